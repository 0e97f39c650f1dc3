// SPDX-License-Identifier: Apache-2.0
// Lossless streams (docs/STREAMS.md) over mem:// channels: the record header, hot-standby
// arbitration of two copies (one channel or A/B channels) under independent loss, failover,
// a record lost on both copies, divergence and epochs. Counts and orders only.
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <prizma/prizma.hpp>

#include "lib/streams/stream_testing.hpp"
#include "tests/support/catch.hpp"
#include "tests/support/counters.hpp"
#include "tests/support/full_size.hpp"

namespace {

std::vector<std::byte> body(std::uint64_t i, std::size_t size = 100) {
    std::vector<std::byte> b(size);
    for (std::size_t k = 0; k < size; ++k) {
        b[k] = static_cast<std::byte>((i * 31 + k) & 0xffU);
    }
    return b;
}

/// What a StreamSubscriber handed out, in order.
struct Log {
    std::vector<std::uint64_t> records;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> losses;  // (first, count)
    std::vector<std::uint64_t> divergences;
    std::vector<std::uint64_t> resets;
    std::vector<std::uint64_t> stalls;
    std::uint64_t bad_payload = 0;
    void take(const prizma::StreamEvent& e) {
        switch (e.kind) {
            case prizma::StreamEventKind::record:
                records.push_back(e.sequence);
                if (e.payload.size() != 100
                    || std::memcmp(e.payload.data(), body(e.sequence).data(), 100) != 0) {
                    ++bad_payload;
                }
                break;
            case prizma::StreamEventKind::loss: losses.emplace_back(e.sequence, e.count); break;
            case prizma::StreamEventKind::divergence: divergences.push_back(e.sequence); break;
            case prizma::StreamEventKind::reset: resets.push_back(e.sequence); break;
            case prizma::StreamEventKind::stall: stalls.push_back(e.sequence); break;
            case prizma::StreamEventKind::dispute: break;  // Arbitration::quorum only
        }
    }
    /// Every sequence in [0, n) exactly once, as a record or inside a loss, in order.
    [[nodiscard]] bool accounts_for(std::uint64_t n) const {
        std::uint64_t expect = 0;
        std::size_t r = 0;
        std::size_t l = 0;
        while (expect < n) {
            if (r < records.size() && records[r] == expect) {
                ++r;
                ++expect;
            } else if (l < losses.size() && losses[l].first == expect) {
                expect += losses[l].second;
                ++l;
            } else {
                return false;
            }
        }
        return r == records.size() && l == losses.size();
    }
};

/// Publishes records [0, n) on both stream publishers (b stops after `b_until`, a after
/// `a_until`), reading the stream all along; returns the log.
Log run(prizma::Context& ctx,
        prizma::StreamPublisher& a,
        prizma::StreamPublisher& b,
        prizma::StreamSubscriber& stream,
        std::uint64_t n,
        std::uint64_t a_until,
        std::uint64_t b_until) {
    Log log;
    const auto offer = [&](prizma::StreamPublisher& p, std::uint64_t until) {
        if (p.next_sequence() < std::min(n, until)) {
            const auto r = p.offer(body(p.next_sequence()));
            REQUIRE((r.has_value() || prizma::is_transient(r.error())));
        }
    };
    const std::int64_t deadline = prizma::Context::now_ns() + 120'000'000'000LL;
    std::int64_t quiet_since = -1;
    while (prizma::Context::now_ns() < deadline) {
        for (int k = 0; k < 16; ++k) {
            offer(a, a_until);
            offer(b, b_until);
        }
        const int work = ctx.poll();
        const std::size_t got =
            stream.poll(256, [&](const prizma::StreamEvent& e) { log.take(e); });
        const auto next = stream.next_sequence();
        if (next && *next >= n) {
            break;
        }
        // Both publishers done and nothing moving for 2 s: the rest is not coming.
        const bool done =
            a.next_sequence() >= std::min(n, a_until) && b.next_sequence() >= std::min(n, b_until);
        if (done && work == 0 && got == 0) {
            quiet_since = quiet_since < 0 ? prizma::Context::now_ns() : quiet_since;
            if (prizma::Context::now_ns() - quiet_since > 2'000'000'000LL) {
                break;
            }
        } else {
            quiet_since = -1;
        }
    }
    return log;
}

prizma::StreamSubscriber make_stream(prizma::Subscriber& s1,
                                     prizma::Subscriber* s2 = nullptr,
                                     std::size_t buffer_records = 4096) {
    prizma::StreamOptions o;
    o.stream_id = 42;
    o.start_sequence = 0;
    o.buffer_records = buffer_records;
    auto st = prizma::StreamSubscriber::create(o);
    REQUIRE(st.has_value());
    REQUIRE(st->add(s1).has_value());
    if (s2 != nullptr) {
        REQUIRE(st->add(*s2).has_value());
    }
    return std::move(*st);
}

/// The stream clock of the boundary tests below: stands still until a test moves it.
std::int64_t g_now = 1'000'000'000;
std::int64_t test_now() noexcept {
    return g_now;
}

/// Two publishers (two copies) on one mem:// channel and a stream reading it on test_now().
struct Rig {
    prizma::Context ctx = prizma::Context::create().value();
    prizma::Subscriber sub;
    prizma::Publisher pa;
    prizma::Publisher pb;
    std::optional<prizma::StreamSubscriber> stream;
    Log log;

