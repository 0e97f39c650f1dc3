// SPDX-License-Identifier: Apache-2.0
// UdpTransport's data path, owner thread only: send_batch (sendmmsg, GSO runs), poll_rx
// (recvfrom/recvmmsg, GRO segments, gro=auto), release_rx, arm_wakeup.
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "transports/udp/gro_policy.hpp"
#include "transports/udp/udp_impl.hpp"
#include "transports/udp/udp_transport.hpp"

namespace prizma::udp {
namespace {

void set_port(Addr& a, std::uint16_t port) noexcept {
    if (a.ss.ss_family == AF_INET) {
        reinterpret_cast<sockaddr_in*>(&a.ss)->sin_port = htons(port);
    } else {
        reinterpret_cast<sockaddr_in6*>(&a.ss)->sin6_port = htons(port);
    }
}

bool from_endpoint(const Endpoint& e, Addr& out) noexcept {
    out = Addr{};
    if (e.family == kFamily4) {
        auto* a = reinterpret_cast<sockaddr_in*>(&out.ss);
        a->sin_family = AF_INET;
        a->sin_port = htons(e.port);
        std::memcpy(&a->sin_addr, e.addr.data(), 4);
        out.len = sizeof(sockaddr_in);
        return true;
    }
    if (e.family == kFamily6) {
        auto* a = reinterpret_cast<sockaddr_in6*>(&out.ss);
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(e.port);
        std::memcpy(&a->sin6_addr, e.addr.data(), 16);
        out.len = sizeof(sockaddr_in6);
        return true;
    }
    return false;
}

}  // namespace

Result<bool> UdpTransport::arm_wakeup() noexcept {
    Impl& im = *impl_;
    if (!im.watched && im.ep.get() >= 0) {
        for (int fd : {im.rx.get(), im.uc.get()}) {
            if (fd < 0) {
                continue;
            }
            epoll_event ev{};
            ev.events = EPOLLIN;  // level-triggered: a datagram already queued wakes at once
            ev.data.fd = fd;
            if (::epoll_ctl(im.ep.get(), EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST) {
                return errno_code();
            }
        }
        im.watched = true;
    }
    // About to sleep: the first datagram after it is the latency case, read alone with
    // recvfrom() (a read skipped because epoll said nothing left `quiet` as it was:
    // recvmmsg, ~0.4 us more, after every blocking wake-up).
    im.quiet = {true, true};
    // Segments of a GRO datagram not yet handed out are invisible to epoll.
    return im.pending_pos == im.pending.size();
}

// Once armed, the sockets sit in ep level-triggered: ep is readable while either has a
// datagram. Only segments already read (pending) would be missed.
bool UdpTransport::rx_follows_wakeup() const noexcept {
    const Impl& im = *impl_;
    return im.watched && im.pending_pos == im.pending.size();
}

// Batches into sendmmsg; a run of downstream packets of one size (the last may be shorter)
// becomes a single GSO message (UDP_SEGMENT): one pass through the stack for up to 64.
// Gathers packets[consumed] into message m, and with GSO the downstream packets of the same
// size that follow it (a shorter one ends the run). Returns how many packets it took.
std::size_t UdpTransport::Impl::gather_run(std::span<const TxPacket> packets,
                                           std::size_t& consumed,
                                           std::size_t& niov,
                                           mmsghdr& m,
                                           bool gso) noexcept {
    const TxPacket& p = packets[consumed];
    const std::size_t size = p.header.size() + p.payload.size();
    std::size_t segs = 0;
    std::size_t total = 0;
    // Gather this packet and, with GSO, following downstream packets of the same size.
    while (consumed < packets.size() && niov + 2 <= tx_iov.size()) {
        const TxPacket& q = packets[consumed];
        const std::size_t qs = q.header.size() + q.payload.size();
        if (segs != 0) {
            const bool same_run = gso && q.route == Route::downstream
                                  && p.route == Route::downstream && qs <= size
                                  && segs < kMaxGsoSegments && total + qs <= 65000;
            if (!same_run) {
                break;
            }
        }
        // A piece that starts where the message's last one ends extends it: the
        // Session packs its batch back to back, so a GSO run is one iovec and the
        // kernel copies it in one pass instead of one short copy per packet.
        for (const auto piece : {q.header, q.payload}) {
            if (piece.empty()) {
                continue;
            }
            auto* base = const_cast<std::byte*>(piece.data());
            iovec* const end = tx_iov.data() + niov;
            iovec* last = end != m.msg_hdr.msg_iov ? end - 1 : nullptr;
            if (last != nullptr
                && static_cast<std::byte*>(last->iov_base) + last->iov_len == base) {
                last->iov_len += piece.size();
            } else {
                tx_iov[niov++] = iovec{base, piece.size()};
            }
        }
        ++segs;
        total += qs;
        ++consumed;
        if (qs < size) {
            break;  // a shorter one can only end a GSO run
        }
    }
    return segs;
}

// One system call for the first nmsg messages; how many went (-1: errno says why).
int UdpTransport::Impl::send_messages(std::size_t nmsg, bool lone_packet) noexcept {
    // One message (a lone packet, or one GSO run): sendmsg skips sendmmsg's per-call
    // vector handling, which is on the latency path of every echo; a lone packet in one
    // buffer (the Session's send batch copies each packet into one) goes by sendto(),
    // which also skips the msghdr and iovec copy-in.
    int rc = 0;
    if (nmsg == 1 && lone_packet && tx_msgs[0].msg_hdr.msg_iovlen == 1) {
        const msghdr& h = tx_msgs[0].msg_hdr;
        rc = ::sendto(tx, h.msg_iov[0].iov_base, h.msg_iov[0].iov_len, MSG_DONTWAIT,
                      static_cast<const sockaddr*>(h.msg_name), h.msg_namelen)
                     < 0
                 ? -1
                 : 1;
    } else if (nmsg == 1) {
        rc = ::sendmsg(tx, &tx_msgs[0].msg_hdr, MSG_DONTWAIT) < 0 ? -1 : 1;
    } else {
        rc = ::sendmmsg(tx, tx_msgs.data(), static_cast<unsigned>(nmsg), MSG_DONTWAIT);
    }
    return rc;
}

Result<std::size_t> UdpTransport::send_batch(std::span<const TxPacket> packets) noexcept {
    Impl& im = *impl_;
    std::size_t done = 0;
    while (done < packets.size()) {
        std::size_t nmsg = 0;
        std::size_t niov = 0;
        std::size_t consumed = done;
        // Only [0, nmsg) is written and read: not zeroed on every send (hot path).
        std::array<std::size_t, 64> per_msg;  // NOLINT(cppcoreguidelines-pro-type-member-init)
        const std::size_t max_msgs = std::min(im.tx_msgs.size(), per_msg.size());
        std::size_t skipped = 0;
        while (consumed < packets.size() && nmsg < max_msgs && niov + 2 <= im.tx_iov.size()) {
            const TxPacket& p = packets[consumed];
            Addr& dst = im.tx_addr[nmsg];
            if (p.route == Route::downstream) {
                dst = im.group;
            } else if (!from_endpoint(p.to, dst)) {
                ++consumed;  // no address: nothing can be done with it
                ++skipped;
                ++counters_.tx_errors;
                continue;
            } else {
                set_port(dst, im.cfg.port);  // the channel's port (UdpConfig::port)
            }
            mmsghdr& m = im.tx_msgs[nmsg];
            m = mmsghdr{};
            m.msg_hdr.msg_name = &dst.ss;
            m.msg_hdr.msg_namelen = dst.len;
            m.msg_hdr.msg_iov = &im.tx_iov[niov];
            const std::size_t size = p.header.size() + p.payload.size();
            const std::size_t segs = im.gather_run(packets, consumed, niov, m, gso_);
            m.msg_hdr.msg_iovlen =
                static_cast<std::size_t>(im.tx_iov.data() + niov - m.msg_hdr.msg_iov);
            if (segs > 1) {
                auto& ctl = im.tx_ctl[nmsg];
                m.msg_hdr.msg_control = ctl.data();
                m.msg_hdr.msg_controllen = CMSG_SPACE(sizeof(std::uint16_t));
                cmsghdr* c = CMSG_FIRSTHDR(&m.msg_hdr);
                c->cmsg_level = SOL_UDP;
                c->cmsg_type = UDP_SEGMENT;
                c->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));
                const auto gso_size = static_cast<std::uint16_t>(size);
                std::memcpy(CMSG_DATA(c), &gso_size, sizeof gso_size);
                ++counters_.tx_gso_sends;
            }
            per_msg[nmsg] = segs;
            ++nmsg;
        }
        if (nmsg == 0) {
            done = consumed;
            continue;
        }
        const int rc = im.send_messages(nmsg, per_msg[0] == 1);
        ++counters_.tx_syscalls;
        if (rc < 0) {
            if (errno == EAGAIN || errno == ENOBUFS) {
                return done;  // queue full: the rest later
            }
            if ((errno == EIO || errno == EINVAL) && gso_) {
                gso_ = false;  // no GSO on this path after all: resend without it
                continue;
            }
            ++counters_.tx_errors;
            return done != 0 ? Result<std::size_t>(done) : Result<std::size_t>(errno_code());
        }
        std::size_t sent_pkts = 0;
        for (int i = 0; i < rc; ++i) {
            sent_pkts += per_msg[static_cast<std::size_t>(i)];
            counters_.tx_iovecs += im.tx_msgs[static_cast<std::size_t>(i)].msg_hdr.msg_iovlen;
        }
        counters_.tx_datagrams += sent_pkts;
        if (static_cast<std::size_t>(rc) < nmsg) {
            return done + sent_pkts + skipped;
        }
        done = consumed;
    }
    return done;
}

