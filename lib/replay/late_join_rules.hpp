// SPDX-License-Identifier: Apache-2.0
#pragma once
// The late joiner's rules for what it has already delivered (lib/replay/late_join.cpp), apart
// so that their boundaries are tested on their own (tests/unit/replay_test.cpp).
#include <cstdint>

#include <prizma/stream.hpp>

namespace prizma::detail {

/// The end (exclusive) of what an event covers: a record its sequence, a loss its range, a
/// stall or a reset nothing (their sequence).
[[nodiscard]] inline std::uint64_t event_end(const StreamEvent& e) noexcept {
    return e.kind == StreamEventKind::record ? e.sequence + 1
           : e.kind == StreamEventKind::loss ? e.sequence + e.count
                                             : e.sequence;
}

/// Already delivered when the position is `next` (by the replay or earlier live): a record or
/// loss that ends at or before `next`, a stall before it. A stall or a dispute at `next` is news
/// (the live reader lost what comes next and nothing follows it); resets and divergences always
/// pass.
[[nodiscard]] inline bool event_stale(const StreamEvent& e, std::uint64_t next) noexcept {
    switch (e.kind) {
        case StreamEventKind::record:
        case StreamEventKind::loss: return event_end(e) <= next;
        case StreamEventKind::stall:
        case StreamEventKind::dispute: return e.sequence < next;
        case StreamEventKind::reset:
        case StreamEventKind::divergence: return false;
    }
    return false;
}

}  // namespace prizma::detail
