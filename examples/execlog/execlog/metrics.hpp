// SPDX-License-Identifier: Apache-2.0
// Prometheus metrics of the ExecLog programs, in the node-exporter textfile format
// (docs/EXECLOG.md, "Metrics"): every program given --metrics-file rewrites that file each
// --metrics-ms, whole (written beside it and renamed), so node-exporter's textfile collector
// never reads half of it. Every sample carries the labels role="core|archiver|risk|fix|monitor"
// and name="..." (a core's --name, else the role), so the programs of one host can share a
// textfile directory.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include <prizma/prizma.hpp>

#include <CLI/CLI.hpp>

namespace execlog {

class Feed;

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
    /// Adds one sample (`extra`: more labels, `k="v"` pairs joined by commas, already escaped).
    /// A family's HELP and TYPE come before its first sample.
    void counter(std::string_view metric,
                 std::string_view help,
                 std::uint64_t v,
                 std::string_view extra = {});
    /// A counter of seconds (fractional).
    void counter_seconds(std::string_view metric, std::string_view help, double v);
    void gauge(std::string_view metric,
               std::string_view help,
               double v,
               std::string_view extra = {});
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
    bool begin(std::string_view metric,
               std::string_view help,
               const char* type,
               std::string_view extra);

    std::string path_;
    std::string labels_;  // role="...",name="..."
    std::int64_t period_ns_;
    std::int64_t written_ns_ = INT64_MIN / 2;
    std::string text_;
    std::string last_family_;
    std::string said_;  // the last error said
};

}  // namespace execlog
