// SPDX-License-Identifier: Apache-2.0
// prizma-pong PING_URI PONG_URI [--count N] [--wait spin|block] [--cpu N] [--preset P]
// Echoes every message that arrives on PING_URI, unchanged, onto PONG_URI (for prizma-ping).
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

#include "cli.hpp"
#include "tool_util.hpp"

namespace {

struct Args {
    std::string ping_uri;
    std::string pong_uri;
    std::uint64_t count = 0;  // 0 = forever
    bool spin = true;
    int cpu = -1;
    prizma::ChannelOptions opts;
};

/// Reads the command line into `a`. Returns -1 to go on, or the exit code (cli.hpp's parse()).
int parse_args(int argc, char** argv, Args& a) {
    std::string wait = "spin";
    CLI::App app{"", "prizma-pong"};
    prizma::tools::init(
        app,
        "prizma-pong PING_URI PONG_URI [--count N] [--wait spin|block] [--cpu N]\n"
        "                   [--preset wan|lan|rdma] [--window PACKETS]",
        "Echoes each message from PING_URI onto PONG_URI, unchanged, for prizma-ping.",
        "Prints \"echoing\" on stderr once both channels are open (scripts wait for it), and a\n"
        "summary line at the end. Exits 1 after an unrecoverable loss on PING_URI or a failed\n"
        "echo.");
    app.add_option("PING_URI", a.ping_uri,
                   "Channel the messages come in on (prizma-ping's PING_URI)")
        ->required()
        ->type_name("");
    app.add_option("PONG_URI", a.pong_uri, "Channel the echoes go out on (prizma-ping's PONG_URI)")
        ->required()
        ->type_name("");
    app.add_option("--count", a.count,
                   "Stop after echoing N messages; prizma-ping's handshake probes do\n"
                   "not count (default 0: until SIGINT/SIGTERM)")
        ->type_name("N")
        ->check(prizma::tools::whole());
    app.add_option("--wait", wait,
                   "spin busy-polls (default); block sleeps on the transports'\n"
                   "wakeup fds")
        ->type_name("spin|block")
        ->check(prizma::tools::one_of({"spin", "block"}));
    app.add_option("--cpu", a.cpu, "Pin the thread to this CPU (default: not pinned)")
        ->type_name("N")
        ->check(prizma::tools::whole(0, 4095));
    prizma::tools::add_preset(app, a.opts);
    app.add_option("--window", a.opts.window_sqns,
                   "Transmit/receive window in packets, 64..2^30 (default 65536)")
        ->type_name("PACKETS")
        ->check(prizma::tools::whole(64, 1U << 30U));
    const int rc = prizma::tools::parse(app, argc, argv);
    a.spin = wait == "spin";
    return rc;
}

/// What the echo loop did.
struct Totals {
    std::uint64_t echoed = 0;   ///< prizma-ping's handshake probes not included
    std::uint64_t losses = 0;   ///< loss events on PING_URI
    std::uint64_t retries = 0;  ///< offers refused by a full window
    bool failed = false;        ///< an echo failed for good
};

/// Offers `msg` until it goes out, serving the channel while the window is full; gives up at
/// SIGINT/SIGTERM or when the offer fails for good (printed; stops the loop too).
void echo_one(prizma::Context& ctx,
              prizma::Publisher& pub,
              std::span<const std::byte> msg,
              Totals& t) {
    while (!prizma::tools::stop_requested()) {
        auto r = pub.offer(msg);
        if (r) {
            // prizma-ping's handshake probes (sequence number all ones) are echoed but
            // not counted, so --count N ends after N measured (and warm-up) messages.
            std::uint64_t seq = 0;
            if (msg.size() >= sizeof seq) {
                std::memcpy(&seq, msg.data(), sizeof seq);
            }
            if (seq != ~std::uint64_t{0}) {
                ++t.echoed;
            }
            pub.flush();  // the echo leaves now, before any channel is polled
            return;
        }
        if (prizma::is_transient(r.error())) {
            ++t.retries;
            (void)ctx.poll();  // serve NAKs/SPMs until the window has room
        } else {
            fmt::print(stderr, "prizma-pong: offer failed: {}\n", r.error().message());
            t.failed = true;
            prizma::tools::request_stop();
        }
    }
}

/// Echoes every message from `sub` onto `pub` until SIGINT/SIGTERM, --count echoes or a
/// failed echo.
Totals echo_all(prizma::Context& ctx,
                prizma::Subscriber& sub,
                prizma::Publisher& pub,
                const Args& a) {
    Totals t;
    // One message at a time: the payload is copied out of the handler (it is valid only there)
    // so that a full window can be served by polling before the echo is retried.
    std::vector<std::byte> buf(pub.max_message_size());
    while (!prizma::tools::stop_requested() && (a.count == 0 || t.echoed < a.count)) {
        std::size_t len = 0;
        bool pending = false;
        const int work = ctx.poll();
        const std::size_t got = sub.poll(1, [&](const prizma::Message& m) {
            if (m.kind == prizma::MessageKind::loss) {
                ++t.losses;
            } else if (m.kind == prizma::MessageKind::data && m.payload.size() <= buf.size()) {
                std::memcpy(buf.data(), m.payload.data(), m.payload.size());
                len = m.payload.size();
                pending = true;
            }
        });
        if (pending) {
            echo_one(ctx, pub, std::span<const std::byte>(buf.data(), len), t);
        }
        if (got == 0 && work == 0 && !a.spin) {
            ctx.wait(std::chrono::milliseconds(10));
        }
    }
    return t;
}

int run(int argc, char** argv) {
    Args a;
    if (const int rc = parse_args(argc, argv, a); rc >= 0) {
        return rc;
    }
    prizma::tools::precise_timers();
    if (a.cpu >= 0) {
        if (const std::string e = prizma::tools::pin_to_cpu(a.cpu); !e.empty()) {
            fmt::print(stderr, "prizma-pong: {}\n", e);
            return 1;
        }
    }
    auto ctx = prizma::tools::make_context("prizma-pong");
    if (!ctx) {
        return 1;
    }
    auto sub = ctx->add_subscriber(a.ping_uri, a.opts);
    if (!sub) {
        fmt::print(stderr, "prizma-pong: {}: {}\n", a.ping_uri, sub.error().message());
        return 1;
    }
    auto pub = ctx->add_publisher(a.pong_uri, a.opts);
    if (!pub) {
        fmt::print(stderr, "prizma-pong: {}: {}\n", a.pong_uri, pub.error().message());
        return 1;
    }
    for (const std::string& d : {sub->transport_description(), pub->transport_description()}) {
        if (!d.empty()) {
            fmt::print(stderr, "prizma-pong: transport: {}\n", d);  // what was chosen
        }
    }
    prizma::tools::stop_on_signals();
    fmt::print(stderr, "prizma-pong: echoing {} -> {}\n", a.ping_uri, a.pong_uri);
    const Totals t = echo_all(*ctx, *sub, *pub, a);
    // Let the last echoes be repaired if the pinger NAKs them.
    pub->close();
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (std::chrono::steady_clock::now() < until) {
        if (ctx->poll() == 0) {
            ctx->wait(std::chrono::milliseconds(1));
        }
    }
    fmt::print("echoed {} messages, loss events {}, back-pressure retries {}\n", t.echoed, t.losses,
               t.retries);
    return t.losses == 0 && !t.failed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main("prizma-pong", run, argc, argv);
}
