// SPDX-License-Identifier: Apache-2.0
// prizma-send URI --count N --size BYTES [--rate MSGS_PER_S] [--preset P] [--linger SECONDS]
// Message i carries i as a 64-bit little-endian counter in its first 8 bytes, then filler.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

#include "cli.hpp"
#include "tool_util.hpp"

namespace {

struct Args {
    std::string uri;
    std::uint64_t count = 0;
    std::size_t size = 0;
    double rate = 0;
    double linger = 0;
    prizma::ChannelOptions opts;
};

/// Reads the command line into `a`. Returns -1 to go on, or the exit code (cli.hpp's parse()).
int parse_args(int argc, char** argv, Args& a) {
    CLI::App app{"", "prizma-send"};
    prizma::tools::init(
        app,
        "prizma-send URI --count N --size BYTES [--rate MSGS_PER_S] [--preset wan|lan|rdma]\n"
        "                   [--linger SECONDS] [--window PACKETS] [--repair-rate BYTES_PER_S]",
        "Publishes N messages of BYTES on URI. Each message starts with its index as a 64-bit\n"
        "little-endian counter (prizma-recv checks them).",
        "After the last message the sender keeps answering NAKs at least --linger seconds,\n"
        "then until no NAK has come for two NAK rounds of the preset (at most the receivers'\n"
        "repair deadline: lan 0.48 s, wan 25 s, rdma 7 ms), then closes the channel (FIN).\n"
        "Prints the rate and the publisher's counters.");
    app.add_option("URI", a.uri,
                   "udp://GROUP:PORT?iface=ADDR[&dport=N&ttl=N...], verbs://...\n"
                   "or mem://NAME:DPORT (every key: docs/URI.md)")
        ->required()
        ->type_name("");
    app.add_option("--count", a.count, "Messages to send")
        ->required()
        ->type_name("N")
        ->check(prizma::tools::whole());
    app.add_option("--size", a.size, "Bytes per message (>= 8, at most the channel's maximum)")
        ->required()
        ->type_name("BYTES")
        ->check(prizma::tools::whole(8));
    app.add_option("--rate", a.rate, "Messages per second (default 0: as fast as possible)")
        ->type_name("MSGS_PER_S")
        ->check(prizma::tools::at_least(0));
    prizma::tools::add_preset(app, a.opts);
    prizma::tools::add_window(app, a.opts);
    app.add_option("--repair-rate", a.opts.repair_rate_bytes_per_sec,
                   "RDATA budget, bytes/s: repairs wait in a queue for tokens\n"
                   "(default 0: unlimited; ChannelOptions::repair_rate_bytes_per_sec)")
        ->type_name("BYTES_PER_S");
    app.add_option("--linger", a.linger,
                   "Keep answering NAKs at least this long after the last message,\n"
                   "then until quiet (default 0: until quiet)")
        ->type_name("SECONDS")
        ->check(prizma::tools::at_least(0));
    return prizma::tools::parse(app, argc, argv);
}

/// Sends messages 0..count-1, paced at --rate when one is given. Returns the seconds the
/// sending took, or nothing when an offer failed for good (the error is printed).
std::optional<double> send_all(prizma::Context& ctx, prizma::Publisher& pub, const Args& a) {
    const std::uint64_t n = a.count;
    const double rate = a.rate;
    const std::size_t bytes = a.size;
    std::vector<std::byte> msg(bytes);
    // Filler byte k of message i is (i + k) & 0xff: copied from a repeating 0..255 pattern.
    std::vector<std::byte> pattern(bytes + 256);
    for (std::size_t j = 0; j < pattern.size(); ++j) {
        pattern[j] = static_cast<std::byte>(j & 0xffU);
    }
    const auto start = std::chrono::steady_clock::now();
    std::uint64_t sent = 0;
    while (sent < n) {
        // Paced: every message due by now goes out in one burst (one sendmmsg / GSO send per
        // 64), then the sender sleeps until the next one is due, serving NAKs meanwhile.
        std::uint64_t allowed = n;
        if (rate > 0) {
            const auto now = std::chrono::steady_clock::now();
            const double elapsed = std::chrono::duration<double>(now - start).count();
            allowed = std::min(n, static_cast<std::uint64_t>(elapsed * rate) + 1);
            if (sent >= allowed) {
                if (ctx.poll() == 0) {
                    const auto due =
                        start
                        + std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::duration<double>(static_cast<double>(sent) / rate));
                    ctx.wait(std::chrono::duration_cast<std::chrono::nanoseconds>(due - now));
                }
                continue;
            }
        }
        while (sent < allowed) {
            std::memcpy(msg.data(), &sent, 8);
            std::memcpy(msg.data() + 8, pattern.data() + ((sent + 8) & 0xffU), bytes - 8);
            auto r = pub.offer(msg);
            if (r) {
                ++sent;
            } else if (!prizma::is_transient(r.error())) {
                fmt::print(stderr, "prizma-send: offer failed: {}\n", r.error().message());
                return std::nullopt;
            }
            if (!r || sent % 64 == 0) {
                (void)ctx.poll();  // flush the batch, serve NAKs
            }
        }
        (void)ctx.poll();
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Keeps answering NAKs at least `linger` seconds, then until the publisher is quiet (no NAK
/// for two NAK rounds, or the receivers' repair deadline passed), then closes the channel
/// (FIN) and lets the FIN SPMs go out.
void linger_and_close(prizma::Context& ctx, prizma::Publisher& pub, double linger) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(linger);
    while (std::chrono::steady_clock::now() < until || !pub.quiet()) {
        if (ctx.poll() == 0) {
            ctx.wait(std::chrono::milliseconds(1));
        }
    }
    pub.close();
    for (int i = 0; i < 20; ++i) {
        (void)ctx.poll();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

/// The publisher's counters (the main ones, then all of them), then the transport's own (when
/// it has any).
void print_counters(const prizma::Publisher& pub) {
    const auto c = pub.counters();
    fmt::print("odata {} rdata {} naks received {} ncf {} spm {}\n", c.odata_sent, c.rdata_sent,
               c.naks_received, c.ncf_sent, c.spm_sent);
    fmt::print("{}\n", prizma::tools::counters_line(c));
    if (const auto t = pub.transport_counters(); !t.empty()) {
        fmt::print("transport");
        for (const auto& k : t) {
            fmt::print(" {} {}", k.name, k.value);
        }
        fmt::print("\n");
    }
}

int run(int argc, char** argv) {
    Args a;
    if (const int rc = parse_args(argc, argv, a); rc >= 0) {
        return rc;
    }
    prizma::tools::precise_timers();
    auto ctx = prizma::tools::make_context("prizma-send");
    if (!ctx) {
        return 1;
    }
    auto pub = ctx->add_publisher(a.uri, a.opts);
    if (!pub) {
        fmt::print(stderr, "prizma-send: {}: {}\n", a.uri, pub.error().message());
        return 1;
    }
    if (const std::string d = pub->transport_description(); !d.empty()) {
        fmt::print(stderr, "prizma-send: transport: {}\n", d);  // what was chosen
    }
    if (a.size > pub->max_message_size()) {
        fmt::print(stderr,
                   "prizma-send: --size {} exceeds the maximum message size {} on this channel\n",
                   a.size, pub->max_message_size());
        return 2;
    }
    const std::optional<double> secs = send_all(*ctx, *pub, a);
    if (!secs) {
        return 1;
    }
    // send_all() returns only once every message is out: count of them.
    fmt::print("sent {} messages of {} bytes in {:.3f} s ({:.0f} msgs/s)\n", a.count, a.size, *secs,
               *secs > 0 ? static_cast<double>(a.count) / *secs : 0.0);
    linger_and_close(*ctx, *pub, a.linger);
    print_counters(*pub);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main("prizma-send", run, argc, argv);
}
