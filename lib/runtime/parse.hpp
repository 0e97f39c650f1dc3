// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>
#include <system_error>

namespace prizma::runtime {

/// The whole of `s` as an unsigned integer no larger than `max`: decimal, or hexadecimal with
/// a 0x prefix when `hex_prefix` is set. Empty text, a sign, trailing characters and overflow
/// are refused. The one integer parser of the URIs, the options and the tools.
inline std::optional<std::uint64_t> parse_uint(std::string_view s,
                                               std::uint64_t max = UINT64_MAX,
                                               bool hex_prefix = false) noexcept {
    int base = 10;
    if (hex_prefix && s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        s.remove_prefix(2);
        base = 16;
    }
    std::uint64_t v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
    if (s.empty() || ec != std::errc{} || p != s.data() + s.size() || v > max) {
        return std::nullopt;
    }
    return v;
}

/// A probability 0 <= p < 1 written as a decimal ("0.05"); nullopt otherwise.
inline std::optional<double> parse_probability(std::string_view s) noexcept {
    double v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc{} || p != s.data() + s.size() || !(v >= 0 && v < 1)) {
        return std::nullopt;
    }
    return v;
}

}  // namespace prizma::runtime
