// SPDX-License-Identifier: Apache-2.0
// execlog-monitor: the ExecLog's live rate, gaps, divergences, the active core and per-source
// counters (a subscriber like any other, or passive: --passive), and each flow-controlled
// consumer's lag as the cores' publishers see it (prizma stats files, <prizma/stats.hpp>).
#include <cstdint>
#include <map>
#include <string>

#include <fmt/core.h>

#include <prizma/prizma.hpp>
#include <prizma/stats.hpp>

#include "../tools/tool_util.hpp"
#include "execlog/consumer.hpp"
#include "execlog/record.hpp"

namespace {

constexpr const char* kTool = "execlog-monitor";
/// With --exit-at-end: how long after a stall with nothing after it the monitor gives up.
constexpr std::int64_t kTailGiveUpNs = 10'000'000'000;

struct View {
    std::uint64_t records = 0;
    std::uint64_t next = 0;
    std::uint64_t loss_events = 0;
    std::uint64_t lost = 0;
    std::uint64_t divergences = 0;
    std::uint64_t stalls = 0;  // stall events: a loss with nothing after it
    std::uint64_t unknown = 0;
    std::uint64_t active_changes = 0;
    bool ended = false;
    // The last stall: records from `stalled_at` on were lost on this subscription and nothing
    // came after them (the monitor has no archiver to ask).
    std::uint64_t stalled_at = UINT64_MAX;
    std::int64_t stalled_ns = 0;
    std::string active;
    std::map<std::string, std::uint64_t> first_copies;     // per source, all run
    std::map<std::string, std::uint64_t> interval_copies;  // per source, this interval

