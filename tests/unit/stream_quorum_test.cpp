// SPDX-License-Identifier: Apache-2.0
// StreamSubscriber with Arbitration::quorum (docs/STREAMS.md, "Arbitration"): a record is
// delivered once enough publishers sent the same copy; a wrong copy is never delivered, even
// from the publisher heard first; copies that disagree with no quorum stop the stream at that
// record until resolve(). Over mem:// channels, on a clock the tests move.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <prizma/prizma.hpp>

#include "lib/streams/stream_testing.hpp"
#include "tests/support/catch.hpp"

namespace {

std::vector<std::byte> body(std::uint64_t i) {
    std::vector<std::byte> b(64);
    for (std::size_t k = 0; k < b.size(); ++k) {
        b[k] = static_cast<std::byte>((i * 37 + k) & 0xffU);
    }
    return b;
}

std::int64_t g_now = 1'000'000'000;
std::int64_t test_now() noexcept {
    return g_now;
}

struct Event {
    prizma::StreamEventKind kind;
    std::uint64_t sequence;
    std::uint64_t count;
    std::vector<std::byte> payload;
    prizma::Tsi source;
};

/// `n` publishers (the cores) on one mem:// channel, a quorum stream reading it.
struct Quorum {
    prizma::Context ctx = prizma::Context::create().value();
    prizma::Subscriber sub;
    std::vector<prizma::Publisher> pubs;
    std::vector<std::optional<prizma::StreamPublisher>> out;
    std::optional<prizma::StreamSubscriber> stream;
    std::vector<Event> log;

    Quorum(const std::string& name,
           std::size_t n,
           std::size_t quorum,
           std::size_t buffer = 4096,
           bool timeout_loss = false)
        : sub(ctx.add_subscriber("mem://" + name + ":7600").value()) {
        g_now = 1'000'000'000;
        for (std::size_t i = 0; i < n; ++i) {
            pubs.push_back(ctx.add_publisher("mem://" + name + ":7600").value());
        }
        out.resize(n);
        prizma::StreamOptions o;
        o.stream_id = 42;
        o.start_sequence = 0;
        o.arbitration = prizma::Arbitration::quorum;
        o.quorum = quorum;
        o.quorum_timeout = std::chrono::milliseconds(100);
        o.buffer_records = buffer;
        o.quorum_timeout_loss = timeout_loss;
        stream.emplace(prizma::StreamSubscriber::create(o).value());
        REQUIRE(stream->add(sub).has_value());
        prizma::detail::StreamSubscriberTesting::set_clock(*stream, &test_now);
    }
    /// Publisher `p` writes records [from, to); record `wrong` (if in range) with other bytes.
    /// Publisher `p` writes records [from, to); record `wrong` (if in range) with other bytes
    /// (those of record wrong + salt), all of epoch `epoch`.
    void send(std::size_t p,
              std::uint64_t from,
              std::uint64_t to,
              std::uint64_t wrong = UINT64_MAX,
              std::uint64_t salt = 1000,
              std::uint32_t epoch = 1) {
        if (!out[p] || out[p]->next_sequence() != from || out[p]->epoch() != epoch) {
            out[p].emplace(prizma::StreamPublisher::create(pubs[p], 42, epoch, from).value());
        }
        for (std::uint64_t i = from; i < to; ++i) {
            REQUIRE(out[p]->next_sequence() == i);
            REQUIRE(out[p]->offer(body(i == wrong ? i + salt : i)).has_value());
        }
        pump();
    }
    void pump() {
        for (int i = 0; i < 50; ++i) {
            (void)ctx.poll();
            stream->poll(64, [&](const prizma::StreamEvent& e) {
                log.push_back(Event{
                    e.kind, e.sequence, e.count, {e.payload.begin(), e.payload.end()}, e.source});
            });
        }
    }
    [[nodiscard]] std::vector<std::uint64_t> of(prizma::StreamEventKind k) const {
        std::vector<std::uint64_t> v;
        for (const Event& e : log) {
            if (e.kind == k) {
                v.push_back(e.sequence);
            }
        }
        return v;
    }
    [[nodiscard]] std::vector<std::uint64_t> records() const {
        return of(prizma::StreamEventKind::record);
    }
    /// Every record event carries the right bytes (the agreed copy, never a wrong one).
    [[nodiscard]] bool all_right() const {
        for (const Event& e : log) {
            if (e.kind == prizma::StreamEventKind::record && e.payload != body(e.sequence)) {
                return false;
            }
        }
        return true;
    }
};

std::vector<std::uint64_t> range(std::uint64_t from, std::uint64_t to) {
    std::vector<std::uint64_t> v;
    for (std::uint64_t i = from; i < to; ++i) {
        v.push_back(i);
    }
    return v;
}

}  // namespace

