// SPDX-License-Identifier: Apache-2.0
// UdpTransport::create() and its steps: addresses and interface, bound sockets and their
// buffers, group membership, what the kernel granted, GSO/GRO, the receive and send rings.
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "transports/udp/sock_diag.hpp"
#include "transports/udp/udp_impl.hpp"
#include "transports/udp/udp_transport.hpp"

namespace prizma::udp {
namespace {

/// Sockets of this network namespace bound to exactly `a` (address and port), from the
/// kernel's socket diagnostics (sock_diag.hpp); -1 when it cannot tell (no udp_diag in the
/// kernel): the check is then skipped, as it always was where the kernel cannot answer.
int sockets_bound_to(const Addr& a) {
    const bool v4 = a.family() == AF_INET;
    std::array<std::uint8_t, 16> want{};
    std::uint16_t port = 0;
    if (v4) {
        const auto* a4 = reinterpret_cast<const sockaddr_in*>(&a.ss);
        std::memcpy(want.data(), &a4->sin_addr, 4);
        port = ntohs(a4->sin_port);
    } else {
        const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&a.ss);
        std::memcpy(want.data(), &a6->sin6_addr, 16);
        port = ntohs(a6->sin6_port);
    }
    const auto found = udp_sockets_on_port(a.family(), port);
    if (!found) {
        return -1;
    }
    // More sockets than a dump lists are on the port: more than one, whoever they are.
    int count = found->not_listed > 0 ? 2 : 0;
    for (const UdpSocketInfo& s : found->sockets) {
        count += std::memcmp(s.local.data(), want.data(), v4 ? 4 : 16) == 0 ? 1 : 0;
    }
    return count;
}

unsigned ifindex_of(const Addr& a) noexcept {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) {
        return 0;
    }
    unsigned idx = 0;
    unsigned loopback = 0;  // a loopback interface whose IPv4 subnet holds `a` (127/8)
    for (ifaddrs* i = list; i != nullptr && idx == 0; i = i->ifa_next) {
        if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != a.family()) {
            continue;
        }
        if (a.family() == AF_INET && (i->ifa_flags & IFF_LOOPBACK) != 0 && i->ifa_netmask != nullptr
            && loopback == 0) {
            const auto net = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
            const auto mask = reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr;
            if (((net ^ reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_addr.s_addr) & mask)
                == 0) {
                loopback = ::if_nametoindex(i->ifa_name);
            }
        }
        const bool same =
            a.family() == AF_INET
                ? std::memcmp(&reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr,
                              &reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_addr, 4)
                      == 0
                : std::memcmp(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr,
                              &reinterpret_cast<const sockaddr_in6*>(&a.ss)->sin6_addr, 16)
                      == 0;
        if (same) {
            idx = ::if_nametoindex(i->ifa_name);
        }
    }
    ::freeifaddrs(list);
    // Every address of a loopback subnet is local without being assigned (127.0.0.2 on lo):
    // a second publisher on one host takes one for its own unicast NAK address.
    return idx != 0 ? idx : loopback;
}

/// A set-up failure: an OS error gets its text after the detail.
Error setup_error(std::string msg, std::error_code ec) {
    if (ec.category() == std::system_category()) {
        msg += ": " + ec.message();
    }
    return {ec, std::move(msg)};
}

}  // namespace

Result<void, Error> UdpTransport::Impl::resolve(unsigned& ifindex) {
    if (!make_addr(cfg.group, cfg.port, group)) {
        return setup_error("bad group address '" + cfg.group + "'", Errc::invalid_argument);
    }
    multicast = group.is_multicast();
    fam = group.family();
    if (cfg.iface.empty()) {
        if (multicast) {
            return setup_error(
                "multicast group " + cfg.group + " needs iface=ADDR (never the default route)",
                Errc::invalid_argument);
        }
    } else if (!make_addr(cfg.iface, cfg.port, iface) || iface.family() != fam) {
        return setup_error("bad iface '" + cfg.iface + "' for group " + cfg.group,
                           Errc::invalid_argument);
    }
    if (!cfg.iface.empty()) {
        ifindex = ifindex_of(iface);
        if (ifindex == 0) {
            return setup_error("no local interface has address " + cfg.iface,
                               Errc::invalid_argument);
        }
    }
    max_datagram = cfg.max_datagram != 0 ? cfg.max_datagram : (fam == AF_INET ? 1472U : 1452U);
    return {};
}