    explicit Rig(const std::string& name,
                 std::size_t history = 65536,
                 const prizma::ChannelOptions& sub_options = {},
                 std::size_t buffer_records = 4096)
        : sub(ctx.add_subscriber("mem://" + name + ":7500", sub_options).value()),
          pa(ctx.add_publisher("mem://" + name + ":7500").value()),
          pb(ctx.add_publisher("mem://" + name + ":7500").value()) {
        g_now = 1'000'000'000;
        prizma::StreamOptions o;
        o.stream_id = 42;
        o.start_sequence = 0;
        o.gap_timeout = std::chrono::milliseconds(100);
        o.history = history;
        o.buffer_records = buffer_records;
        stream.emplace(prizma::StreamSubscriber::create(o).value());
        REQUIRE(stream->add(sub).has_value());
        prizma::detail::StreamSubscriberTesting::set_clock(*stream, &test_now);
    }
    /// Offers records [from, to) of `epoch` on `p` (its own copy), then moves everything.
    void send(prizma::Publisher& p,
              std::uint32_t epoch,
              std::uint64_t from,
              std::uint64_t to,
              std::uint64_t salt = 0) {
        auto out = prizma::StreamPublisher::create(p, 42, epoch, from).value();
        for (std::uint64_t i = from; i < to; ++i) {
            REQUIRE(out.offer(body(i + salt)).has_value());
        }
        pump();
    }
    void pump() {
        for (int i = 0; i < 50; ++i) {
            (void)ctx.poll();
            stream->poll(64, [&](const prizma::StreamEvent& e) { log.take(e); });
        }
    }
    [[nodiscard]] std::int64_t timeout() const { return 100'000'000; }
};

}  // namespace

TEST_CASE("stream: the record header round-trips and its checksum covers every field",
          "[unit][stream]") {
    const auto payload = body(7, 37);
    std::vector<std::byte> rec(prizma::RecordHeader::kBytes + payload.size());
    prizma::RecordHeader::write(rec, 42, 3, 0x0102030405060708ULL, payload);
    std::memcpy(rec.data() + prizma::RecordHeader::kBytes, payload.data(), payload.size());
    CHECK(std::to_integer<int>(rec[0]) == 2);
    CHECK(std::to_integer<int>(rec[1]) == 28);
    CHECK(std::to_integer<int>(rec[7]) == 42);
    CHECK(std::to_integer<int>(rec[11]) == 3);
    CHECK(std::to_integer<int>(rec[12]) == 0x01);
    CHECK(std::to_integer<int>(rec[19]) == 0x08);
    prizma::RecordHeader h;
    REQUIRE(prizma::RecordHeader::read(rec, h));
    CHECK(h.stream_id == 42);
    CHECK(h.epoch == 3);
    CHECK(h.sequence == 0x0102030405060708ULL);
    CHECK(h.checksum == prizma::RecordHeader::checksum_of(42, 3, h.sequence, payload));
    CHECK(h.checksum != prizma::RecordHeader::checksum_of(42, 4, h.sequence, payload));
    CHECK(h.checksum != prizma::RecordHeader::checksum_of(42, 3, h.sequence + 1, payload));
    auto other = payload;
    other[36] ^= std::byte{1};  // the last, partial word counts too
    CHECK(h.checksum != prizma::RecordHeader::checksum_of(42, 3, h.sequence, other));
    CHECK_FALSE(prizma::RecordHeader::read(std::span<const std::byte>(rec).first(27), h));
    rec[0] = std::byte{1};  // version 1: prizma before XXH3
    CHECK_FALSE(prizma::RecordHeader::read(rec, h));
    rec[0] = std::byte{3};
    CHECK_FALSE(prizma::RecordHeader::read(rec, h));
}