TEST_CASE("stream quorum: a pair must agree, each record once, after both copies",
          "[unit][stream]") {
    Quorum q("quorum-pair", 2, 2);
    q.send(0, 0, 5);
    q.send(1, 0, 1);  // both publishers heard
    CHECK(q.records() == range(0, 1));
    q.send(0, 5, 10);
    CHECK(q.records() == range(0, 1));  // the standby's copies are waited for
    q.send(1, 1, 10);
    CHECK(q.records() == range(0, 10));
    CHECK(q.all_right());
    for (const Event& e : q.log) {
        CHECK(e.count == 2);  // both publishers sent each record
    }
    CHECK(q.stream->counters().unconfirmed == 0);
    CHECK(q.stream->counters().duplicates == 10);
    CHECK(q.stream->counters().divergences == 0);
}

TEST_CASE("stream quorum: the active copy wrong halts at exactly that record until resolve",
          "[unit][stream]") {
    Quorum q("quorum-active-wrong", 2, 2);
    q.send(0, 0, 10, 5);  // the active publisher, heard first: record 5 is wrong
    q.send(1, 0, 10);
    // Records before it, then the dispute at 5; nothing after it, though 6-9 agree.
    CHECK(q.records() == range(0, 5));
    REQUIRE(q.of(prizma::StreamEventKind::dispute) == std::vector<std::uint64_t>{5});
    CHECK(q.log.back().count == 2);
    CHECK(q.stream->next_sequence() == 5);
    const auto copies = q.stream->disputed();
    REQUIRE(copies.size() == 2);
    CHECK(copies[0].source == q.pubs[0].tsi());  // heard first
    CHECK(copies[1].source == q.pubs[1].tsi());
    CHECK(copies[0].votes == 1);
    REQUIRE(copies[1].record.size() == prizma::RecordHeader::kBytes + 64);
    CHECK(std::memcmp(copies[1].record.data() + prizma::RecordHeader::kBytes, body(5).data(), 64)
          == 0);
    const std::uint64_t right = copies[1].checksum;
    // Time alone settles nothing, and nothing is read past the halt's buffer.
    g_now += 10'000'000'000;
    q.pump();
    CHECK(q.records() == range(0, 5));
    CHECK(q.of(prizma::StreamEventKind::dispute).size() == 1);  // once per position
    // Wrong requests are refused and change nothing.
    CHECK_FALSE(q.stream->resolve(6, right).has_value());
    CHECK_FALSE(q.stream->resolve(5, right ^ 1U).has_value());
    REQUIRE(q.stream->resolve(5, right).has_value());
    q.pump();
    CHECK(q.records() == range(0, 10));
    CHECK(q.all_right());  // record 5 is the standby's copy
    // The active's copy is reported after the record, with its bytes and source.
    REQUIRE(q.of(prizma::StreamEventKind::divergence) == std::vector<std::uint64_t>{5});
    for (const Event& e : q.log) {
        if (e.kind == prizma::StreamEventKind::divergence) {
            CHECK(e.source == q.pubs[0].tsi());
            CHECK(e.payload == body(1005));
        }
    }
    CHECK(q.stream->disputed().empty());
    CHECK(q.stream->counters().disputes == 1);
    CHECK(q.stream->counters().resolved == 1);
    CHECK(q.stream->counters().divergences == 1);
    CHECK_FALSE(q.stream->resolve(5, right).has_value());  // settled already
}