Result<void, Error> UdpTransport::Impl::open_sockets() {
    auto make_socket = [&](const Addr& bind_to) -> Result<UniqueFd> {
        UniqueFd fd(::socket(fam, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (fd.get() < 0) {
            return errno_code();
        }
        (void)set_opt(fd.get(), SOL_SOCKET, SO_REUSEADDR, 1);
        (void)set_opt(fd.get(), SOL_SOCKET, SO_REUSEPORT, 1);
        if (::bind(fd.get(), bind_to.sa(), bind_to.len) != 0) {
            return errno_code();
        }
        return fd;
    };
    // Downstream receive socket.
    // Bound to the group address itself: only that group's datagrams arrive, and same-host
    // unicast NAKs to ADDR:port can never be hashed to a receiver's socket.
    // A multicast channel that does not join (a publisher) has none: with IP_MULTICAST_ALL
    // off it could hear nothing there, so it would only cost a syscall per upstream poll
    // (and on IPv6, which has no such option here, a loopback copy of each of its own sends
    // whenever a same-host subscriber joined).
    if (!multicast || cfg.join) {
        auto made = make_socket(group);
        if (made) {
            rx = std::move(*made);
        } else if (multicast || made.error().value() != EADDRNOTAVAIL) {
            return setup_error("cannot bind UDP port " + std::to_string(cfg.port), made.error());
        }
    }
    // Unicast socket on the interface address: unicast NAKs to our NLA land here (a specific
    // address wins the kernel's lookup over same-host wildcard sockets, docs/PROTOCOL.md §8.5).
    if (cfg.bind_unicast && !cfg.iface.empty()
        && !(rx.get() >= 0 && !multicast && cfg.iface == cfg.group)) {
        auto made = make_socket(iface);
        if (!made) {
            return setup_error("cannot bind " + cfg.iface + ":" + std::to_string(cfg.port),
                               made.error());
        }
        uc = std::move(*made);
        // Unicast NAKs to iface:port reach one socket bound there (the kernel hashes each
        // sender to one of an SO_REUSEPORT group): a second publisher on the same address and
        // port would silently miss some receivers' NAKs, so it is refused (docs/URI.md).
        if (sockets_bound_to(iface) > 1) {
            return setup_error("another socket on this host is bound to " + cfg.iface + ":"
                                   + std::to_string(cfg.port)
                                   + " (a second publisher?): unicast NAKs would reach only "
                                     "one of them; give each publisher its own iface address "
                                     "(e.g. 127.0.0.2 on loopback) or port",
                               std::make_error_code(std::errc::address_in_use));
        }
    }
    tx = uc.get() >= 0 ? uc.get() : rx.get();
    if (tx < 0) {
        UniqueFd fd(::socket(fam, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (fd.get() < 0) {
            return setup_error("socket", errno_code());
        }
        uc = std::move(fd);
        tx = uc.get();
    }
    for (int fd : {rx.get(), uc.get()}) {
        if (fd < 0) {
            continue;
        }
        // The kernel caps SO_RCVBUF/SO_SNDBUF at net.core.{r,w}mem_max; a process with
        // CAP_NET_ADMIN may go beyond with the FORCE variants (tried first, as feed handlers
        // do). What was granted is read back below and reported.
        if (!set_opt(fd, SOL_SOCKET, SO_RCVBUFFORCE, cfg.rcvbuf)) {
            (void)set_opt(fd, SOL_SOCKET, SO_RCVBUF, cfg.rcvbuf);
        }
        if (!set_opt(fd, SOL_SOCKET, SO_SNDBUFFORCE, cfg.sndbuf)) {
            (void)set_opt(fd, SOL_SOCKET, SO_SNDBUF, cfg.sndbuf);
        }
        if (cfg.busy_poll_us > 0) {
            (void)set_opt(fd, SOL_SOCKET, SO_BUSY_POLL, cfg.busy_poll_us);
        }
    }
    return {};
}

Result<void, Error> UdpTransport::Impl::join(unsigned ifindex) {
    if (multicast) {
        if (fam == AF_INET) {
            ip_mreqn mreq{};
            mreq.imr_multiaddr = reinterpret_cast<const sockaddr_in*>(&group.ss)->sin_addr;
            mreq.imr_address = reinterpret_cast<const sockaddr_in*>(&iface.ss)->sin_addr;
            mreq.imr_ifindex = static_cast<int>(ifindex);
            if (cfg.join && cfg.sources.empty()
                && ::setsockopt(rx.get(), IPPROTO_IP, IP_ADD_MEMBERSHIP, &mreq, sizeof mreq) != 0) {
                return setup_error("cannot join " + cfg.group + " on " + cfg.iface, errno_code());
            }
            if (rx.get() >= 0) {
                (void)set_opt(rx.get(), IPPROTO_IP, IP_MULTICAST_ALL, 0);
            }
            ip_mreqn out{};
            out.imr_address = mreq.imr_address;
            out.imr_ifindex = static_cast<int>(ifindex);
            if (::setsockopt(tx, IPPROTO_IP, IP_MULTICAST_IF, &out, sizeof out) != 0) {
                return setup_error("IP_MULTICAST_IF " + cfg.iface, errno_code());
            }
            (void)set_opt(tx, IPPROTO_IP, IP_MULTICAST_TTL, cfg.ttl);
            (void)set_opt(tx, IPPROTO_IP, IP_MULTICAST_LOOP, cfg.loop ? 1 : 0);
        } else {
            ipv6_mreq mreq{};
            mreq.ipv6mr_multiaddr = reinterpret_cast<const sockaddr_in6*>(&group.ss)->sin6_addr;
            mreq.ipv6mr_interface = ifindex;
            if (cfg.join && cfg.sources.empty()
                && ::setsockopt(rx.get(), IPPROTO_IPV6, IPV6_ADD_MEMBERSHIP, &mreq, sizeof mreq)
                       != 0) {
                return setup_error("cannot join " + cfg.group + " on " + cfg.iface, errno_code());
            }
            (void)set_opt(tx, IPPROTO_IPV6, IPV6_MULTICAST_IF, ifindex);
            (void)set_opt(tx, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, cfg.ttl);
            (void)set_opt(tx, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, cfg.loop ? 1U : 0U);
        }
    }
    if (multicast && cfg.join && !cfg.sources.empty()) {
        if (auto r = join_sources(ifindex); !r) {
            return r;
        }
    }
    // DSCP/ECN byte of every datagram sent (IP_TOS / IPV6_TCLASS); 0 leaves the default.
    if (cfg.tos != 0) {
        const bool set = fam == AF_INET ? set_opt(tx, IPPROTO_IP, IP_TOS, cfg.tos)
                                        : set_opt(tx, IPPROTO_IPV6, IPV6_TCLASS, cfg.tos);
        if (!set) {
            return setup_error("cannot set tos=" + std::to_string(cfg.tos), errno_code());
        }
    }
    return {};
}

// sources=: one source-specific join per sender (MCAST_JOIN_SOURCE_GROUP, both families).
Result<void, Error> UdpTransport::Impl::join_sources(unsigned ifindex) {
    for (const auto& src : cfg.sources) {
        Addr a;
        if (!make_addr(src, 0, a) || a.family() != fam) {
            return setup_error("sources: " + src + " is not an address of the group's family",
                               Errc::invalid_argument);
        }
        group_source_req req{};
        req.gsr_interface = ifindex;
        std::memcpy(&req.gsr_group, &group.ss, sizeof req.gsr_group);
        std::memcpy(&req.gsr_source, &a.ss, sizeof req.gsr_source);
        const int level = fam == AF_INET ? IPPROTO_IP : IPPROTO_IPV6;
        if (::setsockopt(rx.get(), level, MCAST_JOIN_SOURCE_GROUP, &req, sizeof req) != 0) {
            return setup_error(
                "cannot join " + cfg.group + " for source " + src + " on " + cfg.iface,
                errno_code());
        }
    }
    return {};
}

void UdpTransport::Impl::read_back(UdpCounters& c) const noexcept {
    // Read back the buffer sizes: the kernel caps them at net.core.rmem_max silently.
    int eff = 0;
    socklen_t elen = sizeof eff;
    const int probe_fd = rx.get() >= 0 ? rx.get() : uc.get();
    if (::getsockopt(probe_fd, SOL_SOCKET, SO_RCVBUF, &eff, &elen) == 0) {
        c.rcvbuf_effective = eff / 2;  // Linux reports double the payload size
        c.rcvbuf_capped = eff / 2 < cfg.rcvbuf ? 1U : 0U;
    }
    elen = sizeof eff;
    if (::getsockopt(tx, SOL_SOCKET, SO_SNDBUF, &eff, &elen) == 0) {
        c.sndbuf_effective = eff / 2;
    }
    // SO_BUSY_POLL above net.core.busy_read needs CAP_NET_ADMIN: report what was granted.
    elen = sizeof eff;
    if (cfg.busy_poll_us > 0
        && ::getsockopt(probe_fd, SOL_SOCKET, SO_BUSY_POLL, &eff, &elen) == 0) {
        c.busy_poll_us = eff;
    }
}

bool UdpTransport::Impl::setup_gro() noexcept {
    // Only a channel with a data socket (a group or unicast address it receives on) merges:
    // a publisher's one socket hears NAKs and SPMRs, which need no 64 KiB receive slots
    // (4 MiB for a batch of 64).
    bool merging = cfg.gro != GroMode::off && rx.get() >= 0;
    if (merging && cfg.gro == GroMode::adaptive) {
        // gro=auto starts with it off, and asks rather than sets: setting UDP_GRO even once
        // turns on the kernel's UDP encapsulation hooks for the socket's life
        // (udp_tunnel_encap_enable). The first burst sets it (adapt_gro). A kernel that
        // cannot report the option is probed by setting it and clearing it again.
        int v = 0;
        socklen_t len = sizeof v;
        merging = ::getsockopt(rx.get(), SOL_UDP, UDP_GRO, &v, &len) == 0;
        if (!merging && set_opt(rx.get(), SOL_UDP, UDP_GRO, 1)) {
            merging = true;
            // Seen: a burst may have been merged meanwhile.
            gro[0].reset(!set_opt(rx.get(), SOL_UDP, UDP_GRO, 0), true);
        }
    } else if (merging) {
        std::array<bool, 2> on{};
        for (std::size_t i = 0; i < 2; ++i) {
            const int fd = i == 0 ? rx.get() : uc.get();
            if (fd >= 0) {
                on[i] = set_opt(fd, SOL_UDP, UDP_GRO, 1);
                merging = merging && on[i];
            }
        }
        // All or none: a socket left merging behind MTU-sized slots would truncate bursts.
        for (std::size_t i = 0; i < 2 && !merging; ++i) {
            const int fd = i == 0 ? rx.get() : uc.get();
            if (on[i]) {
                on[i] = !set_opt(fd, SOL_UDP, UDP_GRO, 0);
            }
        }
        gro[0].reset(on[0], on[0]);
        gro[1].reset(on[1], on[1]);
    }
    return merging;
}

void UdpTransport::Impl::size_rings(bool gro_on) {
    rx_slot = gro_on ? kGroBuffer : max_datagram + 64;
    const std::size_t n = std::max<std::size_t>(1, cfg.batch);
    rx_buf.resize(n * rx_slot);
    rx_msgs.resize(n);
    rx_iov.resize(n);
    rx_from.resize(n);
    rx_ctl.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        rx_iov[i] = iovec{rx_buf.data() + i * rx_slot, rx_slot};
        mmsghdr& m = rx_msgs[i];
        m = mmsghdr{};
        m.msg_hdr.msg_name = &rx_from[i];
        m.msg_hdr.msg_iov = &rx_iov[i];
        m.msg_hdr.msg_iovlen = 1;
        m.msg_hdr.msg_control = rx_ctl[i].data();
        reset_rx(i);
    }
    pending.reserve(n * (gro_on ? kMaxGsoSegments : 1));
    tx_msgs.resize(n);
    tx_iov.resize(2 * n);
    tx_addr.resize(n);
    tx_ctl.resize(n);
}

Result<std::unique_ptr<UdpTransport>, Error> UdpTransport::create(const UdpConfig& cfg) {
    auto impl = std::make_unique<Impl>();
    impl->cfg = cfg;
    unsigned ifindex = 0;
    if (auto r = impl->resolve(ifindex); !r) {
        return r.error();
    }
    if (auto r = impl->open_sockets(); !r) {
        return r.error();
    }
    if (auto r = impl->join(ifindex); !r) {
        return r.error();
    }
    std::unique_ptr<UdpTransport> t(new UdpTransport(std::move(impl)));
    Impl& im = *t->impl_;
    im.read_back(t->counters_);
    // Probe GSO/GRO: a kernel without them refuses the socket option.
    t->gso_ = cfg.gso && set_opt(im.tx, SOL_UDP, UDP_SEGMENT, 0);
    t->gro_ = im.setup_gro();
    im.size_rings(t->gro_);
    // Wakeup: one epoll fd over both sockets. The sockets join it only at the first
    // arm_wakeup(): a socket watched by an epoll set makes every datagram queued to it run
    // the epoll callbacks (a locked wait queue, twice when the Context's epoll nests this
    // one) in the *sender's* send path, ~0.3 us per hop that a busy-polling party never uses.
    im.ep.reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!cfg.iface.empty()) {
        t->local_ = to_endpoint(im.iface.ss);
    }
    return t;
}

}  // namespace prizma::udp
