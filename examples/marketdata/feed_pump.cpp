// SPDX-License-Identifier: Apache-2.0
#include "feed_pump.hpp"

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <utility>

#include <fmt/core.h>

#include <boost/asio/post.hpp>

namespace md::gw {

namespace asio = boost::asio;

namespace {

std::int64_t realtime_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// One run_once() is a bounded slice of work: at most kMaxPollRounds polls, kMaxEventsPerRun
// stream events and kMaxRunTime. After it the touched bars are pushed and the loop's other
// handlers run (HTTP, and the writes of push clients on this loop). Unbounded, a gateway
// slower than the feed (a loaded host, the sanitizers) found new records in every round and
// stayed in one run_once() for as long as the feed lasted: a whole day pushed as one update.
constexpr int kMaxPollRounds = 64;
constexpr std::size_t kMaxEventsPerRun = 256;
constexpr auto kMaxRunTime = std::chrono::milliseconds(2);
constexpr auto kFlushEvery = std::chrono::milliseconds(200);
// A fill's first pass waits this long after the jump is seen: the gateways that heard the
// missed ticks write their bars every kFlushEvery. Later passes (bars still flagged: the open
// ones, whose copy in Redis is older than ours) come at most this often.
constexpr auto kFillSettle = std::chrono::seconds(1);
constexpr std::uint64_t kInstantsPerDay = 100'000'000ULL;

}  // namespace

std::unique_ptr<FeedPump> FeedPump::create(asio::io_context& ioc,
                                           Shared& shared,
                                           std::string& error) {
    auto ctx = prizma::Context::create();
    if (!ctx) {
        error = ctx.error().message();
        return nullptr;
    }
    std::unique_ptr<FeedPump> p(new FeedPump(ioc, shared, std::move(*ctx)));
    if (!p->open_stores(error) || !p->subscribe(error)) {
        return nullptr;
    }
    if (p->ctx_.wakeup_fd() < 0) {
        error = "the prizma Context has no wakeup fd";
        return nullptr;
    }
    p->fd_.assign(p->ctx_.wakeup_fd());
    return p;
}

bool FeedPump::subscribe(std::string& error) {
    for (const std::string& uri : s_.cfg.feeds) {
        prizma::ChannelOptions opts;
        opts.max_recover_sqns = s_.cfg.join_history;
        auto sub = ctx_.add_subscriber(uri, opts);
        if (!sub) {
            error = uri + ": " + sub.error().message();
            return false;
        }
        subs_.push_back(*sub);
    }
    return s_.cfg.recorder.empty() ? start_live(error) : start_late_join(error);
}

/// Every copy of the stream, merged: each record once, in order, from whichever copy brings
/// it first. Starts at the first record heard (what was published before is a gap, marked).
bool FeedPump::start_live(std::string& error) {
    prizma::StreamOptions so;
    so.stream_id = s_.cfg.stream_id;
    auto st = prizma::StreamSubscriber::create(so);
    if (!st) {
        error = "stream: " + st.error().message();
        return false;
    }
    stream_.emplace(std::move(*st));
    for (prizma::Subscriber& sub : subs_) {
        if (auto r = stream_->add(sub); !r) {
            error = "stream: " + r.error().message();
            return false;
        }
    }
    return true;
}

/// The recorder's replay from the next record this gateway has not applied (0 without a
/// store: the whole journal), then live once the replay has caught up with it.
bool FeedPump::start_late_join(std::string& error) {
    const std::string& hp = s_.cfg.recorder;
    const std::size_t colon = hp.rfind(':');
    unsigned port = 0;
    if (colon == std::string::npos
        || std::from_chars(hp.data() + colon + 1, hp.data() + hp.size(), port).ptr
               != hp.data() + hp.size()
        || port == 0 || port > 65535) {
        error = "--recorder " + hp + ": HOST:PORT";
        return false;
    }
    prizma::LateJoinOptions lo;
    lo.stream.stream_id = s_.cfg.stream_id;
    lo.replay_address = s_.cfg.recorder.substr(0, colon);
    lo.replay_port = static_cast<std::uint16_t>(port);
    lo.client.security = s_.cfg.recorder_security;
    lo.from = position_ ? position_->next : 0;
    auto lj = prizma::LateJoin::create(lo);
    if (!lj) {  // live alone; what the recorder would have brought is a gap, marked
        ++s_.feed.recorder_errors;
        fmt::print(stderr, "md-gateway: recorder {}: {}; going on with the live feed\n", hp,
                   lj.error().message());
        return start_live(error);
    }
    join_.emplace(std::move(*lj));
    for (prizma::Subscriber& sub : subs_) {
        if (auto r = join_->add(sub); !r) {
            error = "stream: " + r.error().message();
            return false;
        }
    }
    fmt::print("md-gateway: fetching records from {} on from the recorder {}\n", lo.from, hp);
    return true;
}

bool FeedPump::open_stores(std::string& error) {
    long long loaded = 0;
    if (!s_.cfg.store_dir.empty()) {
        store_ = LmdbStore::open(s_.cfg.store_dir, s_.cfg.store_mib, error);
        if (!store_) {
            return false;
        }
        const long long n = store_->load(s_.bars, feeds_, position_, error);
        if (n < 0) {
            return false;
        }
        loaded += n;
    }
    if (!s_.cfg.redis.empty()) {
        // Loaded after LMDB: the shared history wins over this host's copy.
        // MD_REDIS_LAZY_SLOTS=1: learn a cluster's slots from MOVED replies only (tests use
        // it to exercise the redirections).
        const char* lazy = std::getenv("MD_REDIS_LAZY_SLOTS");  // NOLINT(concurrency-mt-unsafe)
        redis_ = RedisStore::connect(s_.cfg.redis, lazy != nullptr && *lazy == '1',
                                     RedisAuth{s_.cfg.redis_user, s_.cfg.redis_password}, error);
        if (!redis_) {
            return false;
        }
        redis_->set_reference_layout(s_.cfg.compat_reference);
        const long long n = redis_->load(s_.bars, feeds_, error);
        if (n < 0) {
            return false;
        }
        loaded += n;
        s_.feed.redis_redirections = redis_->redirections();
        s_.feed.redis_asks = redis_->asks();
        writer_ = std::make_unique<RedisWriter>(*redis_, redis_mutex_, s_.feed);
    }
    s_.feed.bars_loaded = loaded;
    s_.feed.gaps = s_.bars.gaps().size();
    // What /healthz reports after a restart: the stores' bars, codes and feed position.
    Loaded& l = s_.loaded;
    l.bars = loaded;
    l.codes = s_.bars.codes().size();
    for (const auto& [id, f] : feeds_) {
        l.last_channel_seq = std::max(l.last_channel_seq, f.last_seq);
    }
    l.stream_next = position_ ? position_->next : 0;
    l.from = store_ && redis_ ? "lmdb+redis" : store_ ? "lmdb" : redis_ ? "redis" : "none";
    s_.feed.last_channel_seq = l.last_channel_seq;
    return true;
}

FeedPump::FeedPump(asio::io_context& ioc, Shared& shared, prizma::Context ctx)
    : ioc_(ioc),
      s_(shared),
      ctx_(std::move(ctx)),
      fd_(ioc),
      deadline_(ioc),
      flush_timer_(ioc),
      heartbeat_timer_(ioc),
      sink_([this](Code c, Period p, const Bar& b) { note_bar(c, p, b); }) {}

FeedPump::~FeedPump() {
    if (fd_.is_open()) {
        (void)fd_.release();  // the Context owns the fd
    }
}

void FeedPump::start() {
    ctx_.adopt_owner_thread();
    update_state();
    run_once();
    schedule_flush();
    schedule_heartbeat();
}

void FeedPump::schedule_heartbeat() {
    heartbeat_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(s_.cfg.heartbeat_s)));
    heartbeat_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec && !stopped_) {
            update_state();
            if (s_.hub.any()) {
                s_.hub.broadcast(state_message(s_, "heartbeat"));
                ++s_.feed.heartbeats;
            }
            schedule_heartbeat();
        }
    });
}