TEST_CASE("stream quorum: three publishers, one wrong: the majority goes on, no halt",
          "[unit][stream]") {
    Quorum q("quorum-majority", 3, 2);
    for (std::size_t p = 0; p < 3; ++p) {
        q.send(p, 0, 5);
    }
    CHECK(q.records() == range(0, 5));
    q.send(0, 5, 10, 7);  // the first heard is wrong at 7
    q.send(1, 5, 10);     // 1 and 0 disagree at 7: the third is waited for
    CHECK(q.records() == range(0, 7));
    CHECK(q.of(prizma::StreamEventKind::dispute).empty());
    q.send(2, 5, 10);
    CHECK(q.records() == range(0, 10));
    CHECK(q.all_right());
    CHECK(q.of(prizma::StreamEventKind::divergence) == std::vector<std::uint64_t>{7});
    CHECK(q.of(prizma::StreamEventKind::dispute).empty());
    CHECK(q.stream->counters().unconfirmed == 0);
    // Two wrong in different ways and the third silent: no majority at the timeout.
    q.send(0, 10, 12, 11);
    q.send(1, 10, 12, UINT64_MAX);
    CHECK(q.records() == range(0, 11));
    g_now += 100'000'000;
    q.pump();
    CHECK(q.of(prizma::StreamEventKind::dispute) == std::vector<std::uint64_t>{11});
    CHECK(q.records() == range(0, 11));
    q.send(2, 10, 12);  // the third, late: its copy completes the quorum of 2
    CHECK(q.records() == range(0, 12));
    CHECK(q.all_right());
}

TEST_CASE("stream quorum: a silent publisher delays one record by quorum_timeout, no more",
          "[unit][stream]") {
    Quorum q("quorum-silent", 2, 2);
    q.send(0, 0, 3);
    q.send(1, 0, 3);
    CHECK(q.records() == range(0, 3));
    q.send(0, 3, 8);  // the standby has failed
    CHECK(q.records() == range(0, 3));
    g_now += 100'000'000 - 1;
    q.pump();
    CHECK(q.records() == range(0, 3));
    g_now += 1;
    q.pump();
    // Record 3 at the timeout, and 4-7 at once: the silent one is not waited for again.
    CHECK(q.records() == range(0, 8));
    CHECK(q.all_right());
    CHECK(q.stream->counters().unconfirmed == 5);
    for (const Event& e : q.log) {
        CHECK(e.count == (e.sequence < 3 ? 2U : 1U));
    }
    // It sends again: counted again, its copies waited for.
    q.send(1, 8, 9);
    q.send(0, 8, 9);
    q.send(0, 9, 10);
    CHECK(q.records() == range(0, 9));
    q.send(1, 9, 10);
    CHECK(q.records() == range(0, 10));
    CHECK(q.stream->counters().unconfirmed == 5);
}

// A subscriber that can read the settled copy elsewhere (an ExecLog consumer, from the
// archive): the record whose quorum timed out is a loss event, never its lone copy, even when
// the late copy would have been a different one.
TEST_CASE("stream quorum: with quorum_timeout_loss a timed-out record is lost, not unconfirmed",
          "[unit][stream]") {
    Quorum q("quorum-timeout-loss", 2, 2, 4096, true);
    q.send(0, 0, 3);
    q.send(1, 0, 3);
    CHECK(q.records() == range(0, 3));
    q.send(0, 3, 6, 3);  // the active's copy of 3 is wrong; the standby's is late
    g_now += 100'000'000;
    q.pump();
    CHECK(q.of(prizma::StreamEventKind::loss) == std::vector<std::uint64_t>{3});
    CHECK(q.records() == std::vector<std::uint64_t>{0, 1, 2, 4, 5});  // the late one: not waited
    CHECK(q.stream->counters().quorum_losses == 1);
    CHECK(q.stream->counters().lost_records == 1);
    CHECK(q.stream->counters().overflows == 0);
    for (const Event& e : q.log) {
        CHECK((e.kind != prizma::StreamEventKind::record || e.sequence != 3));
    }
    q.send(1, 3, 6);  // it comes back: waited for again
    q.send(0, 6, 7);
    CHECK(q.records() == std::vector<std::uint64_t>{0, 1, 2, 4, 5});
    q.send(1, 6, 7);
    CHECK(q.records() == std::vector<std::uint64_t>{0, 1, 2, 4, 5, 6});
}

