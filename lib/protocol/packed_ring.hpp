// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>

namespace prizma::protocol {

inline constexpr std::size_t kNoFit = SIZE_MAX;

/// Where `n` bytes go in a buffer of `size` bytes used as a ring of packed records: after the
/// newest record (`head`), wrapping to 0 when the end is reached, never over the oldest live
/// record (`tail`). Returns kNoFit when they do not fit. `head == tail` never happens with live
/// records, since a record may not end exactly at the tail.
constexpr std::size_t ring_fit(
    bool empty, std::size_t head, std::size_t tail, std::size_t n, std::size_t size) noexcept {
    if (empty) {
        return n <= size ? 0 : kNoFit;
    }
    if (head >= tail) {
        if (head + n <= size) {
            return head;
        }
        return n < tail ? 0 : kNoFit;
    }
    return head + n < tail ? head : kNoFit;
}

}  // namespace prizma::protocol