void FeedPump::update_state() {
    const double age = last_record_age_s(s_);
    FeedState st = FeedState::live;
    if ((join_ && !join_->counters().merged) || s_.feed.fills_waiting.load() > 0) {
        st = FeedState::catching_up;
    } else if (age < 0 || age > s_.cfg.down_after_s) {
        st = FeedState::down;
    } else if (age > s_.cfg.stale_after_s) {
        st = FeedState::stale;
    }
    const int before = s_.feed.state.exchange(static_cast<int>(st));
    if (before == static_cast<int>(st)) {
        return;
    }
    ++s_.feed.state_changes;
    fmt::print(stderr, "md-gateway: feed {} -> {} (last record {:.1f} s ago)\n",
               kFeedStateNames.at(static_cast<std::size_t>(before)),
               kFeedStateNames.at(static_cast<std::size_t>(st)), age);
    s_.hub.broadcast(state_message(s_, "state"));
}

void FeedPump::schedule_flush() {
    flush_timer_.expires_after(kFlushEvery);
    flush_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec && !stopped_) {
            copy_stream_counters();
            check_lost_tail();
            flush_store();
            run_fills();
            update_state();
            schedule_flush();
        }
    });
}

void FeedPump::stop() {
    stopped_ = true;
    ++generation_;
    deadline_.cancel();
    flush_timer_.cancel();
    heartbeat_timer_.cancel();
    fd_.cancel();
    flush_store();
    if (writer_) {
        writer_->stop();  // what was handed over is written before the gateway exits
    }
}

