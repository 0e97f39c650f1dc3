// SPDX-License-Identifier: Apache-2.0
// Boundaries of the receiver's state machine, each asserted exactly: the one-off mistakes
// (an off-by-one at the trail, `>` for `>=` at a retry limit, a NAK without its back-off, a
// source expired while its ambient SPMs come) that scenarios with slack let through.
// scripts/mutate.sh checks that each of them makes a case here fail (docs/TESTING.md).
// Sans-I/O with a manual clock: a hand-driven Receiver (tests/support/rx_harness.hpp) or the
// in-memory network (tests/support/sim.hpp).
#include <algorithm>
#include <set>
#include <vector>

#include "tests/support/rx_harness.hpp"

using namespace prizma;           // NOLINT(google-build-using-namespace): test file
using namespace prizma::testing;  // NOLINT(google-build-using-namespace): test file

namespace {

std::vector<std::byte> rdata(const Stream& st, std::uint32_t s, Sqn trail) {
    return st.f.data(Sqn{s}, trail, make_message(s, 100), nullptr, PacketType::rdata);
}

/// What a missing sqn's NAK chain did until its loss was reported.
struct Chain {
    std::size_t naks = 0;  ///< NAKs that asked for it
    std::size_t ncfs = 0;  ///< NCFs fed back (one per NAK when `confirm`)
    bool lost = false;
};

/// Runs the timers, deadline by deadline, until `s` is reported lost (at most 10 s); each NAK
/// for it is answered at once with an NCF when `confirm` (the RDATA never comes).
Chain nak_until_loss(Rx& rx, const Stream& st, Sqn s, bool confirm) {
    Chain c;
    const std::int64_t end = rx.now + 10 * kSec;
    for (int i = 0; i < 100'000 && rx.count(Kind::loss) == 0 && rx.step(end); ++i) {
        const std::size_t naks = rx.net.naks_for(s);
        if (naks != c.naks) {
            c.naks = naks;
            if (confirm) {
                rx.feed(st.f.ncf(s), kSourceOtherSocket);
                ++c.ncfs;
            }
        }
    }
    c.lost = rx.count(Kind::loss) == 1;
    return c;
}

/// Messages 0..9 and 11..19 delivered, 10 reported lost (one event), nothing else.
void require_only_10_lost(const Rx& rx) {
    const auto loss = std::find_if(rx.got.begin(), rx.got.end(),
                                   [](const Got& g) { return g.kind == Kind::loss; });
    REQUIRE(loss != rx.got.end());
    CHECK(loss->sqn == 10);
    CHECK(loss->count == 1);
    std::vector<std::uint64_t> want;
    for (std::uint64_t i = 0; i < 20; ++i) {
        if (i != 10) {
            want.push_back(i);
        }
    }
    CHECK(rx.data_indices() == want);
    CHECK(rx.counters().lost_sqns == 1);
}

}  // namespace

