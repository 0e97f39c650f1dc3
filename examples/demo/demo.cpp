// SPDX-License-Identifier: Apache-2.0
// prizma demo, on the public API only: one publisher and two subscribers on the in-memory
// multicast network (mem://), each subscriber losing packets at random. PGM repairs the loss
// (NAK -> NCF -> RDATA) and every subscriber receives every message exactly once, in order.
// Runs on the real clock.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

#include "../tools/cli.hpp"

namespace {

struct Args {
    std::uint64_t messages = 20000;
    double loss = 0.05;
    std::uint64_t seed = 1;
    std::size_t size = 100;
};

struct Sub {
    prizma::Subscriber sub;
    std::uint64_t expected = 0;
    std::uint64_t delivered = 0;
    std::uint64_t out_of_order = 0;
    std::uint64_t losses = 0;
};

std::uint64_t counter(const std::vector<prizma::NamedCounter>& named, std::string_view name) {
    for (const auto& k : named) {
        if (k.name == name) {
            return k.value;
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Args args;
    CLI::App app{"", "prizma-demo"};
    prizma::tools::init(
        app, "prizma-demo [--messages N] [--loss P] [--size BYTES] [--seed S]",
        "1 publisher -> 2 subscribers on an in-memory network, each losing P of the\n"
        "packets; exits 0 when both got every message once, in order.");
    app.add_option("--messages", args.messages, "Messages to publish, > 0 (default 20000)")
        ->type_name("N")
        ->check(prizma::tools::whole(1));
    app.add_option("--loss", args.loss,
                   "Share of the packets each subscriber loses, 0 <= P < 1\n(default 0.05)")
        ->type_name("P")
        ->check(prizma::tools::real(prizma::tools::Interval{0, false, 1, true}));
    app.add_option("--size", args.size, "Bytes per message, 8..60000 (default 100)")
        ->type_name("BYTES")
        ->check(prizma::tools::whole(8, 60000));
    app.add_option("--seed", args.seed, "Seed of the packet loss (default 1)")
        ->type_name("S")
        ->check(prizma::tools::whole());
    if (const int rc = prizma::tools::parse(app, argc, argv); rc >= 0) {
        return rc;
    }
    auto ctx = prizma::Context::create();
    if (!ctx) {
        fmt::print(stderr, "prizma-demo: {}\n", ctx.error().message());
        return 1;
    }
    prizma::ChannelOptions opts;
    opts.window_sqns = 1U << 15U;
    // Two subscribers on the in-process network "demo", each dropping `loss` of what reaches
    // it (seeded), then the publisher.
    std::vector<Sub> subs;
    for (std::uint64_t i = 0; i < 2; ++i) {
        const std::string uri =
            fmt::format("mem://demo:7500?loss={}&seed={}", args.loss, args.seed * 100 + i);
        auto s = ctx->add_subscriber(args.loss > 0 ? uri : "mem://demo:7500", opts);
        if (!s) {
            fmt::print(stderr, "prizma-demo: subscriber: {}\n", s.error().message());
            return 1;
        }
        subs.push_back(Sub{*s});
    }
    opts.window_sqns = 1U << 16U;
    auto pub = ctx->add_publisher("mem://demo:7500", opts);
    if (!pub) {
        fmt::print(stderr, "prizma-demo: publisher: {}\n", pub.error().message());
        return 1;
    }

    fmt::print(
        "prizma demo: 1 publisher -> 2 subscribers, in-memory multicast, {:.1f}% loss per "
        "subscriber\n",
        args.loss * 100);
    fmt::print("publishing {} messages of {} bytes (seed {})\n", args.messages, args.size,
               args.seed);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::byte> msg(args.size);
    std::uint64_t sent = 0;
    bool bad_payload = false;
    const auto deadline = start + std::chrono::seconds(30);
    auto all_done = [&] {
        for (const auto& s : subs) {
            if (s.expected + s.losses < args.messages) {
                return false;
            }
        }
        return true;
    };
    while (!all_done() && std::chrono::steady_clock::now() < deadline) {
        for (int burst = 0; burst < 16 && sent < args.messages; ++burst) {
            std::memcpy(msg.data(), &sent, 8);
            for (std::size_t k = 8; k < msg.size(); ++k) {
                msg[k] = static_cast<std::byte>((sent + k) & 0xffU);
            }
            if (!pub->offer(msg)) {
                break;  // back-pressure: try again next cycle
            }
            ++sent;
        }
        (void)ctx->poll();
        for (auto& s : subs) {
            s.sub.poll(256, [&](const prizma::Message& m) {
                if (m.kind == prizma::MessageKind::loss) {
                    ++s.losses;
                    fmt::print("  subscriber lost {} sequence numbers at {}\n", m.count,
                               m.sqn.value);
                    return;
                }
                if (m.kind != prizma::MessageKind::data) {
                    return;
                }
                std::uint64_t idx = 0;
                std::memcpy(&idx, m.payload.data(), 8);
                if (idx != s.expected) {
                    ++s.out_of_order;
                }
                for (std::size_t k = 8; k < m.payload.size(); ++k) {
                    bad_payload |= m.payload[k] != static_cast<std::byte>((idx + k) & 0xffU);
                }
                s.expected = idx + 1;
                ++s.delivered;
            });
        }
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto pc = pub->counters();
    fmt::print("publisher: {} ODATA, {} NAKs received, {} NCFs and {} RDATA (repairs) sent\n",
               pc.odata_sent, pc.naks_received, pc.ncf_sent, pc.rdata_sent);
    bool ok = !bad_payload;
    for (std::size_t i = 0; i < subs.size(); ++i) {
        const auto& s = subs[i];
        const auto c = s.sub.counters();
        fmt::print(
            "subscriber {}: delivered {}/{} in order, {} dropped by the network, {} repaired, "
            "{} NAKs sent, {} duplicates, {} loss events\n",
            i + 1, s.delivered, args.messages, counter(s.sub.transport_counters(), "fault_dropped"),
            c.repaired, c.naks_sent, c.duplicates, c.loss_events);
        ok = ok && s.expected == args.messages && s.out_of_order == 0
             && s.delivered == args.messages;
    }
    fmt::print("{} in {:.2f} s\n",
               ok ? "OK: every message delivered exactly once, in order" : "FAILED", secs);
    return ok ? 0 : 1;
}
