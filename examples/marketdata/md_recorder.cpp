// SPDX-License-Identifier: Apache-2.0
// md-recorder [URI] [--feed URI[,URI]]... --journal DIR [--listen ADDR:PORT] [--stream-id N]
// Records md-feed's lossless stream (every copy heard, A and B, merged by a
// prizma::StreamSubscriber) into a prizma::Recorder journal and serves it with a
// prizma::ReplayServer, so that a md-gateway restarted with --recorder fetches the ticks
// published while it was down (docs/MARKETDATA.md).
#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include <prizma/prizma.hpp>
#include <prizma/recorder.hpp>
#include <prizma/replay.hpp>
#include <prizma/stream.hpp>

#include "../tools/cli.hpp"
#include "../tools/replay_cli.hpp"
#include "../tools/tool_util.hpp"
#include "md/codec.hpp"

namespace {

struct Args {
    std::vector<std::string> feeds;
    std::string journal;
    std::string listen = "127.0.0.1:0";
    std::uint32_t stream_id = md::kDefaultStreamId;
    prizma::tools::ReplaySecurityArgs security;
};

int parse_args(int argc, char** argv, Args& a) {
    CLI::App app{"", "md-recorder"};
    prizma::tools::init(
        app,
        "md-recorder [URI] [--feed URI[,URI]]... --journal DIR [--listen ADDR:PORT]\n"
        "                   [--stream-id N]",
        "Journals md-feed's stream (A/B copies merged) and serves it to md-gateway --recorder.",
        "Prints 'md-recorder: serving DIR on ADDR:PORT' once it listens (port 0: a free one).\n"
        "One journal holds one feed session: a later md-feed run (a new epoch restarting at\n"
        "sequence 0) needs a new --journal.");
    std::string uri;
    std::vector<std::string> feeds;
    app.add_option("URI", uri, "The feed: udp://GROUP:PORT?iface=ADDR ... (docs/URI.md)")
        ->type_name("");
    app.add_option("--feed", feeds, "A copy of the feed (repeat, or a comma list: A and B)")
        ->delimiter(',')
        ->type_name("URI");
    app.add_option("--journal", a.journal, "The journal's directory (made if missing)")
        ->required()
        ->type_name("DIR");
    app.add_option("--listen", a.listen, "The replay service's address (default 127.0.0.1:0)")
        ->type_name("ADDR:PORT");
    app.add_option("--stream-id", a.stream_id, "The feed's stream id (default 1)")
        ->type_name("N")
        ->check(prizma::tools::whole(1, 0xffffffff));
    prizma::tools::add_replay_security_options(app, a.security, true);
    const int rc = prizma::tools::parse(app, argc, argv);
    if (rc >= 0) {
        return rc;
    }
    if (!uri.empty()) {
        a.feeds.push_back(uri);
    }
    a.feeds.insert(a.feeds.end(), feeds.begin(), feeds.end());
    if (a.feeds.empty()) {
        fmt::print(stderr, "md-recorder: a feed URI is needed (URI or --feed)\n");
        return 2;
    }
    return -1;
}

/// Appends one event, waiting while the journal's buffer is full (never dropped). False when
/// the journal refuses it for good.
bool append(prizma::Recorder& rec,
            prizma::Context& ctx,
            const prizma::StreamEvent& e,
            std::span<const std::byte> record) {
    for (;;) {
        const auto r = rec.append(e, record);
        if (r) {
            return true;
        }
        if (r.error() != prizma::Errc::back_pressured || prizma::tools::stop_requested()) {
            return false;
        }
        (void)ctx.poll();  // keeps the network going (PGM buffers what comes meanwhile)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

std::optional<prizma::ReplayServer> start_server(const Args& a, std::string& error) {
    prizma::ReplayServerOptions so;
    const std::size_t colon = a.listen.rfind(':');
    unsigned port = 0;
    const char* end = a.listen.data() + a.listen.size();
    if (colon == std::string::npos
        || std::from_chars(a.listen.data() + colon + 1, end, port).ptr != end || port > 65535) {
        error = "--listen " + a.listen + ": ADDR:PORT";
        return std::nullopt;
    }
    so.address = a.listen.substr(0, colon);
    so.port = static_cast<std::uint16_t>(port);
    so.streams = {{a.stream_id, a.journal}};
    auto sec = prizma::tools::replay_security(a.security);
    if (!sec) {
        error = sec.error().message();
        return std::nullopt;
    }
    so.security = std::move(*sec);
    so.allow = a.security.allow;
    auto server = prizma::ReplayServer::start(so);
    if (!server) {
        error = "replay service on " + a.listen + ": " + server.error().message();
        return std::nullopt;
    }
    return std::move(*server);
}

/// Journals what the stream delivers until SIGINT/SIGTERM.
void record(prizma::Context& ctx, prizma::StreamSubscriber& in, prizma::Recorder& rec) {
    bool refused = false;
    while (!prizma::tools::stop_requested()) {
        const int work = ctx.poll();
        const std::size_t n = in.poll(256, [&](const prizma::StreamEvent& e) {
            if (e.kind == prizma::StreamEventKind::divergence || refused) {
                return;
            }
            if (!append(rec, ctx, e,
                        e.kind == prizma::StreamEventKind::record ? in.last_record()
                                                                  : std::span<const std::byte>{})) {
                refused = true;  // e.g. a new feed session restarting below the journal's end
                fmt::print(stderr,
                           "md-recorder: the journal refuses record {} of epoch {}; nothing "
                           "more is recorded (a new feed session needs a new --journal)\n",
                           e.sequence, e.epoch);
            }
        });
        if (work == 0 && n == 0) {
            ctx.wait(std::chrono::milliseconds(20));
        }
    }
}

int run(int argc, char** argv) {
    Args a;
    if (const int rc = parse_args(argc, argv, a); rc >= 0) {
        return rc;
    }
    auto ctx = prizma::tools::make_context("md-recorder");
    if (!ctx) {
        return 1;
    }
    prizma::StreamOptions so;
    so.stream_id = a.stream_id;
    auto in = prizma::StreamSubscriber::create(so);
    if (!in) {
        fmt::print(stderr, "md-recorder: {}\n", in.error().message());
        return 1;
    }
    std::deque<prizma::Subscriber> subs;
    for (const std::string& uri : a.feeds) {
        auto sub = ctx->add_subscriber(uri);
        if (!sub) {
            fmt::print(stderr, "md-recorder: {}: {}\n", uri, sub.error().message());
            return 1;
        }
        subs.push_back(*sub);
        if (auto r = in->add(subs.back()); !r) {
            fmt::print(stderr, "md-recorder: {}: {}\n", uri, r.error().message());
            return 1;
        }
    }
    prizma::RecorderOptions ro;
    ro.directory = a.journal;
    ro.stream_id = a.stream_id;
    auto rec = prizma::Recorder::open(ro);
    if (!rec) {
        fmt::print(stderr, "md-recorder: {}: {}\n", a.journal, rec.error().message());
        return 1;
    }
    std::string error;
    auto server = start_server(a, error);
    if (!server) {
        fmt::print(stderr, "md-recorder: {}\n", error);
        return 1;
    }
    prizma::tools::stop_on_signals();
    fmt::print("md-recorder: serving {} on {}:{}\n", a.journal,
               a.listen.substr(0, a.listen.rfind(':')), server->port());
    fmt::print("md-recorder: replay protection: {}\n", server->protection());
    (void)std::fflush(stdout);
    record(*ctx, *in, *rec);
    server->stop();
    const auto c = rec->counters();
    fmt::print("md-recorder: {} entries journaled, next sequence {}\n", c.appended,
               rec->next_sequence());
    return rec->flush() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main("md-recorder", run, argc, argv);
}