void FeedPump::run_once() {
    if (stopped_) {
        return;
    }
    const auto until = std::chrono::steady_clock::now() + kMaxRunTime;
    std::size_t events = 0;
    bool spent = false;  // the budget stopped it: events may wait in the stream (no fd shows)
    for (int round = 0; round < kMaxPollRounds; ++round) {
        const int work = ctx_.poll();
        std::size_t n = 0;
        prizma::StreamEvent e;
        for (;;) {
            spent = events >= kMaxEventsPerRun || std::chrono::steady_clock::now() >= until;
            if (spent || !next_event(e)) {
                break;
            }
            ++n;
            ++events;
            on_event(e);
        }
        if (spent || (work == 0 && n == 0)) {
            break;
        }
    }
    if (std::exchange(record_seen_, false)) {
        s_.feed.last_record_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::steady_clock::now().time_since_epoch())
                                         .count(),
                                     std::memory_order_relaxed);
        if (s_.feed.state.load(std::memory_order_relaxed) != static_cast<int>(FeedState::live)) {
            update_state();  // recovered: say so at once, before the bars go out
        }
    }
    flush_push();
    if (join_) {
        copy_stream_counters();
    }
    arm(spent);
}

/// `more`: the last slice left work; go on after the loop's other handlers.
void FeedPump::arm(bool more) {
    const std::uint64_t gen = ++generation_;
    if (more || !ctx_.prepare_wait()) {
        asio::post(ioc_, [this, gen] {
            if (gen == generation_) {
                run_once();
            }
        });
        return;
    }
    fd_.async_wait(asio::posix::stream_descriptor::wait_read,
                   [this, gen](const boost::system::error_code& ec) {
                       if (!ec && gen == generation_) {
                           deadline_.cancel();
                           run_once();
                       }
                   });
    // The recorder's replay arrives on its own TCP socket, which the Context does not watch:
    // while it catches up, look again soon.
    const bool replaying = join_ && !join_->counters().merged;
    const auto cap = std::chrono::steady_clock::now()
                     + (replaying ? std::chrono::milliseconds(1) : std::chrono::milliseconds(100));
    deadline_.expires_at(std::min(ctx_.next_deadline(), cap));
    deadline_.async_wait([this, gen](const boost::system::error_code& ec) {
        if (!ec && gen == generation_) {
            fd_.cancel();
            run_once();
        }
    });
}

