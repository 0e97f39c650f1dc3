// SPDX-License-Identifier: Apache-2.0
// md-gateway [URI] [--feed URI]... --http ADDR:PORT [--store DIR] [--redis HOST:PORT]
//            [--recorder HOST:PORT] [--threads N] [--web DIR]
// Subscribes to md-feed's channels (A/B copies merged by prizma::StreamSubscriber), builds 1m..1d
// bars and serves them over HTTP (reference API, v2, WebSocket/SSE push, a chart page, health and
// metrics). docs/MARKETDATA.md.
#include <sys/resource.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include <fmt/core.h>

#include "../tools/cli.hpp"
#include "../tools/replay_cli.hpp"
#include "feed_pump.hpp"
#include "http_server.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

namespace {

namespace asio = boost::asio;
using md::gw::Config;

/// The Redis password: from `file` (its first line), else $MD_REDIS_PASSWORD (never argv,
/// which ps shows). False after printing why when the file cannot be read.
bool read_password(const std::string& file, std::string& out) {
    if (file.empty()) {
        const char* env = std::getenv("MD_REDIS_PASSWORD");  // NOLINT(concurrency-mt-unsafe)
        out = env != nullptr ? env : "";
        return true;
    }
    std::ifstream in(file);
    if (!in || !std::getline(in, out)) {
        fmt::print(stderr, "md-gateway: --redis-password-file {}: cannot read it\n", file);
        return false;
    }
    return true;
}

/// The options of docs/MARKETDATA.md's "Limits and security" and "Feed liveness".
void add_limit_options(CLI::App& app, Config& c) {
    app.add_option("--max-push", c.max_push,
                   "WebSocket + SSE clients (default 1000; also count in --max-connections)")
        ->type_name("N")
        ->check(prizma::tools::whole(1, 1'000'000));
    app.add_option("--allow-origin", c.allow_origins,
                   "An Origin (https://host:port, or *) whose pages may use /ws and /sse; the "
                   "page's own origin always may (repeat, or a comma list)")
        ->delimiter(',')
        ->type_name("ORIGIN");
    app.add_option("--allow-host", c.allow_hosts,
                   "A Host name with a dot answered besides IP addresses and one-label names "
                   "(DNS rebinding guard; repeat, or a comma list)")
        ->delimiter(',')
        ->type_name("NAME");
    app.add_option("--push-write-timeout", c.push_write_timeout_s,
                   "Close a push client whose write is stuck this long (10)")
        ->type_name("SECONDS")
        ->check(prizma::tools::above(0));
    app.add_option("--heartbeat", c.heartbeat_s, "Push heartbeats with the feed state (5)")
        ->type_name("SECONDS")
        ->check(prizma::tools::above(0));
    app.add_option("--stale-after", c.stale_after_s,
                   "No feed record for this long: stale, /healthz 503 (5)")
        ->type_name("SECONDS")
        ->check(prizma::tools::above(0));
    app.add_option("--down-after", c.down_after_s, "No feed record for this long: down (30)")
        ->type_name("SECONDS")
        ->check(prizma::tools::above(0));
    app.add_option_function<std::string>(
           "--compat", [&c](const std::string& v) { c.compat_reference = v == "reference"; },
           "reference: answer /getStockData as the reference service (unknown parameters "
           "ignored, [] for start > end and unknown codes) and use its Redis layout")
        ->type_name("reference")
        ->check(CLI::IsMember({"reference"}));
    app.add_option("--fill-timeout", c.fill_timeout_s,
                   "A missed interval not filled from Redis by then keeps its gap flags (60)")
        ->type_name("SECONDS")
        ->check(prizma::tools::above(0));
    app.add_option("--cache-mib", c.cache_mib, "Answer cache per loop, MiB (default 64)")
        ->type_name("N")
        ->check(prizma::tools::whole(1, 1'000'000));
    app.add_option("--max-answer-kib", c.max_answer_kib, "Largest /v2 answer, KiB (8192)")
        ->type_name("N")
        ->check(prizma::tools::whole(1, 1'000'000));
    app.add_option("--redis-user", c.redis_user, "Redis ACL user (AUTH user password)")
        ->type_name("NAME");
}

int parse_args(int argc, char** argv, Config& c) {
    CLI::App app{"", "md-gateway"};
    prizma::tools::init(
        app,
        "md-gateway [URI] [--feed URI[,URI]]... --http ADDR:PORT [--store DIR]\n"
        "                  [--redis HOST:PORT] [--recorder HOST:PORT] [--stream-id N]\n"
        "                  [--threads N] [--web DIR] [--max-bars N] [--idle-timeout SECONDS]\n"
        "                  [--max-connections N] [--max-push N] [--allow-origin ORIGIN]...\n"
        "                  [--allow-host NAME]... [--push-write-timeout SECONDS]\n"
        "                  [--heartbeat SECONDS] [--stale-after SECONDS] [--down-after SECONDS]\n"
        "                  [--compat reference] [--fill-timeout SECONDS] [--cache-mib N] "
        "[--max-answer-kib N]\n"
        "                  [--redis-user NAME] [--redis-password-file FILE]",
        "Builds 1m/5m/15m/30m/60m/1d bars from the md-feed ticks on URI and serves them:\n"
        "  GET /getStockData?code=300525.SZ&period=1m&start=202308180930&end=202308181030\n"
        "  GET /v2/bars?codes=A,B&period=5m&last=N (or start, end; ETag / If-None-Match)\n"
        "  /ws?code=&period= (WebSocket), /sse?code=&period= (Server-Sent Events)\n"
        "  / (chart page), /healthz, /metrics (Prometheus)",
        "Bars are labelled by their end minute (202308180931 = 09:30..09:31); see\n"
        "docs/MARKETDATA.md for the conventions. Several feeds (A/B) are merged record by\n"
        "record: each sequence once, from whichever copy brings it first.");
    std::string uri;
    std::vector<std::string> feeds;
    app.add_option("URI", uri, "The feed: udp://GROUP:PORT?iface=ADDR ... (docs/URI.md)")
        ->type_name("");
    app.add_option("--feed", feeds, "A copy of the feed (repeat, or a comma list: A and B)")
        ->delimiter(',')
        ->type_name("URI");
    app.add_option("--http", c.http, "Listen address")->required()->type_name("ADDR:PORT");
    app.add_option("--store", c.store_dir, "LMDB directory: bars survive a restart")
        ->type_name("DIR");
    app.add_option("--redis", c.redis,
                   "Redis (standalone or a cluster node): bars shared by gateways")
        ->type_name("HOST:PORT");
    app.add_option("--recorder", c.recorder,
                   "md-recorder's replay service: ticks missed while down are fetched from it")
        ->type_name("HOST:PORT");
    app.add_option("--stream-id", c.stream_id, "The feed's stream id (default 1)")
        ->type_name("N")
        ->check(prizma::tools::whole(1, 0xffffffff));
    app.add_option("--join-history", c.join_history,
                   "Join a feed younger than this many packets from its start (1024; 1: from "
                   "the first packet heard)")
        ->type_name("N")
        ->check(prizma::tools::whole(1, 65535));
    app.add_option("--threads", c.threads, "Event loops (default: one per core)")
        ->type_name("N")
        ->check(prizma::tools::whole(1, 256));
    app.add_option("--web", c.web_dir, "Directory with lightweight-charts.standalone.production.js")
        ->type_name("DIR");
    app.add_option("--max-bars", c.max_bars, "Most bars one answer holds (default 5000)")
        ->type_name("N")
        ->check(prizma::tools::whole(1, 1'000'000));
    app.add_option("--idle-timeout", c.idle_timeout_s,
                   "Close a connection idle (or sending a request slower) than this (60)")
        ->type_name("SECONDS")
        ->check(prizma::tools::above(0));
    app.add_option("--max-connections", c.max_connections, "Open connections (default 20000)")
        ->type_name("N")
        ->check(prizma::tools::whole(1, 1'000'000));
    add_limit_options(app, c);
    std::string password_file;
    app.add_option("--redis-password-file", password_file,
                   "A file holding the Redis password (or MD_REDIS_PASSWORD)")
        ->type_name("FILE");
    prizma::tools::ReplaySecurityArgs security;
    prizma::tools::add_replay_security_options(app, security, false);
    const int rc = prizma::tools::parse(app, argc, argv);
    if (rc >= 0) {
        return rc;
    }
    auto sec = prizma::tools::replay_security(security);
    if (!sec) {
        fmt::print(stderr, "md-gateway: {}\n", sec.error().message());
        return 2;
    }
    c.recorder_security = std::move(*sec);
    if (!read_password(password_file, c.redis_password)) {
        return 2;
    }
    if (!uri.empty()) {
        c.feeds.push_back(uri);
    }
    c.feeds.insert(c.feeds.end(), feeds.begin(), feeds.end());
    if (c.feeds.empty()) {
        fmt::print(stderr, "md-gateway: a feed URI is needed (URI or --feed)\n");
        return 2;
    }
    return -1;
}

/// Raises the open-files limit to its hard limit (idle connections are file descriptors).
void raise_nofile() {
    rlimit r{};
    if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        (void)::setrlimit(RLIMIT_NOFILE, &r);
    }
}

