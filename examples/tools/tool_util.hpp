// SPDX-License-Identifier: Apache-2.0
// Small helpers shared by the command-line tools (CPU pinning, JSON text, counter lines,
// stop signals).
// Command lines: cli.hpp.
#pragma once

#include <sched.h>
#include <sys/prctl.h>

#include <atomic>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include <prizma/counters.hpp>

namespace prizma::tools {

/// The calling thread's timer slack set to 1 us (Linux's default is 50 us): a tool that
/// sleeps until a message is due (prizma-ping --rate, prizma-send --rate) or until one arrives
/// (--wait block) wakes when it asked to, not up to 50 us later. Best effort.
inline void precise_timers() noexcept {
    (void)::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
}

/// "counters NAME VALUE NAME VALUE ...": every ChannelCounters field, zeros included, on one
/// line (scripts take one with `sed -n 's/^counters.* naks_ignored \([0-9]*\).*/\1/p'`).
namespace detail {
inline std::atomic<bool> stop_flag{false};  // lock-free: may be set from a signal handler
extern "C" inline void on_stop_signal(int /*signo*/) {
    stop_flag.store(true);
}
}  // namespace detail

/// Whether the program was asked to stop: SIGINT or SIGTERM after stop_on_signals(), or
/// request_stop(). The tools' (and md-recorder's) loops end on it and print their summary.
inline bool stop_requested() noexcept {
    return detail::stop_flag.load();
}

/// Asks the program's loops to end, as SIGINT would.
inline void request_stop() noexcept {
    detail::stop_flag.store(true);
}

/// SIGINT (Ctrl-C) and SIGTERM (kill) set stop_requested() instead of killing the process.
inline void stop_on_signals() noexcept {
    (void)std::signal(SIGINT, detail::on_stop_signal);
    (void)std::signal(SIGTERM, detail::on_stop_signal);
}

inline std::string counters_line(const ChannelCounters& c) {
    std::string line = "counters";
    for (const auto& f : kChannelCounterFields) {
        line += ' ';
        line += f.name;
        line += ' ';
        line += std::to_string(c.*f.member);
    }
    return line;
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

/// Length of the well-formed UTF-8 sequence at the start of s (1 to 4), 0 when there is none
/// (a stray continuation byte, an overlong form, a surrogate, beyond U+10FFFF, cut short).
inline std::size_t utf8_length(std::string_view s) noexcept {
    const auto b = [&](std::size_t i) {
        return static_cast<unsigned>(static_cast<unsigned char>(s[i]));
    };
    const unsigned c = b(0);
    std::size_t n = 0;
    unsigned lo = 0x80;  // bounds of the second byte (RFC 3629 table)
    unsigned hi = 0xbf;
    if (c < 0x80) {
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        lo = c == 0xe0 ? 0xa0 : 0x80;
        hi = c == 0xed ? 0x9f : 0xbf;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        lo = c == 0xf0 ? 0x90 : 0x80;
        hi = c == 0xf4 ? 0x8f : 0xbf;
    } else {
        return 0;
    }
    if (s.size() < n || b(1) < lo || b(1) > hi) {
        return 0;
    }
    for (std::size_t i = 2; i < n; ++i) {
        if (b(i) < 0x80 || b(i) > 0xbf) {
            return 0;
        }
    }
    return n;
}

/// A JSON string literal for s (RFC 8259): quote, backslash and control characters escaped,
/// UTF-8 kept, every byte that is not well-formed UTF-8 replaced by U+FFFD (text read from a
/// file can be cut in the middle of a character).
inline std::string json_string(std::string_view s) {
    std::string out = "\"";
    while (!s.empty()) {
        const auto c = static_cast<unsigned char>(s[0]);
        std::size_t used = 1;
        if (c == '"' || c == '\\') {
            out += '\\';
            out += s[0];
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20) {
            constexpr char kHex[] = "0123456789abcdef";
            out += "\\u00";
            out += kHex[(c >> 4U) & 0xfU];
            out += kHex[c & 0xfU];
        } else if (const std::size_t n = utf8_length(s); n == 0) {
            out += "\\ufffd";
        } else {
            out.append(s.substr(0, n));
            used = n;
        }
        s.remove_prefix(used);
    }
    out += '"';
    return out;
}

}  // namespace prizma::tools