bool FeedPump::next_event(prizma::StreamEvent& e) {
    if (!join_) {
        return stream_->next(e);
    }
    const auto r = join_->next(e);
    if (r) {
        return *r;
    }
    // The recorder refused the range or stayed away: live alone from here; what it would have
    // brought is a gap, marked like any other.
    ++s_.feed.recorder_errors;
    fmt::print(stderr, "md-gateway: recorder {}: {} ({}); going on with the live feed\n",
               s_.cfg.recorder, r.error().message(), join_->error_text());
    s_.feed.replayed = join_->counters().replayed;
    join_.reset();
    std::string error;
    if (!start_live(error)) {
        fmt::print(stderr, "md-gateway: {}\n", error);
    }
    return false;
}

void FeedPump::on_event(const prizma::StreamEvent& e) {
    switch (e.kind) {
        case prizma::StreamEventKind::record:
            ++s_.feed.records;
            record_seen_ = true;
            position_ = StreamPosition{e.epoch, 0, e.sequence + 1};
            batch_.stream = position_;
            on_message(e.payload);
            return;
        case prizma::StreamEventKind::loss:
            position_ = StreamPosition{e.epoch, 0, e.sequence + e.count};
            batch_.stream = position_;
            on_loss(e.count);
            return;
        case prizma::StreamEventKind::reset:
            ++s_.feed.stream_resets;
            position_ = StreamPosition{e.epoch, 0, e.sequence};
            batch_.stream = position_;
            return;
        case prizma::StreamEventKind::stall:
            // Lost data and nothing after it: the bars from the last tick on are marked as a
            // tail loss (check_lost_tail), unless a later record shows the extent first.
            ++s_.feed.loss_events;
            loss_pending_ = true;
            loss_at_ = std::chrono::steady_clock::now();
            fmt::print(stderr, "md-gateway: feed stalled after a loss at record {}\n", e.sequence);
            return;
        case prizma::StreamEventKind::dispute:  // Arbitration::quorum only: not used here
        case prizma::StreamEventKind::divergence:
            if (++s_.feed.divergences <= 3) {
                fmt::print(stderr,
                           "md-gateway: record {} of epoch {}: a copy differs from the one "
                           "applied (divergent feeds)\n",
                           e.sequence, e.epoch);
            }
            return;
    }
}

void FeedPump::on_loss(std::uint64_t count) {
    ++s_.feed.loss_events;
    s_.feed.lost_records += count;
    loss_pending_ = true;
    loss_at_ = std::chrono::steady_clock::now();
    fmt::print(stderr, "md-gateway: feed loss: {} records cannot be repaired\n", count);
}

void FeedPump::copy_stream_counters() {
    if (stream_) {
        const prizma::StreamCounters& c = stream_->counters();
        s_.feed.stream_duplicates = c.duplicates;
        s_.feed.foreign = c.foreign + c.bad_checksum + c.stale_epoch;
    }
    if (join_) {
        s_.feed.replayed = join_->counters().replayed;
    }
}

void FeedPump::on_message(std::span<const std::byte> payload) {
    ++s_.feed.messages;
    MsgHeader h;
    ticks_.clear();
    instruments_.clear();
    if (!decode(payload, h, ticks_, instruments_)) {
        ++s_.feed.malformed;
        return;
    }
    msg_sent_ns_ = h.send_ns;
    if (h.send_ns != 0) {  // 0: a deterministic (A/B) feed carries no send time
        const std::int64_t lag = realtime_ns() - h.send_ns;
        s_.feed.lag_ns.store(lag, std::memory_order_relaxed);
        // A sender's clock ahead of ours gives a negative lag: counted as 0.
        const std::int64_t counted = std::max<std::int64_t>(lag, 0);
        ++s_.feed.lag.at(lag_bucket(static_cast<double>(counted) * 1e-9));
        s_.feed.lag_sum_ns.fetch_add(static_cast<std::uint64_t>(counted),
                                     std::memory_order_relaxed);
    }
    for (const Instrument& in : instruments_) {
        s_.bars.apply(in);
        batch_.instruments.push_back(in);
    }
    current_feed_ = h.feed_id;
    on_ticks(h);
}

