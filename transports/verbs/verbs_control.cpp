// SPDX-License-Identifier: Apache-2.0
// The control thread (unicast AHs, SA re-joins: what may block, never the data path) and the
// listener of the device's async events, which the device's event thread calls.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "lib/posix/errors.hpp"
#include "lib/runtime/rng.hpp"
#include "transports/verbs/verbs_impl.hpp"

namespace prizma::verbs {
namespace {

bool is_port_event(ibv_event_type t) noexcept {
    switch (t) {
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_PKEY_CHANGE:
        case IBV_EVENT_SM_CHANGE:
        case IBV_EVENT_CLIENT_REREGISTER:
        case IBV_EVENT_GID_CHANGE: return true;
        default: return false;
    }
}

}  // namespace

ibv_ah_attr to_attr(const policy::AhFields& f) noexcept {
    ibv_ah_attr a{};
    a.is_global = f.is_global ? 1 : 0;
    std::memcpy(a.grh.dgid.raw, f.dgid.data(), 16);
    a.grh.flow_label = f.flow_label;
    a.grh.sgid_index = f.sgid_index;
    a.grh.hop_limit = f.hop_limit;
    a.grh.traffic_class = f.traffic_class;
    a.dlid = f.dlid;
    a.sl = f.sl;
    a.src_path_bits = f.src_path_bits;
    a.port_num = f.port_num;
    a.static_rate = f.static_rate;
    return a;
}

/// Wakes the control thread (an eventfd write: one system call, nothing else).
void wake(int fd) noexcept {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
}

/// Makes the unicast AHs of the channel's cache (control thread): the handle another channel
/// of this process made already (§1.1), or a new one; on IB with the SA's path to the peer.
class VerbsTransport::Impl::AhMaker final : public AhCache::Maker {
public:
    explicit AhMaker(VerbsTransport::Impl& m) noexcept : m_(m) {}
    AhCache::Made make(const Endpoint& peer,
                       const policy::SourceRoute& route,
                       AhCache::PathMemo& memo) noexcept override {
        policy::AhFields f = policy::unicast_ah(m_.local_port, peer.addr, route);
        if (m_.local_port.infiniband && !memo.known) {
            // The path's own SL, from the SA (blocks up to ~1 s: this thread's job).
            auto path = query_path(m_.info.device, m_.info.port, m_.local_gid, peer.addr, m_.pkey);
            if (path) {
                memo.path = {path->dlid, path->sl, path->rate};
                memo.known = true;
            } else {
                m_.ctl_counters.path_fallbacks.fetch_add(1, std::memory_order_relaxed);
            }
        }
        if (memo.known) {
            policy::apply_path(f, memo.path);
        }
        std::shared_ptr<ibv_ah> ah = m_.dev->find_ah(f);
        const bool shared = ah != nullptr;
        if (!shared) {
            ibv_ah_attr a = to_attr(f);
            if (ibv_ah* made = ibv_create_ah(m_.dev->pd(), &a); made != nullptr) {
                ah = m_.dev->keep_ah(f, made);
            }
        }
        ibv_ah* const handle = ah.get();
        return {handle, std::move(ah), shared};
    }
    void published(bool shared) noexcept override {
        (shared ? m_.ctl_counters.ah_shared : m_.ctl_counters.ah_created)
            .fetch_add(1, std::memory_order_relaxed);
    }
    void failed() noexcept override {
        m_.ctl_counters.ah_failed.fetch_add(1, std::memory_order_relaxed);
    }

private:
    VerbsTransport::Impl& m_;
};

int VerbsTransport::Impl::service_ahs() noexcept {
    AhMaker maker(*this);
    const AhCache::Serviced s = ahs.service(AhCache::Clock::now(), maker);  // counted by it
    if (s.deferred != 0) {
        // The owner thread has not passed a quiescent point for a while (idle or stuck):
        // evicted handles stay alive in their slots rather than be destroyed in use.
        ctl_counters.ah_retire_full.fetch_add(1, std::memory_order_relaxed);
    }
    return s.wait_ms;
}

void VerbsTransport::Impl::on_async(const ibv_async_event& ev) noexcept {
    ControlCounters& c = ctl_counters;
    bool rejoin = false;
    {
        c.async_events.fetch_add(1, std::memory_order_relaxed);
        // element is a union: port_num only for port events (a QP or CQ event carries a
        // pointer there).
        const bool ours = is_port_event(ev.event_type) && ev.element.port_num == info.port;
        switch (ev.event_type) {
            case IBV_EVENT_PORT_ERR:
                if (ours) {
                    c.port_err.fetch_add(1, std::memory_order_relaxed);
                    c.port_down.store(1, std::memory_order_relaxed);
                }
                break;
            case IBV_EVENT_PORT_ACTIVE:
                if (ours) {
                    c.port_active.fetch_add(1, std::memory_order_relaxed);
                    c.port_down.store(0, std::memory_order_relaxed);
                    rejoin = rejoin || sa != nullptr;  // the SM may have dropped the port
                }
                break;
            case IBV_EVENT_LID_CHANGE:
                // The kernel's multicast client takes a LID change as a group error: the SM
                // may have moved the port, join again.
                c.lid_change.fetch_add(ours ? 1 : 0, std::memory_order_relaxed);
                rejoin = rejoin || (ours && sa != nullptr);
                break;
            case IBV_EVENT_SM_CHANGE:
                c.sm_change.fetch_add(ours ? 1 : 0, std::memory_order_relaxed);
                rejoin = rejoin || (ours && sa != nullptr);  // a new SM may not know us
                break;
            case IBV_EVENT_CLIENT_REREGISTER:
                c.client_reregister.fetch_add(ours ? 1 : 0, std::memory_order_relaxed);
                rejoin = rejoin || (ours && sa != nullptr);  // the SM lost its records
                break;
            case IBV_EVENT_GID_CHANGE:
                c.gid_change.fetch_add(ours ? 1 : 0, std::memory_order_relaxed);
                break;
            case IBV_EVENT_PKEY_CHANGE:
                c.pkey_change.fetch_add(ours ? 1 : 0, std::memory_order_relaxed);
                break;
            case IBV_EVENT_DEVICE_FATAL:
                c.device_fatal.fetch_add(1, std::memory_order_relaxed);
                fatal.store(true, std::memory_order_relaxed);
                break;
            case IBV_EVENT_QP_FATAL:
            case IBV_EVENT_QP_REQ_ERR:
            case IBV_EVENT_QP_ACCESS_ERR:
                // Our QP is in error: nothing it sends or receives completes any more. The
                // owner thread replaces it (its receives, flushed, wake that thread up).
                if (ev.element.qp == live_qp.load(std::memory_order_acquire)) {
                    c.qp_fatal.fetch_add(1, std::memory_order_relaxed);
                    qp_broken.store(true, std::memory_order_release);
                }
                break;
            case IBV_EVENT_CQ_ERR:
                // A CQ overran (a provider bug given our depths): loud, fatal, not retried;
                // counted with the device's fatal errors.
                if (ev.element.cq == send_cq.get() || ev.element.cq == recv_cq.get()) {
                    c.device_fatal.fetch_add(1, std::memory_order_relaxed);
                    fatal.store(true, std::memory_order_relaxed);
                }
                break;
            default: break;
        }
        if (refreshes_routes(ev.event_type)) {
            // The same events that start the share's new generation: every cached unicast
            // handle dropped, the routes they hold may be stale. The owner thread requests
            // fresh ones as sources are heard again.
            if (ours) {
                c.ah_flushed.fetch_add(ahs.flush(), std::memory_order_relaxed);
            }
        }
    }
    if (rejoin) {
        rejoin_wanted.store(true, std::memory_order_release);
    }
    wake(ctl.wake.get());  // the control thread: a rejoin, a flush, a count to report
}

// Re-joins the SA; a new MLID is attached (then the old one detached) and gets a new group AH.
bool VerbsTransport::Impl::rejoin_sa() noexcept {
    if (!sa->rejoin()) {
        ctl_counters.rejoin_failures.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    ctl_counters.rejoins.fetch_add(1, std::memory_order_relaxed);
    const sa::McMemberRecord& r = sa->record();
    if (r.mlid == mlid) {
        return true;
    }
    ctl_counters.mlid_changes.fetch_add(1, std::memory_order_relaxed);
    // The QP's attachment stays: providers key it by MGID and QPN (mlx5, rxe), so attaching
    // the new MLID and detaching the old one could remove the only attachment. Only the AH,
    // which carries the MLID as its DLID, is replaced.
    const policy::GroupPath path{r.sl, r.flow_label, r.rate};
    ibv_ah_attr a = to_attr(policy::group_ah(local_port, mgid, r.mlid, &path, cfg.hop_limit));
    AhPtr fresh(ibv_create_ah(dev->pd(), &a));
    if (!fresh) {
        ctl_counters.ah_failed.fetch_add(1, std::memory_order_relaxed);
        return false;  // retried at the next event
    }
    mlid = r.mlid;
    live_group_ah.store(fresh.get(), std::memory_order_release);
    if (group_ah && retired_ahs.size() < retired_ahs.capacity()) {
        retired_ahs.push_back(std::move(group_ah));
    }  // else: the old one is destroyed; its WRs completed long ago (a capacity of 16 events)
    group_ah = std::move(fresh);
    return true;
}

void VerbsTransport::Impl::control_loop() noexcept {
    pollfd fds[1] = {{ctl.wake.get(), POLLIN, 0}};
    using Clock = std::chrono::steady_clock;
    runtime::Rng rng = runtime::Rng::from_entropy();
    const auto draw = [&rng] {
        return static_cast<std::uint32_t>(rng() >> 32U);  // the high half: xorshift64*'s best
    };
    bool rejoin = false;
    unsigned attempt = 0;
    Clock::time_point rejoin_at{};
    int timeout = -1;
    while (!ctl.stop.load(std::memory_order_acquire)) {
        int wait_ms = timeout;
        if (rejoin) {
            const auto left =
                std::chrono::ceil<std::chrono::milliseconds>(rejoin_at - Clock::now());
            wait_ms = static_cast<int>(std::max<std::int64_t>(left.count(), 0));
            wait_ms = timeout < 0 ? wait_ms : std::min(wait_ms, timeout);
        }
        (void)::poll(fds, 1, wait_ms);
        std::uint64_t drained = 0;
        [[maybe_unused]] const ssize_t got = ::read(ctl.wake.get(), &drained, sizeof drained);
        if (rejoin_wanted.exchange(false, std::memory_order_acq_rel) && !rejoin) {
            // a fabric event: every host heard it, spread the joins
            rejoin = true;
            attempt = 0;
            rejoin_at =
                Clock::now() + std::chrono::milliseconds(policy::rejoin_delay_ms(0, draw()));
        }
        if (rejoin && sa && Clock::now() >= rejoin_at) {
            if (rejoin_sa()) {
                rejoin = false;
            } else {
                rejoin_at = Clock::now()
                            + std::chrono::milliseconds(policy::rejoin_delay_ms(++attempt, draw()));
            }
        }
        timeout = service_ahs();
    }
}

void VerbsTransport::Impl::stop_control() noexcept {
    if (listen_id != 0) {
        dev->unlisten(listen_id);  // no event reaches this channel any more
        listen_id = 0;
    }
    if (ctl.thread.joinable()) {
        ctl.stop.store(true, std::memory_order_release);
        wake(ctl.wake.get());
        ctl.thread.join();
    }
}

Result<void, Error> VerbsTransport::Impl::start_control() {
    ctl.wake.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!ctl.wake.valid()) {
        return fail<void>("eventfd failed: " + posix::errno_text(), std::errc::io_error);
    }
    retired_ahs.reserve(16);
    try {
        ctl.thread = std::thread([this] { control_loop(); });
    } catch (const std::system_error& e) {
        return fail<void>(std::string("cannot start the verbs control thread: ") + e.what(),
                          std::errc::resource_unavailable_try_again);
    }
    listen_id = dev->listen([this](const ibv_async_event& ev) { on_async(ev); });
    info.device_channels = dev->channels();
    return {};
}

}  // namespace prizma::verbs
