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

#include <nlohmann/json.hpp>

namespace prizma::tools {

/// The calling thread's timer slack set to 1 us (Linux's default is 50 us): a tool that
/// sleeps until a message is due (prizma-ping --rate, prizma-send --rate) or until one arrives
/// (--wait block) wakes when it asked to, not up to 50 us later. Best effort.
inline void precise_timers() noexcept {
    (void)::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
}

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

/// "counters NAME VALUE NAME VALUE ...": every ChannelCounters field, zeros included, on one
/// line (scripts take one with `sed -n 's/^counters.* naks_ignored \([0-9]*\).*/\1/p'`).
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

/// The tools' JSON documents (--json): the fields in the order they are set.
using Json = nlohmann::ordered_json;

/// `doc` as one line of JSON text (RFC 8259), escaped by nlohmann-json: quote, backslash and
/// control characters escaped, UTF-8 kept, every byte that is not well-formed UTF-8 replaced
/// by U+FFFD (text read from a file can be cut in the middle of a character).
inline std::string json_text(const Json& doc) {
    return doc.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace prizma::tools