TEST_CASE("stream quorum: a halt reads at most 16 x buffer_records, and nothing is lost after it",
          "[unit][stream]") {
    // While halted the stream goes on reading (the copy that settles the dispute may come
    // after the others' backlog), but no more than 16 x buffer_records records; what stays
    // unread waits in the subscriber (PGM's window).
    Quorum q("quorum-bounded", 2, 2, 8);
    for (std::uint64_t at = 0; at < 8; at += 4) {  // the copies a few records apart
        q.send(0, at, at + 4, 2);
        q.send(1, at, at + 4);
    }
    CHECK(q.records() == range(0, 2));
    REQUIRE(q.of(prizma::StreamEventKind::dispute) == std::vector<std::uint64_t>{2});
    for (std::uint64_t at = 8; at < 200; at += 4) {
        q.send(0, at, at + 4);
        q.send(1, at, at + 4);
    }
    CHECK(q.records() == range(0, 2));
    // `buffered` counts the records taken ahead of `next` (a few before the halt too)
    const auto read = q.stream->counters().buffered;
    CHECK(read > 100);          // it read well past buffer_records while halted
    CHECK(read <= 16 * 8 + 8);  // and stopped at its bound:
    for (std::uint64_t at = 200; at < 260; at += 4) {
        q.send(0, at, at + 4);
        q.send(1, at, at + 4);
    }
    CHECK(q.stream->counters().buffered == read);  // nothing more read
    REQUIRE(q.stream->resolve(2, q.stream->disputed()[1].checksum).has_value());
    for (int i = 0; i < 10; ++i) {
        q.pump();
    }
    CHECK(q.records() == range(0, 260));
    CHECK(q.all_right());
    CHECK(q.of(prizma::StreamEventKind::loss).empty());
    CHECK(q.stream->counters().overflows == 0);
    CHECK(q.stream->counters().unconfirmed == 0);
}

TEST_CASE("stream quorum: the copy that settles a dispute is found behind the others' backlog",
          "[unit][stream]") {
    // Three publishers, buffer_records 8. Two disagree at 2 while the third is late; they go
    // on far past buffer_records before the third's copy of 2 comes, behind their backlog in
    // the subscriber. The halted stream must read on to it: it settles the dispute, no
    // operator needed.
    Quorum q("quorum-behind", 3, 2, 8);
    for (std::size_t p = 0; p < 3; ++p) {
        q.send(p, 0, 2);
    }
    q.send(0, 2, 3, 2);
    q.send(1, 2, 3);
    g_now += 100'000'000;
    q.pump();
    REQUIRE(q.of(prizma::StreamEventKind::dispute) == std::vector<std::uint64_t>{2});
    q.send(0, 3, 60);
    q.send(1, 3, 60);
    CHECK(q.records() == range(0, 2));
    q.send(2, 2, 60);
    CHECK(q.records() == range(0, 60));
    CHECK(q.all_right());
    CHECK(q.of(prizma::StreamEventKind::divergence) == std::vector<std::uint64_t>{2});
    CHECK(q.of(prizma::StreamEventKind::loss).empty());
    CHECK(q.stream->counters().unconfirmed == 0);
}

