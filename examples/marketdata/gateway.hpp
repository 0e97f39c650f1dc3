// SPDX-License-Identifier: Apache-2.0
// md-gateway's parts: the shared state (bars, metrics, push subscriptions), the feed pump (the
// prizma Context on the first event loop) and the HTTP server (one io_context per loop).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <prizma/options.hpp>
#include <prizma/replay.hpp>

#include "md/bars.hpp"
#include "md/lmdb_store.hpp"

namespace md::gw {

struct Config {
    std::vector<std::string> feeds;  // copies of the feed's stream (A, B, ...)
    std::uint32_t stream_id = 1;
    /// A feed whose history is within this many packets when the gateway joins is taken from
    /// its start (ChannelOptions::max_recover_sqns); 1: from the first packet heard.
    std::uint32_t join_history = prizma::ChannelOptions{}.max_recover_sqns;
    std::string recorder;                      // HOST:PORT of md-recorder's replay service
    prizma::ReplaySecurity recorder_security;  // how it is reached (keys, certificates)

    std::string http = "127.0.0.1:8080";
    std::string store_dir;
    std::string redis;
    std::string web_dir;
    unsigned threads = 0;
    std::size_t max_bars = 5000;
    double idle_timeout_s = 60;
    std::size_t max_connections = 20'000;
    std::size_t store_mib = 4096;
    bool compat_reference = false;  // --compat reference: answers and Redis layout as the seed's

    // Push clients and browsers (docs/MARKETDATA.md, "Limits").
    std::size_t max_push = 1000;             // WebSocket + SSE sessions (own cap)
    std::vector<std::string> allow_origins;  // Origins allowed on /ws, /sse besides same-origin
    std::vector<std::string> allow_hosts;    // Host names allowed besides IP literals, localhost
    double push_write_timeout_s = 10;        // a push write pending longer closes the client
    double heartbeat_s = 5;                  // push heartbeats (feed state)
    std::size_t cache_mib = 64;              // answer cache per loop
    std::size_t max_answer_kib = 8192;       // one /v2 answer
    std::string redis_user;                  // Redis ACL user (AUTH user password)
    std::string redis_password;              // from --redis-password-file or MD_REDIS_PASSWORD