TEST_CASE("stream: a record as written verifies and one flipped bit in any byte does not",
          "[unit][stream]") {
    for (const std::size_t size : {0U, 1U, 15U, 16U, 17U, 100U, 1400U}) {
        const auto payload = body(3, size);
        std::vector<std::byte> rec(prizma::RecordHeader::kBytes + size);
        prizma::RecordHeader::write(rec, 42, 7, 1000 + size, payload);
        std::copy(payload.begin(), payload.end(), rec.begin() + prizma::RecordHeader::kBytes);
        const auto verifies = [](std::span<const std::byte> r) {
            prizma::RecordHeader h;
            return prizma::RecordHeader::read(r, h)
                   && h.checksum
                          == prizma::RecordHeader::checksum_of(
                              h.stream_id, h.epoch, h.sequence,
                              r.subspan(prizma::RecordHeader::kBytes));
        };
        REQUIRE(verifies(rec));
        std::size_t missed = 0;
        for (std::size_t i = 0; i < rec.size(); ++i) {
            for (unsigned bit = 0; bit < 8; ++bit) {
                rec[i] ^= std::byte{static_cast<unsigned char>(1U << bit)};
                // Reserved bytes 2-3: read() refuses them other than zero.
                missed += verifies(rec) ? 1U : 0U;
                rec[i] ^= std::byte{static_cast<unsigned char>(1U << bit)};
            }
        }
        CHECK(missed == 0);
        // A byte less is no record of this checksum either.
        CHECK_FALSE(verifies(std::span<const std::byte>(rec).first(rec.size() - 1)));
    }
}