    void apply(const prizma::StreamEvent& e) {
        switch (e.kind) {
            case prizma::StreamEventKind::loss:
                ++loss_events;
                lost += e.count;
                next = e.sequence + e.count;
                fmt::print("{}: GAP: records [{}, {}) lost\n", kTool, e.sequence,
                           e.sequence + e.count);
                return;
            case prizma::StreamEventKind::stall:
                ++stalls;
                stalled_at = e.sequence;
                stalled_ns = prizma::Context::now_ns();
                fmt::print("{}: STALL: records from {} on may be lost\n", kTool, e.sequence);
                return;
            case prizma::StreamEventKind::divergence:
                ++divergences;
                fmt::print("{}: DIVERGENCE at record {}: source {} differs\n", kTool, e.sequence,
                           execlog::tsi_text(e.source));
                return;
            case prizma::StreamEventKind::reset:
                fmt::print("{}: epoch {} from sequence {}\n", kTool, e.epoch, e.sequence);
                return;
            case prizma::StreamEventKind::dispute:
                fmt::print(
                    "{}: HALT at record {}: the cores' {} copies differ and none has the "
                    "quorum (the archiver waits for the operator)\n",
                    kTool, e.sequence, e.count);
                return;
            case prizma::StreamEventKind::record: break;
        }
        ++records;
        next = e.sequence + 1;
        const std::uint8_t t = execlog::type_byte(e.payload);
        unknown += t < 1 || t > execlog::kMaxRecordType ? 1U : 0U;
        ended = ended || t == static_cast<std::uint8_t>(execlog::RecordType::session_end);
        const std::string src = execlog::tsi_text(e.source);
        ++first_copies[src];
        ++interval_copies[src];
    }
    /// The source that delivered most first copies this interval.
    void close_interval() {
        std::string best;
        std::uint64_t most = 0;
        for (const auto& [s, n] : interval_copies) {
            if (n > most) {
                best = s;
                most = n;
            }
        }
        if (!best.empty() && best != active) {
            active_changes += active.empty() ? 0U : 1U;
            active = best;
        }
        interval_copies.clear();
    }
};

std::uint64_t counter(const std::vector<std::pair<std::string, std::uint64_t>>& cs,
                      std::string_view name) {
    for (const auto& [k, v] : cs) {
        if (k == name) {
            return v;
        }
    }
    return 0;
}

/// This subscription's own counters, the ones not zero (receive side and transport): what a
/// still stream looks like from here (nothing heard, or held for a repair), with or without a
/// stats file.
std::string own_counters(const prizma::Subscriber& sub) {
    std::string out;
    const prizma::ChannelCounters c = sub.counters();
    for (const auto& f : prizma::kChannelCounterFields) {
        if (c.*f.member != 0) {
            out += fmt::format("{}{} {}", out.empty() ? "" : ", ", f.name, c.*f.member);
        }
    }
    for (const auto& t : sub.transport_counters()) {
        if (t.value != 0) {
            out += fmt::format(", {} {}", t.name, t.value);
        }
    }
    return out;
}

/// The stream has not moved for `still_ms`: said loudly, with this subscription's counters.
void say_still(std::int64_t still_ms, std::uint64_t last, const prizma::Subscriber& sub) {
    fmt::print(
        "{}: ALERT: no record for {} ms after record {}: the stream is halted or held (an "
        "archiver halted at a divergence, or flow control without a counted archiver: see the "
        "cores' members below)\n",
        kTool, still_ms, last);
    fmt::print("{}:   this subscription: {}\n", kTool, own_counters(sub));
}

void say_final(const View& v, const prizma::StreamCounters& c, const prizma::Subscriber& sub) {
    fmt::print(
        "{}: final: records {}, next {}, gaps {} ({} records), divergences {}, duplicates {}, "
        "stale-epoch {}, unknown types {}, sources {}, active-core changes {}, stalls {}, "
        "cpu {:.3f} s\n",
        kTool, v.records, v.next, v.loss_events, v.lost, v.divergences, c.duplicates, c.stale_epoch,
        v.unknown, v.first_copies.size(), v.active_changes, v.stalls, execlog::cpu_seconds());
    fmt::print("{}: final: this subscription: {}\n", kTool, own_counters(sub));
}

/// Per-source counters of this process's own subscription, and every flow-controlled
/// receiver the publishers of this user's prizma processes track.
void print_stats(const prizma::Context& ctx) {
    if (!ctx.stats_file().empty()) {
        if (auto own = prizma::stats::read(std::string(ctx.stats_file())); own) {
            for (const auto& ch : own->channels) {
                for (const auto& s : ch.sources) {
                    fmt::print(
                        "{}:   source {}: odata {}, rdata {}, naks {}, loss events {}, delivered "
                        "{}\n",
                        kTool, prizma::stats::printable(s.tsi),
                        counter(s.counters, "odata_received"),
                        counter(s.counters, "rdata_received"), counter(s.counters, "naks_sent"),
                        counter(s.counters, "loss_events"),
                        counter(s.counters, "messages_delivered"));
                }
            }
        }
    }
    for (const auto& dir : prizma::stats::readable_dirs()) {
        auto files = prizma::stats::list_files(dir);
        for (const auto& path : files ? *files : std::vector<std::string>{}) {
            auto s = prizma::stats::read(path);
            if (!s || s->process != prizma::stats::ProcessState::running) {
                continue;
            }
            for (const auto& ch : s->channels) {
                if (!ch.publisher) {
                    continue;
                }
                for (const auto& r : ch.sources) {
                    const bool counted = counter(r.counters, "counted") != 0;
                    fmt::print(
                        "{}:   {}core pid {}: consumer tag {}: lag {} packets, heard {} ms ago, "
                        "{}\n",
                        kTool, counted ? "" : "ALERT: ", s->pid, counter(r.counters, "tag"),
                        counter(r.counters, "lag"), counter(r.counters, "heard_ms_ago"),
                        counted ? "counted" : "not counted (evicted or not admitted yet)");
                }
            }
        }
    }
}

void write_metrics(execlog::Metrics& m,
                   const View& v,
                   const prizma::StreamCounters& c,
                   std::int64_t still_ms,
                   std::int64_t now) {
    m.gauge(execlog::metric("execlog_next_sequence"), static_cast<double>(v.next));
    m.counter(execlog::metric("execlog_records_total"), v.records);
    m.counter(execlog::metric("execlog_loss_events_total"), v.loss_events);
    m.counter(execlog::metric("execlog_lost_records_total"), v.lost);
    m.counter(execlog::metric("execlog_divergences_total"), v.divergences);
    m.counter(execlog::metric("execlog_duplicates_total"), c.duplicates);
    m.counter(execlog::metric("execlog_stale_epoch_total"), c.stale_epoch);
    m.counter(execlog::metric("execlog_unknown_types_total"), v.unknown);
    m.counter(execlog::metric("execlog_monitor_stalls_total"), v.stalls);
    m.counter(execlog::metric("execlog_monitor_active_changes_total"), v.active_changes);
    m.gauge(execlog::metric("execlog_monitor_still_seconds"), static_cast<double>(still_ms) / 1e3);
    for (const auto& [src, n] : v.first_copies) {
        m.counter(execlog::metric("execlog_monitor_first_copies_total"), n,
                  fmt::format("source=\"{}\"", execlog::Metrics::escape(src)));
    }
    m.publish(kTool, now);
}

int run(int argc, char** argv) {
    CLI::App app{"", kTool};
    prizma::tools::init(app, "execlog-monitor URI [--interval-ms MS] [options]",
                        "Live rate, gaps, divergences, the active core, per-source counters and "
                        "consumers' lag of the ExecLog.");
    execlog::ConsumerArgs a;
    // The monitor watches: the first copy of each record (it has no archive to settle a
    // dispute), every other copy that differs reported.
    a.arbitration = "first";
    execlog::add_consumer_options(app, a);
    std::uint32_t interval_ms = 1000;
    bool no_stats = false;
    app.add_option("--interval-ms", interval_ms, "Report period (default 1000)")
        ->check(prizma::tools::whole(10, 3600000));
    app.add_flag("--no-stats", no_stats, "Do not read prizma stats files");
    bool passive = false;
    app.add_flag("--passive", passive, "Never NAK (then a packet lost here is a gap here only)");
    if (const int rc = prizma::tools::parse(app, argc, argv); rc >= 0) {
        return rc;
    }
    if (!execlog::finish_consumer_args(kTool, a)) {
        return 2;
    }
    prizma::tools::stop_on_signals();
    auto ctx = prizma::tools::make_context(kTool);
    if (!ctx) {
        return 1;
    }
    auto co = execlog::consumer_channel_options(a.feed.window, passive);
    co.recover_history = false;  // live from the first packet heard
    auto sub = ctx->add_subscriber(a.feed.uri, co);
    prizma::StreamOptions so;
    so.stream_id = a.feed.stream_id;
    auto in = sub ? prizma::StreamSubscriber::create(so)
                  : prizma::Result<prizma::StreamSubscriber, prizma::Error>(sub.error());
    if (!sub || !in || !in->add(*sub)) {
        fmt::print(stderr, "{}: {}\n", kTool,
                   !sub ? sub.error().message() : "cannot read the stream");
        return 1;
    }
    View v;
    execlog::Metrics metrics(a.metrics, "monitor", "monitor");
    bool lost_tail = false;
    std::int64_t at = prizma::Context::now_ns();
    std::uint64_t at_records = 0;
    std::int64_t still_ms = 0;  // since the last record, while the stream has not ended
    while (!prizma::tools::stop_requested() && !(a.exit_at_end && v.ended)) {
        const int work = ctx->poll();
        const std::size_t n = in->poll(1024, [&](const prizma::StreamEvent& e) { v.apply(e); });
        const std::int64_t now = prizma::Context::now_ns();
        if (now - at >= std::int64_t{interval_ms} * 1'000'000) {
            v.close_interval();
            const auto& c = in->counters();
            fmt::print(
                "{}: {:.0f} records/s, next {}, active core {}, gaps {} ({} records), divergences "
                "{}, "
                "duplicates {}, stale-epoch {}, unknown types {}\n",
                kTool,
                static_cast<double>(v.records - at_records) * 1e9 / static_cast<double>(now - at),
                v.next, v.active.empty() ? "-" : v.active, v.loss_events, v.lost, v.divergences,
                c.duplicates, c.stale_epoch, v.unknown);
            if (v.records == at_records && v.records > 0 && !v.ended) {
                still_ms += (now - at) / 1'000'000;
                say_still(still_ms, v.next - 1, *sub);
            } else {
                still_ms = 0;
            }
            if (!no_stats) {
                print_stats(*ctx);
            }
            (void)std::fflush(stdout);
            at = now;
            at_records = v.records;
        }
        if (metrics.due(now)) {
            write_metrics(metrics, v, in->counters(), still_ms, now);
        }
        if (a.exit_at_end && v.stalled_at == v.next && now - v.stalled_ns > kTailGiveUpNs) {
            // A monitor (passive: it never asks for repairs) that lost the stream's last records
            // would wait for the session end for ever: it says so and ends.
            fmt::print(stderr,
                       "{}: ENDED WITHOUT the session end: records from {} on were lost on this "
                       "subscription and nothing has followed them for {} s (no archiver to "
                       "ask)\n",
                       kTool, v.next, kTailGiveUpNs / 1'000'000'000);
            lost_tail = true;
            break;
        }
        if (work == 0 && n == 0 && !a.spin) {
            ctx->wait(std::chrono::milliseconds(100));
        }
    }
    v.close_interval();
    write_metrics(metrics, v, in->counters(), still_ms, prizma::Context::now_ns());
    say_final(v, in->counters(), *sub);
    return lost_tail ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main(kTool, run, argc, argv);
}
