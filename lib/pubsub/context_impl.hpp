// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/epoll.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <prizma/context.hpp>

#include "lib/posix/unique_fd.hpp"
#include "lib/protocol/config.hpp"
#include "lib/pubsub/channel.hpp"
#include "lib/pubsub/channel_keys.hpp"
#include "lib/runtime/rng.hpp"
#include "lib/stats/stats_file.hpp"

namespace prizma {

/// A Context's state: its channels, the epoll over their transports, the stats file. Split
/// over context.cpp (channels), context_wait.cpp (duty cycle, waiting) and counters.cpp.
struct Context::Impl {
    detail::OwnerThread owner;
    TransportRegistry registry;
    std::vector<std::unique_ptr<detail::Channel>> channels;
    Gsi gsi{};
    runtime::Rng rng = runtime::Rng::from_entropy();  // TSI ports, receiver ids, seeds
    posix::UniqueFd epoll;
    std::size_t busy_only = 0;       // channels whose transport has no wakeup fd
    stats::Writer stats;             // counters for prizma-stat (shared-memory file)
    std::string stats_error;         // why there is no stats file (empty: there is one, or off)
    std::int64_t stats_next_ns = 0;  // next update of it
    /// Channel::rx_idle was set by the last epoll look and no poll has used it yet.
    bool ready_fresh = false;
    static constexpr int kWaitEvents = 16;
    /// wait()'s timeout: a CLOCK_MONOTONIC timerfd in `epoll`, moved only when a wait needs it
    /// earlier (see wait()); invalid when it could not be made (then epoll's own timeout).
    posix::UniqueFd timer;
    std::int64_t timer_at = 0;  // its expiry (steady-clock ns); 0: not armed, or fired and read
    /// Makes sure the timer fires no later than `until`; false when it cannot be set.
    bool arm_timer(std::int64_t until, std::int64_t now) noexcept;  // context_wait.cpp
    void clear_timer() noexcept;  // reads a fired timer, so the epoll fd is quiet again
    Impl() = default;
    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;
    Impl(Impl&&) = delete;
    Impl& operator=(Impl&&) = delete;
    ~Impl() {
        for (auto& ch : channels) {  // flow control: no source waits for us any more
            if (auto* rcv = ch->session->receiver()) {
                rcv->leave(*ch->session);
                ch->session->flush();
            }
        }
    }
    void write_stats() noexcept;  // lib/pubsub/counters.cpp
    void publish_channel_names() noexcept;
    /// Marks, from the n events epoll returned, which channels had nothing (n < 0: unknown).
    void note_ready(const epoll_event* ev, int n) noexcept;  // lib/pubsub/context_wait.cpp
    /// Before a poll with no fresh epoll look: one epoll_wait(0) for every channel, when it
    /// saves at least two empty receives.
    void look_ready() noexcept;

    Result<detail::Channel*, Error> add(std::string_view uri,
                                        const ChannelOptions& o,
                                        bool publisher);
    Result<detail::Channel*, Error> add(TransportChannel tc,
                                        const ChannelOptions& given,
                                        bool publisher,
                                        std::string name,
                                        const pubsub::ChannelKeys& keys);
    Result<void, Error> remove(detail::Channel* ch);
    protocol::SourceConfig source_config(const TransportChannel& tc,
                                         const Transport& t,
                                         const ChannelOptions& o,
                                         const protocol::Timers& timers);
    protocol::ReceiverConfig receiver_config(const TransportChannel& tc,
                                             const Transport& t,
                                             const ChannelOptions& o,
                                             const protocol::Timers& timers);
};

}  // namespace prizma
