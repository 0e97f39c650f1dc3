// SPDX-License-Identifier: Apache-2.0
// prizma-recv URI --count N [--timeout SECONDS] [--preset P] [--recover] [--spin] [--verbose]
// Checks that messages 0..N-1 (64-bit little-endian counter in the first 8 bytes) arrive once
// each; exits 0 only then.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

namespace {

void usage() {
    fmt::print(
        stderr,
        "usage: prizma-recv URI --count N [--timeout SECONDS] [--preset wan|lan|rdma] [--recover]\n"
        "                   [--spin] [--verbose]\n"
        "  --spin: busy-poll (never sleep between polls), as a latency-critical consumer does.\n"
        "  Exits 0 only when messages 0..N-1 all arrived exactly once.\n");
}

}  // namespace

int main(int argc, char** argv) {
    std::string uri;
    long long count = -1;
    double timeout = 30;
    bool verbose = false;
    bool spin = false;
    prizma::ChannelOptions opts;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        const bool has_value = i + 1 < argc;
        try {
            if (a == "--help" || a == "-h") {
                usage();
                return 0;
            }
            if (a == "--count" && has_value) {
                count = std::stoll(argv[++i]);
            } else if (a == "--timeout" && has_value) {
                timeout = std::stod(argv[++i]);
            } else if (a == "--preset" && has_value) {
                opts.preset = argv[++i];
            } else if (a == "--recover") {
                opts.recover_history = true;
            } else if (a == "--verbose") {
                verbose = true;
            } else if (a == "--spin") {
                spin = true;
            } else if (uri.empty() && !a.starts_with("--")) {
                uri = a;
            } else {
                throw std::invalid_argument("bad argument");
            }
        } catch (const std::exception&) {
            fmt::print(stderr, "prizma-recv: bad or incomplete argument '{}'\n", a);
            usage();
            return 2;
        }
    }
    if (uri.empty() || count < 0 || timeout <= 0) {
        fmt::print(stderr, "prizma-recv: need URI and --count N\n");
        usage();
        return 2;
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
    const auto n = static_cast<std::uint64_t>(count);
    std::vector<std::uint8_t> seen(n, 0);
    std::uint64_t received = 0;
    std::uint64_t unique = 0;
    std::uint64_t duplicates = 0;
    std::uint64_t out_of_range = 0;
    std::uint64_t gaps = 0;
    std::uint64_t loss_events = 0;
    std::uint64_t bytes = 0;
    std::uint64_t expect = 0;
    std::chrono::steady_clock::time_point first{};
    std::chrono::steady_clock::time_point last{};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
    auto now = std::chrono::steady_clock::now();
    while (unique < n && now < deadline) {
        const int work = ctx->poll();
        now = std::chrono::steady_clock::now();  // one clock read per batch, not per message
        const std::size_t got = sub->poll(256, [&](const prizma::Message& m) {
            if (m.kind == prizma::MessageKind::loss) {
                ++loss_events;
                fmt::print("loss: {} sequence numbers from sqn {}\n", m.count, m.sqn);
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
