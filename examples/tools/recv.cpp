// SPDX-License-Identifier: Apache-2.0
// prizma-recv URI --count N [--timeout SECONDS] [--deadline SECONDS] [--preset P] [--recover]
//             [--spin] [--verbose]
// Checks that messages 0..N-1 (64-bit little-endian counter in the first 8 bytes) arrive once
// each; exits 0 only then.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

#include "cli.hpp"
#include "tool_util.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
    std::string uri;
    std::uint64_t count = 0;
    double timeout = 30;
    double deadline_s = 0;  // 0: none
    bool verbose = false;
    bool spin = false;
    double consume_rate = 0;  // messages/s the application takes; 0: as fast as they come
    bool verify = false;      // check every byte against prizma-send's pattern
    prizma::ChannelOptions opts;
};

/// Reads the command line into `a`. Returns -1 to go on, or the exit code (cli.hpp's parse()).
int parse_args(int argc, char** argv, Args& a) {
    CLI::App app{"", "prizma-recv"};
    prizma::tools::init(
        app,
        "prizma-recv URI --count N [--timeout SECONDS] [--deadline SECONDS]\n"
        "                   [--preset wan|lan|rdma] [--recover] [--spin] [--verbose]\n"
        "                   [--consume-rate MSGS_PER_S] [--window PACKETS] [--verify]",
        "Subscribes to URI and checks that messages 0..N-1 from prizma-send (a 64-bit\n"
        "little-endian index in the first 8 bytes) all arrive exactly once.",
        "Exits 0 only when messages 0..N-1 all arrived exactly once; 1 when a message is\n"
        "missing, duplicated or out of range, or --timeout / --deadline ran out first.\n"
        "Prints \"listening on URI\" on stderr once the channel is open (scripts wait for it).");
    app.add_option("URI", a.uri,
                   "udp://GROUP:PORT?iface=ADDR[&loss=P&seed=N...], verbs://...\n"
                   "or mem://NAME:DPORT (every key: docs/URI.md)")
        ->required()
        ->type_name("");
    app.add_option("--count", a.count, "Messages expected (indexes 0..N-1)")
        ->required()
        ->type_name("N")
        ->check(prizma::tools::whole());
    app.add_option("--timeout", a.timeout,
                   "Idle timeout: give up when no message has arrived for this long\n"
                   "(from the start until the first one; default 30)")
        ->type_name("SECONDS")
        ->check(prizma::tools::above(0));
    app.add_option("--deadline", a.deadline_s,
                   "Give up this long after the start, whatever arrives (default: none)")
        ->type_name("SECONDS")
        ->check(prizma::tools::above(0));
    prizma::tools::add_preset(app, a.opts);
    prizma::tools::add_window(app, a.opts);
    app.add_flag("--recover", a.opts.recover_history,
                 "Late join: recover the source's history back to its trail\n"
                 "(default: start at the first packet heard)");
    app.add_flag("--spin", a.spin,
                 "Busy-poll (never sleep between polls), as a latency-critical\n"
                 "consumer does (default: sleep on the transport's wakeup)");
    app.add_flag("--verbose", a.verbose, "Print every message and source event");
    app.add_flag("--verify", a.verify,
                 "Check every byte of every message: byte k of message i is (i + k) & 0xff\n"
                 "after the index (prizma-send's and OpenPGM pgm_peer's filler); a message\n"
                 "that differs is counted corrupt and fails the run");
    app.add_option("--consume-rate", a.consume_rate,
                   "Take at most this many messages per second from the subscriber, as a slow\n"
                   "consumer does (flow control: flow=min in the URI); default 0: no limit")
        ->type_name("MSGS_PER_S")
        ->check(CLI::NonNegativeNumber);
    return prizma::tools::parse(app, argc, argv);
}

/// What arrived, checked against the indexes 0..n-1 expected.
struct Tally {
    Tally(std::uint64_t expected, bool print_each, bool check_bytes)
        : n(expected), verbose(print_each), verify(check_bytes), seen(n, 0) {}