TEST_CASE("boundary: the trail inside a lost run: sqns before it lost, the trail itself repaired",
          "[protocol][boundary][trail]") {
    // 0..9 and 20 arrive; 10..19 are missing, in back-off. The source's trail then moves to
    // 15 (by an SPM, by ODATA, or first to 13 and then to 15): 10..14 are gone for good, and
    // 15 is the oldest sqn the source can still repair.
    enum class Via : std::uint8_t { spm, odata, two_steps };
    for (const Via via : {Via::spm, Via::odata, Via::two_steps}) {
        INFO("trail moved by " << (via == Via::spm     ? "an SPM"
                                   : via == Via::odata ? "ODATA"
                                                       : "two steps"));
        Rx rx;
        Stream st;
        st.open(rx);
        st.send(rx, 10);
        st.next = Sqn{20};
        st.send(rx, 1);
        const Sqn trail{15};
        const auto odata21 = st.f.data(Sqn{21}, trail, make_message(21, 100));
        switch (via) {
            case Via::spm: rx.feed(st.f.spm(trail, Sqn{20}), kSourceOtherSocket); break;
            case Via::odata: rx.feed(odata21, kSource); break;
            case Via::two_steps:
                rx.feed(st.f.spm(Sqn{13}, Sqn{20}), kSourceOtherSocket);
                CHECK(rx.counters().lost_sqns == 3);
                rx.feed(odata21, kSource);
                break;
        }
        CHECK(rx.counters().lost_sqns == 5);
        // The back-off ends: one NAK, for exactly 15..19.
        (void)rx.run_for(rx.r->config().timers.nak_bo_ivl_ns);
        REQUIRE(rx.net.count(PacketType::nak) == 1);
        CHECK(rx.net.sent.back().sqns
              == std::vector<Sqn>{Sqn{15}, Sqn{16}, Sqn{17}, Sqn{18}, Sqn{19}});
        // 10..14 make one loss event, reported once 15 resolves (its repair comes now).
        CHECK(rx.count(Kind::loss) == 0);
        for (std::uint32_t s = 15; s < 20; ++s) {
            rx.feed(rdata(st, s, trail), kSourceOtherSocket);
        }
        REQUIRE(rx.count(Kind::loss) == 1);
        const auto loss = std::find_if(rx.got.begin(), rx.got.end(),
                                       [](const Got& g) { return g.kind == Kind::loss; });
        CHECK(loss->sqn == 10);
        CHECK(loss->count == 5);
        std::vector<std::uint64_t> want{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 18, 19, 20};
        if (via != Via::spm) {
            want.push_back(21);
        }
        CHECK(rx.data_indices() == want);
        CHECK(rx.counters().repaired == 5);
        CHECK(rx.counters().lost_sqns == 5);
    }
}

TEST_CASE("boundary: exactly nak_ncf_retries NAKs without an NCF, then the loss",
          "[protocol][boundary][nak]") {
    for (const std::uint32_t retries : {3U, 5U}) {
        INFO("nak_ncf_retries " << retries);
        auto c = receiver_config(11);
        c.timers.nak_ncf_retries = retries;
        Rx rx(c);
        Stream st;
        st.open(rx);
        st.send(rx, 20, 10);  // 10 lost; no NCF, no RDATA ever
        const Chain chain = nak_until_loss(rx, st, Sqn{10}, false);
        REQUIRE(chain.lost);
        CHECK(chain.naks == retries);
        CHECK(rx.counters().nak_sent == retries);
        CHECK(rx.counters().repair_timeouts == 0);  // the retry limit, not the absolute deadline
        require_only_10_lost(rx);
    }
}

TEST_CASE("boundary: exactly nak_data_retries NCFs without RDATA, then the loss",
          "[protocol][boundary][nak]") {
    for (const std::uint32_t retries : {3U, 5U}) {
        INFO("nak_data_retries " << retries);
        auto c = receiver_config(12);
        c.timers.nak_data_retries = retries;
        Rx rx(c);
        Stream st;
        st.open(rx);
        st.send(rx, 20, 10);  // 10 lost; every NAK gets its NCF, the RDATA never comes
        const Chain chain = nak_until_loss(rx, st, Sqn{10}, true);
        REQUIRE(chain.lost);
        CHECK(chain.naks == retries);
        CHECK(chain.ncfs == retries);
        CHECK(rx.counters().ncf_received == retries);
        CHECK(rx.counters().repair_timeouts == 0);
        require_only_10_lost(rx);
    }
}

