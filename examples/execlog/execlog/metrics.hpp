// SPDX-License-Identifier: Apache-2.0
// Prometheus metrics of the ExecLog programs, in the node-exporter textfile format
// (docs/EXECLOG.md, "Metrics"): every program given --metrics-file rewrites that file each
// --metrics-ms, whole (written beside it and renamed), so node-exporter's textfile collector
// never reads half of it. Every sample carries the labels role="core|archiver|risk|fix|monitor"
// and name="..." (a core's --name, else the role), so the programs of one host can share a
// textfile directory.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include <prizma/prizma.hpp>

#include <CLI/CLI.hpp>

namespace execlog {

class Feed;

/// One metric family: its name, TYPE and HELP text.
struct MetricFamily {
    std::string_view name;
    std::string_view type;  ///< "counter" or "gauge"
    std::string_view help;
};

/// Every family the ExecLog programs write, the one place their TYPE and HELP are said.
/// docs/EXECLOG.md's table "Metrics (Prometheus)" lists the same names (test/unit_test.cpp
/// compares the two).
inline constexpr std::array kMetricFamilies{
    MetricFamily{"execlog_next_sequence", "gauge", "The next record sequence this program takes"},
    MetricFamily{"execlog_records_total", "counter",
                 "Records handed to the program, each once, in order"},
    MetricFamily{"execlog_halted", "gauge",
                 "1 while the stream is halted at a divergence or dispute (an operator decides)"},
    MetricFamily{"execlog_late_joins_total", "counter",
                 "Times the program read the archiver to catch up"},
    MetricFamily{"execlog_replayed_records_total", "counter",
                 "Records that came from the archiver"},
    MetricFamily{"execlog_late_join_failures_total", "counter", "Late joins that failed (retried)"},
    MetricFamily{"execlog_live_gaps_total", "counter",
                 "Live gaps PGM could not repair, filled from the archiver"},
    MetricFamily{"execlog_duplicates_total", "counter",
                 "Copies of records already taken (the other core's, normally one per record)"},
    MetricFamily{"execlog_divergences_total", "counter",
                 "Copies whose bytes differ from the record taken"},
    MetricFamily{"execlog_disputes_total", "counter",
                 "Records whose copies disagreed with no quorum"},
    MetricFamily{"execlog_unconfirmed_total", "counter",
                 "Quorum: records taken with fewer agreeing cores than --quorum (others silent)"},
    MetricFamily{"execlog_loss_events_total", "counter",
                 "Loss events: records no copy and no archive could give"},
    MetricFamily{"execlog_lost_records_total", "counter", "Records lost for good"},
    MetricFamily{"execlog_stale_epoch_total", "counter", "Records of an older epoch, dropped"},
    MetricFamily{"execlog_bad_records_total", "counter",
                 "Records dropped: bad checksum, another record version, not a record"},
    MetricFamily{"execlog_pgm_naks_sent_total", "counter", "PGM NAKs sent (repairs asked for)"},
    MetricFamily{"execlog_pgm_repaired_total", "counter", "PGM packets repaired"},
    MetricFamily{"execlog_pgm_window_full_total", "counter",
                 "PGM packets dropped: the receive window was full"},
    MetricFamily{"execlog_pgm_sources", "gauge", "PGM sources heard (the cores)"},
    MetricFamily{"execlog_up", "gauge",
                 "1: the program is running (the file stays when it stops: see "
                 "execlog_metrics_written_seconds)"},
    MetricFamily{"execlog_metrics_written_seconds", "gauge",
                 "When this file was written, Unix time"},
    MetricFamily{"execlog_unknown_types_total", "counter",
                 "Records of a type this program does not know"},
    MetricFamily{"execlog_monitor_stalls_total", "counter",
                 "Stalls: records lost on this subscription with nothing after them"},
    MetricFamily{"execlog_monitor_active_changes_total", "counter",
                 "Times the core heard first changed"},
    MetricFamily{"execlog_monitor_still_seconds", "gauge",
                 "How long no record has come while the session has not ended (0: records flow)"},
    MetricFamily{"execlog_monitor_first_copies_total", "counter",
                 "Records whose first copy came from this source (a core, by name.port)"},
    MetricFamily{"execlog_core_next_sequence", "gauge", "The next record sequence this core makes"},
    MetricFamily{"execlog_core_records_total", "counter", "Records this core published"},
    MetricFamily{"execlog_core_inputs_total", "counter",
                 "Inputs (orders, cancels, replaces) processed"},
    MetricFamily{"execlog_core_held", "gauge",
                 "1 while flow control holds the core (a counted member behind)"},
    MetricFamily{"execlog_core_held_seconds_total", "counter",
                 "Time held by flow control, seconds"},
    MetricFamily{"execlog_core_back_pressured_total", "counter",
                 "Offers refused for flow control or window"},
    MetricFamily{"execlog_core_epoch", "gauge", "The stream epoch"},
    MetricFamily{"execlog_core_session_ended", "gauge", "1 once the session end is published"},
    MetricFamily{"execlog_pgm_naks_received_total", "counter", "PGM NAKs received"},
    MetricFamily{"execlog_pgm_rdata_sent_total", "counter", "PGM repairs sent"},
    MetricFamily{"execlog_pgm_flow_evicted_total", "counter", "Flow-control members evicted"},
    MetricFamily{"execlog_archive_next_sequence", "gauge", "The journal's next record sequence"},
    MetricFamily{"execlog_archive_written_sequence", "gauge",
                 "Records on disk (written and synced), up to"},
    MetricFamily{"execlog_archive_halted_at", "gauge",
                 "The record the archive is halted at (-1: none)"},
    MetricFamily{"execlog_archive_loss_entries_total", "counter", "Loss entries journaled"},
    MetricFamily{"execlog_replay_clients_total", "counter", "Replay connections accepted"},
    MetricFamily{"execlog_replay_refused_total", "counter",
                 "Replay connections refused (not allowed, over a cap)"},
    MetricFamily{"execlog_replay_records_total", "counter", "Records served to replay clients"},
    MetricFamily{"execlog_replay_errors_total", "counter",
                 "Bad replay requests answered with an error"},
    MetricFamily{"execlog_replay_timeouts_total", "counter", "Replay clients closed for silence"},
    MetricFamily{"execlog_risk_trades_total", "counter", "Trades applied to positions"},
    MetricFamily{"execlog_fix_messages_total", "counter",
                 "FIX messages stored for the firms' sessions"},
    MetricFamily{"execlog_fix_no_session_total", "counter",
                 "Records for an account with no FIX session"},
    MetricFamily{"execlog_fix_sessions_logged_on", "gauge", "FIX sessions logged on now"},
};

/// The family called `name`: a name not in kMetricFamilies does not compile.
consteval const MetricFamily& metric(std::string_view name) {
    for (const auto& f : kMetricFamilies) {
        if (f.name == name) {
            return f;
        }
    }
    throw "execlog::metric: not in kMetricFamilies";
}

struct MetricsArgs {
    std::string file;                ///< --metrics-file; empty: no metrics
    std::uint32_t period_ms = 1000;  ///< --metrics-ms
    std::string name;                ///< --metrics-name; empty: the program's default
};

inline void add_metrics_options(CLI::App& app, MetricsArgs& a) {
    app.add_option("--metrics-file", a.file,
                   "Write Prometheus metrics here (node-exporter textfile format: a NAME.prom "
                   "in its --collector.textfile.directory), rewritten whole every --metrics-ms");
    app.add_option("--metrics-ms", a.period_ms, "Metrics period (default 1000)")
        ->check(CLI::Range(10U, 3'600'000U));
    app.add_option("--metrics-name", a.name,
                   "The metrics' name label (default: a core's --name, else the program's "
                   "role): programs sharing a textfile directory need different ones");
}

class Metrics {
public:
    Metrics(const MetricsArgs& args, std::string_view role, std::string_view name);
    [[nodiscard]] bool enabled() const noexcept { return !path_.empty(); }
    /// A period has passed since the last write (always false when disabled).
    [[nodiscard]] bool due(std::int64_t now_ns) const noexcept {
        return enabled() && now_ns - written_ns_ >= period_ns_;
    }
    /// Adds one sample of `family` (`extra`: more labels, `k="v"` pairs joined by commas,
    /// already escaped). A family's HELP and TYPE come before its first sample.
    void counter(const MetricFamily& family, std::uint64_t v, std::string_view extra = {});
    /// A counter of seconds (fractional).
    void counter_seconds(const MetricFamily& family, double v);
    void gauge(const MetricFamily& family, double v, std::string_view extra = {});
    /// What every consumer reports: its feed (records, late joins, disputes, ...), the stream's
    /// arbitration and the PGM subscriber under it. `halted`: held at a dispute or divergence.
    void feed(Feed& f, bool halted);
    /// Writes the samples added since the last write, with execlog_up and the time, and starts
    /// a new set. Returns an error text (empty on success); the program goes on either way.
    std::string write(std::int64_t now_ns);
    /// write(), and an error said on stderr once (again only when it changes).
    void publish(const char* tool, std::int64_t now_ns);
    /// A label value escaped as the text format wants (\\, \", \n).
    static std::string escape(std::string_view v);

private:
    /// Starts a sample: its family's HELP and TYPE if new, the name and labels; false when
    /// disabled (nothing written).
    bool begin(const MetricFamily& family, std::string_view extra);

    std::string path_;
    std::string labels_;  // role="...",name="..."
    std::int64_t period_ns_;
    std::int64_t written_ns_ = INT64_MIN / 2;
    std::string text_;
    std::string last_family_;
    std::string said_;  // the last error said
};

}  // namespace execlog