// Reads up to n datagrams from socket fd into the receive slots from `slot` on: one with
// recvfrom(), more with recvmmsg(). Returns how many, -1 with errno set, or kTruncated when
// the one datagram read was longer than its slot (dropped and counted).
int UdpTransport::Impl::read_datagrams(int fd,
                                       std::size_t slot,
                                       std::size_t n,
                                       UdpCounters& counters) noexcept {
    int rc = 0;
    if (n == 1) {
        // One datagram: recvfrom() skips the msghdr and iovec copy-in that recvmsg and
        // recvmmsg pay on every call, empty or not (about a third of an empty poll). It
        // brings no UDP_GRO segment size: a merged datagram is split by the layer above's
        // framing instead (gro_segment_size).
        mmsghdr& m = rx_msgs[slot];
        std::byte* buf = rx_buf.data() + slot * rx_slot;
        socklen_t alen = sizeof(sockaddr_storage);
        const ssize_t got = ::recvfrom(fd, buf, rx_slot,
                                       MSG_DONTWAIT | MSG_TRUNC,  // the real length
                                       reinterpret_cast<sockaddr*>(&rx_from[slot]), &alen);
        if (got > static_cast<ssize_t>(rx_slot)) {
            ++counters.rx_truncated;  // its tail is gone: nothing to hand up
            return kTruncated;
        }
        rc = got < 0 ? -1 : 1;
        if (got >= 0) {
            ++counters.rx_single_reads;
            m.msg_len = static_cast<unsigned>(got);
            m.msg_hdr.msg_namelen = alen;
            m.msg_hdr.msg_controllen = 0;  // no control message below
        }
    } else {
        rc = ::recvmmsg(fd, &rx_msgs[slot], static_cast<unsigned>(n), MSG_DONTWAIT, nullptr);
    }
    return rc;
}

