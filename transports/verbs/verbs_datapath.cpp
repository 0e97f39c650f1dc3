// SPDX-License-Identifier: Apache-2.0
// The data path (owner thread only): send_batch (one chain of WRs, one doorbell), poll_rx and
// release_rx over the receive ring, arm_wakeup, and the QP's recovery after an error. The
// unicast AHs come from the AhCache; what may block is the control thread's.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "transports/verbs/verbs_impl.hpp"

namespace prizma::verbs {

void VerbsTransport::Impl::post_receives(const std::uint32_t* ids, std::size_t n) noexcept {
    std::size_t i = 0;
    while (i < n) {
        const std::size_t chunk = std::min(n - i, rx.wr.size());
        for (std::size_t k = 0; k < chunk; ++k) {
            const std::uint32_t s = ids[i + k];
            rx.sge[k].addr =
                reinterpret_cast<std::uintptr_t>(rx.base + s * rx.stride + kRxGrhOffset);
            rx.sge[k].length = static_cast<std::uint32_t>(kGrhBytes + rx_mtu);
            rx.sge[k].lkey = mr->lkey;
            rx.wr[k].wr_id = s;
            rx.wr[k].sg_list = &rx.sge[k];
            rx.wr[k].num_sge = 1;
            rx.wr[k].next = k + 1 < chunk ? &rx.wr[k + 1] : nullptr;
        }
        ibv_recv_wr* bad = nullptr;
        const int rc = ibv_post_recv(qp.get(), rx.wr.data(), &bad);
        ++counters.rx_reposts;
        const std::size_t posted = rc == 0 ? chunk : static_cast<std::size_t>(bad - rx.wr.data());
        rx.posted += posted;
        if (rc != 0) {
            ++counters.completion_errors;  // the QP is in error; those slots are lost
            return;
        }
        i += chunk;
    }
}

// ---------------------------------------------------------------------------------------
// Unicast address handles (§7): the owner thread finds and requests them in the AhCache; the
// control thread creates them (a system call that can block ~1 s on RoCE while the neighbour
// resolves), caches failures and retries them with back-off. No allocation, lock or system
// call on the data path except one eventfd write when a new peer is first seen.

void VerbsTransport::Impl::count(AhCache::Note note) noexcept {
    switch (note.what) {
        case AhCache::Noted::known:
        case AhCache::Noted::requested: break;
        case AhCache::Noted::route_changed: ++counters.ah_route_changes; break;
        case AhCache::Noted::table_full: ++counters.ah_table_full; break;
    }
    if (note.wake) {
        wake(ctl.wake.get());
    }
}

void VerbsTransport::Impl::note_source(const Endpoint& peer,
                                       const policy::SourceRoute& route) noexcept {
    count(ahs.note_source(peer, route, local_port.infiniband));
}

ibv_ah* VerbsTransport::Impl::unicast_ah(const Endpoint& peer) noexcept {
    AhCache::Note note;
    void* const ah = ahs.lookup(peer, note);
    count(note);
    if (ah == nullptr) {
        ++counters.ah_pending;
    }
    return static_cast<ibv_ah*>(ah);
}

bool VerbsTransport::Impl::send_ready(std::size_t n) noexcept {
    // Completions of signalled WRs (and any error: a send error stops the queue, every
    // later send would be flushed). An empty CQ costs a read of one entry, no system call.
    if (tx.posted - tx.done >= tx.signal_every || tx.posted - tx.done + n > cfg.tx_depth) {
        reap_send();
    }
    return !fatal.load(std::memory_order_relaxed)
           && (!qp_broken.load(std::memory_order_acquire) || recover_qp());
}

void VerbsTransport::Impl::reap_send() noexcept {
    ibv_wc w[16];
    for (;;) {
        const int n = ibv_poll_cq(send_cq.get(), 16, w);
        if (n <= 0) {
            return;
        }
        for (int i = 0; i < n; ++i) {
            if (w[i].status == IBV_WC_WR_FLUSH_ERR) {
                ++counters.wr_flushed;
                qp_broken.store(true, std::memory_order_relaxed);
            } else if (w[i].status != IBV_WC_SUCCESS) {
                // A UD send error moves the QP to SQE (or ERR): every later send would be
                // flushed. recover_qp() runs before the next one.
                ++counters.completion_errors;
                counters.last_completion_error = ibv_wc_status_str(w[i].status);
                qp_broken.store(true, std::memory_order_relaxed);
            }
            // Completions arrive in posting order; a signalled WR retires all before it.
            tx.done = std::max(tx.done, w[i].wr_id + 1);
        }
    }
}

bool VerbsTransport::Impl::recover_qp() noexcept {
    qp_broken.store(false, std::memory_order_relaxed);
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    if (ibv_query_qp(qp.get(), &a, IBV_QP_STATE, &ia) == 0) {
        switch (policy::qp_recovery(static_cast<policy::QpState>(a.qp_state))) {
            case policy::QpRecovery::none: return true;  // a late flush of before: recovered
            case policy::QpRecovery::to_rts: {
                // A send error (UD: SQE). The receive side never stopped; the send queue
                // restarts with the next post.
                ibv_qp_attr m{};
                m.qp_state = IBV_QPS_RTS;
                m.cur_qp_state = IBV_QPS_SQE;
                if (ibv_modify_qp(qp.get(), &m, IBV_QP_STATE | IBV_QP_CUR_STATE) == 0) {
                    ++counters.qp_recovered;
                    return true;
                }
                break;  // then a new QP
            }
            case policy::QpRecovery::rebuild: break;
        }
    }
    return rebuild_qp();
}

// The QP in the error state (a fatal QP event, or rxe after any send error) is replaced:
// detached, destroyed, the CQs drained of what it left there, a new one made like it (same
// depths and inline grant), re-attached, every receive slot not held by the caller posted
// again. Its QPN is new: sources learn it from the next datagram (their NAK handles), and a
// receiver takes a source's new QPN from its next SPM. Owner thread; error path only.
bool VerbsTransport::Impl::rebuild_qp() noexcept {
    const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
    const std::size_t oldest = rebuilds % kMaxRebuilds;
    if (rebuilds >= kMaxRebuilds && now - rebuild_ns[oldest] < kRebuildWindowNs) {
        ++counters.qp_rebuild_failures;  // failing over and over: a device or config fault
        fatal.store(true, std::memory_order_relaxed);
        return false;
    }
    rebuild_ns[oldest] = now;
    ++rebuilds;
    const std::uint16_t group_lid = mlid.load();
    if (attached) {
        (void)ibv_detach_mcast(qp.get(), reinterpret_cast<const ibv_gid*>(mgid.data()), group_lid);
    }
    live_qp.store(nullptr, std::memory_order_release);
    qp.reset();  // waits until the control thread acknowledged the QP's async events
    for (ibv_cq* cq : {send_cq.get(), recv_cq.get()}) {
        ibv_wc w[16];
        while (ibv_poll_cq(cq, 16, w) > 0) {
        }
    }
    tx.done = tx.posted;
    rx.posted = 0;
    rx.stash_begin = rx.stash_end = 0;
    rx.repost_count = 0;
    ibv_qp_init_attr qa = qp_attr(max_inline);  // the first QP's grant: no bisection again
    QpPtr fresh(ibv_create_qp(dev->pd(), &qa));
    const bool ok =
        fresh && bring_up(fresh.get()) == nullptr
        && (!attached
            || ibv_attach_mcast(fresh.get(), reinterpret_cast<const ibv_gid*>(mgid.data()),
                                group_lid)
                   == 0);
    if (!ok) {
        ++counters.qp_rebuild_failures;
        fatal.store(true, std::memory_order_relaxed);
        return false;
    }
    qp = std::move(fresh);
    info.qpn = qp->qp_num;
    live_qp.store(qp.get(), std::memory_order_release);
    // Every slot but those the caller holds (handed out, given back by release_rx).
    for (std::uint32_t s = 0; s < cfg.rx_depth; ++s) {
        if (std::find(rx.handed.begin(),
                      rx.handed.begin() + static_cast<std::ptrdiff_t>(rx.handed_count), s)
            == rx.handed.begin() + static_cast<std::ptrdiff_t>(rx.handed_count)) {
            rx.repost[rx.repost_count++] = s;
        }
    }
    post_receives(rx.repost.data(), rx.repost_count);
    rx.repost_count = 0;
    ++counters.qp_rebuilt;
    return true;
}

TransportCaps VerbsTransport::caps() const noexcept {
    TransportCaps c{impl_->mtu, impl_->tx.wr.size(), kGrhBytes};
    c.max_rx_datagram = impl_->rx_mtu;
    return c;
}

int VerbsTransport::wakeup_fd() const noexcept {
    return impl_->channel->fd;
}

Result<bool> VerbsTransport::arm_wakeup() noexcept {
    Impl& m = *impl_;
    m.ahs.quiescent();  // and before the owner sleeps: nothing retired waits on its wake-up
    // Consume the events that woke us (each must be acknowledged), then re-arm. Completions
    // that arrived before the arm raise no event: poll once more and keep what we find.
    ibv_cq* cq = nullptr;
    void* cq_ctx = nullptr;
    while (ibv_get_cq_event(m.channel.get(), &cq, &cq_ctx) == 0) {
        ++m.rx.unacked_events;
    }
    if (m.rx.unacked_events >= 64) {
        ibv_ack_cq_events(m.recv_cq.get(), m.rx.unacked_events);
        m.rx.unacked_events = 0;
    }
    if (ibv_req_notify_cq(m.recv_cq.get(), 0) != 0) {
        return err(std::errc::io_error);
    }
    if (m.rx.stash_end > m.rx.stash_begin || m.qp_broken.load(std::memory_order_acquire)) {
        return false;  // poll now (a broken QP is recovered there)
    }
    const int n = ibv_poll_cq(m.recv_cq.get(), static_cast<int>(m.rx.wc.size()), m.rx.wc.data());
    if (n > 0) {
        m.rx.stash_begin = 0;
        m.rx.stash_end = static_cast<std::size_t>(n);
        return false;
    }
    return true;
}

void VerbsTransport::forget(const Endpoint& peer) noexcept {
    if (impl_->ahs.forget(peer)) {
        wake(impl_->ctl.wake.get());
    }
}

Result<std::size_t> VerbsTransport::send_batch(std::span<const TxPacket> packets) noexcept {
    Impl& m = *impl_;
    // The owner's quiescent point (§7): the last batch's unicast handles were posted, this
    // one has read none yet. Unicast AHs the control thread retired before may go now.
    m.ahs.quiescent();
    const std::size_t depth = m.cfg.tx_depth;
    if (!m.send_ready(packets.size())) {
        return err(std::errc::io_error);  // the device or the QP failed for good
    }
    std::size_t room = depth - (m.tx.posted - m.tx.done);
    ibv_ah* const group = m.live_group_ah.load(std::memory_order_acquire);
    if (room == 0) {
        ++m.counters.tx_sq_full;
        return std::size_t{0};
    }
    std::size_t accepted = 0;
    while (accepted < packets.size() && room > 0) {
        const std::size_t chunk = std::min({packets.size() - accepted, room, m.tx.wr.size()});
        std::size_t nwr = 0;
        std::size_t consumed = 0;
        for (; consumed < chunk; ++consumed) {
            const TxPacket& p = packets[accepted + consumed];
            const std::size_t len = p.header.size() + p.payload.size();
            ibv_ah* ah = group;
            std::uint32_t qpn = m.dest_qpn;
            if (p.route == Route::unicast) {
                ah = m.unicast_ah(p.to);
                qpn = p.to.id;
            }
            if (len > m.mtu) {
                ++m.counters.tx_oversize;
                continue;
            }
            if (ah == nullptr) {
                ++m.counters.tx_no_route;
                continue;
            }
            const std::uint64_t seq = m.tx.posted + nwr;
            m.tx.wr_packet[nwr] = static_cast<std::uint32_t>(consumed);
            ibv_send_wr& wr = m.tx.wr[nwr];
            ibv_sge* sge = &m.tx.sge[2 * nwr];
            wr = ibv_send_wr{};
            wr.wr_id = seq;
            wr.opcode = IBV_WR_SEND;
            wr.sg_list = sge;
            wr.wr.ud.ah = ah;
            wr.wr.ud.remote_qpn = qpn;
            wr.wr.ud.remote_qkey = m.cfg.qkey;
            if (len <= m.max_inline) {
                // Inline: the driver copies the bytes into the WQE; no lkey, no pool copy.
                wr.send_flags = IBV_SEND_INLINE;
                sge[0] = {reinterpret_cast<std::uintptr_t>(p.header.data()),
                          static_cast<std::uint32_t>(p.header.size()), 0};
                wr.num_sge = 1;
                if (!p.payload.empty()) {
                    sge[1] = {reinterpret_cast<std::uintptr_t>(p.payload.data()),
                              static_cast<std::uint32_t>(p.payload.size()), 0};
                    wr.num_sge = 2;
                }
                ++m.counters.tx_inline;
            } else {
                std::byte* slot = m.tx.base + (seq % depth) * m.tx.stride;
                std::memcpy(slot, p.header.data(), p.header.size());
                if (!p.payload.empty()) {
                    std::memcpy(slot + p.header.size(), p.payload.data(), p.payload.size());
                }
                sge[0] = {reinterpret_cast<std::uintptr_t>(slot), static_cast<std::uint32_t>(len),
                          m.mr->lkey};
                wr.num_sge = 1;
            }
            if ((seq + 1) % m.tx.signal_every == 0) {
                wr.send_flags |= IBV_SEND_SIGNALED;
            }
            ++nwr;
        }
        if (nwr != 0) {
            for (std::size_t i = 0; i + 1 < nwr; ++i) {
                m.tx.wr[i].next = &m.tx.wr[i + 1];
            }
            m.tx.wr[nwr - 1].next = nullptr;
            ibv_send_wr* bad = nullptr;
            const int rc = ibv_post_send(m.qp.get(), m.tx.wr.data(), &bad);
            ++m.counters.tx_posts;
            const std::size_t posted =
                rc == 0 ? nwr : static_cast<std::size_t>(bad - m.tx.wr.data());
            m.tx.posted += posted;
            m.counters.tx_datagrams += posted;
            room -= posted;
            if (rc != 0) {
                // ENOMEM = send queue full (should not happen given the accounting).
                ++m.counters.tx_sq_full;
                // Packets before the failed WR (sent or dropped as oversize/no route) count
                // as taken; the rest are offered again later.
                return accepted + m.tx.wr_packet[posted];
            }
        }
        accepted += consumed;
    }
    return accepted;
}

Result<std::size_t> VerbsTransport::poll_rx(std::span<RxPacket> out) noexcept {
    Impl& m = *impl_;
    m.ahs.quiescent();  // no unicast handle held here either (a receiver polls most)
    if (m.fatal.load(std::memory_order_relaxed)) {
        return err(std::errc::io_error);  // IBV_EVENT_DEVICE_FATAL: nothing works any more
    }
    if (m.rx.stash_end == m.rx.stash_begin && m.qp_broken.load(std::memory_order_acquire)
        && !m.recover_qp()) {
        return err(std::errc::io_error);
    }
    if (m.rx.stash_end == m.rx.stash_begin) {
        const int want = static_cast<int>(std::min(out.size(), m.rx.wc.size()));
        const int n = ibv_poll_cq(m.recv_cq.get(), want, m.rx.wc.data());
        if (n < 0) {
            return err(std::errc::io_error);
        }
        m.rx.stash_begin = 0;
        m.rx.stash_end = static_cast<std::size_t>(n);
    }
    std::size_t k = 0;
    const std::size_t lim = std::min(out.size(), m.rx.handed.size());
    while (m.rx.stash_begin < m.rx.stash_end && k < lim) {
        const ibv_wc& w = m.rx.wc[m.rx.stash_begin++];
        --m.rx.posted;
        const auto slot = static_cast<std::uint32_t>(w.wr_id);
        if (w.status == IBV_WC_WR_FLUSH_ERR) {
            // The QP is in the error state: not re-posted (it would be flushed at once);
            // recover_qp() replaces the QP and posts every slot again.
            ++m.counters.wr_flushed;
            m.qp_broken.store(true, std::memory_order_relaxed);
            continue;
        }
        if (w.status != IBV_WC_SUCCESS || w.byte_len < kGrhBytes) {
            if (w.status == IBV_WC_LOC_LEN_ERR) {
                ++m.counters.rx_truncated;  // longer than the port's MTU: cannot happen
            }
            if (w.status != IBV_WC_SUCCESS) {
                ++m.counters.completion_errors;
                m.counters.last_completion_error = ibv_wc_status_str(w.status);
            }
            m.rx.repost[m.rx.repost_count++] = slot;
            continue;
        }
        const std::byte* grh = m.rx.base + slot * m.rx.stride + kRxGrhOffset;
        RxPacket& r = out[k];
        r.data = std::span<const std::byte>(grh + kGrhBytes, w.byte_len - kGrhBytes);
        r.from.family = kFamilyVerbs;
        r.from.port = 0;
        r.from.id = w.src_qp;
        if ((w.wc_flags & IBV_WC_GRH) != 0) {
            r.from.addr = source_gid_from_grh(reinterpret_cast<const std::uint8_t*>(grh));
        } else {
            r.from.addr = {};
        }
        // The way back (IB: the LID, SL and path bits ibv_init_ah_from_wc would use), for the
        // AH the control thread makes when a source is first seen (§7).
        if (m.cfg.attach) {  // subscribers NAK sources; publishers send nothing unicast
            m.note_source(r.from, policy::SourceRoute{w.slid, w.sl, w.dlid_path_bits});
        }
        r.rx_time_ns = 0;
        m.rx.handed[k++] = slot;
        ++m.counters.rx_datagrams;
    }
    m.rx.handed_count = k;
    // Low water: after taking these completions, (almost) no receive is left posted. The
    // device drops what arrives now (UD has no RNR retry): PGM will have to repair it.
    if (k != 0 && m.rx.posted < std::max<std::size_t>(1, m.cfg.rx_depth / 8)) {
        ++m.counters.rx_ring_low;
    }
    if (k == 0 && m.rx.repost_count != 0) {
        m.post_receives(m.rx.repost.data(), m.rx.repost_count);
        m.rx.repost_count = 0;
    }
    return k;
}

void VerbsTransport::release_rx(std::size_t count) noexcept {
    Impl& m = *impl_;
    count = std::min(count, m.rx.handed_count);
    for (std::size_t i = 0; i < count; ++i) {
        m.rx.repost[m.rx.repost_count++] = m.rx.handed[i];
    }
    m.rx.handed_count = 0;
    // One chained post (one doorbell) for the whole batch.
    if (m.rx.repost_count != 0) {
        m.post_receives(m.rx.repost.data(), m.rx.repost_count);
        m.rx.repost_count = 0;
    }
}

}  // namespace prizma::verbs
