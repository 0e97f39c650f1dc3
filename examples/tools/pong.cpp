// SPDX-License-Identifier: Apache-2.0
// prizma-pong PING_URI PONG_URI [--count N] [--wait spin|block] [--cpu N] [--preset P]
// Echoes every message that arrives on PING_URI, unchanged, onto PONG_URI (for prizma-ping).
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

#include "examples/tools/tool_util.hpp"

namespace {

std::atomic<bool> g_stop{false};

void usage() {
    fmt::print(stderr,
               "usage: prizma-pong PING_URI PONG_URI [--count N] [--wait spin|block] [--cpu N]\n"
               "                   [--preset wan|lan|rdma] [--window PACKETS]\n"
               "  Echoes each message from PING_URI onto PONG_URI until N messages were echoed\n"
               "  (default: until SIGINT/SIGTERM). --wait spin (default) busy-polls; block sleeps\n"
               "  on the transports' wakeup fds.\n");
}

}  // namespace

int main(int argc, char** argv) {
    std::string ping_uri;
    std::string pong_uri;
    std::uint64_t count = 0;  // 0 = forever
    bool spin = true;
    int cpu = -1;
    prizma::ChannelOptions opts;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        const bool has_value = i + 1 < argc;
        std::uint64_t v = 0;
        if (a == "--help" || a == "-h") {
            usage();
            return 0;
        }
        if (a == "--count" && has_value && prizma::tools::parse_u64(argv[i + 1], count)) {
            ++i;
        } else if (a == "--wait" && has_value
                   && (std::string_view(argv[i + 1]) == "spin"
                       || std::string_view(argv[i + 1]) == "block")) {
            spin = std::string_view(argv[++i]) == "spin";
        } else if (a == "--cpu" && has_value && prizma::tools::parse_u64(argv[i + 1], v)
                   && v < 4096) {
            cpu = static_cast<int>(v);
            ++i;
        } else if (a == "--preset" && has_value) {
            opts.preset = argv[++i];
        } else if (a == "--window" && has_value && prizma::tools::parse_u64(argv[i + 1], v)
                   && v >= 64 && v <= (1U << 30U)) {
            opts.window_sqns = static_cast<std::uint32_t>(v);
            ++i;
        } else if (!a.starts_with("--") && ping_uri.empty()) {
            ping_uri = a;
        } else if (!a.starts_with("--") && pong_uri.empty()) {
            pong_uri = a;
        } else {
            fmt::print(stderr, "prizma-pong: bad or incomplete argument '{}'\n", a);
            usage();
            return 2;
        }
    }
    if (ping_uri.empty() || pong_uri.empty()) {
        fmt::print(stderr, "prizma-pong: need PING_URI and PONG_URI\n");
        usage();
        return 2;
    }
    if (cpu >= 0) {
        if (const std::string e = prizma::tools::pin_to_cpu(cpu); !e.empty()) {
            fmt::print(stderr, "prizma-pong: {}\n", e);
            return 1;
        }
    }
    auto ctx = prizma::Context::create();
    if (!ctx) {
        fmt::print(stderr, "prizma-pong: {}\n", ctx.error().message());
        return 1;
    }
    auto sub = ctx->add_subscriber(ping_uri, opts);
    if (!sub) {
        fmt::print(stderr, "prizma-pong: {}: {}\n", ping_uri, sub.error().message());
        return 1;
    }
    auto pub = ctx->add_publisher(pong_uri, opts);
    if (!pub) {
        fmt::print(stderr, "prizma-pong: {}: {}\n", pong_uri, pub.error().message());
        return 1;
    }
    (void)std::signal(SIGINT, [](int) { g_stop = true; });
    (void)std::signal(SIGTERM, [](int) { g_stop = true; });
    fmt::print(stderr, "prizma-pong: echoing {} -> {}\n", ping_uri, pong_uri);
    std::uint64_t echoed = 0;
    std::uint64_t losses = 0;
    std::uint64_t retries = 0;
    // One message at a time: the payload is copied out of the handler (it is valid only there)
    // so that a full window can be served by polling before the echo is retried.
    std::vector<std::byte> buf(pub->max_message_size());
    std::size_t len = 0;
    bool pending = false;
    bool failed = false;
    while (!g_stop && (count == 0 || echoed < count)) {
        const int work = ctx->poll();
        const std::size_t got = sub->poll(1, [&](const prizma::Message& m) {
            if (m.kind == prizma::MessageKind::loss) {
                ++losses;
            } else if (m.kind == prizma::MessageKind::data && m.payload.size() <= buf.size()) {
                std::memcpy(buf.data(), m.payload.data(), m.payload.size());
                len = m.payload.size();
                pending = true;
            }
        });
        while (pending && !g_stop) {
            auto r = pub->offer(std::span<const std::byte>(buf.data(), len));
            if (r) {
                pending = false;
                // prizma-ping's handshake probes (sequence number all ones) are echoed but
                // not counted, so --count N ends after N measured (and warm-up) messages.
                std::uint64_t seq = 0;
                if (len >= sizeof seq) {
                    std::memcpy(&seq, buf.data(), sizeof seq);
                }
                if (seq != ~std::uint64_t{0}) {
                    ++echoed;
                }
                pub->flush();  // the echo leaves now, before any channel is polled
            } else if (prizma::is_transient(r.error())) {
                ++retries;
                (void)ctx->poll();  // serve NAKs/SPMs until the window has room
            } else {
                fmt::print(stderr, "prizma-pong: offer failed: {}\n", r.error().message());
                failed = true;
                g_stop = true;
            }
        }
        if (got == 0 && work == 0 && !spin) {
            ctx->wait(std::chrono::milliseconds(10));
        }
    }
    // Let the last echoes be repaired if the pinger NAKs them.
    pub->close();
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (std::chrono::steady_clock::now() < until) {
        if (ctx->poll() == 0) {
            ctx->wait(std::chrono::milliseconds(1));
        }
    }
    fmt::print("echoed {} messages, loss events {}, back-pressure retries {}\n", echoed, losses,
               retries);
    return losses == 0 && !failed ? 0 : 1;
}