// The segment size of received datagram i: from its UDP_GRO control message, or, when it
// came without one but may be merged (GroPolicy::maybe_merged), from the layer above's
// framing; otherwise its whole length (one datagram).
std::size_t UdpTransport::Impl::segment_size(std::size_t i,
                                             std::size_t fi,
                                             bool single_read) noexcept {
    const mmsghdr& m = rx_msgs[i];
    std::size_t seg = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m.msg_hdr); c != nullptr;
         c = CMSG_NXTHDR(const_cast<msghdr*>(&m.msg_hdr), c)) {
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int gs = 0;
            std::memcpy(&gs, CMSG_DATA(c), sizeof gs);
            if (gs > 0) {
                seg = static_cast<std::size_t>(gs);
            }
        }
    }
    const std::byte* base = rx_buf.data() + i * rx_slot;
    if (seg == 0) {
        // No segment size: one datagram, or several merged ones when GRO is or was on
        // and the read could not say so: a recvfrom() read (n == 1) has no control
        // message, and after gro=auto switched GRO off, one merged before may still
        // be queued, or even on its way to the queue, however many empty reads later.
        // A merged datagram read by recvmmsg with GRO on always brings its size.
        const bool maybe_merged = gro[fi].maybe_merged(single_read);
        seg = maybe_merged ? gro_segment_size(cfg.frame_length, {base, m.msg_len}) : m.msg_len;
    }
    return seg;
}

