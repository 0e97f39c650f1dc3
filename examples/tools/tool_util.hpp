// SPDX-License-Identifier: Apache-2.0
// Small helpers shared by the command-line tools (argument parsing, CPU pinning, JSON text).
#pragma once

#include <sched.h>

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

namespace prizma::tools {

/// Whole-string unsigned integer; false on anything else (sign, junk, overflow).
inline bool parse_u64(std::string_view s, std::uint64_t& out) noexcept {
    if (s.empty()) {
        return false;
    }
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc{} && p == s.data() + s.size();
}

/// Whole-string non-negative decimal number.
inline bool parse_double(std::string_view s, double& out) noexcept {
    if (s.empty()) {
        return false;
    }
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc{} && p == s.data() + s.size() && out >= 0;
}

/// Pins the calling thread to one CPU; returns an error text, empty on success.
inline std::string pin_to_cpu(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
        return "CPU " + std::to_string(cpu) + " is out of range";
    }
    CPU_SET(static_cast<unsigned>(cpu), &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0) {
        return "cannot pin to CPU " + std::to_string(cpu) + ": "
               + std::system_category().message(errno);
    }
    return {};
}

/// A JSON string literal for s.
inline std::string json_string(std::string_view s) {
    std::string out = "\"";
    for (const char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            constexpr char hex[] = "0123456789abcdef";
            out += "\\u00";
            out += hex[(static_cast<unsigned char>(c) >> 4U) & 0xfU];
            out += hex[static_cast<unsigned char>(c) & 0xfU];
        } else {
            out += c;
        }
    }
    out += '"';
    return out;
}

}  // namespace prizma::tools
