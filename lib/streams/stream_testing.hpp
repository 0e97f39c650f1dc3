// SPDX-License-Identifier: Apache-2.0
#pragma once
// A test seam of StreamSubscriber: the clock its gap and stall timers read (Context::now_ns
// unless set), so a test can put the gap timeout's boundary on the exact nanosecond.
#include <cstddef>
#include <cstdint>

#include <prizma/stream.hpp>

namespace prizma::detail {

struct StreamSubscriberTesting {
    static void set_clock(StreamSubscriber& s, std::int64_t (*clock)() noexcept) noexcept;
    /// Whole records whose bytes the subscriber holds now (held, ballots' copies, newer
    /// epochs', far ahead): the memory bound of docs/STREAMS.md, "Trust".
    static std::size_t stored_records(const StreamSubscriber& s) noexcept;
};

}  // namespace prizma::detail