// With two sockets that an epoll set watches: which have datagrams (the others become -1 in
// fds); false when neither has.
bool UdpTransport::Impl::ready_sockets(std::array<int, 2>& fds) const noexcept {
    // Two watched sockets: one epoll_wait(0) (~0.2 us) says which has datagrams, so
    // an empty poll costs one cheap syscall instead of two recvmmsg (~0.3-1 us each).
    // Unwatched (never armed, the busy-poll case) both are read. Only a channel that
    // both joins and binds its unicast address has two; the Context's have one each
    // (a publisher does not join, a subscriber does not bind).
    std::array<epoll_event, 2> ev{};
    const int ready = ::epoll_wait(ep.get(), ev.data(), 2, 0);
    if (ready <= 0) {
        return false;  // nothing, or EINTR: the next poll retries
    }
    bool in[2] = {false, false};
    for (int i = 0; i < ready; ++i) {
        const int fd = ev[static_cast<std::size_t>(i)].data.fd;
        in[0] = in[0] || fd == fds[0];
        in[1] = in[1] || fd == fds[1];
    }
    fds[0] = in[0] ? fds[0] : -1;
    fds[1] = in[1] ? fds[1] : -1;
    return true;
}

Result<std::size_t> UdpTransport::poll_rx(std::span<RxPacket> out) noexcept {
    Impl& im = *impl_;
    im.lent = 0;
    im.lent_to = nullptr;
    if (im.pending_pos < im.pending.size()) {
        // Segments of the last batch that did not fit: handed out before anything is read
        // (they live in rx_buf, which the next recvmmsg overwrites).
        const std::size_t k = std::min(out.size(), im.pending.size() - im.pending_pos);
        std::copy_n(im.pending.begin() + static_cast<std::ptrdiff_t>(im.pending_pos), k,
                    out.begin());
        im.lent = k;
        return k;
    }
    im.pending.clear();
    im.pending_pos = 0;
    std::size_t k = 0;  // segments written straight into `out`
    std::array<int, 2> fds = {im.poll_uc_first ? im.uc.get() : im.rx.get(),
                              im.poll_uc_first ? im.rx.get() : im.uc.get()};
    im.poll_uc_first = !im.poll_uc_first;
    if (fds[0] >= 0 && fds[1] >= 0 && im.watched && !im.ready_sockets(fds)) {
        return std::size_t{0};
    }
    std::size_t slot = 0;
    for (int fd : fds) {
        if (fd < 0 || slot == im.rx_msgs.size()) {
            continue;
        }
        // The headers were built once; received entries are restored below, so an empty
        // poll (the busy-poll common case) costs only the syscall.
        // After an empty poll ask for one datagram: the first to arrive after a quiet
        // spell (the latency case) comes back without the kernel trying the empty queue
        // again for the next one; a burst gets the full batch from the next poll on.
        const std::size_t fi = fd == im.rx.get() ? 0 : 1;
        const std::size_t n = im.quiet[fi] ? 1 : im.rx_msgs.size() - slot;
        const int rc = im.read_datagrams(fd, slot, n, counters_);
        if (rc == Impl::kTruncated) {
            im.quiet[fi] = false;
            continue;
        }
        if (rc < 0) {
            if (errno == EAGAIN) {  // == EWOULDBLOCK on Linux
                im.quiet[fi] = true;
                continue;
            }
            if (k != 0 || !im.pending.empty()) {
                break;  // hand out what the other socket gave; the error comes back next
            }
            return errno_code();
        }
        im.quiet[fi] = false;
        bool merged = false;
        for (std::size_t i = slot; i < slot + static_cast<std::size_t>(rc); ++i) {
            const mmsghdr& m = im.rx_msgs[i];
            if ((m.msg_hdr.msg_flags & MSG_TRUNC) != 0) {
                ++counters_.rx_truncated;  // longer than the slot: its tail is gone
                im.reset_rx(i);
                continue;
            }
            const std::size_t seg = im.segment_size(i, fi, n == 1);
            const std::byte* base = im.rx_buf.data() + i * im.rx_slot;
            merged = merged || seg < m.msg_len;
            const socklen_t salen = m.msg_hdr.msg_namelen;
            if (salen != im.last_sa_len || std::memcmp(&im.last_sa, &im.rx_from[i], salen) != 0) {
                std::memcpy(&im.last_sa, &im.rx_from[i], salen);
                im.last_sa_len = salen;
                im.last_from = to_endpoint(im.rx_from[i]);
            }
            ++counters_.rx_datagrams;
            for (std::size_t off = 0; off < m.msg_len; off += seg) {
                const std::size_t len = std::min<std::size_t>(seg, m.msg_len - off);
                RxPacket& r = k < out.size() ? out[k++] : im.pending.emplace_back();
                r.data = std::span<const std::byte>(base + off, len);
                r.from = im.last_from;
                r.rx_time_ns = 0;
                if (off != 0) {
                    ++counters_.rx_gro_segments;
                }
            }
            im.reset_rx(i);
        }
        if (im.cfg.gro == GroMode::adaptive && gro_) {
            adapt_gro(fd, im.gro[fi], n >= 2, static_cast<std::size_t>(rc), merged);
        }
        slot += static_cast<std::size_t>(rc);
    }
    im.lent = k;
    im.lent_to = out.data();
    return k;
}

