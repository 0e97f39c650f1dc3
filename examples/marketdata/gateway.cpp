// SPDX-License-Identifier: Apache-2.0
#include "gateway.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/core.h>

#include "md/query.hpp"

#include <nlohmann/json.hpp>

namespace md::gw {

std::size_t latency_bucket(double seconds) noexcept {
    const auto* const it = std::lower_bound(kLatencyBounds.begin(), kLatencyBounds.end(), seconds);
    return static_cast<std::size_t>(it - kLatencyBounds.begin());
}

std::size_t lag_bucket(double seconds) noexcept {
    const auto* const it = std::lower_bound(kLagBounds.begin(), kLagBounds.end(), seconds);
    return static_cast<std::size_t>(it - kLagBounds.begin());
}

void PushHub::add(std::uint64_t k, const std::shared_ptr<PushClient>& c) {
    const std::lock_guard lock(mu_);
    subs_[k].push_back(c);
    count_.fetch_add(1, std::memory_order_relaxed);
}

void PushHub::remove(std::uint64_t k, const PushClient* c) {
    const std::lock_guard lock(mu_);
    const auto it = subs_.find(k);
    if (it == subs_.end()) {
        return;
    }
    auto& v = it->second;
    const auto n = std::erase_if(v, [c](const std::weak_ptr<PushClient>& w) {
        const auto sp = w.lock();
        return !sp || sp.get() == c;
    });
    count_.fetch_sub(n, std::memory_order_relaxed);
    if (v.empty()) {
        subs_.erase(it);
    }
}

std::size_t PushHub::publish(Code c, Period p, const Bar& b, std::int64_t sent_ns) {
    std::vector<std::shared_ptr<PushClient>> targets;
    {
        const std::lock_guard lock(mu_);
        const auto it = subs_.find(key(c, p));
        if (it == subs_.end()) {
            return 0;
        }
        for (const auto& w : it->second) {
            if (auto sp = w.lock()) {
                targets.push_back(std::move(sp));
            }
        }
    }
    if (targets.empty()) {
        return 0;
    }
    auto msg = std::make_shared<std::string>();
    msg->reserve(200);
    *msg += R"({"period":")";
    *msg += period_name(p);
    *msg += R"(","bar":)";
    append_bar(*msg, c, b);
    *msg += R"(,"sent_ns":)";
    *msg += std::to_string(sent_ns);
    *msg += '}';
    const std::shared_ptr<const std::string> shared = std::move(msg);
    for (const auto& t : targets) {
        t->push(shared);
    }
    return targets.size();
}

std::size_t PushHub::broadcast(const std::string& msg) {
    std::vector<std::shared_ptr<PushClient>> targets;
    {
        const std::lock_guard lock(mu_);
        for (const auto& [k, v] : subs_) {
            for (const auto& w : v) {
                if (auto sp = w.lock()) {
                    targets.push_back(std::move(sp));
                }
            }
        }
    }
    const auto shared = std::make_shared<const std::string>(msg);
    for (const auto& t : targets) {
        t->control(shared);
    }
    return targets.size();
}

namespace {

void counter(std::string& out, const char* name, const char* help, std::uint64_t v) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}\n", name, help, v);
}

void gauge(std::string& out, const char* name, const char* help, double v) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} gauge\n{0} {2}\n", name, help, v);
}

template <typename Buckets, typename Bounds>
void histogram(std::string& out,
               const char* name,
               const char* help,
               const Buckets& b,
               const Bounds& bounds,
               double sum_s) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} histogram\n", name, help);
    std::uint64_t cum = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
        cum += b[i];
        if (i < bounds.size()) {
            out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds.at(i), cum);
        } else {
            out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, cum);
        }
    }
    out += fmt::format("{}_sum {}\n{}_count {}\n", name, sum_s, name, cum);
}

}  // namespace