void FeedPump::on_ticks(const MsgHeader& h) {
    FeedPosition& f = feeds_[h.feed_id];
    for (const Tick& t : ticks_) {
        if (t.channel_seq <= f.last_seq) {
            ++s_.feed.duplicate_ticks;
            continue;
        }
        const std::uint64_t now = exchange_instant(t.date, t.time_ms);
        if (t.channel_seq != f.last_seq + 1) {
            // Ticks [last_seq + 1, channel_seq) will never come (loss, or published while
            // this gateway was down): the bars they could be in are marked.
            const std::uint64_t from =
                f.last_seq == 0 ? exchange_instant(t.date, 0) : f.last_instant;
            const GapInterval g{from, now};
            s_.bars.add_gap(g, sink_);
            batch_.gaps.push_back(g);
            ++s_.feed.gaps;
            fmt::print(stderr, "md-gateway: ticks {}..{} missing: bars from {} to {} marked\n",
                       f.last_seq + 1, t.channel_seq - 1, g.from, g.to);
            if (redis_) {
                const auto now_s = std::chrono::steady_clock::now();
                fills_.push_back(Fill{g, now_s, now_s + kFillSettle, false, {}});
                ++s_.feed.fills_started;
                s_.feed.fills_waiting = s_.feed.fills_waiting + 1;
            }
        }
        loss_pending_ = false;
        f.last_seq = t.channel_seq;
        f.last_instant = std::max(f.last_instant, now);
        on_tick(t);
    }
    batch_.feed_seq[h.feed_id] = f;
    s_.feed.last_channel_seq.store(f.last_seq, std::memory_order_relaxed);
}

void FeedPump::on_tick(const Tick& t) {
    ++s_.feed.ticks;
    if (s_.bars.apply(t, sink_) == BarStore::Applied::out_of_session) {
        ++s_.feed.out_of_session;
    }
}

void FeedPump::note_bar(Code c, Period p, const Bar& b) {
    if (store_ || redis_) {
        dirty_[DirtyKey{PushHub::key(c, p), b.time}] = b;
    }
    if (s_.hub.any()) {
        const auto [it, fresh] =
            to_push_.try_emplace(PushHub::key(c, p), PushItem{b, msg_sent_ns_});
        if (!fresh) {
            if (it->second.bar.time != b.time) {
                // The next bar opened within this slice: the closed one's last state goes out
                // first, or a client would never see how it closed.
                s_.feed.push_sent += s_.hub.publish(c, p, it->second.bar, it->second.sent_ns);
            }
            it->second = {b, msg_sent_ns_};
        }
    }
}

void FeedPump::check_lost_tail() {
    // A loss event with no tick after it (for 200 ms): what was lost may be the last ticks so
    // far, which no later sequence jump would reveal. The bars from the last tick seen to the
    // end of its day are marked now; a later tick's jump marks the rest.
    if (!loss_pending_ || std::chrono::steady_clock::now() - loss_at_ < kFlushEvery) {
        return;
    }
    loss_pending_ = false;
    const FeedPosition& f = feeds_[current_feed_];
    if (f.last_instant == 0) {
        return;
    }
    const std::uint64_t day = f.last_instant / 100'000'000ULL;
    const GapInterval g{f.last_instant,
                        exchange_instant(static_cast<std::uint32_t>(day), hm_ms(23, 59))};
    s_.bars.add_gap(g, sink_);
    batch_.gaps.push_back(g);
    ++s_.feed.gaps;
    fmt::print(stderr,
               "md-gateway: loss after channel seq {}: bars from {} to the day's end marked\n",
               f.last_seq, g.from);
}

