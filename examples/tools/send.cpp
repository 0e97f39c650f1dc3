// SPDX-License-Identifier: Apache-2.0
// prizma-send URI --count N --size S [--rate MSGS_PER_S] [--preset P] [--linger SECONDS]
// Message i carries i as a 64-bit little-endian counter in its first 8 bytes, then filler.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

namespace {

void usage() {
    fmt::print(
        stderr,
        "usage: prizma-send URI --count N --size BYTES [--rate MSGS_PER_S] [--preset "
        "wan|lan|rdma]\n"
        "                   [--linger SECONDS]\n"
        "  URI: udp://GROUP:PORT?iface=ADDR[&dport=N&ttl=N...] or mem://NAME:DPORT\n"
        "  Each message starts with its index as a 64-bit little-endian counter.\n"
        "  After the last message the sender keeps answering NAKs for --linger seconds (2).\n");
}

bool num(std::string_view s, double& out) {
    try {
        std::size_t pos = 0;
        out = std::stod(std::string(s), &pos);
        return pos == s.size() && out >= 0;
    } catch (const std::exception&) {
        return false;
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::string uri;
    double count = -1;
    double size = -1;
    double rate = 0;
    double linger = 2;
    prizma::ChannelOptions opts;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        const bool has_value = i + 1 < argc;
        if (a == "--help" || a == "-h") {
            usage();
            return 0;
        }
        if (a == "--count" && has_value && num(argv[i + 1], count)) {
            ++i;
        } else if (a == "--size" && has_value && num(argv[i + 1], size)) {
            ++i;
        } else if (a == "--rate" && has_value && num(argv[i + 1], rate)) {
            ++i;
        } else if (a == "--linger" && has_value && num(argv[i + 1], linger)) {
            ++i;
        } else if (a == "--preset" && has_value) {
            opts.preset = argv[++i];
        } else if (uri.empty() && !a.starts_with("--")) {
            uri = a;
        } else {
            fmt::print(stderr, "prizma-send: bad or incomplete argument '{}'\n", a);
            usage();
            return 2;
        }
    }
    if (uri.empty() || count < 0 || size < 8) {
        fmt::print(stderr, "prizma-send: need URI, --count N and --size S (S >= 8)\n");
        usage();
        return 2;
    }
    auto ctx = prizma::Context::create();
    if (!ctx) {
        fmt::print(stderr, "prizma-send: {}\n", ctx.error().message());
        return 1;
    }
    auto pub = ctx->add_publisher(uri, opts);
    if (!pub) {
        fmt::print(stderr, "prizma-send: {}: {}\n", uri, pub.error().message());
        return 1;
    }
    const auto n = static_cast<std::uint64_t>(count);
    const auto bytes = static_cast<std::size_t>(size);
    if (bytes > pub->max_message_size()) {
        fmt::print(stderr,
                   "prizma-send: --size {} exceeds the maximum message size {} on this channel\n",
                   bytes, pub->max_message_size());
        return 2;
    }
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
                if (ctx->poll() == 0) {
                    const auto due =
                        start
                        + std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::duration<double>(static_cast<double>(sent) / rate));
                    ctx->wait(std::chrono::duration_cast<std::chrono::nanoseconds>(due - now));
                }
                continue;
            }
        }
        while (sent < allowed) {
            std::memcpy(msg.data(), &sent, 8);
            std::memcpy(msg.data() + 8, pattern.data() + ((sent + 8) & 0xffU), bytes - 8);
            auto r = pub->offer(msg);
            if (r) {
                ++sent;
            } else if (!prizma::is_transient(r.error())) {
                fmt::print(stderr, "prizma-send: offer failed: {}\n", r.error().message());
                return 1;
            }
            if (!r || sent % 64 == 0) {
                (void)ctx->poll();  // flush the batch, serve NAKs
            }
        }
        (void)ctx->poll();
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("sent {} messages of {} bytes in {:.3f} s ({:.0f} msgs/s)\n", sent, bytes, secs,
               secs > 0 ? static_cast<double>(sent) / secs : 0.0);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(linger);
    while (std::chrono::steady_clock::now() < until) {
        if (ctx->poll() == 0) {
            ctx->wait(std::chrono::milliseconds(1));
        }
    }
    pub->close();
    for (int i = 0; i < 20; ++i) {
        (void)ctx->poll();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const auto c = pub->counters();
    fmt::print("odata {} rdata {} naks received {} ncf {} spm {}\n", c.odata_sent, c.rdata_sent,
               c.naks_received, c.ncf_sent, c.spm_sent);
    if (const auto t = pub->transport_counters(); !t.empty()) {
        fmt::print("transport");
        for (const auto& k : t) {
            fmt::print(" {} {}", k.name, k.value);
        }
        fmt::print("\n");
    }
    return 0;
}