TEST_CASE("stream quorum: bad options are refused", "[unit][stream]") {
    prizma::StreamOptions o;
    o.arbitration = prizma::Arbitration::quorum;
    o.quorum = 0;
    CHECK_FALSE(prizma::StreamSubscriber::create(o).has_value());
    o.quorum = 2;
    o.quorum_timeout = std::chrono::milliseconds(-1);
    CHECK_FALSE(prizma::StreamSubscriber::create(o).has_value());
    o.quorum_timeout = std::chrono::milliseconds(0);
    CHECK(prizma::StreamSubscriber::create(o).has_value());
}

// One copy's newer epoch (a forged record: any checksum verifies) used to reset the stream at
// once, every honest record after it `stale_epoch`. In quorum mode a reset needs the quorum's
// publishers on the new epoch, like a record.
TEST_CASE("stream quorum trust: an epoch change needs the quorum, one copy's is held",
          "[unit][stream][trust]") {
    Quorum q("quorum-epoch", 3, 2);
    q.send(0, 0, 3);
    q.send(1, 0, 3);
    q.send(2, 3, 4, UINT64_MAX, 1000, 9);  // one publisher (forged): epoch 9 from 3
    CHECK(q.of(prizma::StreamEventKind::reset).empty());
    CHECK(q.stream->counters().epoch_pending == 1);
    q.send(0, 3, 6);
    q.send(1, 3, 6);
    g_now += 1'000'000'000;
    q.pump();
    CHECK(q.records() == range(0, 6));  // the pair goes on in epoch 1
    CHECK(q.stream->counters().stale_epoch == 0);
    CHECK(q.of(prizma::StreamEventKind::reset).empty());
    // The pair's own deliberate reset, epoch 2 from 0: once both sent it.
    q.send(0, 0, 3, UINT64_MAX, 1000, 2);
    CHECK(q.of(prizma::StreamEventKind::reset).empty());
    CHECK(q.records() == range(0, 6));
    q.send(1, 0, 3, UINT64_MAX, 1000, 2);
    CHECK(q.of(prizma::StreamEventKind::reset) == std::vector<std::uint64_t>{0});
    auto expect = range(0, 6);
    for (std::uint64_t i = 0; i < 3; ++i) {
        expect.push_back(i);
    }
    CHECK(q.records() == expect);
    CHECK(q.all_right());
    for (const Event& e : q.log) {
        CHECK((e.kind != prizma::StreamEventKind::record || e.count == 2));
    }
    CHECK(q.stream->counters().unconfirmed == 0);
}

// A gap in quorum mode is lost only when the quorum's publishers agree on a record after it:
// a forged record ahead (within the buffer) does not end a gap at the timeout, a record lost
// on both copies of a pair still is.
TEST_CASE("stream quorum trust: one copy's record ahead does not decide a loss",
          "[unit][stream][trust]") {
    Quorum q("quorum-gap", 3, 2, 8);
    q.send(0, 0, 3);
    q.send(1, 0, 3);
    q.send(2, 5, 6, 5);  // forged, ahead of the gap at 3
    constexpr std::uint64_t kFar = 3 + 1'000'000'000ULL;
    q.send(2, kFar, kFar + 1);  // and far ahead
    CHECK(q.stream->counters().too_far == 1);
    g_now += 2'000'000'000;  // four gap timeouts
    q.pump();
    CHECK(q.of(prizma::StreamEventKind::loss).empty());
    CHECK(q.stream->next_sequence() == 3);
    q.send(0, 3, 10);
    q.send(1, 3, 10);
    CHECK(q.records() == range(0, 10));
    CHECK(q.all_right());
    CHECK(q.of(prizma::StreamEventKind::divergence) == std::vector<std::uint64_t>{5});
    // Honest: 10 lost on both copies of the pair, 11 on: lost at the gap timeout.
    q.send(0, 11, 13);
    q.send(1, 11, 13);
    g_now += 500'000'000;
    q.pump();
    CHECK(q.of(prizma::StreamEventKind::loss) == std::vector<std::uint64_t>{10});
    CHECK(q.records().back() == 12);
    CHECK(q.stream->counters().lost_records == 1);
}

