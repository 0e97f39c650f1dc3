// SPDX-License-Identifier: Apache-2.0
// prizma demo: one publisher and two subscribers on the in-memory multicast network, each
// subscriber losing packets at random. PGM repairs the loss (NAK -> NCF -> RDATA) and every
// subscriber receives every message exactly once, in order. Runs on the real clock.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "examples/tools/cli.hpp"
#include "lib/protocol/config.hpp"
#include "lib/pubsub/session.hpp"
#include "transports/memory/lossy_transport.hpp"
#include "transports/memory/memory_transport.hpp"

using namespace prizma;  // NOLINT(google-build-using-namespace): example program

namespace {

std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

struct Args {
    std::uint64_t messages = 20000;
    double loss = 0.05;
    std::uint64_t seed = 1;
    std::size_t size = 100;
};

struct Subscriber {
    std::unique_ptr<memory::MemoryTransport> mem;
    std::unique_ptr<memory::LossyTransport> lossy;
    std::unique_ptr<pubsub::Session> session;
    std::uint64_t expected = 0;
    std::uint64_t out_of_order = 0;
    std::uint64_t losses = 0;
};

}  // namespace

int main(int argc, char** argv) {
    Args args;
    CLI::App app{"", "prizma-demo"};
    tools::init(app, "prizma-demo [--messages N] [--loss P] [--size BYTES] [--seed S]",
                "1 publisher -> 2 subscribers on an in-memory network, each losing P of the\n"
                "packets; exits 0 when both got every message once, in order.");
    app.add_option("--messages", args.messages, "Messages to publish, > 0 (default 20000)")
        ->type_name("N")
        ->check(tools::whole(1));
    app.add_option("--loss", args.loss,
                   "Share of the packets each subscriber loses, 0 <= P < 1\n(default 0.05)")
        ->type_name("P")
        ->check(tools::real(tools::Interval{0, false, 1, true}));
    app.add_option("--size", args.size, "Bytes per message, 8..60000 (default 100)")
        ->type_name("BYTES")
        ->check(tools::whole(8, 60000));
    app.add_option("--seed", args.seed, "Seed of the packet loss (default 1)")
        ->type_name("S")
        ->check(tools::whole());
    if (const int rc = tools::parse(app, argc, argv); rc >= 0) {
        return rc;
    }
    memory::MemoryNetwork net(memory::MemoryNetwork::Config{1472, 16384, 64});
    const auto timers = protocol::preset(protocol::Preset::lan);

    protocol::SourceConfig sc;
    sc.tsi.gsi = Gsi{{0xde, 0xad, 0xbe, 0xef, 0x00, 0x01}};
    sc.tsi.sport = 4660;
    sc.nla = pgm::Nla::ipv4(127, 0, 0, 1);
    sc.group = pgm::Nla::ipv4(239, 192, 0, 1);
    sc.txw_sqns = 1U << 16U;
    sc.timers = timers;
    auto pub_mem = net.attach();
    pubsub::SessionConfig pc;
    pc.source = sc;
    auto pub = pubsub::Session::create(*pub_mem, pc);
    if (!pub) {
        fmt::print(stderr, "publisher: {}\n", pub.error().message());
        return 1;
    }

    std::vector<Subscriber> subs(2);
    for (std::size_t i = 0; i < subs.size(); ++i) {
        auto& s = subs[i];
        s.mem = net.attach();
        memory::LossyTransport::Config lc;
        lc.seed = args.seed * 100 + i;
        lc.drop = args.loss;
        s.lossy = std::make_unique<memory::LossyTransport>(*s.mem, lc, now_ns);
        protocol::ReceiverConfig rc;
        rc.group = sc.group;
        rc.rxw_sqns = 1U << 15U;
        rc.seed = args.seed * 7 + i;
        rc.timers = timers;
        pubsub::SessionConfig cfg;
        cfg.receiver = rc;
        auto sess = pubsub::Session::create(*s.lossy, cfg);
        if (!sess) {
            fmt::print(stderr, "subscriber: {}\n", sess.error().message());
            return 1;
        }
        s.session = std::move(*sess);
    }

    fmt::print(
        "prizma demo: 1 publisher -> 2 subscribers, in-memory multicast, {:.1f}% loss per "
        "subscriber\n",
        args.loss * 100);
    fmt::print("publishing {} messages of {} bytes (seed {})\n", args.messages, args.size,
               args.seed);
    (*pub)->source()->open(now_ns(), **pub);
    const std::int64_t start = now_ns();
    std::vector<std::byte> msg(args.size);
    std::uint64_t sent = 0;
    bool bad_payload = false;
    const std::int64_t deadline = start + 30LL * 1'000'000'000;
    auto all_done = [&] {
        for (const auto& s : subs) {
            if (s.expected + s.losses < args.messages) {
                return false;
            }
        }
        return true;
    };
    while (!all_done() && now_ns() < deadline) {
        const std::int64_t t = now_ns();
        for (int burst = 0; burst < 16 && sent < args.messages; ++burst) {
            std::memcpy(msg.data(), &sent, 8);
            for (std::size_t k = 8; k < msg.size(); ++k) {
                msg[k] = static_cast<std::byte>((sent + k) & 0xffU);
            }
            auto r = (*pub)->publish(msg, t);
            if (!r) {
                break;  // back-pressure: try again next cycle
            }
            ++sent;
        }
        (void)(*pub)->do_work(t);
        for (auto& s : subs) {
            (void)s.session->do_work(t);
            (void)s.session->receiver()->poll(256, [&](const protocol::Event& e) {
                if (e.kind == protocol::Event::Kind::loss) {
                    ++s.losses;
                    fmt::print("  subscriber lost {} sequence numbers at {}\n", e.count,
                               e.sqn.value);
                    return;
                }
                if (e.kind != protocol::Event::Kind::data) {
                    return;
                }
                std::uint64_t idx = 0;
                std::memcpy(&idx, e.payload.data(), 8);
                if (idx != s.expected) {
                    ++s.out_of_order;
                }
                for (std::size_t k = 8; k < e.payload.size(); ++k) {
                    bad_payload |= e.payload[k] != static_cast<std::byte>((idx + k) & 0xffU);
                }
                s.expected = idx + 1;
            });
        }
    }
    const double secs = static_cast<double>(now_ns() - start) / 1e9;
    const auto& sctr = (*pub)->source()->counters();
    fmt::print("publisher: {} ODATA, {} NAKs received, {} NCFs and {} RDATA (repairs) sent\n",
               sctr.odata_sent, sctr.nak_received, sctr.ncf_sent, sctr.rdata_sent);
    bool ok = !bad_payload;
    for (std::size_t i = 0; i < subs.size(); ++i) {
        const auto& s = subs[i];
        const auto& c = s.session->receiver()->counters();
        fmt::print(
            "subscriber {}: delivered {}/{} in order, {} dropped by the network, {} repaired, "
            "{} NAKs sent, {} duplicates, {} loss events\n",
            i + 1, c.apdus_delivered, args.messages, s.lossy->stats().dropped, c.repaired,
            c.nak_sent, c.duplicates, c.loss_events);
        ok = ok && s.expected == args.messages && s.out_of_order == 0
             && c.apdus_delivered == args.messages;
    }
    fmt::print("{} in {:.2f} s\n",
               ok ? "OK: every message delivered exactly once, in order" : "FAILED", secs);
    return ok ? 0 : 1;
}