TEST_CASE("boundary: the first NAK waits a random back-off of at most nak_backoff, never none",
          "[protocol][boundary][nak]") {
    // RFC 3208 §6.3: NAK_RB_IVL is drawn from (0, NAK_BO_IVL], also for the very first NAK of
    // a receiver that knows the source's address already (its SPM came before the loss), and
    // from the SPM on for a gap found before it (§6.2: no NAK before the first SPM). With a
    // back-off of 1 ns the draw is exactly 1 ns: a NAK at the detection instant shows.
    for (const std::int64_t bo : {std::int64_t{2 * kMs}, std::int64_t{1}}) {
        for (const bool spm_first : {true, false}) {
            INFO("nak_backoff " << bo << " ns, " << (spm_first ? "SPM first" : "gap first"));
            std::set<std::int64_t> waits;
            for (std::uint64_t seed = 1; seed <= 32; ++seed) {
                INFO("seed " << seed);
                auto c = receiver_config(seed);
                c.timers.nak_bo_ivl_ns = bo;
                Rx rx(c);
                Stream st;
                if (spm_first) {
                    st.open(rx);
                }
                st.send(rx, 10);
                ++st.next;  // 10 lost
                std::int64_t detected = rx.now;
                st.send(rx, 1);  // 11: the gap is found
                if (!spm_first) {
                    (void)rx.run_for(20 * kMs);
                    REQUIRE(rx.net.count(PacketType::nak) == 0);  // parked until the SPM
                    detected = rx.now;
                    rx.feed(st.f.spm(Sqn{0}, Sqn{11}), kSourceOtherSocket);
                }
                rx.now = detected;
                rx.r->on_timer(detected, rx.net);  // the detection instant itself
                CHECK(rx.net.naks_for(Sqn{10}) == 0);
                std::int64_t nak_at = -1;
                for (int i = 0; i < 10'000 && nak_at < 0 && rx.step(detected + 2 * bo); ++i) {
                    if (rx.net.naks_for(Sqn{10}) != 0) {
                        nak_at = rx.now;
                    }
                }
                REQUIRE(nak_at >= 0);
                CHECK(nak_at > detected);
                CHECK(nak_at <= detected + bo);
                waits.insert(nak_at - detected);
            }
            if (bo > 1) {
                CHECK(waits.size() > 8);  // drawn, not one fixed wait
            }
        }
    }
}

TEST_CASE("boundary: a quiet source's ambient SPMs keep it alive, without them it expires",
          "[protocol][boundary][expiry]") {
    Sim sim;
    memory::LossyTransport::Config link;  // passes everything until cut below
    auto& rcv = sim.add_receiver(receiver_config(5), link);
    auto& src = sim.add_source(source_config());  // its opening SPMs reach the receiver
    sim.pump();
    const auto& t = rcv.receiver().config().timers;
    REQUIRE(t.peer_expiry_ns > 2 * t.ambient_spm_ns);
    // No data at all for four expiry periods: the ambient SPMs alone keep the source.
    sim.run_for(4 * t.peer_expiry_ns, 50 * kMs);
    CHECK(src.source().counters().odata_sent == 0);
    const auto ambient_spms = static_cast<std::uint64_t>(4 * t.peer_expiry_ns / t.ambient_spm_ns);
    CHECK(rcv.receiver().counters().spm_received >= 3 + ambient_spms - 1);
    CHECK(rcv.count(Kind::joined) == 1);
    CHECK(rcv.count(Kind::left) == 0);
    CHECK(rcv.count(Kind::loss) == 0);
    CHECK(rcv.receiver().peer_count() == 1);
    // Still the same source, window intact: a message after the long idle is delivered.
    REQUIRE(src.session->publish(make_message(0, 100), sim.now).has_value());
    sim.run_for(5 * kSec, 50 * kMs);  // the heartbeats after it end
    REQUIRE(rcv.data().size() == 1);
    // Cut: no SPM arrives any more. It expires one peer_expiry after the last one it heard.
    rcv.lossy->config().drop = 1.0;
    const std::int64_t cut = sim.now;
    REQUIRE(
        sim.run_until([&] { return rcv.count(Kind::left) == 1; }, 2 * t.peer_expiry_ns, 50 * kMs));
    CHECK(sim.now >= cut + t.peer_expiry_ns - t.ambient_spm_ns);
    CHECK(sim.now <= cut + t.peer_expiry_ns + 50 * kMs);
    CHECK(rcv.count(Kind::loss) == 0);
    CHECK(rcv.receiver().peer_count() == 0);
}

