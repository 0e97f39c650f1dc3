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

bool Metrics::begin(std::string_view metric,
                    std::string_view help,
                    const char* type,
                    std::string_view extra) {
    if (!enabled()) {
        return false;
    }
    if (metric != last_family_) {  // a family's samples come together, after one HELP and TYPE
        last_family_ = metric;
        fmt::format_to(std::back_inserter(text_), "# HELP {} {}\n# TYPE {} {}\n", metric, help,
                       metric, type);
    }
    text_ += metric;
    text_ += '{';
    text_ += labels_;
    if (!extra.empty()) {
        text_ += ',';
        text_ += extra;
    }
    text_ += "} ";
    return true;
}

void Metrics::counter(std::string_view metric,
                      std::string_view help,
                      std::uint64_t v,
                      std::string_view extra) {
    if (begin(metric, help, "counter", extra)) {
        fmt::format_to(std::back_inserter(text_), "{}\n", v);
    }
}

void Metrics::counter_seconds(std::string_view metric, std::string_view help, double v) {
    if (begin(metric, help, "counter", {})) {
        fmt::format_to(std::back_inserter(text_), "{}\n", v);
    }
}

void Metrics::gauge(std::string_view metric,
                    std::string_view help,
                    double v,
                    std::string_view extra) {
    if (begin(metric, help, "gauge", extra)) {
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
    gauge("execlog_next_sequence", "The next record sequence this program takes",
          static_cast<double>(f.next_sequence()));
    counter("execlog_records_total", "Records handed to the program, each once, in order",
            fc.delivered);
    gauge("execlog_halted",
          "1 while the stream is halted at a divergence or dispute (an operator decides)",
          halted ? 1.0 : 0.0);
    counter("execlog_late_joins_total", "Times the program read the archiver to catch up",
            fc.late_joins);
    counter("execlog_replayed_records_total", "Records that came from the archiver", fc.replayed);
    counter("execlog_late_join_failures_total", "Late joins that failed (retried)",
            fc.late_join_failures);
    counter("execlog_live_gaps_total", "Live gaps PGM could not repair, filled from the archiver",
            fc.live_gaps);
    counter("execlog_duplicates_total",
            "Copies of records already taken (the other core's, normally one per record)",
            s.duplicates);
    counter("execlog_divergences_total", "Copies whose bytes differ from the record taken",
            s.divergences);
    counter("execlog_disputes_total", "Records whose copies disagreed with no quorum", s.disputes);
    counter("execlog_unconfirmed_total",
            "Quorum: records taken with fewer agreeing cores than --quorum (others silent)",
            s.unconfirmed);
    counter("execlog_loss_events_total", "Loss events: records no copy and no archive could give",
            s.loss_events);
    counter("execlog_lost_records_total", "Records lost for good", s.lost_records);
    counter("execlog_stale_epoch_total", "Records of an older epoch, dropped", s.stale_epoch);
    counter("execlog_bad_records_total",
            "Records dropped: bad checksum, another record version, not a record",
            s.bad_checksum + s.other_version + s.foreign);
    counter("execlog_pgm_naks_sent_total", "PGM NAKs sent (repairs asked for)", pc.naks_sent);
    counter("execlog_pgm_repaired_total", "PGM packets repaired", pc.repaired);
    counter("execlog_pgm_window_full_total", "PGM packets dropped: the receive window was full",
            pc.window_full);
    gauge("execlog_pgm_sources", "PGM sources heard (the cores)", static_cast<double>(pc.sources));
}

std::string Metrics::write(std::int64_t now_ns) {
    if (!enabled()) {
        return {};
    }
    written_ns_ = now_ns;
    const auto unix_s =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    gauge("execlog_up",
          "1: the program is running (the file stays when it stops: see "
          "execlog_metrics_written_seconds)",
          1.0);
    gauge("execlog_metrics_written_seconds", "When this file was written, Unix time", unix_s);
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
