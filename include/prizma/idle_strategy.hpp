// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <thread>

namespace prizma {

/// What AgentRunner (or any polling loop) calls after each duty cycle: `idle(work)` with the
/// work that cycle did, never throwing. BusySpin, Yielding, Backoff and Sleeping model it; so
/// can a strategy of your own.
template <typename T>
concept IdleStrategy = requires(T& strategy, int work) {
    { strategy.idle(work) }
    noexcept;
};

/// What a polling loop does after a duty cycle that did `work` units (0 = idle). Each has
/// `void idle(int work) noexcept`. Market data: BusySpin; CPU-frugal consumers: Backoff, or
/// Context::wait() in their own loop (blocking on the transports' fds until the next timer).

/// Never gives the core away: lowest latency, one core per loop.
struct BusySpin {
    // NOLINTNEXTLINE(readability-convert-member-functions-to-static): the concept's member
    void idle(int /*work*/) noexcept {}
};

/// Yields the core when there was nothing to do.
struct Yielding {
    // NOLINTNEXTLINE(readability-convert-member-functions-to-static): the concept's member
    void idle(int work) noexcept {
        if (work == 0) {
            std::this_thread::yield();
        }
    }
};

/// Spins, then yields, then sleeps with a doubling period (Aeron's defaults: 10 spins,
/// 20 yields, 1 µs to 1 ms); any work resets it.
class Backoff {
public:
    Backoff() noexcept = default;
    Backoff(std::uint32_t spins,
            std::uint32_t yields,
            std::chrono::nanoseconds min_park,
            std::chrono::nanoseconds max_park) noexcept
        : spins_(spins),
          yields_(yields),
          min_park_(min_park),
          max_park_(max_park),
          park_(min_park) {}
    void idle(int work) noexcept {
        if (work > 0) {
            state_ = 0;
            park_ = min_park_;
            return;
        }
        if (state_ < spins_) {
            ++state_;
        } else if (state_ < spins_ + yields_) {
            ++state_;
            std::this_thread::yield();
        } else {
            std::this_thread::sleep_for(park_);
            park_ = park_ * 2 < max_park_ ? park_ * 2 : max_park_;
        }
    }

    /// What the next idle(0) does: zero = spin or yield, else park this long.
    [[nodiscard]] std::chrono::nanoseconds next_park() const noexcept {
        return state_ < spins_ + yields_ ? std::chrono::nanoseconds(0) : park_;
    }

private:
    std::uint32_t spins_ = 10;
    std::uint32_t yields_ = 20;
    std::chrono::nanoseconds min_park_{1000};
    std::chrono::nanoseconds max_park_{1'000'000};
    std::uint32_t state_ = 0;
    std::chrono::nanoseconds park_{1000};
};

/// Sleeps a fixed period when idle.
struct Sleeping {
    std::chrono::nanoseconds period{1'000'000};
    void idle(int work) const noexcept {
        if (work == 0) {
            std::this_thread::sleep_for(period);
        }
    }
};

}  // namespace prizma

namespace prizma {
static_assert(
    IdleStrategy<
        BusySpin> && IdleStrategy<Yielding> && IdleStrategy<Backoff> && IdleStrategy<Sleeping>);
}  // namespace prizma