// gro=auto, after a read of `datagrams` from socket `fd` (a batch read if `batch`): the
// policy decides (GroPolicy), this applies it with one setsockopt().
void UdpTransport::adapt_gro(
    int fd, GroPolicy& policy, bool batch, std::size_t datagrams, bool merged) noexcept {
    const auto action = policy.after_read(batch, datagrams, merged, impl_->rx_msgs.size());
    if (action == GroPolicy::Action::none) {
        return;
    }
    const bool ok = set_opt(fd, SOL_UDP, UDP_GRO, action == GroPolicy::Action::switch_on ? 1 : 0);
    policy.switched(action, ok);
    counters_.rx_gro_switches += ok ? 1U : 0U;
}

void UdpTransport::release_rx(std::size_t count) noexcept {
    Impl& im = *impl_;
    count = std::min(count, im.lent);
    if (im.lent_to == nullptr) {
        im.pending_pos += count;  // they came from pending
    } else if (count < im.lent) {
        // Handed out straight but not all taken: the rest goes back in front of pending
        // (within its reserved capacity: no allocation), to be handed out again first.
        im.pending.insert(im.pending.begin(), im.lent_to + count, im.lent_to + im.lent);
    }
    im.lent = 0;
    im.lent_to = nullptr;
}

}  // namespace prizma::udp
