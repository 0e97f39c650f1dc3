// SPDX-License-Identifier: Apache-2.0
// Command-line pieces and the event loop the consumers share.
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <string>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

#include "../../tools/cli.hpp"
#include "../../tools/replay_cli.hpp"
#include "execlog/feed.hpp"
#include "execlog/metrics.hpp"

namespace execlog {

struct ConsumerArgs {
    FeedOptions feed;
    std::string replay;  ///< HOST:PORT of the archiver, or empty
    prizma::tools::ReplaySecurityArgs replay_security;
    bool spin = false;
    bool exit_at_end = false;
    std::uint32_t silence_probe_ms = 1000;
    std::string arbitration = "first";
    std::uint32_t quorum_timeout_ms = 1000;
    MetricsArgs metrics;
};

/// This process's CPU time so far, user + system (getrusage), in seconds: the consumers print
/// it on their final line so a benchmark can divide it by the records they applied.
inline double cpu_seconds() {
    rusage ru{};
    if (::getrusage(RUSAGE_SELF, &ru) != 0) {
        return 0.0;
    }
    const auto s = [](const timeval& t) {
        return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
    };
    return s(ru.ru_utime) + s(ru.ru_stime);
}

inline void add_consumer_options(CLI::App& app, ConsumerArgs& a) {
    app.add_option("uri", a.feed.uri, "Channel URI of the ExecLog")->required();
    app.add_option("--stream-id", a.feed.stream_id, "Stream id (default 21)")
        ->check(prizma::tools::whole(0, 0xffffffffU));
    app.add_option("--replay", a.replay,
                   "The archiver's replay service, HOST:PORT: catch up from it when behind");
    app.add_option("--window", a.feed.window, "Receive window, packets (default 65536)")
        ->check(prizma::tools::whole(64, 1U << 20U));
    app.add_option("--pgm-history", a.feed.max_recover,
                   "PGM history a fresh consumer asks the cores for, packets (default 0: the "
                   "whole window); what is older comes from the archiver (--replay)")
        ->check(prizma::tools::whole(0, 1U << 20U));
    app.add_flag("--spin", a.spin, "Busy-poll (default: block on the context's fd)");
    app.add_flag("--exit-at-end", a.exit_at_end, "Exit after the session-end record");
    app.add_option("--silence-probe-ms", a.silence_probe_ms,
                   "Live silent this long: ask the archiver whether the stream went on "
                   "(default 1000; 0: never)")
        ->check(prizma::tools::whole(0, 3'600'000));
    app.add_option("--arbitration", a.arbitration,
                   "How the cores' copies are taken: first (default: the first copy, lowest "
                   "latency; a differing copy is reported after) or quorum (a record once "
                   "--quorum cores sent the same copy; copies that differ halt the stream "
                   "until the archive holds the operator's choice)")
        ->check(prizma::tools::one_of({"quorum", "first"}));
    app.add_option("--quorum", a.feed.quorum,
                   "With --arbitration quorum: cores that must send the same copy (default 2: "
                   "a hot-standby pair must agree; 2 with three cores: a majority)")
        ->check(prizma::tools::whole(1, 16));
    app.add_option("--quorum-timeout-ms", a.quorum_timeout_ms,
                   "With --arbitration quorum: how long a record waits for the other cores' "
                   "copies; a core silent that long is not waited for until it sends again "
                   "(default 1000)")
        ->check(prizma::tools::whole(0, 60'000));
    prizma::tools::add_replay_security_options(app, a.replay_security, false);
    add_metrics_options(app, a.metrics);
}

/// Checks what add_consumer_options() took; prints the error and returns false.
inline bool finish_consumer_args(const char* tool, ConsumerArgs& a) {
    a.feed.name = tool;
    a.feed.silence_probe = std::chrono::milliseconds(a.silence_probe_ms);
    a.feed.arbitration =
        a.arbitration == "first" ? prizma::Arbitration::first : prizma::Arbitration::quorum;
    a.feed.quorum_timeout = std::chrono::milliseconds(a.quorum_timeout_ms);
    auto sec = prizma::tools::replay_security(a.replay_security);
    if (!sec) {
        fmt::print(stderr, "{}: {}\n", tool, sec.error().message());
        return false;
    }
    a.feed.replay_security = std::move(*sec);
    if (!a.replay.empty()) {
        const auto hp = parse_host_port(a.replay);
        if (!hp || hp->second == 0) {
            fmt::print(stderr, "{}: --replay '{}': want HOST:PORT\n", tool, a.replay);
            return false;
        }
        a.feed.replay_host = hp->first;
        a.feed.replay_port = hp->second;
    }
    return true;
}

/// Sleeps until the context has work (or `max_wait`), unless spinning; shorter while the feed
/// reads the archiver (its socket is not the context's).
inline void idle(prizma::Context& ctx, const Feed& feed, bool spin) {
    if (spin) {
        return;
    }
    ctx.wait(feed.catching_up() ? std::chrono::milliseconds(1) : std::chrono::milliseconds(100));
}

}  // namespace execlog
