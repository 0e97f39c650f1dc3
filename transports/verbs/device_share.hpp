// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the verbs channels of one process share on one RDMA device (docs/RDMA.md §1.1).

#include <infiniband/verbs.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <prizma/result.hpp>

#include "lib/posix/unique_fd.hpp"
#include "transports/verbs/device_policy.hpp"
#include "transports/verbs/verbs_handles.hpp"

namespace prizma::verbs {

/// The async events after which a cached address handle's route may be stale: the share
/// starts a new generation of its handles, each channel drops its own.
bool refreshes_routes(ibv_event_type t) noexcept;

/// One per device per process, shared by every channel on it: the device context (one uverbs
/// file and one set of doorbell pages instead of one per channel), one protection domain, one
/// reader of the device's async events that hands each event to every channel on the device,
/// and the unicast address handles: a destination's AH is made once (on RoCE a creation can
/// block ~1 s while the kernel resolves the neighbour) and used by every channel that sends
/// to it. AHs belong to the PD, not to a QP, so any channel's QP may use them.
class DeviceShare {
public:
    /// The process's share of the device `ctx` is open on: the existing one (then `ctx` is
    /// closed) or a new one that owns `ctx`. Errors: the PD or the event thread failed.
    static Result<std::shared_ptr<DeviceShare>, Error> adopt(ContextPtr ctx);
    ~DeviceShare();
    DeviceShare(const DeviceShare&) = delete;
    DeviceShare& operator=(const DeviceShare&) = delete;
    DeviceShare(DeviceShare&&) = delete;
    DeviceShare& operator=(DeviceShare&&) = delete;

    [[nodiscard]] ibv_context* context() const noexcept { return context_.get(); }
    [[nodiscard]] ibv_pd* pd() const noexcept { return pd_.get(); }
    [[nodiscard]] const std::string& name() const noexcept { return name_; }
    /// Channels listening now.
    [[nodiscard]] std::size_t channels() const;

    /// Called on the share's event thread with every async event of the device, before it is
    /// acknowledged; the channel filters (its port, its QP). Must not block.
    using Listener = std::function<void(const ibv_async_event&)>;
    std::uint64_t listen(Listener l);
    /// When this returns, the listener runs no more (it waits for a call in progress).
    void unlisten(std::uint64_t id);

    /// A handle made for exactly these fields since the last fabric event, or null.
    std::shared_ptr<ibv_ah> find_ah(const policy::AhFields& f);
    /// Keeps `made` (just created for `f`) for the other channels; when one was kept for the
    /// same fields meanwhile, that one is returned and `made` destroyed.
    std::shared_ptr<ibv_ah> keep_ah(const policy::AhFields& f, ibv_ah* made);
    /// Handles kept before a LID, SM, client-reregister or GID event are not handed out again
    /// (their routes may be stale); the event thread calls it before dispatching such events.
    void new_generation() noexcept;
    [[nodiscard]] std::size_t kept_ahs();  ///< live handles in the cache

private:
    explicit DeviceShare(ContextPtr ctx);
    void run() noexcept;
    using Key = std::tuple<bool,
                           policy::Gid,
                           std::uint32_t,
                           std::uint8_t,
                           std::uint8_t,
                           std::uint8_t,
                           std::uint16_t,
                           std::uint8_t,
                           std::uint8_t,
                           std::uint8_t,
                           std::uint8_t>;
    static Key key_of(const policy::AhFields& f) noexcept;
    struct Kept {
        std::weak_ptr<ibv_ah> ah;
        std::uint64_t generation = 0;
    };

    std::string name_;
    ContextPtr context_;
    PdPtr pd_;
    posix::UniqueFd stop_;  // eventfd: ends the event thread
    std::thread thread_;
    mutable std::mutex listeners_mu_;  // held while an event is dispatched
    std::vector<std::pair<std::uint64_t, Listener>> listeners_;
    std::uint64_t next_id_ = 1;
    std::mutex ah_mu_;
    std::map<Key, Kept> ahs_;
    std::uint64_t generation_ = 0;
};

}  // namespace prizma::verbs