namespace {

/// The feed's and the stream's metrics.
void feed_metrics(std::string& out, const Shared& s) {
    const FeedMetrics& f = s.feed;
    std::array<std::uint64_t, kLagBounds.size() + 1> lag{};
    for (std::size_t i = 0; i < lag.size(); ++i) {
        lag.at(i) = f.lag.at(i).load(std::memory_order_relaxed);
    }
    histogram(out, "md_feed_lag_seconds", "Feed message receive time minus send time.", lag,
              kLagBounds, static_cast<double>(f.lag_sum_ns.load()) * 1e-9);
    gauge(out, "md_feed_last_lag_seconds", "Lag of the last feed message.",
          static_cast<double>(f.lag_ns.load()) * 1e-9);
    counter(out, "md_feed_messages_total", "Feed messages received.", f.messages);
    counter(out, "md_feed_ticks_total", "Ticks folded into bars.", f.ticks);
    counter(out, "md_feed_duplicate_ticks_total", "Ticks seen before (dropped).",
            f.duplicate_ticks);
    counter(out, "md_feed_malformed_total", "Feed messages that are not ticks.", f.malformed);
    counter(out, "md_feed_loss_events_total", "prizma unrecoverable-loss events.", f.loss_events);
    counter(out, "md_feed_lost_records_total", "Stream records reported lost.", f.lost_records);
    counter(out, "md_stream_records_total", "Stream records applied (each sequence once).",
            f.records);
    counter(out, "md_stream_duplicates_total", "Copies of records already applied (A/B).",
            f.stream_duplicates);
    counter(out, "md_stream_divergences_total", "Copies that differ from the record applied.",
            f.divergences);
    counter(out, "md_stream_resets_total", "New stream epochs (feed sessions).", f.stream_resets);
    counter(out, "md_stream_foreign_total", "Messages that are not records of the stream.",
            f.foreign);
    counter(out, "md_recorder_replayed_total", "Records fetched from the recorder.", f.replayed);
    counter(out, "md_recorder_errors_total", "Recorder replays that failed (then live only).",
            f.recorder_errors);
    counter(out, "md_feed_gaps_total", "Tick gaps marked on bars (gap flag).", f.gaps);
    gauge(out, "md_feed_last_channel_seq", "Last channel sequence number applied.",
          static_cast<double>(f.last_channel_seq.load()));
}

/// Stores, push, limits, liveness and fills.
void other_metrics(std::string& out, const Shared& s) {
    const FeedMetrics& f = s.feed;
    counter(out, "md_store_commits_total", "LMDB transactions written.", f.store_commits);
    counter(out, "md_store_errors_total", "LMDB transactions that failed.", f.store_errors);
    counter(out, "md_redis_writes_total", "Batches written to Redis.", f.redis_writes);
    counter(out, "md_redis_errors_total", "Batches Redis refused or lost.", f.redis_errors);
    counter(out, "md_redis_redirections_total", "Redis Cluster MOVED/ASK replies followed.",
            f.redis_redirections);
    counter(out, "md_redis_ask_total", "Redis Cluster ASK replies followed (migrating slots).",
            f.redis_asks);
    counter(out, "md_push_sent_total", "Bar updates handed to push clients.", f.push_sent);
    counter(out, "md_push_conflated_total", "Bar updates replaced by a newer one unsent.",
            f.push_conflated);
    gauge(out, "md_ws_clients", "WebSocket clients.", static_cast<double>(f.ws_clients.load()));
    gauge(out, "md_sse_clients", "SSE clients.", static_cast<double>(f.sse_clients.load()));
    gauge(out, "md_http_connections", "Open connections.",
          static_cast<double>(f.connections.load()));
    counter(out, "md_http_connections_refused_total", "Connections over --max-connections.",
            f.connections_refused);
    gauge(out, "md_push_clients", "WebSocket and SSE clients (--max-push).",
          static_cast<double>(f.push_clients.load()));
    counter(out, "md_push_refused_total", "Push subscriptions over --max-push (503).",
            f.push_refused);
    counter(out, "md_push_write_timeouts_total",
            "Push clients closed: a write pending over --push-write-timeout.",
            f.push_write_timeouts);
    counter(out, "md_http_forbidden_origin_total", "/ws and /sse refused for their Origin.",
            f.forbidden_origin);
    counter(out, "md_http_forbidden_host_total", "Requests refused for their Host (421).",
            f.forbidden_host);
    out +=
        "# HELP md_feed_state The feed's state (1 for the current one).\n"
        "# TYPE md_feed_state gauge\n";
    for (std::size_t i = 0; i < kFeedStateNames.size(); ++i) {
        out += fmt::format("md_feed_state{{state=\"{}\"}} {}\n", kFeedStateNames.at(i),
                           f.state.load() == static_cast<int>(i) ? 1 : 0);
    }
    gauge(out, "md_feed_last_record_age_seconds",
          "Seconds since the last stream record (-1: none yet).", last_record_age_s(s));
    counter(out, "md_feed_state_changes_total", "Feed state changes (pushed to clients).",
            f.state_changes);
    counter(out, "md_push_heartbeats_total", "Heartbeats pushed (to all clients, each round).",
            f.heartbeats);
    counter(out, "md_fill_started_total", "Missed intervals to fill from Redis.", f.fills_started);
    counter(out, "md_fill_done_total", "Missed intervals filled from Redis (complete).",
            f.fills_done);
    counter(out, "md_fill_given_up_total", "Missed intervals left flagged after --fill-timeout.",
            f.fills_given_up);
    counter(out, "md_fill_bars_total", "Bars taken from Redis to fill missed intervals.",
            f.bars_filled);
    gauge(out, "md_fill_waiting", "Missed intervals not yet filled (state catching_up).",
          static_cast<double>(f.fills_waiting.load()));
    gauge(out, "md_fill_unresolved_series", "Series still flagged in intervals being filled.",
          static_cast<double>(f.fill_unresolved.load()));
    counter(out, "md_http_answer_too_large_total", "/v2 answers over --max-answer-kib (400).",
            f.answers_too_large);
}

}  // namespace