TEST_CASE("boundary: data one window ahead of the oldest undelivered sqn is dropped, not stored",
          "[protocol][boundary][window]") {
    // A window of 1024: 0 is missing, 1..1023 held. 1024 would take 0's slot: it is dropped
    // (counted), and NAKed once the window has moved.
    auto c = receiver_config(13);
    c.rxw_sqns = 1024;
    c.max_recover_sqns = 512;
    Rx rx(c);
    Stream st;
    st.open(rx);
    st.send(rx, 1024, 0);
    REQUIRE(rx.data_indices().empty());
    rx.feed(st.f.data(Sqn{1024}, Sqn{0}, make_message(1024, 100)), kSource);
    CHECK(rx.counters().outside_window == 1);
    CHECK(rx.data_indices().empty());
    st.repair(rx, Sqn{0});
    require_all_delivered(rx, 1024);
    rx.feed(st.f.data(Sqn{1024}, Sqn{0}, make_message(1024, 100)), kSource);  // its repair
    require_all_delivered(rx, 1025);
}

TEST_CASE("boundary: an NCF one window ahead of the oldest undelivered sqn changes nothing",
          "[protocol][boundary][window]") {
    auto c = receiver_config(14);
    c.rxw_sqns = 1024;
    c.max_recover_sqns = 512;
    Rx rx(c);
    Stream st;
    st.open(rx);
    st.send(rx, 11, 0);                                // 0 missing, in back-off; 1..10 held
    rx.feed(st.f.ncf(Sqn{1024}), kSourceOtherSocket);  // 0's slot, one window on
    CHECK(rx.counters().nak_suppressed == 0);
    (void)rx.run_for(rx.r->config().timers.nak_bo_ivl_ns);
    REQUIRE(rx.net.count(PacketType::nak) == 1);  // 0's, on time; no gap opened up to 1023
    CHECK(rx.net.sent.back().sqns == std::vector<Sqn>{Sqn{0}});
    CHECK(rx.counters().nak_sqns_sent == 1);
}

// An SPM from the pinned sender's own address with another NLA is another sender (NAKs would go
// elsewhere): refused while the pinned one is alive, i.e. its last SPM is less than two ambient
// SPM intervals old; from exactly two intervals on, kConfirmSpms agreeing SPMs move the pin.
TEST_CASE("boundary: an SPM from the pinned address with another NLA is refused, then confirmed",
          "[protocol][boundary][spm]") {
    constexpr std::uint64_t kConfirm = protocol::Receiver::kConfirmSpms;
    Rx rx;
    Stream st;
    const std::int64_t pinned_at = rx.now;
    st.open(rx);
    st.send(rx, 10);
    const std::int64_t two_ambient = 2 * rx.r->config().timers.ambient_spm_ns;
    Forge moved = st.f;
    moved.nla = pgm::Nla::ipv4(10, 0, 0, 9);
    rx.now = pinned_at + 1;
    rx.feed(moved.spm(Sqn{0}, st.next - 1), kSourceOtherSocket);
    CHECK(rx.counters().refused == 1);
    rx.now = pinned_at + two_ambient - 1;
    for (std::uint64_t i = 0; i < kConfirm; ++i) {
        rx.feed(moved.spm(Sqn{0}, st.next - 1), kSourceOtherSocket);
    }
    CHECK(rx.counters().refused == 1 + kConfirm);
    CHECK(rx.counters().repins == 0);
    rx.now = pinned_at + two_ambient;
    for (std::uint64_t i = 0; i < kConfirm; ++i) {
        rx.feed(moved.spm(Sqn{0}, st.next - 1), kSourceOtherSocket);
    }
    CHECK(rx.counters().refused == 2 * kConfirm);  // all but the last
    CHECK(rx.counters().repins == 1);
    st.send(rx, 10, 15);  // sqn 15 lost: its NAK names the new NLA
    (void)rx.run_for(50 * kMs);
    REQUIRE(rx.net.count(PacketType::nak) >= 1);
    for (const auto& s : rx.net.sent) {
        if (s.type == PacketType::nak) {
            CHECK(s.nla == moved.nla);
        }
    }
}