TEST_CASE("stream: two publishers on one channel, each losing 1%, every record once in order",
          "[unit][stream]") {
    const std::uint64_t kN = prizma::test::sized(100'000, 10'000'000);  // long: the full 10 M
    auto ctx = prizma::Context::create().value();
    auto sub = ctx.add_subscriber("mem://stream-a:7500");
    auto pa = ctx.add_publisher("mem://stream-a:7500?tx_loss=0.01&seed=11");
    auto pb = ctx.add_publisher("mem://stream-a:7500?tx_loss=0.01&seed=12");
    REQUIRE((sub && pa && pb));
    auto a = prizma::StreamPublisher::create(*pa, 42, 1).value();
    auto b = prizma::StreamPublisher::create(*pb, 42, 1).value();
    auto stream = make_stream(*sub);
    const Log log = run(ctx, a, b, stream, kN, kN, kN);
    CHECK(log.records.size() == kN);
    CHECK(log.accounts_for(kN));
    CHECK(log.losses.empty());
    CHECK(log.bad_payload == 0);
    CHECK(stream.counters().duplicates > kN / 2);  // the other copy, mostly
    CHECK(stream.counters().divergences == 0);
}

TEST_CASE(
    "stream: A/B feeds on two channels, a passive subscriber, a record lost on both "
    "copies is reported before anything after it",
    "[unit][stream]") {
    constexpr std::uint64_t kN = 60'000;
    prizma::ChannelOptions passive;
    passive.passive = true;  // no PGM repair: only the other copy fills a gap
    auto ctx = prizma::Context::create().value();
    auto sa = ctx.add_subscriber("mem://stream-b1:7500?loss=0.03&seed=21", passive);
    auto sb = ctx.add_subscriber("mem://stream-b2:7500?loss=0.03&seed=22", passive);
    auto pa = ctx.add_publisher("mem://stream-b1:7500");
    auto pb = ctx.add_publisher("mem://stream-b2:7500");
    REQUIRE((sa && sb && pa && pb));
    auto a = prizma::StreamPublisher::create(*pa, 42, 1).value();
    auto b = prizma::StreamPublisher::create(*pb, 42, 1).value();
    // A passive copy holds what follows its own loss until it declares it (its NAK timers,
    // wall clock), while the other runs on: a buffer of the whole stream keeps the count of
    // records lost independent of how fast this host runs.
    auto stream = make_stream(*sa, &*sb, kN);
    const Log log = run(ctx, a, b, stream, kN, kN, kN);
    CHECK(stream.counters().overflows == 0);
    CHECK(log.accounts_for(kN));  // in order, each once, as a record or inside a loss
    CHECK(log.bad_payload == 0);
    // 3% each, independent: ~0.09% of the records are lost on both (~54 here) ...
    CHECK_FALSE(log.losses.empty());
    // ... and only those: the other copy filled the ~3,600 each lost alone.
    CHECK(stream.counters().lost_records < kN / 200);
    CHECK(stream.counters().records + stream.counters().lost_records == kN);
}

TEST_CASE(
    "stream: the active publisher stops mid-stream, the standby carries on, no gap, no "
    "duplicate",
    "[unit][stream]") {
    constexpr std::uint64_t kN = 50'000;
    auto ctx = prizma::Context::create().value();
    auto sub = ctx.add_subscriber("mem://stream-c:7500");
    auto pa = ctx.add_publisher("mem://stream-c:7500");
    auto pb = ctx.add_publisher("mem://stream-c:7500");
    REQUIRE((sub && pa && pb));
    auto a = prizma::StreamPublisher::create(*pa, 42, 1).value();
    auto b = prizma::StreamPublisher::create(*pb, 42, 1).value();
    auto stream = make_stream(*sub);
    const Log log = run(ctx, a, b, stream, kN, 20'000, kN);  // a dies at 20,000
    CHECK(log.records.size() == kN);
    CHECK(log.accounts_for(kN));
    CHECK(log.losses.empty());
}

TEST_CASE("stream: a diverging copy is reported, a new epoch resets, old epochs are dropped",
          "[unit][stream]") {
    auto ctx = prizma::Context::create().value();
    auto sub = ctx.add_subscriber("mem://stream-d:7500");
    auto pa = ctx.add_publisher("mem://stream-d:7500");
    auto pb = ctx.add_publisher("mem://stream-d:7500");
    REQUIRE((sub && pa && pb));
    auto stream = make_stream(*sub);
    Log log;
    // Polls until `done` holds (at most 10 s: a loaded host, the sanitizers), then 50 times
    // more, so that what should not happen has the chance to: no count of polls decides.
    const auto pump = [&](const auto& done) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!done() && std::chrono::steady_clock::now() < deadline) {
            (void)ctx.poll();
            stream.poll(64, [&](const prizma::StreamEvent& e) { log.take(e); });
        }
        for (int i = 0; i < 50; ++i) {
            (void)ctx.poll();
            stream.poll(64, [&](const prizma::StreamEvent& e) { log.take(e); });
        }
    };
    const auto& c = stream.counters();
    auto a = prizma::StreamPublisher::create(*pa, 42, 1).value();
    for (std::uint64_t i = 0; i < 10; ++i) {
        REQUIRE(a.offer(body(i)).has_value());
    }
    pump([&] { return log.records.size() >= 10; });
    REQUIRE(log.records.size() == 10);
    // The standby writes record 5 with other bytes: a divergence, nothing delivered twice.
    auto b = prizma::StreamPublisher::create(*pb, 42, 1, 5).value();
    REQUIRE(b.offer(body(99)).has_value());
    pump([&] { return c.divergences >= 1; });
    CHECK(log.divergences == std::vector<std::uint64_t>{5});
    CHECK(log.records.size() == 10);
    CHECK(stream.counters().divergences == 1);
    // A deliberate reset: epoch 2 from 0. The reset comes first, then its records.
    auto a2 = prizma::StreamPublisher::create(*pa, 42, 2, 0).value();
    for (std::uint64_t i = 0; i < 3; ++i) {
        REQUIRE(a2.offer(body(i)).has_value());
    }
    pump([&] { return log.records.size() >= 13; });
    CHECK(log.resets == std::vector<std::uint64_t>{0});
    REQUIRE(log.records.size() == 13);
    CHECK(log.records[10] == 0);
    CHECK(log.records[12] == 2);
    // The old epoch's copy goes on: dropped and counted.
    REQUIRE(b.offer(body(6)).has_value());
    pump([&] { return c.stale_epoch >= 1; });
    CHECK(log.records.size() == 13);
    CHECK(stream.counters().stale_epoch == 1);
    // Another stream's records and non-records are counted, not delivered.
    auto other = prizma::StreamPublisher::create(*pa, 7, 2, 3).value();
    REQUIRE(other.offer(body(3)).has_value());
    REQUIRE(pa->offer(body(1, 10)).has_value());
    pump([&] { return c.foreign >= 2; });
    CHECK(log.records.size() == 13);
    CHECK(stream.counters().foreign == 2);
    // An older prizma's record (header version 1, its own checksum), this stream's next: told
    // apart, counted, not delivered. Another stream's in version 1 is foreign.
    auto v1 = std::vector<std::byte>(prizma::RecordHeader::kBytes + 10);
    prizma::RecordHeader::write(v1, 42, 2, 3, {});
    v1[0] = std::byte{1};
    REQUIRE(pa->offer(v1).has_value());
    prizma::RecordHeader::write(v1, 7, 2, 3, {});
    v1[0] = std::byte{1};
    REQUIRE(pa->offer(v1).has_value());
    pump([&] { return c.other_version >= 1 && c.foreign >= 3; });
    CHECK(log.records.size() == 13);
    CHECK(stream.counters().other_version == 1);
    CHECK(stream.counters().foreign == 3);
}

