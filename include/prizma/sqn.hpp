// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

namespace prizma {

/// A PGM sequence number (RFC 3208 §3.3: 32-bit, wraps): what Publisher::offer returns and
/// Message::sqn carries. Ordered only through serial arithmetic (precedes(), distance());
/// there is deliberately no operator< or <=>: serial order is not transitive, so a Sqn must not
/// end up in std::map or std::sort by accident. `value` is the raw number (printing, storage).
struct Sqn {
    std::uint32_t value = 0;

    friend constexpr bool operator==(Sqn, Sqn) = default;
    friend constexpr Sqn operator+(Sqn a, std::uint32_t n) noexcept { return Sqn{a.value + n}; }
    friend constexpr Sqn operator-(Sqn a, std::uint32_t n) noexcept { return Sqn{a.value - n}; }
    constexpr Sqn& operator++() noexcept {
        ++value;
        return *this;
    }
};

/// Signed distance from `from` to `to`, in (-2^31, 2^31]. Positive when `to` follows `from`.
constexpr std::int32_t distance(Sqn from, Sqn to) noexcept {
    return static_cast<std::int32_t>(to.value - from.value);
}
/// True when `a` comes strictly before `b` in serial order (RFC 1982 style, 32-bit).
constexpr bool precedes(Sqn a, Sqn b) noexcept {
    return distance(a, b) > 0;
}
/// True when `a` is before or equal to `b`.
constexpr bool precedes_or_equal(Sqn a, Sqn b) noexcept {
    return distance(a, b) >= 0;
}
/// Unsigned count of sequence numbers in [first, last] when first precedes_or_equal last.
constexpr std::uint32_t span_count(Sqn first, Sqn last) noexcept {
    return last.value - first.value + 1U;
}

}  // namespace prizma