// Sixteen forged publishers, each with its own copy, used to fill a record's sixteen votes and
// lock the true pair out (a dispute). A publisher that agreed with delivered records now takes
// the place of a vote of none.
TEST_CASE("stream quorum trust: sixteen forged publishers do not lock the true ones out",
          "[unit][stream][trust]") {
    Quorum q("quorum-flood", 2, 2);
    // The forged sources on four more channels of the stream, four each (a channel's source
    // storage budget holds four by default).
    std::vector<prizma::Subscriber> forged_subs;
    forged_subs.reserve(4);  // the stream keeps their addresses
    std::vector<prizma::Publisher> forged;
    for (int c = 0; c < 4; ++c) {
        const std::string uri = "mem://quorum-flood-" + std::to_string(c) + ":7600";
        forged_subs.push_back(q.ctx.add_subscriber(uri).value());
        REQUIRE(q.stream->add(forged_subs.back()).has_value());
        for (int p = 0; p < 4; ++p) {
            forged.push_back(q.ctx.add_publisher(uri).value());
        }
    }
    q.send(0, 0, 3);
    q.send(1, 0, 3);
    CHECK(q.records() == range(0, 3));
    for (std::size_t p = 0; p < forged.size(); ++p) {
        auto w = prizma::StreamPublisher::create(forged[p], 42, 1, 3).value();
        REQUIRE(w.offer(body(3 + 1000 * (p + 1))).has_value());  // each a different wrong copy
        q.pump();
    }
    CHECK(q.stream->counters().duplicates == 3 + 15);  // 16 forged votes on record 3
    CHECK(q.records() == range(0, 3));
    q.send(0, 3, 5);
    q.send(1, 3, 5);
    CHECK(q.records() == range(0, 5));
    CHECK(q.all_right());
    CHECK(q.of(prizma::StreamEventKind::dispute).empty());
    CHECK(q.stream->counters().votes_refused == 2);
}

// The pinned behaviour: one publisher's copy heard twice (a resend, a second path) is one
// vote, never two: the record still waits for the other publisher.
TEST_CASE("stream quorum trust: a publisher's copy heard twice is one vote",
          "[unit][stream][trust]") {
    Quorum q("quorum-twice", 2, 2);
    auto second_path = q.ctx.add_subscriber("mem://quorum-twice:7600");
    REQUIRE(second_path.has_value());
    REQUIRE(q.stream->add(*second_path).has_value());
    q.send(0, 0, 2);
    q.send(1, 0, 2);
    REQUIRE(q.records() == range(0, 2));
    q.send(0, 2, 3);
    q.send(0, 2, 3);  // the same record again: a resend, and each on two subscribers
    CHECK(q.stream->counters().duplicates >= 3);
    CHECK(q.records() == range(0, 2));  // one vote: not the quorum of 2
    q.send(1, 2, 3);
    CHECK(q.records() == range(0, 3));
    CHECK(q.log.back().count == 2);
    CHECK(q.stream->counters().unconfirmed == 0);
}

// What docs/STREAMS.md says the stream holds: ballots keep each record's first copy up to
// 16 x buffer_records ahead, and other copies only within buffer_records: at most
// (16 + 15) x buffer_records whole records, here 62.
TEST_CASE("stream quorum trust: the records held stay within (16 + 15) x buffer_records",
          "[unit][stream][trust]") {
    Quorum q("quorum-memory", 16, 2, 2);
    for (std::uint64_t i = 0; i < 40; ++i) {
        for (std::size_t p = 0; p < 16; ++p) {
            q.send(p, i, i + 1, i, 1000 * (p + 1));  // every copy of every record different
        }
    }
    CHECK(q.of(prizma::StreamEventKind::dispute) == std::vector<std::uint64_t>{0});
    const std::size_t held = prizma::detail::StreamSubscriberTesting::stored_records(*q.stream);
    CHECK(held <= (16 + 15) * 2);
    CHECK(held > 16 * 2);  // first copies beyond buffer_records are kept: the bound is real
}