TEST_CASE("stream: bad options and subscribers are refused", "[unit][stream]") {
    prizma::StreamOptions o;
    o.buffer_records = 0;
    CHECK_FALSE(prizma::StreamSubscriber::create(o).has_value());
    o = {};
    o.gap_timeout = std::chrono::nanoseconds(0);
    CHECK_FALSE(prizma::StreamSubscriber::create(o).has_value());
    auto ctx = prizma::Context::create().value();
    auto sub = ctx.add_subscriber("mem://stream-e:7500");
    REQUIRE(sub.has_value());
    auto st = prizma::StreamSubscriber::create({}).value();
    CHECK(st.add(*sub).has_value());
    CHECK_FALSE(st.add(*sub).has_value());  // already a copy
    auto pub = ctx.add_publisher("mem://stream-e:7500");
    REQUIRE(pub.has_value());
    pub->close();
    REQUIRE(ctx.remove(*pub).has_value());
    CHECK_FALSE(prizma::StreamPublisher::create(*pub, 1, 1).has_value());  // removed
}

// A record lost at the very end (nothing after it) used to leave the stream silent for ever:
// a loss event needs a later record to name the range. A stall event now says it, once per
// position, and a later record turns it into an ordinary loss.
TEST_CASE("stream: a loss with nothing after it is a stall event, once", "[unit][stream]") {
    prizma::ChannelOptions passive;
    passive.passive = true;  // no repair: PGM declares the lost tail lost
    auto ctx = prizma::Context::create().value();
    auto sub = ctx.add_subscriber("mem://stream-g:7500", passive);
    auto pub = ctx.add_publisher("mem://stream-g:7500?tx_loss=0.05&seed=7");
    REQUIRE((sub && pub));
    auto out = prizma::StreamPublisher::create(*pub, 42, 1).value();
    prizma::StreamOptions o;
    o.stream_id = 42;
    o.start_sequence = 0;
    o.gap_timeout = std::chrono::milliseconds(100);
    auto stream = prizma::StreamSubscriber::create(o).value();
    REQUIRE(stream.add(*sub).has_value());
    const auto dropped = [&] {
        return prizma::test::transport_counter(*pub, "fault_dropped");
    };
    Log log;
    const auto pump = [&](std::int64_t ns) {
        const std::int64_t until = prizma::Context::now_ns() + ns;
        do {
            (void)ctx.poll();
            (void)stream.poll(256, [&](const prizma::StreamEvent& e) { log.take(e); });
        } while (prizma::Context::now_ns() < until);
    };
    // Send until a record is dropped on its way out (after at least 20): that one is the tail.
    std::uint64_t last = 0;
    for (;;) {
        const std::uint64_t before = dropped();
        last = out.next_sequence();
        REQUIRE(out.offer(body(last)).has_value());
        pump(0);
        if (last >= 20 && dropped() > before) {
            break;
        }
        REQUIRE(last < 100'000);
    }
    for (int i = 0; i < 200 && log.stalls.empty(); ++i) {
        pump(10'000'000);
    }
    REQUIRE(log.stalls.size() == 1);
    CHECK(log.stalls[0] == last);
    CHECK(stream.next_sequence() == last);  // informational: the position did not move
    CHECK(log.accounts_for(last));          // what came before: records and named losses
    pump(500'000'000);  // five gap timeouts more: still one stall for this position
    CHECK(log.stalls.size() == 1);
    CHECK(stream.counters().stalls == 1);
    // The publisher goes on: the next record names the lost range.
    REQUIRE(out.offer(body(last + 1)).has_value());
    for (int i = 0; i < 200 && log.records.back() != last + 1; ++i) {
        pump(10'000'000);
    }
    REQUIRE_FALSE(log.losses.empty());
    CHECK(log.losses.back() == std::pair<std::uint64_t, std::uint64_t>{last, 1});
    CHECK(log.records.back() == last + 1);
}

// A gap is held open while some copy can still fill it, until the gap timeout: lost at
// gap_since + gap_timeout exactly (`>=`), not a nanosecond before. Copy b has delivered only 0,
// so it can still bring 1 while a is already at 2.
TEST_CASE("stream boundary: a gap some copy can fill is lost at gap_timeout exactly",
          "[unit][stream][boundary]") {
    Rig rig("stream-bt");
    const std::int64_t t0 = g_now;
    rig.send(rig.pa, 1, 0, 1);
    rig.send(rig.pb, 1, 0, 1);
    rig.send(rig.pa, 1, 2, 3);  // 1 missing: 2 held from t0
    CHECK(rig.log.records == std::vector<std::uint64_t>{0});
    CHECK(rig.log.losses.empty());
    g_now = t0 + rig.timeout() - 1;
    rig.pump();
    CHECK(rig.log.losses.empty());
    CHECK(rig.stream->next_sequence() == 1);
    g_now = t0 + rig.timeout();
    rig.pump();
    CHECK(rig.log.losses == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{1, 1}});
    CHECK(rig.log.records == std::vector<std::uint64_t>{0, 2});
    CHECK(rig.stream->counters().overflows == 0);
}