bool read_web(md::gw::Shared& s) {
    if (s.cfg.web_dir.empty()) {
        return true;
    }
    const std::string path = s.cfg.web_dir + "/lightweight-charts.standalone.production.js";
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        fmt::print(stderr, "md-gateway: cannot read {} (scripts/fetch-web-assets.sh)\n", path);
        return false;
    }
    s.web_js.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return true;
}

int run(int argc, char** argv) {
    auto shared = std::make_unique<md::gw::Shared>();
    if (const int rc = parse_args(argc, argv, shared->cfg); rc >= 0) {
        return rc;
    }
    raise_nofile();
    if (!read_web(*shared)) {
        return 1;
    }
    const unsigned loops = shared->cfg.threads != 0
                               ? shared->cfg.threads
                               : std::max(1U, std::thread::hardware_concurrency());
    std::vector<std::unique_ptr<asio::io_context>> iocs;
    for (unsigned i = 0; i < loops; ++i) {
        iocs.push_back(std::make_unique<asio::io_context>(1));
        shared->loops.push_back(std::make_unique<md::gw::LoopMetrics>());
    }
    std::string error = md::gw::check_address_free(shared->cfg.http);
    if (!error.empty()) {
        fmt::print(stderr, "md-gateway: {}\n", error);
        return 1;
    }
    auto pump = md::gw::FeedPump::create(*iocs[0], *shared, error);
    if (!pump) {
        fmt::print(stderr, "md-gateway: {}\n", error);
        return 1;
    }
    for (unsigned i = 0; i < loops; ++i) {
        error = md::gw::listen(*iocs[i], *shared, *shared->loops[i], shared->cfg.http);
        if (!error.empty()) {
            fmt::print(stderr, "md-gateway: {}\n", error);
            return 1;
        }
    }
    asio::signal_set signals(*iocs[0], SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code&, int) {
        pump->stop();
        for (auto& ioc : iocs) {
            ioc->stop();
        }
    });
    pump->start();
    fmt::print("md-gateway: listening on {} with {} loops; {} bars loaded\n", shared->cfg.http,
               loops, shared->feed.bars_loaded.load());
    (void)std::fflush(stdout);
    std::vector<std::thread> threads;
    for (unsigned i = 1; i < loops; ++i) {
        threads.emplace_back([&ioc = *iocs[i]] { ioc.run(); });
    }
    iocs[0]->run();
    for (auto& ioc : iocs) {
        ioc->stop();
    }
    for (auto& t : threads) {
        t.join();
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main("md-gateway", run, argc, argv);
}