std::string metrics_text(const Shared& s) {
    std::string out;
    out.reserve(4096);
    std::array<std::uint64_t, 6> by_class{};
    std::array<std::uint64_t, kLatencyBounds.size() + 1> lat{};
    std::uint64_t sum_ns = 0;
    std::uint64_t not_modified = 0;
    for (const auto& l : s.loops) {
        for (std::size_t i = 0; i < by_class.size(); ++i) {
            by_class.at(i) += l->by_class.at(i).load(std::memory_order_relaxed);
        }
        for (std::size_t i = 0; i < lat.size(); ++i) {
            lat.at(i) += l->latency.at(i).load(std::memory_order_relaxed);
        }
        sum_ns += l->latency_sum_ns.load(std::memory_order_relaxed);
        not_modified += l->not_modified.load(std::memory_order_relaxed);
    }
    out +=
        "# HELP md_http_requests_total HTTP requests answered, by status class.\n"
        "# TYPE md_http_requests_total counter\n";
    for (std::size_t i = 1; i < by_class.size(); ++i) {
        out += fmt::format("md_http_requests_total{{code=\"{}xx\"}} {}\n", i, by_class.at(i));
    }
    counter(out, "md_http_not_modified_total", "Answers 304 to If-None-Match.", not_modified);
    std::uint64_t cache_bytes = 0;
    std::uint64_t cache_entries = 0;
    for (const auto& l : s.loops) {
        cache_bytes += l->cache_bytes.load(std::memory_order_relaxed);
        cache_entries += l->cache_entries.load(std::memory_order_relaxed);
    }
    gauge(out, "md_http_cache_bytes", "Bytes of cached answers (all loops; --cache-mib each).",
          static_cast<double>(cache_bytes));
    gauge(out, "md_http_cache_entries", "Cached answers (all loops).",
          static_cast<double>(cache_entries));
    histogram(out, "md_http_request_duration_seconds",
              "Time from a request read to its answer written.", lat, kLatencyBounds,
              static_cast<double>(sum_ns) * 1e-9);
    feed_metrics(out, s);
    other_metrics(out, s);
    return out;
}

double last_record_age_s(const Shared& s) {
    const std::int64_t at = s.feed.last_record_ns.load(std::memory_order_relaxed);
    if (at == 0) {
        return -1;
    }
    const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
    return static_cast<double>(now - at) * 1e-9;
}

namespace {

const char* state_name(const Shared& s) {
    return kFeedStateNames.at(static_cast<std::size_t>(s.feed.state.load()));
}

using Json = nlohmann::ordered_json;

/// `x` rounded to a resolution of 1 / `scale` (the JSON shows what a person reads).
double rounded(double x, double scale) {
    return std::round(x * scale) / scale;
}

/// The last record's age in seconds, ms resolution; null before the first.
Json age_json(double age) {
    return age < 0 ? Json(nullptr) : Json(rounded(age, 1e3));
}

}  // namespace

std::string state_message(const Shared& s, const char* type) {
    const Json doc = {{"type", type},
                      {"state", state_name(s)},
                      {"age_s", age_json(last_record_age_s(s))},
                      {"last_channel_seq", s.feed.last_channel_seq.load()}};
    return doc.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string health_text(const Shared& s) {
    const FeedMetrics& f = s.feed;
    const Loaded& l = s.loaded;
    const double uptime =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - s.started).count();
    const Json doc = {{"status", state_name(s)},
                      {"last_record_age_s", age_json(last_record_age_s(s))},
                      {"stale_after_s", s.cfg.stale_after_s},
                      {"ticks", f.ticks.load()},
                      {"last_channel_seq", f.last_channel_seq.load()},
                      {"codes", s.bars.codes().size()},
                      {"gaps", f.gaps.load()},
                      {"loss_events", f.loss_events.load()},
                      {"bars_loaded", f.bars_loaded.load()},
                      {"loaded",
                       {{"from", l.from},
                        {"bars", l.bars},
                        {"codes", l.codes},
                        {"last_channel_seq", l.last_channel_seq},
                        {"stream_next", l.stream_next}}},
                      {"fill",
                       {{"waiting", f.fills_waiting.load()},
                        {"unresolved_series", f.fill_unresolved.load()},
                        {"done", f.fills_done.load()},
                        {"given_up", f.fills_given_up.load()}}},
                      {"push_clients", f.push_clients.load()},
                      {"max_bars", s.cfg.max_bars},
                      {"pid", ::getpid()},
                      {"uptime_s", rounded(uptime, 10)}};
    return doc.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace md::gw

namespace md::gw {

std::pair<int, std::string> health(const Shared& s) {
    const bool live = s.feed.state.load() == static_cast<int>(FeedState::live);
    return {live ? 200 : 503, health_text(s)};
}

}  // namespace md::gw