// Once no copy can bring the missing record any more, the gap is lost at once, with the clock
// standing still: a copy that left (its FIN) is not waited for, nor one already past the gap.
TEST_CASE("stream boundary: a gap no copy can fill is lost at once, a copy that left counts out",
          "[unit][stream][boundary]") {
    SECTION("the other copy left") {
        // Short NAK timers: a source lingers three NAK rounds after its FIN, then leaves.
        prizma::ChannelOptions quick;
        quick.timers = prizma::Timers::of(prizma::TimerPreset::lan);
        quick.timers->nak_backoff = std::chrono::milliseconds(1);
        quick.timers->nak_repeat = std::chrono::milliseconds(1);
        quick.timers->nak_rdata = std::chrono::milliseconds(1);
        Rig rig("stream-bl", 65536, quick);
        rig.send(rig.pa, 1, 0, 1);
        rig.send(rig.pb, 1, 0, 1);
        rig.send(rig.pa, 1, 2, 3);  // 1 missing, b may bring it: held
        CHECK(rig.log.losses.empty());
        // b's FIN: it leaves a few milliseconds later. The stream's clock stands still, so only
        // its leaving can end the gap.
        rig.pb.close();
        const std::int64_t until = prizma::Context::now_ns() + 10'000'000'000LL;
        while (rig.log.losses.empty() && prizma::Context::now_ns() < until) {
            rig.pump();
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        CHECK(rig.log.losses == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{1, 1}});
        CHECK(rig.log.records == std::vector<std::uint64_t>{0, 2});
    }
    SECTION("the other copy is past the gap too") {
        Rig rig("stream-bp");
        rig.send(rig.pa, 1, 0, 1);
        rig.send(rig.pb, 1, 0, 1);
        rig.send(rig.pb, 1, 3, 4);  // b: 3 held, b at 3
        CHECK(rig.log.losses.empty());
        rig.send(rig.pa, 1, 2, 3);  // a: at 2; neither brings 1 any more
        CHECK(rig.log.losses == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{1, 1}});
        CHECK(rig.log.records == std::vector<std::uint64_t>{0, 2, 3});
    }
    SECTION("while the other copy is there and behind, it is waited for") {
        Rig rig("stream-bw");
        rig.send(rig.pa, 1, 0, 1);
        rig.send(rig.pb, 1, 0, 1);
        rig.send(rig.pa, 1, 2, 3);
        CHECK(rig.log.losses.empty());
        rig.send(rig.pb, 1, 1, 2);  // it did bring it
        CHECK(rig.log.losses.empty());
        CHECK(rig.log.records == std::vector<std::uint64_t>{0, 1, 2});
    }
}

