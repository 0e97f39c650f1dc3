// SPDX-License-Identifier: Apache-2.0
#include "execlog/metrics.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "execlog/feed.hpp"

namespace execlog {

Metrics::Metrics(const MetricsArgs& args, std::string_view role, std::string_view name)
    : path_(args.file),
      labels_(fmt::format("role=\"{}\",name=\"{}\"",
                          escape(role),
                          escape(args.name.empty() ? name : std::string_view(args.name)))),
      period_ns_(std::int64_t{args.period_ms} * 1'000'000) {}

std::string Metrics::escape(std::string_view v) {
    std::string out;
    out.reserve(v.size());
    for (const char c : v) {
        if (c == '\\' || c == '"') {
            out += '\\';
            out += c;
        } else if (c == '\n') {
            out += "\\n";
        } else {
            out += c;
        }
    }
    return out;
}

bool Metrics::begin(const MetricFamily& family, std::string_view extra) {
    if (!enabled()) {
        return false;
    }
    if (family.name != last_family_) {  // a family's samples come together, after one HELP and TYPE
        last_family_ = family.name;
        fmt::format_to(std::back_inserter(text_), "# HELP {} {}\n# TYPE {} {}\n", family.name,
                       family.help, family.name, family.type);
    }
    text_ += family.name;
    text_ += '{';
    text_ += labels_;
    if (!extra.empty()) {
        text_ += ',';
        text_ += extra;
    }
    text_ += "} ";
    return true;
}

void Metrics::counter(const MetricFamily& family, std::uint64_t v, std::string_view extra) {
    if (begin(family, extra)) {
        fmt::format_to(std::back_inserter(text_), "{}\n", v);
    }
}

void Metrics::counter_seconds(const MetricFamily& family, double v) {
    if (begin(family, {})) {
        fmt::format_to(std::back_inserter(text_), "{}\n", v);
    }
}

void Metrics::gauge(const MetricFamily& family, double v, std::string_view extra) {
    if (begin(family, extra)) {
        fmt::format_to(std::back_inserter(text_), "{}\n", v);
    }
}

void Metrics::feed(Feed& f, bool halted) {
    if (!enabled()) {
        return;
    }
    const FeedCounters& fc = f.counters();
    const prizma::StreamCounters s = f.stream_counters();
    const prizma::ChannelCounters pc = f.subscriber().counters();
    gauge(execlog::metric("execlog_next_sequence"), static_cast<double>(f.next_sequence()));
    counter(execlog::metric("execlog_records_total"), fc.delivered);
    gauge(execlog::metric("execlog_halted"), halted ? 1.0 : 0.0);
    counter(execlog::metric("execlog_late_joins_total"), fc.late_joins);
    counter(execlog::metric("execlog_replayed_records_total"), fc.replayed);
    counter(execlog::metric("execlog_late_join_failures_total"), fc.late_join_failures);
    counter(execlog::metric("execlog_live_gaps_total"), fc.live_gaps);
    counter(execlog::metric("execlog_duplicates_total"), s.duplicates);
    counter(execlog::metric("execlog_divergences_total"), s.divergences);
    counter(execlog::metric("execlog_disputes_total"), s.disputes);
    counter(execlog::metric("execlog_unconfirmed_total"), s.unconfirmed);
    counter(execlog::metric("execlog_loss_events_total"), s.loss_events);
    counter(execlog::metric("execlog_lost_records_total"), s.lost_records);
    counter(execlog::metric("execlog_stale_epoch_total"), s.stale_epoch);
    counter(execlog::metric("execlog_bad_records_total"),
            s.bad_checksum + s.other_version + s.foreign);
    counter(execlog::metric("execlog_pgm_naks_sent_total"), pc.naks_sent);
    counter(execlog::metric("execlog_pgm_repaired_total"), pc.repaired);
    counter(execlog::metric("execlog_pgm_window_full_total"), pc.window_full);
    gauge(execlog::metric("execlog_pgm_sources"), static_cast<double>(pc.sources));
}

std::string Metrics::write(std::int64_t now_ns) {
    if (!enabled()) {
        return {};
    }
    written_ns_ = now_ns;
    const auto unix_s =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    gauge(execlog::metric("execlog_up"), 1.0);
    gauge(execlog::metric("execlog_metrics_written_seconds"), unix_s);
    std::string body;
    body.swap(text_);
    last_family_.clear();
    // A fresh name beside it (never one planted there: O_EXCL), readable by node-exporter's
    // user, then renamed over the old file.
    std::string tmp = path_ + ".XXXXXX";
    const int fd = ::mkstemp(tmp.data());
    if (fd < 0) {
        return fmt::format("metrics: {}: {}", tmp, std::strerror(errno));
    }
    std::size_t done = 0;
    while (done < body.size()) {
        const ssize_t n = ::write(fd, body.data() + done, body.size() - done);
        if (n <= 0) {
            break;
        }
        done += static_cast<std::size_t>(n);
    }
    const bool ok = done == body.size() && ::fchmod(fd, 0644) == 0;
    const int err = errno;
    if (::close(fd) != 0 || !ok) {
        (void)::unlink(tmp.c_str());
        return fmt::format("metrics: writing {}: {}", tmp, std::strerror(ok ? errno : err));
    }
    if (::rename(tmp.c_str(), path_.c_str()) != 0) {
        const std::string why = std::strerror(errno);
        (void)::unlink(tmp.c_str());
        return fmt::format("metrics: {}: {}", path_, why);
    }
    return {};
}

void Metrics::publish(const char* tool, std::int64_t now_ns) {
    std::string err = write(now_ns);
    if (!err.empty() && err != said_) {
        fmt::print(stderr, "{}: warning: {}\n", tool, err);
    }
    said_ = std::move(err);
}

}  // namespace execlog
