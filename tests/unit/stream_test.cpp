// SPDX-License-Identifier: Apache-2.0
// Lossless streams (docs/STREAMS.md) over mem:// channels: the record header, hot-standby
// arbitration of two copies (one channel or A/B channels) under independent loss, failover,
// a record lost on both copies, divergence and epochs. Counts and orders only.
#include <cstring>
#include <string>
#include <vector>

#include <prizma/prizma.hpp>

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

}  // namespace

TEST_CASE("stream: the record header round-trips and its checksum covers every field",
          "[unit][stream]") {
    const auto payload = body(7, 37);
    std::vector<std::byte> rec(prizma::RecordHeader::kBytes + payload.size());
    prizma::RecordHeader::write(rec, 42, 3, 0x0102030405060708ULL, payload);
    std::memcpy(rec.data() + prizma::RecordHeader::kBytes, payload.data(), payload.size());
    CHECK(std::to_integer<int>(rec[0]) == 1);
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
    rec[0] = std::byte{2};
    CHECK_FALSE(prizma::RecordHeader::read(rec, h));
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
    const auto pump = [&] {
        for (int i = 0; i < 200; ++i) {
            (void)ctx.poll();
            stream.poll(64, [&](const prizma::StreamEvent& e) { log.take(e); });
        }
    };
    auto a = prizma::StreamPublisher::create(*pa, 42, 1).value();
    for (std::uint64_t i = 0; i < 10; ++i) {
        REQUIRE(a.offer(body(i)).has_value());
    }
    pump();
    REQUIRE(log.records.size() == 10);
    // The standby writes record 5 with other bytes: a divergence, nothing delivered twice.
    auto b = prizma::StreamPublisher::create(*pb, 42, 1, 5).value();
    REQUIRE(b.offer(body(99)).has_value());
    pump();
    CHECK(log.divergences == std::vector<std::uint64_t>{5});
    CHECK(log.records.size() == 10);
    CHECK(stream.counters().divergences == 1);
    // A deliberate reset: epoch 2 from 0. The reset comes first, then its records.
    auto a2 = prizma::StreamPublisher::create(*pa, 42, 2, 0).value();
    for (std::uint64_t i = 0; i < 3; ++i) {
        REQUIRE(a2.offer(body(i)).has_value());
    }
    pump();
    CHECK(log.resets == std::vector<std::uint64_t>{0});
    REQUIRE(log.records.size() == 13);
    CHECK(log.records[10] == 0);
    CHECK(log.records[12] == 2);
    // The old epoch's copy goes on: dropped and counted.
    REQUIRE(b.offer(body(6)).has_value());
    pump();
    CHECK(log.records.size() == 13);
    CHECK(stream.counters().stale_epoch == 1);
    // Another stream's records and non-records are counted, not delivered.
    auto other = prizma::StreamPublisher::create(*pa, 7, 2, 3).value();
    REQUIRE(other.offer(body(3)).has_value());
    REQUIRE(pa->offer(body(1, 10)).has_value());
    pump();
    CHECK(log.records.size() == 13);
    CHECK(stream.counters().foreign == 2);
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