// A new epoch starts over: what was held from the old one is dropped, every copy's position is
// forgotten (b was at 9 in epoch 1, which says nothing about epoch 2), and so is the history a
// duplicate's checksum is compared with.
TEST_CASE("stream boundary: an epoch reset clears held records and each copy's position",
          "[unit][stream][boundary]") {
    Rig rig("stream-be");
    const std::int64_t t0 = g_now;
    rig.send(rig.pa, 1, 0, 10);
    rig.send(rig.pb, 1, 0, 10);
    rig.send(rig.pa, 1, 11, 12);  // 10 missing, 11 held (b at 9 may bring 10)
    REQUIRE(rig.log.records.size() == 10);
    REQUIRE(rig.log.losses.empty());
    rig.send(rig.pa, 2, 0, 1);  // epoch 2 from 0: the reset, then its record 0
    CHECK(rig.log.resets == std::vector<std::uint64_t>{0});
    REQUIRE(rig.log.records.size() == 11);
    CHECK(rig.log.records.back() == 0);
    rig.send(rig.pa, 2, 2, 3);  // 1 missing: b (nothing heard in epoch 2) may still bring it
    CHECK(rig.log.losses.empty());
    CHECK(rig.stream->next_sequence() == 1);
    g_now = t0 + rig.timeout();
    rig.pump();
    CHECK(rig.log.losses == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{1, 1}});
    CHECK(rig.log.records.back() == 2);
    // Nothing of epoch 1 is left over: no later loss up to epoch 1's held 11.
    g_now = t0 + 10 * rig.timeout();
    rig.pump();
    CHECK(rig.log.losses.size() == 1);
    CHECK(rig.stream->next_sequence() == 3);
    CHECK(rig.log.bad_payload == 0);
}

TEST_CASE("stream boundary: an epoch reset forgets the history duplicates are checked against",
          "[unit][stream][boundary]") {
    Rig rig("stream-bh");
    rig.send(rig.pa, 1, 0, 10);
    rig.send(rig.pa, 2, 5, 7);  // epoch 2 from 5
    REQUIRE(rig.log.resets == std::vector<std::uint64_t>{5});
    REQUIRE(rig.stream->next_sequence() == 7);
    rig.send(rig.pb, 2, 3, 4);  // epoch 2's 3: before the reset point, never delivered in it
    CHECK(rig.log.divergences.empty());
    CHECK(rig.stream->counters().duplicates == 1);
    rig.send(rig.pb, 2, 6, 7, 1000);  // epoch 2's 6, other bytes: a divergence
    CHECK(rig.log.divergences == std::vector<std::uint64_t>{6});
}