    // Feed liveness (docs/MARKETDATA.md, "Feed liveness").
    double stale_after_s = 5;    // no record for this long: stale (/healthz 503)
    double down_after_s = 30;    // no record for this long (or none yet): down
    double fill_timeout_s = 60;  // a missed interval not filled from Redis by then stays flagged
};

/// What the gateway knows of its feed (FeedPump::update_state()).
enum class FeedState : int {
    down = 0,         // no record yet, or none for down_after
    live = 1,         // a record within stale_after
    stale = 2,        // none for stale_after
    catching_up = 3,  // replaying what it missed (recorder) or filling it (Redis)
};
inline constexpr std::array<const char*, 4> kFeedStateNames{"down", "live", "stale", "catching_up"};

/// Latency histogram bounds in seconds (Prometheus `le`), +Inf implied.
inline constexpr std::array<double, 10> kLatencyBounds{0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                                       0.005,  0.01,    0.025,  0.1,   1.0};
/// Feed lag bounds in seconds: a loaded or catching-up gateway lags by seconds, a recorder
/// replay by tens of them; +Inf implied.
inline constexpr std::array<double, 17> kLagBounds{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                   0.01,   0.025,   0.1,    0.25,  0.5,    1.0,
                                                   2.5,    5.0,     10.0,   30.0,  60.0};

/// Request counters of one HTTP loop (written by that loop only).
struct alignas(64) LoopMetrics {
    std::array<std::atomic<std::uint64_t>, 6> by_class{};  // 1xx..5xx by first digit
    std::array<std::atomic<std::uint64_t>, kLatencyBounds.size() + 1> latency{};
    std::atomic<std::uint64_t> latency_sum_ns{0};
    std::atomic<std::uint64_t> not_modified{0};
    std::atomic<std::uint64_t> cache_bytes{0};  // the loop's answer cache (gauges)
    std::atomic<std::uint64_t> cache_entries{0};
};

/// Feed counters (written by the feed thread).
struct FeedMetrics {
    std::atomic<std::uint64_t> messages{0};
    std::atomic<std::uint64_t> malformed{0};
    std::atomic<std::uint64_t> ticks{0};
    std::atomic<std::uint64_t> duplicate_ticks{0};
    std::atomic<std::uint64_t> out_of_session{0};
    std::atomic<std::uint64_t> loss_events{0};
    std::atomic<std::uint64_t> lost_records{0};
    // The lossless stream (A/B arbitration, recorder backfill).
    std::atomic<std::uint64_t> records{0};
    std::atomic<std::uint64_t> stream_duplicates{0};  // copies of records already applied
    std::atomic<std::uint64_t> divergences{0};        // copies that differ from the one applied
    std::atomic<std::uint64_t> stream_resets{0};      // new epochs (a new feed session)
    std::atomic<std::uint64_t> foreign{0};            // not records of this stream
    std::atomic<std::uint64_t> replayed{0};           // records fetched from the recorder
    std::atomic<std::uint64_t> recorder_errors{0};    // the recorder failed: live only
    std::atomic<std::uint64_t> gaps{0};
    std::atomic<std::uint64_t> last_channel_seq{0};
    std::atomic<std::int64_t> lag_ns{0};  // last message: receive time - send time
    std::array<std::atomic<std::uint64_t>, kLagBounds.size() + 1> lag{};
    std::atomic<std::uint64_t> lag_sum_ns{0};  // of the lags counted in `lag` (negative: 0)
    std::atomic<std::uint64_t> store_commits{0};
    std::atomic<std::uint64_t> store_errors{0};
    std::atomic<std::uint64_t> redis_writes{0};
    std::atomic<std::uint64_t> redis_errors{0};
    std::atomic<std::uint64_t> redis_redirections{0};
    std::atomic<std::uint64_t> redis_asks{0};
    std::atomic<long long> bars_loaded{0};
    std::atomic<std::uint64_t> push_sent{0};
    std::atomic<std::uint64_t> push_conflated{0};
    std::atomic<std::uint64_t> ws_clients{0};
    std::atomic<std::uint64_t> sse_clients{0};
    std::atomic<std::uint64_t> connections{0};
    std::atomic<std::uint64_t> connections_refused{0};
    std::atomic<std::uint64_t> push_clients{0};         // ws + sse, against cfg.max_push
    std::atomic<std::uint64_t> push_refused{0};         // over cfg.max_push
    std::atomic<std::uint64_t> push_write_timeouts{0};  // closed: a write stuck too long
    std::atomic<std::uint64_t> forbidden_origin{0};     // /ws, /sse from another Origin
    std::atomic<std::uint64_t> forbidden_host{0};       // a Host header not allowed
    std::atomic<std::uint64_t> answers_too_large{0};    // /v2 over cfg.max_answer_kib
    std::atomic<int> state{static_cast<int>(FeedState::down)};
    std::atomic<std::int64_t> last_record_ns{0};  // steady clock; 0: none yet
    std::atomic<std::uint64_t> state_changes{0};
    std::atomic<std::uint64_t> heartbeats{0};
    // Fills of missed intervals from Redis (FeedPump::run_fills).
    std::atomic<std::uint64_t> fills_started{0};
    std::atomic<std::uint64_t> fills_done{0};
    std::atomic<std::uint64_t> fills_given_up{0};
    std::atomic<std::uint64_t> bars_filled{0};
    std::atomic<std::uint64_t> fills_waiting{0};    // first pass not yet made (catching up)
    std::atomic<std::uint64_t> fill_unresolved{0};  // series still flagged after a pass
};

/// What the stores held at start (set before the loops run, read-only after).
struct Loaded {
    long long bars = 0;
    std::size_t codes = 0;
    std::uint64_t last_channel_seq = 0;  // the feed position the stores had
    std::uint64_t stream_next = 0;       // the next stream record (LMDB)
    std::string from;                    // "lmdb", "redis", "lmdb+redis" or "none"
};

/// Index of the histogram bucket of `seconds` (kLatencyBounds).
std::size_t latency_bucket(double seconds) noexcept;
/// Index of the histogram bucket of `seconds` (kLagBounds).
std::size_t lag_bucket(double seconds) noexcept;

/// A live-push client (WebSocket or SSE). push() is called from the feed thread and must not
/// block: it keeps the latest message only (conflation) and lets the client's loop write it.
class PushClient {
public:
    PushClient() = default;
    PushClient(const PushClient&) = delete;
    PushClient& operator=(const PushClient&) = delete;
    PushClient(PushClient&&) = delete;
    PushClient& operator=(PushClient&&) = delete;
    virtual ~PushClient() = default;
    virtual void push(std::shared_ptr<const std::string> msg) = 0;
    /// A feed-state message or heartbeat: conflated in a slot of its own, sent before the
    /// next bar update (so that a client learns the feed is stale before more bars come).
    virtual void control(std::shared_ptr<const std::string> msg) = 0;
};

/// Subscriptions per (code, period).
class PushHub {
public:
    static std::uint64_t key(Code c, Period p) noexcept {
        return (std::uint64_t{c} << 3U) | static_cast<std::uint64_t>(p);
    }
    void add(std::uint64_t k, const std::shared_ptr<PushClient>& c);
    void remove(std::uint64_t k, const PushClient* c);
    [[nodiscard]] bool any() const noexcept { return count_.load(std::memory_order_relaxed) > 0; }
    /// Sends the bar's JSON to every subscriber of (code, period); returns how many.
    /// `sent_ns`: the feed's send time of the last tick in it (CLOCK_REALTIME), passed on as
    /// "sent_ns" so that a client can measure the feed-to-client latency.
    std::size_t publish(Code c, Period p, const Bar& b, std::int64_t sent_ns);
    /// Sends a control message (feed state, heartbeat) to every client; returns how many.
    std::size_t broadcast(const std::string& msg);

private:
    std::mutex mu_;
    std::unordered_map<std::uint64_t, std::vector<std::weak_ptr<PushClient>>> subs_;
    std::atomic<std::size_t> count_{0};
};

/// Everything the loops share.
struct Shared {
    Config cfg;
    BarStore bars;
    PushHub hub;
    FeedMetrics feed;
    std::vector<std::unique_ptr<LoopMetrics>> loops;
    Loaded loaded;
    std::string web_js;  // lightweight-charts, read from --web DIR at start (empty: none)
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

/// The Prometheus text of /metrics.
std::string metrics_text(const Shared& s);
/// The JSON of /healthz.
std::string health_text(const Shared& s);
/// /healthz: the HTTP status (200, or 503 when the feed is not live) and the JSON.
std::pair<int, std::string> health(const Shared& s);
/// Seconds since the last stream record (negative: none yet).
double last_record_age_s(const Shared& s);
/// A push control message: {"type":"state"|"heartbeat","state":"live","age_s":0.12,...}.
std::string state_message(const Shared& s, const char* type);

}  // namespace md::gw
