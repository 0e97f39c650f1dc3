// SPDX-License-Identifier: Apache-2.0
// prizma-recv URI --count N [--timeout SECONDS] [--deadline SECONDS] [--preset P] [--recover]
//             [--spin] [--verbose]
// Checks that messages 0..N-1 (64-bit little-endian counter in the first 8 bytes) arrive once
// each; exits 0 only then.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

#include "cli.hpp"

int main(int argc, char** argv) {
    std::string uri;
    std::uint64_t n = 0;
    double timeout = 30;
    double deadline_s = 0;  // 0: none
    bool verbose = false;
    bool spin = false;
    prizma::ChannelOptions opts;
    CLI::App app{"", "prizma-recv"};
    prizma::tools::init(
        app,
        "prizma-recv URI --count N [--timeout SECONDS] [--deadline SECONDS]\n"
        "                   [--preset wan|lan|rdma] [--recover] [--spin] [--verbose]",
        "Subscribes to URI and checks that messages 0..N-1 from prizma-send (a 64-bit\n"
        "little-endian index in the first 8 bytes) all arrive exactly once.",
        "Exits 0 only when messages 0..N-1 all arrived exactly once; 1 when a message is\n"
        "missing, duplicated or out of range, or --timeout / --deadline ran out first.\n"
        "Prints \"listening on URI\" on stderr once the channel is open (scripts wait for it).");
    app.add_option("URI", uri,
                   "udp://GROUP:PORT?iface=ADDR[&loss=P&seed=N...], verbs://...\n"
                   "or mem://NAME:DPORT (every key: docs/URI.md)")
        ->required()
        ->type_name("");
    app.add_option("--count", n, "Messages expected (indexes 0..N-1)")
        ->required()
        ->type_name("N")
        ->check(prizma::tools::whole());
    app.add_option("--timeout", timeout,
                   "Idle timeout: give up when no message has arrived for this long\n"
                   "(from the start until the first one; default 30)")
        ->type_name("SECONDS")
        ->check(prizma::tools::above(0));
    app.add_option("--deadline", deadline_s,
                   "Give up this long after the start, whatever arrives (default: none)")
        ->type_name("SECONDS")
        ->check(prizma::tools::above(0));
    prizma::tools::add_preset(app, opts);
    app.add_flag("--recover", opts.recover_history,
                 "Late join: recover the source's history back to its trail\n"
                 "(default: start at the first packet heard)");
    app.add_flag("--spin", spin,
                 "Busy-poll (never sleep between polls), as a latency-critical\n"
                 "consumer does (default: sleep on the transport's wakeup)");
    app.add_flag("--verbose", verbose, "Print every message and source event");
    if (const int rc = prizma::tools::parse(app, argc, argv); rc >= 0) {
        return rc;
    }
    auto ctx = prizma::Context::create();
    if (!ctx) {
        fmt::print(stderr, "prizma-recv: {}\n", ctx.error().message());
        return 1;
    }
    auto sub = ctx->add_subscriber(uri, opts);
    if (!sub) {
        fmt::print(stderr, "prizma-recv: {}: {}\n", uri, sub.error().message());
        return 1;
    }
    // Ready line (scripts wait for it before starting a sender); on verbs it names the QP a
    // unicast publisher must send to.
    const std::string local = sub->local_address();
    fmt::print(stderr, "prizma-recv: listening on {}{}{}\n", uri, local.empty() ? "" : " at ",
               local);
    std::vector<std::uint8_t> seen(n, 0);
    std::uint64_t received = 0;
    std::uint64_t unique = 0;
    std::uint64_t duplicates = 0;
    std::uint64_t out_of_range = 0;
    std::uint64_t gaps = 0;
    std::uint64_t loss_events = 0;
    std::uint64_t bytes = 0;
    std::uint64_t expect = 0;
    using Clock = std::chrono::steady_clock;
    Clock::time_point first{};
    Clock::time_point last{};
    auto seconds = [](double s) {  // (at most ~30 years: no overflow)
        return std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(std::min(s, 1e9)));
    };
    const auto idle_limit = seconds(timeout);
    const auto start = Clock::now();
    const auto deadline = deadline_s > 0 ? start + seconds(deadline_s) : Clock::time_point::max();
    auto now = start;
    auto last_arrival = start;  // the idle timeout counts from here
    bool idle_out = false;
    bool deadline_out = false;
    while (unique < n) {
        idle_out = now - last_arrival >= idle_limit;
        deadline_out = now >= deadline;
        if (idle_out || deadline_out) {
            break;
        }
        const int work = ctx->poll();
        now = Clock::now();  // one clock read per batch, not per message
        const std::size_t got = sub->poll(256, [&](const prizma::Message& m) {
            if (m.kind == prizma::MessageKind::loss) {
                ++loss_events;
                fmt::print("loss: {} sequence numbers from sqn {}\n", m.count, m.sqn.value);
                return;
            }
            if (m.kind != prizma::MessageKind::data) {
                if (verbose) {
                    fmt::print("source {}\n",
                               m.kind == prizma::MessageKind::joined ? "joined" : "left");
                }
                return;
            }
            if (received == 0) {
                first = now;
            }
            last = now;
            last_arrival = now;
            ++received;
            bytes += m.payload.size();
            std::uint64_t idx = UINT64_MAX;
            if (m.payload.size() >= 8) {
                std::memcpy(&idx, m.payload.data(), 8);
            }
            if (idx >= n) {
                ++out_of_range;
                return;
            }
            if (seen[idx] != 0) {
                ++duplicates;
                return;
            }
            seen[idx] = 1;
            ++unique;
            if (idx != expect) {
                ++gaps;
            }
            expect = idx + 1;
            if (verbose) {
                fmt::print("message {} ({} bytes)\n", idx, m.payload.size());
            }
        });
        if (work == 0 && got == 0 && !spin) {
            ctx->wait(std::chrono::milliseconds(1));
        }
    }
    if (idle_out) {
        fmt::print(stderr, "prizma-recv: no message for {} s (--timeout)\n", timeout);
    } else if (deadline_out) {
        fmt::print(stderr, "prizma-recv: --deadline of {} s reached\n", deadline_s);
    }
    const double secs = std::chrono::duration<double>(last - first).count();
    const auto c = sub->counters();
    fmt::print("received {} messages ({} unique of {}), {} bytes\n", received, unique, n, bytes);
    fmt::print("rate {:.0f} msgs/s, {:.2f} MB/s (first to last message)\n",
               secs > 0 ? static_cast<double>(received) / secs : 0.0,
               secs > 0 ? static_cast<double>(bytes) / secs / 1e6 : 0.0);
    fmt::print(
        "repairs {} naks {} gaps {} duplicates {} out-of-range {} loss events {} malformed {} "
        "window-full {}\n",
        c.repaired, c.naks_sent, gaps, duplicates, out_of_range, loss_events, c.malformed,
        c.window_full);
    if (const auto t = sub->transport_counters(); !t.empty()) {
        fmt::print("transport");
        for (const auto& k : t) {
            fmt::print(" {} {}", k.name, k.value);
        }
        fmt::print("\n");
    }
    const bool ok = unique == n && duplicates == 0 && out_of_range == 0;
    if (!ok) {
        fmt::print(stderr, "prizma-recv: FAILED: {} of {} messages arrived once\n", unique, n);
    }
    return ok ? 0 : 1;
}
