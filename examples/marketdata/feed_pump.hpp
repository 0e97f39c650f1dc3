// SPDX-License-Identifier: Apache-2.0
// The prizma Context inside an Asio loop: the Context's wakeup_fd watched by a
// posix::stream_descriptor, its next_deadline by a steady_timer; every wake-up polls the
// Context, takes the feed's records from the lossless stream (a StreamSubscriber merging the
// A/B copies, or a LateJoin replaying what a recorder holds first), folds the ticks into bars,
// pushes the touched bars and (every 200 ms) writes the changed bars to LMDB and hands them
// to the Redis writer's thread. A wake-up does a bounded slice of work (256 stream events,
// 2 ms), pushes, then lets the loop run its other handlers before the next slice: however
// fast records come, updates go out.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <prizma/prizma.hpp>

#include "gateway.hpp"
#include "md/redis_store.hpp"
#include "redis_writer.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

namespace md::gw {

class FeedPump {
public:
    /// Loads the stores and subscribes to cfg.feeds (through the recorder, cfg.recorder, when
    /// given); nullptr and `error` on failure.
    static std::unique_ptr<FeedPump> create(boost::asio::io_context& ioc,
                                            Shared& shared,
                                            std::string& error);
    FeedPump(const FeedPump&) = delete;
    FeedPump& operator=(const FeedPump&) = delete;
    FeedPump(FeedPump&&) = delete;
    FeedPump& operator=(FeedPump&&) = delete;
    ~FeedPump();
    /// Starts watching (call on the loop's thread).
    void start();
    /// Writes what is not stored yet and stops watching.
    void stop();

private:
    FeedPump(boost::asio::io_context& ioc, Shared& shared, prizma::Context ctx);
    void run_once();
    void arm(bool more);
    void schedule_flush();
    bool subscribe(std::string& error);
    bool start_live(std::string& error);
    bool start_late_join(std::string& error);
    bool next_event(prizma::StreamEvent& e);
    void on_event(const prizma::StreamEvent& e);
    void on_message(std::span<const std::byte> payload);
    void on_loss(std::uint64_t count);
    void copy_stream_counters();
    void on_ticks(const MsgHeader& h);
    void on_tick(const Tick& t);
    void note_bar(Code c, Period p, const Bar& b);
    void flush_store();
    bool open_stores(std::string& error);
    void flush_push();
    void check_lost_tail();
    /// The feed's state from the last record's age (and a replay or fill in progress); a
    /// change is pushed to every client.
    void update_state();
    /// Fills the intervals this gateway missed (a channel-sequence jump: it joined late or
    /// was down) from the bars other gateways wrote to Redis ("Consistency across gateways").
    void run_fills();
    struct Fill {
        GapInterval gap;
        std::chrono::steady_clock::time_point seen;
        std::chrono::steady_clock::time_point next;  // the next pass
        bool first_done = false;
        std::vector<std::pair<Code, Period>> todo;  // after a pass: what is still flagged
    };
    /// One pass; true when nothing of the gap is flagged any more.
    bool fill_once(Fill& f);
    void schedule_heartbeat();

    struct DirtyKey {
        std::uint64_t code_period;
        std::uint64_t time;
        bool operator==(const DirtyKey&) const = default;
    };
    struct DirtyHash {
        std::size_t operator()(const DirtyKey& k) const noexcept {
            return std::hash<std::uint64_t>{}(k.code_period * 0x9e3779b97f4a7c15ULL ^ k.time);
        }
    };

    boost::asio::io_context& ioc_;
    Shared& s_;
    prizma::Context ctx_;
    std::deque<prizma::Subscriber> subs_;  // one per feed copy; stable addresses
    std::optional<prizma::StreamSubscriber> stream_;
    std::optional<prizma::LateJoin> join_;
    std::optional<StreamPosition> position_;  // the next record to apply (persisted)
    std::uint64_t divergences_printed_ = 0;
    std::unique_ptr<LmdbStore> store_;
    std::unique_ptr<RedisStore> redis_;
    std::mutex redis_mutex_;               // redis_ is used by writer_'s thread and the fills
    std::unique_ptr<RedisWriter> writer_;  // after redis_: stopped before it goes
    boost::asio::posix::stream_descriptor fd_;
    boost::asio::steady_timer deadline_;
    boost::asio::steady_timer flush_timer_;
    boost::asio::steady_timer heartbeat_timer_;
    bool record_seen_ = false;  // in this slice
    std::vector<Fill> fills_;
    std::uint64_t generation_ = 0;
    bool stopped_ = false;
    std::map<std::uint64_t, FeedPosition> feeds_;
    std::uint64_t current_feed_ = 0;
    bool loss_pending_ = false;
    std::chrono::steady_clock::time_point loss_at_{};
    std::vector<Tick> ticks_;
    std::vector<Instrument> instruments_;
    std::unordered_map<DirtyKey, Bar, DirtyHash> dirty_;
    StoreBatch batch_;
    struct PushItem {
        Bar bar;
        std::int64_t sent_ns = 0;
    };
    std::unordered_map<std::uint64_t, PushItem> to_push_;
    std::int64_t msg_sent_ns_ = 0;
    BarStore::BarSink sink_;
};

}  // namespace md::gw
