// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <prizma/context.hpp>

#include "lib/pubsub/session.hpp"

namespace prizma::detail {

/// The thread that owns a Context (docs/ARCHITECTURE.md, threading). Checked, when
/// PRIZMA_OWNER_CHECKS is defined
/// (debug builds; the CI's sanitizer build), at every owner-only entry point: the first caller
/// binds it, adopt() hands it over, a call from any other thread aborts with the entry point's
/// name. Compiled out otherwise: nothing on the hot path.
struct OwnerThread {
    std::atomic<std::thread::id> id{};
    void check(const char* what) noexcept {
#ifdef PRIZMA_OWNER_CHECKS
        const std::thread::id me = std::this_thread::get_id();
        std::thread::id cur = id.load(std::memory_order_relaxed);
        if (cur == me
            || (cur == std::thread::id{}
                && id.compare_exchange_strong(cur, me, std::memory_order_relaxed))) {
            return;
        }
        (void)std::fprintf(
            stderr,
            "prizma: %s called from a thread that does not own its Context (one owner "
            "thread; publish from others through a PublishQueue, hand over with "
            "Context::adopt_owner_thread())\n",
            what);
        std::abort();
#else
        (void)what;
#endif
    }
};

/// One channel of a Context: what Publisher, Subscriber and Claim point to.
struct Channel {
    OwnerThread* owner = nullptr;
    /// What the scheme's factory made (with whatever decorator the registry put around it).
    std::unique_ptr<Transport> transport;
    std::unique_ptr<pubsub::Session> session;  ///< over *transport: destroyed before it
    std::string name;  ///< the URI, or the name given with a caller-made transport
    bool publisher = false;
    std::int64_t stamp_ns = 0;  ///< the time offered data is stamped with (see offer_stamp)
    /// The Context's epoll saw nothing for this channel at its last look, and its transport
    /// lets the next poll skip the receive (Transport::rx_follows_wakeup).
    bool rx_idle = false;
};

/// The channel's counters in the public form (lib/pubsub/counters.cpp).
ChannelCounters snapshot(const Channel& ch);
/// The channel's transport counters into `out`, without allocating; returns how many were
/// written.
std::size_t fill_transport_counters(const Channel& ch, std::span<NamedCounter> out) noexcept;
std::vector<NamedCounter> transport_counters_of(const Channel& ch);
/// The transport's events since the last call (none for a removed channel).
std::vector<TransportEvent> transport_events_of(Channel* ch);

}  // namespace prizma::detail
