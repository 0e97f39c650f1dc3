// SPDX-License-Identifier: Apache-2.0
// execlog-archiver: journals the ExecLog with prizma::Recorder and serves it with a
// ReplayServer, so consumers that are behind (started mid-day, restarted, stopped) catch up.
// Give it a tagged flow-control subscription (flow=tagged&flow_tag=N, the cores' tag) and
// live traffic never outruns it. The journal is its state: a restarted archiver resumes at
// the journal's next sequence (PGM recovers the source's history back to its trail).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

#include "execlog/consumer.hpp"
#include "execlog/record.hpp"

namespace {

constexpr const char* kTool = "execlog-archiver";

/// An event the recorder refused for now (back-pressure): kept, with its bytes, to retry.
struct Held {
    prizma::StreamEvent event;
    std::vector<std::byte> payload;
    std::vector<std::byte> record;
};

struct Archive {
    prizma::Recorder rec;
    std::optional<Held> held;
    std::uint64_t losses = 0;
    std::uint64_t lost = 0;
    std::uint64_t unknown = 0;
    std::uint64_t divergences = 0;

    /// false: the journal refused it for good (the error is printed).
    bool take(const prizma::StreamEvent& e, std::span<const std::byte> record, bool& retry) {
        retry = false;
        if (e.kind == prizma::StreamEventKind::stall) {
            // Nothing to journal: a later record or loss event says what was lost.
            fmt::print(stderr,
                       "{}: STALL: nothing after record {} and PGM lost data on every copy\n",
                       kTool, e.sequence - 1);
            return true;
        }
        if (e.kind == prizma::StreamEventKind::divergence) {
            ++divergences;
            fmt::print(stderr, "{}: DIVERGENCE: a copy of record {} from source {} differs\n",
                       kTool, e.sequence, execlog::tsi_text(e.source));
            return true;
        }
        const auto r = rec.append(e, record);
        if (r) {
            if (e.kind == prizma::StreamEventKind::loss) {
                ++losses;
                lost += e.count;
                fmt::print(stderr, "{}: LOSS: records [{}, {}) journaled as lost\n", kTool,
                           e.sequence, e.sequence + e.count);
            } else if (e.kind == prizma::StreamEventKind::record
                       && execlog::type_byte(e.payload) > execlog::kMaxRecordType) {
                ++unknown;
            }
            return true;
        }
        if (prizma::is_transient(r.error())) {
            retry = true;
            return true;
        }
        fmt::print(stderr, "{}: journal: record {}: {}\n", kTool, e.sequence, r.error().message());
        return false;
    }
    void hold(const prizma::StreamEvent& e, std::span<const std::byte> record) {
        held.emplace();
        held->payload.assign(e.payload.begin(), e.payload.end());
        held->record.assign(record.begin(), record.end());
        held->event = e;
        held->event.payload = held->payload;
    }
};

/// The flow-control member: a second subscription to the channel carrying the URI's flow keys,
/// whose messages are taken only as far as the journal is written. The cores' tagged flow
/// control then never lets live traffic run more than its window past what is on disk, so a
/// killed archiver's gap stays within what PGM can recover (the data subscription's history).
struct FlowGate {
    std::optional<prizma::Subscriber> sub;
    std::uint32_t stream_id = 0;
    std::uint32_t epoch = 0;    // the newest epoch seen: older ones' records pass freely
    std::uint64_t drained = 0;  // the highest sequence taken
    bool any = false;