// A duplicate is compared with the checksum recorded for its own sequence: with a history of
// 4 slots, 1's slot holds 5 once 5 is delivered, and a true copy of 1 is no divergence (only
// too old to check); a copy of 5 with other bytes is one.
TEST_CASE("stream boundary: a divergence is a checksum that differs at the same sequence",
          "[unit][stream][boundary]") {
    Rig rig("stream-bd", 4);
    rig.send(rig.pa, 1, 0, 6);
    REQUIRE(rig.log.records.size() == 6);
    rig.send(rig.pb, 1, 1, 2);  // the same record 1
    CHECK(rig.log.divergences.empty());
    rig.send(rig.pb, 1, 5, 6);  // the same record 5
    CHECK(rig.log.divergences.empty());
    rig.send(rig.pb, 1, 5, 6, 1000);  // 5 with other bytes
    CHECK(rig.log.divergences == std::vector<std::uint64_t>{5});
    // Records delivered from the held buffer are remembered too.
    rig.send(rig.pa, 1, 7, 8);  // 6 missing, 7 held
    rig.send(rig.pa, 1, 6, 7);  // 6, then 7 from the buffer
    REQUIRE(rig.log.records.back() == 7);
    rig.send(rig.pb, 1, 7, 8, 1000);  // 7 with other bytes
    CHECK(rig.log.divergences == std::vector<std::uint64_t>{5, 7});
    CHECK(rig.stream->counters().divergences == 2);
}

// buffer_records held records wait for the gap to close; one more declares it lost at once.
TEST_CASE("stream boundary: buffer_records held wait, one more is an overflow loss",
          "[unit][stream][boundary]") {
    Rig rig("stream-bo", 65536, {}, 2);
    rig.send(rig.pa, 1, 0, 1);
    rig.send(rig.pb, 1, 0, 1);  // b may still bring 1: only the buffer ends the wait
    rig.send(rig.pa, 1, 2, 4);  // 2 and 3 held: the buffer's 2
    CHECK(rig.log.losses.empty());
    CHECK(rig.stream->counters().overflows == 0);
    rig.send(rig.pa, 1, 4, 5);  // a third
    CHECK(rig.log.losses == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{1, 1}});
    CHECK(rig.log.records == std::vector<std::uint64_t>{0, 2, 3, 4});
    CHECK(rig.stream->counters().overflows == 1);
}

// One copy far ahead is one copy's word (XXH3 is no signature: anyone can write a record whose
// checksum verifies). A record at next + 10^9 is counted and dropped: neither the gap timeout
// nor a full buffer makes it the end of a gap of 10^9 records.
TEST_CASE("stream trust: a record far ahead is counted and dropped, never a loss up to it",
          "[unit][stream][trust]") {
    Rig rig("stream-far", 65536, {}, 8);
    rig.send(rig.pa, 1, 0, 3);
    rig.send(rig.pb, 1, 0, 3);
    constexpr std::uint64_t kFar = 3 + 1'000'000'000ULL;
    rig.send(rig.pb, 1, kFar, kFar + 1);
    CHECK(rig.stream->counters().too_far == 1);
    g_now += 10 * rig.timeout();
    rig.pump();
    CHECK(rig.log.losses.empty());
    CHECK(rig.stream->next_sequence() == 3);
    // A full buffer (3 missing, 9 held: one more than buffer_records) loses the gap up to the
    // first record held, not up to the far one.
    rig.send(rig.pa, 1, 4, 13);
    CHECK(rig.log.losses == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{3, 1}});
    CHECK(rig.stream->next_sequence() == 13);
    g_now += 10 * rig.timeout();
    rig.pump();
    rig.send(rig.pa, 1, 13, 20);
    CHECK(rig.log.losses.size() == 1);
    CHECK(rig.stream->next_sequence() == 20);
    CHECK(rig.log.bad_payload == 0);
    CHECK(rig.stream->counters().lost_records == 1);
}

// The honest case the bound must still serve: a subscriber that starts (start_sequence 0)
// behind every publisher. Once every copy there is far ahead, the records before them are one
// loss event and their records follow, without waiting for the gap timeout.
TEST_CASE("stream trust: a subscriber behind every copy loses the range up to them, once",
          "[unit][stream][trust]") {
    Rig rig("stream-behind", 65536, {}, 8);
    rig.send(rig.pa, 1, 1'000'000, 1'000'010);
    CHECK(rig.log.losses == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0, 1'000'000}});
    REQUIRE(rig.log.records.size() == 10);
    CHECK(rig.log.records.front() == 1'000'000);
    CHECK(rig.log.records.back() == 1'000'009);
    CHECK(rig.log.bad_payload == 0);
    rig.send(rig.pb, 1, 1'000'000, 1'000'011);  // the standby: duplicates, then the next one
    CHECK(rig.log.records.back() == 1'000'010);
    CHECK(rig.log.losses.size() == 1);
}
