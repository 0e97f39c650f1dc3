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

#include "../tools/tool_util.hpp"
#include "execlog/consumer.hpp"
#include "execlog/divergence.hpp"
#include "execlog/record.hpp"

namespace {

constexpr const char* kTool = "execlog-archiver";

/// An event the recorder refused for now (back-pressure): kept, with its bytes, to retry.
struct Held {
    prizma::StreamEvent event;
    std::vector<std::byte> payload;
    std::vector<std::byte> record;
};

constexpr std::size_t kSourceRing = 1U << 16U;

struct Archive {
    explicit Archive(prizma::Recorder r) : rec(std::move(r)) {}
    prizma::Recorder rec;
    std::optional<Held> held;
    std::uint64_t losses = 0;
    std::uint64_t lost = 0;
    std::uint64_t unknown = 0;
    std::uint64_t divergences = 0;
    std::vector<prizma::Tsi> journaled_from = std::vector<prizma::Tsi>(kSourceRing);
    std::vector<execlog::Divergence> pending;  // markers not written yet
    std::optional<std::uint64_t> halted_at;    // the divergence or dispute it halts at
    bool disputed = false;                     // halted at a dispute: nothing journaled yet
    bool halt_on_divergence = true;
    bool quorum = true;  // Arbitration::quorum: a divergence is an outvoted copy, no halt

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
            const prizma::Tsi first = journaled_from[e.sequence % kSourceRing];
            fmt::print(stderr,
                       "{}: DIVERGENCE: a copy of record {} from source {} differs from the "
                       "journaled copy (source {})\n",
                       kTool, e.sequence, execlog::tsi_text(e.source), execlog::tsi_text(first));
            pending.push_back({e.sequence, first, e.source, prizma::Context::now_ns()});
            if (halt_on_divergence && !quorum && !halted_at) {
                halted_at = e.sequence;
            }
            return true;
        }
        if (e.kind == prizma::StreamEventKind::dispute) {
            return true;  // dispute() has the copies
        }
        const auto r = rec.append(e, record);
        if (r) {
            if (e.kind == prizma::StreamEventKind::record) {
                journaled_from[e.sequence % kSourceRing] = e.source;
            }
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
/// whose messages are taken only as far as the journal is written (with --cores, one such
/// subscription per core, each taking only that core's packets: one core's backlog never
/// holds the other's behind it). The cores' tagged flow
/// control then never lets live traffic run more than its window past what is on disk, so a
/// killed archiver's gap stays within what PGM can recover (the data subscription's history).
struct FlowGate {
    std::optional<prizma::Subscriber> sub;
    std::uint32_t stream_id = 0;
    std::uint32_t epoch = 0;    // the newest epoch seen: older ones' records pass freely
    std::uint64_t drained = 0;  // the highest sequence taken
    bool any = false;

    /// Takes messages while the last one taken is before the journal's last record (records
    /// [0, written) are on disk): never one past it, which the cores would then count as
    /// consumed and repair for the data subscription only within the NAK budget. The first
    /// is taken once a record is on disk (it tells the epoch and where the gate stands).
    void drain(std::uint64_t written) {
        if (!sub) {
            return;
        }
        prizma::Message m;
        while ((any ? drained + 1 < written : written > 0) && sub->next(m)) {
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

/// The flow gates: one, or one per named core.
struct Gates {
    std::vector<FlowGate> gates;
    void drain(std::uint64_t written) {
        for (FlowGate& g : gates) {
            g.drain(written);
        }
    }
};

struct Args {
    execlog::ConsumerArgs c;
    std::vector<std::string> cores;  // --cores: a flow gate per core (their --name)
    std::string on_divergence = "halt";
    std::string divergence_file;  // default: JOURNAL.divergences
    std::string decision_file;    // default: JOURNAL.decision
    std::string journal = "execlog-journal";
    std::string listen = "127.0.0.1:0";
    std::string port_file;
    std::uint32_t flow_window = 4096;
    std::uint32_t recover = 0;  // 0: twice the flow window
    std::uint32_t gap_timeout_ms = 5000;
};

/// Writes the markers of divergences whose copies the tap has (or gave up waiting for, 3 s).
bool write_markers(const Args& a, Archive& ar, const execlog::CopyTap& tap) {
    const std::int64_t now = prizma::Context::now_ns();
    for (auto it = ar.pending.begin(); it != ar.pending.end();) {
        const auto j = tap.copy(it->sequence, it->journaled);
        const auto x = tap.copy(it->sequence, it->differing);
        if (!(j && x) && now - it->seen_ns < 3'000'000'000) {
            ++it;
            continue;
        }
        if (const auto err =
                execlog::append_durably(a.divergence_file, execlog::divergence_marker(*it, j, x));
            !err.empty()) {
            fmt::print(stderr, "{}: divergence marker: {}\n", kTool, err);
            return false;
        }
        fmt::print(stderr, "{}: divergence marker of record {} in '{}'{}\n", kTool, it->sequence,
                   a.divergence_file, j && x ? " (both copies)" : " (a copy was not heard)");
        it = ar.pending.erase(it);
    }
    return true;
}

/// A dispute (Arbitration::quorum): the cores' copies of a record differ and none has the
/// quorum. Every copy goes to the divergence file; then the archiver halts there (nothing
/// journaled) until the operator picks one, or with --on-divergence continue journals the copy
/// heard first. false: the marker could not be written.
bool dispute(const Args& a, Archive& ar, execlog::Feed& f, const prizma::StreamEvent& e) {
    const auto copies = f.disputed();
    if (const auto err =
            execlog::append_durably(a.divergence_file, execlog::dispute_marker(e.sequence, copies));
        !err.empty()) {
        fmt::print(stderr, "{}: dispute marker: {}\n", kTool, err);
        return false;
    }
    for (const auto& c : copies) {
        fmt::print(stderr, "{}: DISPUTE at record {}: copy from {}, checksum {:016x}, {} core(s)\n",
                   kTool, e.sequence, execlog::tsi_text(c.source), c.checksum, c.votes);
    }
    if (!ar.halt_on_divergence && !copies.empty()) {
        fmt::print(stderr, "{}: --on-divergence continue: journaling the copy from {}\n", kTool,
                   execlog::tsi_text(copies.front().source));
        return static_cast<bool>(f.resolve(e.sequence, copies.front().checksum));
    }
    ar.halted_at = e.sequence;
    ar.disputed = true;
    return true;
}

/// The operator's choice in a dispute at `q` applied; false when it names no copy.
bool settle(Archive& ar, execlog::Feed& f, std::uint64_t q, const execlog::OperatorDecision& d) {
    const auto copies = f.disputed();
    const auto pick = d.what == execlog::Decision::use ? execlog::pick_copy(copies, d.which)
                      : copies.empty()                 ? std::nullopt
                                                       : std::optional(copies.front().checksum);
    if (!pick || !f.resolve(q, *pick)) {
        fmt::print(stderr, "{}: decision for record {}: '{}' names none of its copies\n", kTool, q,
                   d.which);
        return false;
    }
    fmt::print(stderr, "{}: the operator chose the copy {:016x} of record {}\n", kTool, *pick, q);
    ar.disputed = false;
    return true;
}

/// While halted at a dispute the stream delivered `e` by itself (Arbitration::quorum: "two
/// that differ with the third late are settled when it comes"): the halt ends, no operator.
void quorum_came(Archive& ar, const prizma::StreamEvent& e, std::int64_t& said_at) {
    if (e.kind == prizma::StreamEventKind::record && e.sequence == *ar.halted_at) {
        fmt::print(stderr,
                   "{}: the quorum came for record {}: {} cores sent the copy from {} (a core "
                   "behind completed it); going on\n",
                   kTool, e.sequence, e.count, execlog::tsi_text(e.source));
    }
    ar.halted_at.reset();
    ar.disputed = false;
    said_at = 0;
}

/// While halted: says so (at once, then every 5 s) and reads the operator's decision. Returns
/// 0 to go on (halted or not), 3 to stop (the operator said so).
int halted(const Args& a, Archive& ar, execlog::Feed& f, std::int64_t& said_at) {
    const std::int64_t now = prizma::Context::now_ns();
    const std::uint64_t q = *ar.halted_at;
    if (ar.disputed && (said_at == 0 || now - said_at > 5'000'000'000)) {
        fmt::print(stderr,
                   "{}: HALTED at record {}: the cores' copies differ and none has the quorum; "
                   "nothing is journaled from it on, '{}' has every copy. The stream is held "
                   "(the cores wait for this archiver). Decide: echo use {} SOURCE-OR-CHECKSUM "
                   "> {}  (journal that copy), echo continue {} > {}  (the copy heard first), "
                   "or echo stop {} > {}  (end here; restart the session on a new epoch)\n",
                   kTool, q, a.divergence_file, q, a.decision_file, q, a.decision_file, q,
                   a.decision_file);
        said_at = now;
    } else if (said_at == 0 || now - said_at > 5'000'000'000) {
        fmt::print(stderr,
                   "{}: HALTED at record {}: two cores' copies differ; the journal keeps the "
                   "first, '{}' both. The stream is held (the cores wait for this archiver). "
                   "Decide: echo continue {} > {}  (keep the journaled copy, go on), or echo "
                   "stop {} > {}  (end here; restart the session on a new epoch)\n",
                   kTool, q, a.divergence_file, q, a.decision_file, q, a.decision_file);
        said_at = now;
    }
    const auto d = execlog::read_decision(a.decision_file, q);
    if (!d) {
        return 0;
    }
    if (d->what == execlog::Decision::stop) {
        fmt::print(stderr, "{}: the operator stopped the stream at record {} ({})\n", kTool, q,
                   a.decision_file);
        return 3;
    }
    const bool was_dispute = ar.disputed;
    if (was_dispute && !settle(ar, f, q, *d)) {
        return 0;  // said why; still halted
    }
    fmt::print(stderr, "{}: the operator let the stream go on {} record {} ({})\n", kTool,
               was_dispute ? "at" : "after", q, a.decision_file);
    ar.halted_at.reset();
    said_at = 0;
    return 0;
}

/// The archiver's metrics: a consumer's, the journal's and the replay service's.
void write_metrics(execlog::Metrics& m,
                   Archive& ar,
                   execlog::Feed& f,
                   const prizma::ReplayServer& server,
                   std::int64_t now) {
    m.feed(f, ar.halted_at.has_value());
    m.gauge(execlog::metric("execlog_archive_next_sequence"),
            static_cast<double>(ar.rec.next_sequence()));
    m.gauge(execlog::metric("execlog_archive_written_sequence"),
            static_cast<double>(ar.rec.written_sequence()));
    m.gauge(execlog::metric("execlog_archive_halted_at"),
            ar.halted_at ? static_cast<double>(*ar.halted_at) : -1.0);
    m.counter(execlog::metric("execlog_archive_loss_entries_total"), ar.losses);
    m.counter(execlog::metric("execlog_unknown_types_total"), ar.unknown);
    const prizma::ReplayServerCounters rc = server.counters();
    m.counter(execlog::metric("execlog_replay_clients_total"), rc.clients);
    m.counter(execlog::metric("execlog_replay_refused_total"), rc.refused);
    m.counter(execlog::metric("execlog_replay_records_total"), rc.records);
    m.counter(execlog::metric("execlog_replay_errors_total"), rc.errors);
    m.counter(execlog::metric("execlog_replay_timeouts_total"), rc.timeouts);
    m.publish(kTool, now);
}

/// What serve() reports through: the metrics file and the replay service's counters.
struct Reports {
    execlog::Metrics& metrics;
    const prizma::ReplayServer& server;
};

int serve(const Args& a,
          prizma::Context& ctx,
          Archive& ar,
          execlog::Feed& f,
          Gates& gate,
          prizma::Subscriber* tap_sub,
          const Reports& reports) {
    std::int64_t printed_at = prizma::Context::now_ns();
    std::int64_t said_at = 0;
    execlog::CopyTap tap(a.c.feed.stream_id, 1U << 14U);
    prizma::StreamEvent e;
    bool ended = false;
    // One event the stream delivered: a dispute halts, the rest is journaled (or held to retry).
    // False on an error already said.
    const auto journal = [&](const prizma::StreamEvent& ev) {
        if (ev.kind == prizma::StreamEventKind::dispute && !dispute(a, ar, f, ev)) {
            return false;
        }
        const auto record = f.last_record();
        bool again = false;
        if (!ar.take(ev, record, again)) {
            return false;
        }
        if (again) {
            ar.hold(ev, record);
        }
        ended = ended
                || (ev.kind == prizma::StreamEventKind::record
                    && execlog::type_byte(ev.payload)
                           == static_cast<std::uint8_t>(execlog::RecordType::session_end));
        return true;
    };
    while (!prizma::tools::stop_requested() && !(a.c.exit_at_end && ended)) {
        const int work = ctx.poll();
        if (tap_sub != nullptr) {
            tap.read(*tap_sub);
        }
        if (!ar.pending.empty() && !write_markers(a, ar, tap)) {
            return 1;
        }
        if (const std::int64_t now = prizma::Context::now_ns(); reports.metrics.due(now)) {
            write_metrics(reports.metrics, ar, f, reports.server, now);
        }
        if (ar.halted_at) {
            // Nothing journaled from the halt on: the cores hold within a window of it. The
            // gates still drain up to it, so a core far behind (one that started the stream
            // afresh when its join wait heard nothing) comes up to the halt and its copy can
            // settle the dispute; held at its own window, it never would.
            gate.drain(ar.rec.written_sequence());
            if (ar.disputed && f.next(e)) {
                // The stream went on by itself: a core's copy, late, completed the quorum.
                quorum_came(ar, e, said_at);
                if (!journal(e)) {
                    return 1;
                }
                continue;
            }
            if (const int rc = halted(a, ar, f, said_at); rc != 0) {
                return rc;
            }
            ctx.wait(std::chrono::milliseconds(50));
            continue;
        }
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
        while (!ar.held && !ar.halted_at && n < 1024 && f.next(e)) {
            ++n;
            if (!journal(e)) {
                return 1;
            }
        }
        gate.drain(ar.rec.written_sequence());
        const std::int64_t now = prizma::Context::now_ns();
        if (now - printed_at > 1'000'000'000) {
            printed_at = now;
            const auto pc = f.subscriber().counters();
            fmt::print(
                "{}: journal next {}, written {}; pgm: rdata {}, naks {}, ncf {}, loss events "
                "{}\n",
                kTool, ar.rec.next_sequence(), ar.rec.written_sequence(), pc.rdata_received,
                pc.naks_sent, pc.ncf_received, pc.loss_events);
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
    app.add_option("--on-divergence", a.on_divergence,
                   "When the cores' copies of a record differ: halt (default: hold the stream "
                   "until the operator decides) or continue (journal the copy heard first, mark "
                   "every copy). With --arbitration quorum a copy the other cores outvote is "
                   "marked, never journaled, and does not halt")
        ->check(prizma::tools::one_of({"halt", "continue"}));
    app.add_option("--divergence-file", a.divergence_file,
                   "Both copies of each divergent record (default JOURNAL.divergences)");
    app.add_option("--decision-file", a.decision_file,
                   "Where the operator writes 'use SEQ SOURCE-OR-CHECKSUM', 'continue SEQ' or "
                   "'stop SEQ' (default JOURNAL.decision)");
    app.add_option("--cores", a.cores,
                   "The cores' names (execlog-core --name), comma-separated: with flow keys, a "
                   "flow gate per core, so one core's backlog never holds the other's (needed "
                   "with --arbitration quorum)")
        ->delimiter(',');
    app.add_option("--gap-timeout-ms", a.gap_timeout_ms,
                   "Wait this long for PGM to repair a live gap before journaling it as lost "
                   "(default 5000)")
        ->check(prizma::tools::whole(1, 3600000));
    return prizma::tools::parse(app, argc, argv);
}

/// One flow gate: takes only `gsi`'s packets when set.
bool open_one_gate(prizma::Context& ctx,
                   const Args& a,
                   const std::string& flow_uri,
                   const std::optional<prizma::Gsi>& gsi,
                   FlowGate& gate) {
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
        // Passive: the data subscription asks for every repair and they are multicast, so the
        // gate hears them too; a gate (one per core) that NAKed as well multiplied the
        // archiver's NAKs in a storm (measured 2026-12-06: 118,830 NAKs in one ExecLog test).
        fo.passive = true;
        if (gsi) {
            fo.allowed_sources = {*gsi};
        }
        auto fs = ctx.add_subscriber(flow_uri, fo);
        if (!fs) {
            fmt::print(stderr, "{}: {}\n", kTool, fs.error().message());
            return false;
        }
        gate.sub = *fs;
        gate.stream_id = a.c.feed.stream_id;
    }
    return true;
}

/// The flow-control member's subscriptions, when the URI carries flow keys (else none): one,
/// or one per core named in --cores.
bool open_gate(prizma::Context& ctx, const Args& a, const std::string& flow_uri, Gates& gates) {
    std::vector<std::optional<prizma::Gsi>> only;
    for (const std::string& name : a.cores) {
        only.push_back(execlog::core_gsi(name));
    }
    if (only.empty()) {
        only.emplace_back(std::nullopt);
    }
    for (const auto& gsi : only) {
        FlowGate& gate = gates.gates.emplace_back();
        if (!open_one_gate(ctx, a, flow_uri, gsi, gate)) {
            return false;
        }
    }
    return true;
}

/// The final counters, on exit.
void print_final(Archive& ar,
                 execlog::Feed& feed,
                 const prizma::ReplayServer& server,
                 bool flushed) {
    const auto s = feed.stream_counters();
    fmt::print(
        "{}: final: journal next {}, records {}, loss entries {} ({} records), divergences {}, "
        "disputes {}, unconfirmed {}, unknown types {}, stale-epoch {}, replay clients {}, "
        "records served {}, cpu {:.3f} s{}\n",
        kTool, ar.rec.next_sequence(), feed.counters().delivered, ar.losses, ar.lost,
        ar.divergences, s.disputes, s.unconfirmed, ar.unknown, s.stale_epoch,
        server.counters().clients, server.counters().records, execlog::cpu_seconds(),
        flushed ? "" : " (flush failed)");
    const auto pc = feed.subscriber().counters();
    fmt::print(
        "{}: pgm: odata {}, rdata {}, naks {}, ncf {}, loss events {} ({} sqns), window full {}, "
        "sources {}, refused {}\n",
        kTool, pc.odata_received, pc.rdata_received, pc.naks_sent, pc.ncf_received, pc.loss_events,
        pc.lost_sqns, pc.window_full, pc.sources, pc.sources_refused);
}

/// --cores names cores, and quorum with a flow gate has one gate per core (else exit 2).
bool cores_fit(const Args& a, const std::string& flow_uri) {
    for (const std::string& name : a.cores) {
        if (!execlog::core_gsi(name)) {
            fmt::print(stderr,
                       "{}: --cores: '{}' is not a core's name (1-6 letters, digits, "
                       "'-' or '_')\n",
                       kTool, name);
            return false;
        }
    }
    if (a.c.feed.arbitration == prizma::Arbitration::quorum && a.cores.empty()
        && execlog::strip_flow_keys(flow_uri) != flow_uri) {
        // One flow gate drains one queue of both cores' packets: a standby behind the active
        // is held behind the active's packets, so quorum waits out its timeout on every record
        // (measured 2026-12-06: 43,642 of 47,738 records unconfirmed). A gate per core
        // (--cores) takes each core's packets on their own.
        fmt::print(stderr,
                   "{}: --arbitration quorum with flow-control keys needs --cores (a flow gate "
                   "per core; docs/EXECLOG.md, \"Divergence\")\n",
                   kTool);
        return false;
    }
    return true;
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
    if (!cores_fit(a, flow_uri)) {
        return 2;
    }
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
    Archive ar(std::move(*rec));
    ar.halt_on_divergence = a.on_divergence == "halt";
    ar.quorum = a.c.feed.arbitration == prizma::Arbitration::quorum;
    if (a.divergence_file.empty()) {
        a.divergence_file = a.journal + ".divergences";
    }
    if (a.decision_file.empty()) {
        a.decision_file = a.journal + ".decision";
    }
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
    prizma::tools::stop_on_signals();
    auto ctx = prizma::tools::make_context(kTool);
    if (!ctx) {
        return 1;
    }
    auto feed = execlog::Feed::open(*ctx, a.c.feed, next);
    if (!feed) {
        fmt::print(stderr, "{}: {}\n", kTool, feed.error().message());
        return 1;
    }
    Gates gate;
    if (!open_gate(*ctx, a, flow_uri, gate)) {
        return 1;
    }
    fmt::print(
        "{}: journal {} from sequence {} (recovered {} bytes of torn tail), replay on {}:{}\n",
        kTool, a.journal, next, ar.rec.counters().recovered_bytes_dropped, listen->first,
        server->port());
    (void)std::fflush(stdout);
    // The tap: every copy as heard (passive: never NAKs), for the divergence markers.
    prizma::ChannelOptions to;
    to.passive = true;
    to.preallocated_sources = 2;
    auto tap = ctx->add_subscriber(a.c.feed.uri, to);
    if (!tap) {
        fmt::print(stderr, "{}: {}\n", kTool, tap.error().message());
        return 1;
    }
    execlog::Metrics metrics(a.c.metrics, "archiver", "archiver");
    const int rc = serve(a, *ctx, ar, **feed, gate, &*tap, Reports{metrics, *server});
    write_metrics(metrics, ar, **feed, *server, prizma::Context::now_ns());
    const auto flushed = ar.rec.flush();
    print_final(ar, **feed, *server, flushed.has_value());
    return rc != 0 ? rc : !flushed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main(kTool, run, argc, argv);
}