    void drain(std::uint64_t written) {
        if (!sub) {
            return;
        }
        prizma::Message m;
        while ((!any || drained < written) && sub->next(m)) {
            prizma::RecordHeader h;
            if (m.kind != prizma::MessageKind::data || !prizma::RecordHeader::read(m.payload, h)
                || h.stream_id != stream_id || (any && h.epoch < epoch)) {
                continue;  // not ours, or stale: the journal will not hold it
            }
            if (any && h.epoch > epoch) {
                drained = 0;
            }
            epoch = h.epoch;
            drained = any ? std::max(drained, h.sequence) : h.sequence;
            any = true;
        }
    }
};

struct Args {
    execlog::ConsumerArgs c;
    std::string journal = "execlog-journal";
    std::string listen = "127.0.0.1:0";
    std::string port_file;
    std::uint32_t flow_window = 4096;
    std::uint32_t recover = 0;  // 0: twice the flow window
    std::uint32_t gap_timeout_ms = 5000;
};

int serve(const Args& a, prizma::Context& ctx, Archive& ar, execlog::Feed& f, FlowGate& gate) {
    std::int64_t printed_at = prizma::Context::now_ns();
    prizma::StreamEvent e;
    bool ended = false;
    while (!execlog::stop_requested() && !(a.c.exit_at_end && ended)) {
        const int work = ctx.poll();
        int n = 0;
        bool retry = false;
        if (ar.held) {
            const Held h = *ar.held;
            if (!ar.take(h.event, h.record, retry)) {
                return 1;
            }
            if (!retry) {
                ar.held.reset();
            }
        }
        while (!ar.held && n < 1024 && f.next(e)) {
            ++n;
            const auto record = f.last_record();
            if (!ar.take(e, record, retry)) {
                return 1;
            }
            if (retry) {
                ar.hold(e, record);
            }
            ended = ended
                    || (e.kind == prizma::StreamEventKind::record
                        && execlog::type_byte(e.payload)
                               == static_cast<std::uint8_t>(execlog::RecordType::session_end));
        }
        gate.drain(ar.rec.written_sequence());
        const std::int64_t now = prizma::Context::now_ns();
        if (now - printed_at > 1'000'000'000) {
            printed_at = now;
            fmt::print("{}: journal next {}, written {}\n", kTool, ar.rec.next_sequence(),
                       ar.rec.written_sequence());
            (void)std::fflush(stdout);
        }
        if (work == 0 && n == 0) {
            if (ar.held) {
                ctx.wait(std::chrono::microseconds(200));
            } else {
                execlog::idle(ctx, f, a.c.spin);
            }
        }
    }
    return 0;
}

/// The command line into `a`; -1 to go on, or the exit code.
int parse_args(int argc, char** argv, Args& a) {
    CLI::App app{"", kTool};
    prizma::tools::init(app, "execlog-archiver URI [--journal DIR] [--listen HOST:PORT] [options]",
                        "Journals the ExecLog (prizma::Recorder) and serves replays of it "
                        "(prizma::ReplayServer) to consumers catching up.");
    execlog::add_consumer_options(app, a.c);
    app.add_option("--replay-allow", a.c.replay_security.allow,
                   "Replay clients allowed (CIDR, repeatable; default any)");
    app.add_option("--journal", a.journal, "Journal directory (default execlog-journal)");
    app.add_option("--listen", a.listen, "Replay service address (default 127.0.0.1:0, any port)");
    app.add_option("--port-file", a.port_file, "Write the replay port there once listening");
    app.add_option("--flow-window", a.flow_window,
                   "With flow keys in URI: the flow-control window, packets, counted from what "
                   "the journal has written (default 4096)")
        ->check(prizma::tools::whole(64, 1U << 20U));
    app.add_option("--recover", a.recover,
                   "PGM history a restarted archiver recovers, packets (default twice the "
                   "flow window)")
        ->check(prizma::tools::whole(1, 1U << 20U));
    app.add_option("--gap-timeout-ms", a.gap_timeout_ms,
                   "Wait this long for PGM to repair a live gap before journaling it as lost "
                   "(default 5000)")
        ->check(prizma::tools::whole(1, 3600000));
    return prizma::tools::parse(app, argc, argv);
}

int run(int argc, char** argv) {
    Args a;
    if (const int rc = parse_args(argc, argv, a); rc >= 0) {
        return rc;
    }
    const auto listen = execlog::parse_host_port(a.listen);
    if (!execlog::finish_consumer_args(kTool, a.c) || !listen) {
        if (!listen) {
            fmt::print(stderr, "{}: --listen '{}': want HOST:PORT\n", kTool, a.listen);
        }
        return 2;
    }
    a.c.feed.replay_host.clear();  // the archiver is the archive
    const std::string flow_uri = a.c.feed.uri;
    a.c.feed.uri = execlog::strip_flow_keys(flow_uri);
    a.c.feed.max_recover = a.recover != 0 ? a.recover : 2 * a.flow_window;
    a.c.feed.gap_timeout = std::chrono::milliseconds(a.gap_timeout_ms);
    a.c.feed.buffer_records = std::size_t{1} << 18U;
    prizma::RecorderOptions ro;
    ro.directory = a.journal;
    ro.stream_id = a.c.feed.stream_id;
    auto rec = prizma::Recorder::open(ro);
    if (!rec) {
        fmt::print(stderr, "{}: journal: {}\n", kTool, rec.error().message());
        return 1;
    }
    Archive ar{std::move(*rec), std::nullopt};
    const std::uint64_t next = ar.rec.next_sequence();
    prizma::ReplayServerOptions so;
    so.address = listen->first;
    so.port = listen->second;
    so.streams = {{a.c.feed.stream_id, a.journal}};
    so.security = a.c.feed.replay_security;
    so.allow = a.c.replay_security.allow;
    auto server = prizma::ReplayServer::start(so);
    if (!server) {
        fmt::print(stderr, "{}: replay service: {}\n", kTool, server.error().message());
        return 1;
    }
    fmt::print("{}: replay service on {} port {}: {}\n", kTool, listen->first, server->port(),
               server->protection());
    if (!a.port_file.empty()) {
        if (const auto err =
                execlog::write_file_atomically(a.port_file, fmt::format("{}\n", server->port()));
            !err.empty()) {
            fmt::print(stderr, "{}: {}\n", kTool, err);
            return 1;
        }
    }
    execlog::install_stop_signals();
    auto ctx = prizma::tools::make_context(kTool);
    if (!ctx) {
        return 1;
    }
    auto feed = execlog::Feed::open(*ctx, a.c.feed, next);
    if (!feed) {
        fmt::print(stderr, "{}: {}\n", kTool, feed.error().message());
        return 1;
    }
    FlowGate gate;
    if (flow_uri != a.c.feed.uri) {
        prizma::ChannelOptions fo;
        fo.window_sqns = a.flow_window;
        fo.preallocated_sources = 2;
        // A restarted archiver reports its position from a window back, where its journal
        // ends (the cores held within the window of it): it is then counted at once, and the
        // data subscription's NAKs for the gap are for data the cores wait for, which they
        // repair outside their NAK budget (docs/EXECLOG.md).
        fo.recover_history = true;
        fo.max_recover_sqns = a.flow_window;
        auto fs = ctx->add_subscriber(flow_uri, fo);
        if (!fs) {
            fmt::print(stderr, "{}: {}\n", kTool, fs.error().message());
            return 1;
        }
        gate.sub = *fs;
        gate.stream_id = a.c.feed.stream_id;
    }
    fmt::print(
        "{}: journal {} from sequence {} (recovered {} bytes of torn tail), replay on {}:{}\n",
        kTool, a.journal, next, ar.rec.counters().recovered_bytes_dropped, listen->first,
        server->port());
    (void)std::fflush(stdout);
    const int rc = serve(a, *ctx, ar, **feed, gate);
    const auto flushed = ar.rec.flush();
    const auto s = (*feed)->stream_counters();
    fmt::print(
        "{}: final: journal next {}, records {}, loss entries {} ({} records), divergences {}, "
        "unknown types {}, stale-epoch {}, replay clients {}, records served {}{}\n",
        kTool, ar.rec.next_sequence(), (*feed)->counters().delivered, ar.losses, ar.lost,
        ar.divergences, ar.unknown, s.stale_epoch, server->counters().clients,
        server->counters().records, flushed ? "" : " (flush failed)");
    const auto pc = (*feed)->subscriber().counters();
    fmt::print(
        "{}: pgm: odata {}, rdata {}, naks {}, ncf {}, loss events {} ({} sqns), window full {}, "
        "sources {}, refused {}\n",
        kTool, pc.odata_received, pc.rdata_received, pc.naks_sent, pc.ncf_received, pc.loss_events,
        pc.lost_sqns, pc.window_full, pc.sources, pc.sources_refused);
    return rc != 0 || !flushed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main(kTool, run, argc, argv);
}
