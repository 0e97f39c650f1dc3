// SPDX-License-Identifier: Apache-2.0
#include "feed_pump.hpp"

#include <chrono>
#include <cstdlib>

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

constexpr int kMaxPollRounds = 64;
constexpr std::size_t kMaxMessagesPerRound = 256;
constexpr auto kFlushEvery = std::chrono::milliseconds(200);

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
    if (!p->open_stores(error)) {
        return nullptr;
    }
    prizma::ChannelOptions opts;
    auto sub = p->ctx_.add_subscriber(shared.cfg.uri, opts);
    if (!sub) {
        error = shared.cfg.uri + ": " + sub.error().message();
        return nullptr;
    }
    p->sub_.emplace(*sub);
    if (p->ctx_.wakeup_fd() < 0) {
        error = "the prizma Context has no wakeup fd";
        return nullptr;
    }
    p->fd_.assign(p->ctx_.wakeup_fd());
    return p;
}

bool FeedPump::open_stores(std::string& error) {
    long long loaded = 0;
    if (!s_.cfg.store_dir.empty()) {
        store_ = LmdbStore::open(s_.cfg.store_dir, s_.cfg.store_mib, error);
        if (!store_) {
            return false;
        }
        const long long n = store_->load(s_.bars, feeds_, error);
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
        redis_ = RedisStore::connect(s_.cfg.redis, lazy != nullptr && *lazy == '1', error);
        if (!redis_) {
            return false;
        }
        const long long n = redis_->load(s_.bars, feeds_, error);
        if (n < 0) {
            return false;
        }
        loaded += n;
        s_.feed.redis_redirections = redis_->redirections();
    }
    s_.feed.bars_loaded = loaded;
    s_.feed.gaps = s_.bars.gaps().size();
    return true;
}

FeedPump::FeedPump(asio::io_context& ioc, Shared& shared, prizma::Context ctx)
    : ioc_(ioc),
      s_(shared),
      ctx_(std::move(ctx)),
      fd_(ioc),
      deadline_(ioc),
      flush_timer_(ioc),
      sink_([this](Code c, Period p, const Bar& b) { note_bar(c, p, b); }) {}

FeedPump::~FeedPump() {
    if (fd_.is_open()) {
        (void)fd_.release();  // the Context owns the fd
    }
}

void FeedPump::start() {
    ctx_.adopt_owner_thread();
    run_once();
    schedule_flush();
}

void FeedPump::schedule_flush() {
    flush_timer_.expires_after(kFlushEvery);
    flush_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec && !stopped_) {
            check_lost_tail();
            flush_store();
            schedule_flush();
        }
    });
}

void FeedPump::stop() {
    stopped_ = true;
    ++generation_;
    deadline_.cancel();
    flush_timer_.cancel();
    fd_.cancel();
    flush_store();
}

void FeedPump::run_once() {
    if (stopped_) {
        return;
    }
    for (int round = 0; round < kMaxPollRounds; ++round) {
        const int work = ctx_.poll();
        const std::size_t n =
            sub_->poll(kMaxMessagesPerRound, [this](const prizma::Message& m) { on_message(m); });
        if (work == 0 && n == 0) {
            break;
        }
    }
    flush_push();
    arm();
}

void FeedPump::arm() {
    const std::uint64_t gen = ++generation_;
    if (!ctx_.prepare_wait()) {
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
    const auto cap = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    deadline_.expires_at(std::min(ctx_.next_deadline(), cap));
    deadline_.async_wait([this, gen](const boost::system::error_code& ec) {
        if (!ec && gen == generation_) {
            fd_.cancel();
            run_once();
        }
    });
}

void FeedPump::on_message(const prizma::Message& m) {
    switch (m.kind) {
        case prizma::MessageKind::data: break;
        case prizma::MessageKind::loss:
            ++s_.feed.loss_events;
            s_.feed.lost_sqns += m.count;
            loss_pending_ = true;
            loss_at_ = std::chrono::steady_clock::now();
            fmt::print(stderr, "md-gateway: feed loss: {} sequence numbers cannot be repaired\n",
                       m.count);
            return;
        default: return;
    }
    ++s_.feed.messages;
    MsgHeader h;
    ticks_.clear();
    instruments_.clear();
    if (!decode(m.payload, h, ticks_, instruments_)) {
        ++s_.feed.malformed;
        return;
    }
    msg_sent_ns_ = h.send_ns;
    const std::int64_t lag = realtime_ns() - h.send_ns;
    s_.feed.lag_ns.store(lag, std::memory_order_relaxed);
    ++s_.feed.lag.at(latency_bucket(static_cast<double>(lag) * 1e-9));
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
        to_push_[PushHub::key(c, p)] = {b, msg_sent_ns_};
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
    if (redis_) {
        const bool ok = redis_->write(batch_, error);
        s_.feed.redis_redirections = redis_->redirections();
        if (ok) {
            ++s_.feed.redis_writes;
        } else {
            ++s_.feed.redis_errors;
            fmt::print(stderr, "md-gateway: {}\n", error);
        }
    }
    batch_ = StoreBatch{};
}

}  // namespace md::gw