void FeedPump::run_fills() {
    if (!redis_ || fills_.empty()) {
        return;
    }
    const auto now = std::chrono::steady_clock::now();
    const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(s_.cfg.fill_timeout_s));
    std::uint64_t unresolved = 0;
    std::uint64_t waiting = 0;
    for (auto it = fills_.begin(); it != fills_.end();) {
        Fill& f = *it;
        if (now >= f.next) {
            f.next = now + kFillSettle;
            if (fill_once(f)) {
                s_.bars.remove_gap(f.gap);
                ++s_.feed.fills_done;
                fmt::print(stderr, "md-gateway: bars from {} to {} filled from Redis\n", f.gap.from,
                           f.gap.to);
                it = fills_.erase(it);
                continue;
            }
        }
        if (now - f.seen > timeout) {
            ++s_.feed.fills_given_up;
            fmt::print(stderr,
                       "md-gateway: bars from {} to {}: {} series still incomplete after {} s "
                       "(no complete copy in Redis); they keep \"gap\":true\n",
                       f.gap.from, f.gap.to, f.todo.size(), s_.cfg.fill_timeout_s);
            it = fills_.erase(it);
            continue;
        }
        unresolved += f.todo.size();
        waiting += f.first_done ? 0 : 1;
        ++it;
    }
    s_.feed.fill_unresolved = unresolved;
    s_.feed.fills_waiting = waiting;
}

bool FeedPump::fill_once(Fill& f) {
    std::vector<std::pair<Code, Period>> pairs;
    if (f.first_done) {
        pairs = f.todo;
    } else {
        for (const Code c : s_.bars.codes()) {
            for (const Period p : kPeriods) {
                pairs.emplace_back(c, p);
            }
        }
    }
    const std::uint64_t lo = f.gap.from / kInstantsPerDay * 10'000;
    const std::uint64_t hi = f.gap.to / kInstantsPerDay * 10'000 + 2359;
    std::vector<std::vector<Bar>> got;
    std::string error;
    bool read = false;
    {
        const std::lock_guard lock(redis_mutex_);  // the writer thread's connections
        read = redis_->bars_in(pairs, lo, hi, got, error);
    }
    if (!read) {
        ++s_.feed.redis_errors;
        fmt::print(stderr, "md-gateway: filling from Redis: {}\n", error);
        return false;
    }
    for (std::size_t i = 0; i < pairs.size(); ++i) {
        const auto [c, p] = pairs[i];
        for (const Bar& b : got[i]) {
            if (overlaps(f.gap, b.time, p) && s_.bars.fill(c, p, b, sink_)) {
                ++s_.feed.bars_filled;
            }
        }
    }
    f.todo.clear();
    for (const auto& [c, p] : pairs) {
        if (s_.bars.flagged(c, p, f.gap)) {
            f.todo.emplace_back(c, p);
        }
    }
    f.first_done = true;
    return f.todo.empty();
}

void FeedPump::flush_push() {
    for (const auto& [k, item] : to_push_) {
        s_.feed.push_sent +=
            s_.hub.publish(static_cast<Code>(k >> 3U), kPeriods.at(k & 7U), item.bar, item.sent_ns);
    }
    to_push_.clear();
}

void FeedPump::flush_store() {
    if ((!store_ && !redis_) || (dirty_.empty() && batch_.empty())) {
        dirty_.clear();
        return;
    }
    for (const auto& [k, b] : dirty_) {
        batch_.bars.push_back(
            {static_cast<Code>(k.code_period >> 3U), kPeriods.at(k.code_period & 7U), b});
    }
    dirty_.clear();
    std::string error;
    if (store_) {
        if (store_->commit(batch_, error)) {
            ++s_.feed.store_commits;
        } else {
            ++s_.feed.store_errors;
            fmt::print(stderr, "md-gateway: store: {}\n", error);
        }
    }
    if (writer_) {
        writer_->submit(std::move(batch_));  // written on the writer's thread
    }
    batch_ = StoreBatch{};
}

}  // namespace md::gw