    /// Counts one message or event delivered at `now` (loss events are printed, and with
    /// --verbose everything else too). True for a data message.
    bool add(const prizma::Message& m, Clock::time_point now) {
        if (m.kind == prizma::MessageKind::loss) {
            ++loss_events;
            fmt::print("loss: {} sequence numbers from sqn {}\n", m.count, m.sqn.value);
            return false;
        }
        if (m.kind != prizma::MessageKind::data) {
            if (verbose) {
                fmt::print("source {}\n",
                           m.kind == prizma::MessageKind::joined ? "joined" : "left");
            }
            return false;
        }
        if (received == 0) {
            first = now;
        }
        last = now;
        ++received;
        bytes += m.payload.size();
        std::uint64_t idx = UINT64_MAX;
        if (m.payload.size() >= 8) {
            std::memcpy(&idx, m.payload.data(), 8);
        }
        if (idx >= n) {
            ++out_of_range;
            return true;
        }
        if (verify && !filler_ok(m.payload, idx)) {
            ++corrupt;
            return true;
        }
        if (seen[idx] != 0) {
            ++duplicates;
            return true;
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
        return true;
    }

    /// Byte k (after the 8-byte index) is (idx + k) & 0xff.
    static bool filler_ok(std::span<const std::byte> p, std::uint64_t idx) {
        for (std::size_t k = 8; k < p.size(); ++k) {
            if (std::to_integer<std::uint8_t>(p[k]) != ((idx + k) & 0xffU)) {
                return false;
            }
        }
        return true;
    }

    std::uint64_t n;
    bool verbose;
    bool verify;
    std::vector<std::uint8_t> seen;
    std::uint64_t received = 0;
    std::uint64_t unique = 0;
    std::uint64_t duplicates = 0;
    std::uint64_t out_of_range = 0;
    std::uint64_t corrupt = 0;  // --verify: bytes that are not the message's
    std::uint64_t gaps = 0;
    std::uint64_t loss_events = 0;
    std::uint64_t bytes = 0;
    std::uint64_t expect = 0;
    Clock::time_point first{};
    Clock::time_point last{};
};

/// Why receive() stopped.
enum class End { complete, idle_timeout, deadline };

/// Polls until every message has arrived, --timeout passed without one, or --deadline.
End receive(prizma::Context& ctx, prizma::Subscriber& sub, const Args& a, Tally& tally) {
    auto seconds = [](double s) {  // (at most ~30 years: no overflow)
        return std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(std::min(s, 1e9)));
    };
    const auto idle_limit = seconds(a.timeout);
    const auto start = Clock::now();
    const auto deadline =
        a.deadline_s > 0 ? start + seconds(a.deadline_s) : Clock::time_point::max();
    auto now = start;
    auto last_arrival = start;  // the idle timeout counts from here
    while (tally.unique < a.count) {
        if (now - last_arrival >= idle_limit) {
            return End::idle_timeout;
        }
        if (now >= deadline) {
            return End::deadline;
        }
        const int work = ctx.poll();
        now = Clock::now();  // one clock read per batch, not per message
        std::size_t limit = 256;
        if (a.consume_rate > 0) {  // a slow consumer: what the rate allows since the start
            const double allowed =
                a.consume_rate * std::chrono::duration<double>(now - start).count();
            const auto taken = static_cast<double>(tally.received);
            limit =
                allowed > taken ? static_cast<std::size_t>(std::min(256.0, allowed - taken)) : 0;
            if (limit == 0) {
                last_arrival = now;  // throttled by us, not idle
                std::this_thread::sleep_for(std::chrono::microseconds(50));
                continue;
            }
        }
        const std::size_t got = sub.poll(limit, [&](const prizma::Message& m) {
            if (tally.add(m, now)) {
                last_arrival = now;
            }
        });
        if (work == 0 && got == 0 && !a.spin) {
            ctx.wait(std::chrono::milliseconds(1));
        }
    }
    return End::complete;
}
/// The first indexes that never arrived, as ranges ("missing: 12, 40-45, ..."), on stderr.
void print_missing(const Tally& t) {
    std::string out;
    int ranges = 0;
    for (std::uint64_t i = 0; i < t.n && ranges < 20; ++i) {
        if (t.seen[i] != 0) {
            continue;
        }
        std::uint64_t j = i;
        while (j + 1 < t.n && t.seen[j + 1] == 0) {
            ++j;
        }
        out += ranges == 0 ? " " : ", ";
        out += i == j ? fmt::format("{}", i) : fmt::format("{}-{}", i, j);
        ++ranges;
        i = j;
    }
    if (ranges != 0) {
        fmt::print(stderr, "prizma-recv: missing:{}{}\n", out, ranges == 20 ? ", ..." : "");
    }
}

/// Prints why the receiver stopped early, the tally and the counters. Returns the exit code:
/// 0 when messages 0..n-1 all arrived exactly once.
int report(const Args& a, End end, const Tally& t, const prizma::Subscriber& sub) {
    if (end == End::idle_timeout) {
        fmt::print(stderr, "prizma-recv: no message for {} s (--timeout)\n", a.timeout);
    } else if (end == End::deadline) {
        fmt::print(stderr, "prizma-recv: --deadline of {} s reached\n", a.deadline_s);
    }
    const double secs = std::chrono::duration<double>(t.last - t.first).count();
    const auto c = sub.counters();
    fmt::print("received {} messages ({} unique of {}), {} bytes\n", t.received, t.unique, t.n,
               t.bytes);
    fmt::print("rate {:.0f} msgs/s, {:.2f} MB/s (first to last message)\n",
               secs > 0 ? static_cast<double>(t.received) / secs : 0.0,
               secs > 0 ? static_cast<double>(t.bytes) / secs / 1e6 : 0.0);
    fmt::print(
        "repairs {} naks {} gaps {} duplicates {} out-of-range {} corrupt {} loss events {} "
        "malformed {} window-full {}\n",
        c.repaired, c.naks_sent, t.gaps, t.duplicates, t.out_of_range, t.corrupt, t.loss_events,
        c.malformed, c.window_full);
    fmt::print("{}\n", prizma::tools::counters_line(c));
    if (const auto tc = sub.transport_counters(); !tc.empty()) {
        fmt::print("transport");
        for (const auto& k : tc) {
            fmt::print(" {} {}", k.name, k.value);
        }
        fmt::print("\n");
    }
    const bool ok = t.unique == t.n && t.duplicates == 0 && t.out_of_range == 0 && t.corrupt == 0;
    // stdout first: with both streams in one file, a stderr line must not land inside the
    // counters line (scripts parse it).
    (void)std::fflush(stdout);
    if (!ok) {
        fmt::print(stderr, "prizma-recv: FAILED: {} of {} messages arrived once\n", t.unique, t.n);
        print_missing(t);
    }
    return ok ? 0 : 1;
}

int run(int argc, char** argv) {
    Args a;
    if (const int rc = parse_args(argc, argv, a); rc >= 0) {
        return rc;
    }
    prizma::tools::precise_timers();
    auto ctx = prizma::tools::make_context("prizma-recv");
    if (!ctx) {
        return 1;
    }
    auto sub = ctx->add_subscriber(a.uri, a.opts);
    if (!sub) {
        fmt::print(stderr, "prizma-recv: {}: {}\n", a.uri, sub.error().message());
        return 1;
    }
    // Ready line (scripts wait for it before starting a sender); on verbs it names the QP a
    // unicast publisher must send to.
    const std::string local = sub->local_address();
    if (const std::string d = sub->transport_description(); !d.empty()) {
        fmt::print(stderr, "prizma-recv: transport: {}\n", d);  // what was chosen
    }
    fmt::print(stderr, "prizma-recv: listening on {}{}{}\n", a.uri, local.empty() ? "" : " at ",
               local);
    Tally tally(a.count, a.verbose, a.verify);
    const End end = receive(*ctx, *sub, a, tally);
    return report(a, end, tally, *sub);
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main("prizma-recv", run, argc, argv);
}
