// SPDX-License-Identifier: Apache-2.0
// Protocol scenarios over the in-memory network with a manual clock (RFC 3208 names).
#include <cstring>
#include <vector>

#include "tests/support/catch.hpp"
#include "tests/support/sim.hpp"

using namespace prizma;           // NOLINT(google-build-using-namespace): test file
using namespace prizma::testing;  // NOLINT(google-build-using-namespace): test file
using protocol::Event;
using protocol::kMs;
using protocol::kUs;
using Kind = protocol::Event::Kind;

namespace {

constexpr std::uint8_t kOdata = 0x04;
constexpr std::uint8_t kRdata = 0x05;

memory::LossyTransport::Config drop(std::vector<memory::LossyTransport::Rule> rules,
                                    std::uint64_t seed = 1) {
    memory::LossyTransport::Config c;
    c.seed = seed;
    c.drop_rules = std::move(rules);
    return c;
}

void publish_n(
    Sim& sim, Sim::Node& src, std::uint64_t first, std::uint64_t n, std::size_t size = 100) {
    for (std::uint64_t i = first; i < first + n; ++i) {
        auto r = src.session->publish(make_message(i, size), sim.now);
        REQUIRE(r.has_value());
    }
}

std::uint64_t index_of(const std::vector<std::byte>& m) {
    std::uint64_t i = 0;
    std::memcpy(&i, m.data(), 8);
    return i;
}

void require_in_order(const Sim::Node& r,
                      std::uint64_t first,
                      std::uint64_t n,
                      std::size_t size = 100) {
    const auto d = r.data();
    REQUIRE(d.size() == n);
    for (std::uint64_t i = 0; i < n; ++i) {
        REQUIRE(d[i] == make_message(first + i, size));
    }
}

}  // namespace

TEST_CASE("lost ODATA is repaired: NAK after back-off, NCF, RDATA delivered in order",
          "[protocol][nak]") {
    Sim sim;
    // The receiver is there first: the source's opening SPMs give it the NLA, so its first
    // NAK waits one back-off from detection (not the SPMR exchange).
    auto& rcv = sim.add_receiver(receiver_config(7), drop({{kOdata, 3, 1}}));
    auto& src = sim.add_source(source_config());
    sim.pump();
    REQUIRE(rcv.receiver().counters().spm_received == 3);
    publish_n(sim, src, 0, 10);
    sim.pump();
    // Gap detected at once (sqn 4 arrived after 2), but no NAK before the back-off expires.
    CHECK(rcv.receiver().counters().nak_sent == 0);
    CHECK(rcv.data().size() == 3);
    const std::int64_t detected = sim.now;
    const auto bo = protocol::preset(protocol::Preset::lan).nak_bo_ivl_ns;
    REQUIRE(
        sim.run_until([&] { return rcv.receiver().counters().nak_sent == 1; }, 2 * bo, 10 * kUs));
    const std::int64_t waited = sim.now - detected;
    CHECK(waited > 0);
    CHECK(waited <= bo + 10 * kUs);  // RFC 3208 §6.3: NAK_RB_IVL within (0, NAK_BO_IVL]
    // The source answered at once with an NCF and the RDATA.
    CHECK(src.source().counters().nak_received == 1);
    CHECK(src.source().counters().ncf_sent == 1);
    CHECK(src.source().counters().rdata_sent == 1);
    CHECK(rcv.receiver().counters().ncf_received == 1);
    CHECK(rcv.receiver().counters().repaired == 1);
    require_in_order(rcv, 0, 10);
    CHECK(rcv.count(Kind::loss) == 0);
    CHECK(rcv.count(Kind::joined) == 1);
}

TEST_CASE("tail loss is found through the SPM heartbeat's lead and repaired", "[protocol][spm]") {
    Sim sim;
    auto& src = sim.add_source(source_config());
    auto& rcv = sim.add_receiver(receiver_config(3), drop({{kOdata, 9, 1}}));
    sim.pump();
    publish_n(sim, src, 0, 10);
    sim.pump();
    CHECK(rcv.data().size() == 9);
    CHECK(rcv.receiver().counters().nak_sent == 0);  // nothing after 9: no gap seen from data
    sim.run_for(50 * kMs, 50 * kUs);
    CHECK(rcv.receiver().counters().spm_received >= 4);
    CHECK(rcv.receiver().counters().nak_sent >= 1);
    require_in_order(rcv, 0, 10);
}

TEST_CASE("burst loss is repaired with OPT_NAK_LIST NAKs", "[protocol][nak]") {
    std::vector<memory::LossyTransport::Rule> rules;
    for (std::uint32_t s = 10; s < 90; ++s) {
        rules.push_back({kOdata, s, 1});
    }
    Sim sim;
    auto& src = sim.add_source(source_config());
    auto& rcv = sim.add_receiver(receiver_config(5), drop(rules));
    sim.pump();
    publish_n(sim, src, 0, 100);
    sim.run_for(100 * kMs, 50 * kUs);
    const auto& c = rcv.receiver().counters();
    CHECK(c.nak_sqns_sent >= 80);
    // 80 sequence numbers in at most a handful of packets: lists of up to 63 per NAK.
    CHECK(c.nak_sent <= 4);
    CHECK(c.nak_sent >= 2);
    CHECK(c.repaired == 80);
    require_in_order(rcv, 0, 100);
}

TEST_CASE("10 receivers losing the same ODATA send far fewer than 10 NAKs (NCF suppression)",
          "[protocol][suppression]") {
    Sim sim;
    auto& src = sim.add_source(source_config());
    std::vector<Sim::Node*> rcvs;
    for (std::uint64_t i = 0; i < 10; ++i) {
        rcvs.push_back(&sim.add_receiver(receiver_config(100 + i), drop({{kOdata, 5, 1}}, i + 1)));
    }
    sim.pump();
    publish_n(sim, src, 0, 20);
    sim.run_for(20 * kMs, 5 * kUs);
    std::uint64_t naks = 0;
    std::uint64_t suppressed = 0;
    for (auto* r : rcvs) {
        naks += r->receiver().counters().nak_sent;
        suppressed += r->receiver().counters().nak_suppressed;
        require_in_order(*r, 0, 20);
    }
    CHECK(src.source().counters().nak_received == naks);
    CHECK(naks <= 3);
    CHECK(suppressed >= 7);
    CHECK(src.source().counters().rdata_sent <= 2);  // NAK elimination: one RDATA serves all
}

TEST_CASE("duplicates and reordering are delivered once and in order", "[protocol][order]") {
    memory::LossyTransport::Config lc;
    lc.seed = 99;
    lc.duplicate = 0.3;
    lc.reorder = 0.3;
    lc.reorder_ns = 30 * kUs;
    Sim sim;
    auto& src = sim.add_source(source_config());
    auto& rcv = sim.add_receiver(receiver_config(9), lc);
    sim.pump();
    for (std::uint64_t i = 0; i < 1000; ++i) {
        publish_n(sim, src, i, 1);
        sim.run_for(10 * kUs, 10 * kUs);
    }
    sim.run_for(50 * kMs, 50 * kUs);
    CHECK(rcv.lossy->stats().duplicated > 100);
    CHECK(rcv.lossy->stats().reordered > 100);
    CHECK(rcv.receiver().counters().duplicates > 100);
    require_in_order(rcv, 0, 1000);
    CHECK(rcv.count(Kind::loss) == 0);
}

TEST_CASE("a lost fragment is repaired and the APDU reassembled", "[protocol][fragment]") {
    Sim sim;
    auto& src = sim.add_source(source_config());
    auto& rcv = sim.add_receiver(receiver_config(11), drop({{kOdata, 3, 1}, {kOdata, 7, 1}}));
    sim.pump();
    const auto small = make_message(1, 100);
    const auto big = make_message(2, 8000);  // 1428-byte fragments: 6 TPDUs
    const auto largest = make_message(3, src.source().max_apdu());
    REQUIRE(src.session->publish(small, sim.now).has_value());
    REQUIRE(*src.session->publish(big, sim.now) == pgm::Sqn{1});
    REQUIRE(*src.session->publish(largest, sim.now) == pgm::Sqn{7});
    CHECK(src.source().next_sqn() == pgm::Sqn{7 + 16});  // 16 fragments, OpenPGM's maximum
    CHECK(src.session->publish(make_message(4, src.source().max_apdu() + 1), sim.now).error()
          == Errc::message_too_large);
    sim.run_for(50 * kMs, 50 * kUs);
    const auto d = rcv.data();
    REQUIRE(d.size() == 3);
    CHECK(d[0] == small);
    CHECK(d[1] == big);
    CHECK(d[2] == largest);
    CHECK(rcv.receiver().counters().repaired == 2);
}

TEST_CASE("loss beyond the transmit window is reported, then delivery continues",
          "[protocol][loss]") {
    auto sc = source_config();
    sc.txw_sqns = 32;
    Sim sim;
    auto& src = sim.add_source(sc);
    auto& rcv = sim.add_receiver(receiver_config(13), drop({{kOdata, 5, 1}}));
    sim.pump();
    publish_n(sim, src, 0, 100);  // sqn 5 leaves the 32-packet window before any NAK
    sim.run_for(100 * kMs, 50 * kUs);
    // The trail carried by later ODATA told the receiver before its back-off ended: no NAK.
    CHECK(rcv.receiver().counters().nak_sent == 0);
    REQUIRE(rcv.count(Kind::loss) == 1);
    std::size_t i = 0;
    std::vector<std::uint64_t> delivered;
    for (const auto& e : rcv.events) {
        if (e.kind == Kind::loss) {
            CHECK(e.sqn == 5);
            CHECK(e.count == 1);
            CHECK(delivered.size() == 5);  // reported in sequence position
        } else if (e.kind == Kind::data) {
            delivered.push_back(index_of(e.payload));
        }
        ++i;
    }
    REQUIRE(delivered.size() == 99);
    for (std::size_t k = 0; k < delivered.size(); ++k) {
        CHECK(delivered[k] == (k < 5 ? k : k + 1));
    }
    CHECK(rcv.receiver().counters().lost_sqns == 1);
}

TEST_CASE("a receiver behind a moving trail loses each sqn once, in position, across windows",
          "[protocol][loss]") {
    // The transmit window (64) slides past three lost runs before any repair can come, and the
    // 256-slot receive window wraps several times: every trail advance must cancel exactly
    // the sqns it passes, once, and the missing-sqn bookkeeping must follow the ring.
    auto sc = source_config();
    sc.txw_sqns = 64;
    auto rc = receiver_config(19);
    rc.rxw_sqns = 256;
    rc.max_recover_sqns = 128;
    std::vector<memory::LossyTransport::Rule> rules;
    const std::vector<std::pair<std::uint32_t, std::uint32_t>> runs = {
        {100, 40}, {300, 10}, {500, 100}};
    for (const auto& [first, n] : runs) {
        for (std::uint32_t s = first; s < first + n; ++s) {
            rules.push_back({kOdata, s, 1});
            rules.push_back({kRdata, s, 1000});
        }
    }
    Sim sim;
    auto& src = sim.add_source(sc);
    auto& rcv = sim.add_receiver(rc, drop(rules));
    sim.pump();
    for (std::uint64_t i = 0; i < 1000; i += 50) {
        publish_n(sim, src, i, 50);
        sim.run_for(10 * kUs, 5 * kUs);
    }
    sim.run_for(100 * kMs, 100 * kUs);
    std::vector<std::pair<std::uint32_t, std::uint32_t>> losses;
    std::vector<std::uint64_t> delivered;
    std::uint64_t lost_before = 0;
    for (const auto& e : rcv.events) {
        if (e.kind == Kind::loss) {
            losses.emplace_back(e.sqn, e.count);
            // Reported in sequence position: everything before the run was delivered.
            CHECK(delivered.size() == e.sqn - lost_before);
            lost_before += e.count;
        } else if (e.kind == Kind::data) {
            delivered.push_back(index_of(e.payload));
        }
    }
    CHECK(losses == runs);
    CHECK(rcv.receiver().counters().lost_sqns == 150);
    CHECK(rcv.receiver().counters().loss_events == 3);
    REQUIRE(delivered.size() == 850);
    std::uint64_t expect = 0;
    for (const auto idx : delivered) {
        for (const auto& [first, n] : runs) {
            if (expect == first) {
                expect += n;
            }
        }
        CHECK(idx == expect);
        ++expect;
    }
}

TEST_CASE("retries exhausted without RDATA: loss reported, delivery continues",
          "[protocol][loss]") {
    Sim sim;
    auto& src = sim.add_source(source_config());
    auto& rcv = sim.add_receiver(receiver_config(15), drop({{kOdata, 4, 1}, {kRdata, 4, 1000}}));
    sim.pump();
    publish_n(sim, src, 0, 10);
    sim.run_for(2000 * kMs, 500 * kUs);
    const auto t = protocol::preset(protocol::Preset::lan);
    CHECK(rcv.receiver().counters().nak_sent >= t.nak_data_retries - 1);
    REQUIRE(rcv.count(Kind::loss) == 1);
    CHECK(rcv.data().size() == 9);
    publish_n(sim, src, 10, 5);
    sim.run_for(10 * kMs, 100 * kUs);
    CHECK(rcv.data().size() == 14);
}

TEST_CASE("sequence numbers wrap across 2^32 with loss and repair", "[protocol][wrap]") {
    auto sc = source_config();
    sc.initial_sqn = pgm::Sqn{0xffffff00U};
    std::vector<memory::LossyTransport::Rule> rules;
    for (std::uint32_t s : {0xfffffffeU, 0xffffffffU, 0U, 1U, 0x80U}) {
        rules.push_back({kOdata, s, 1});
    }
    Sim sim;
    auto& src = sim.add_source(sc);
    auto& rcv = sim.add_receiver(receiver_config(17), drop(rules));
    sim.pump();
    publish_n(sim, src, 0, 600);
    sim.run_for(100 * kMs, 100 * kUs);
    CHECK(src.source().next_sqn() == pgm::Sqn{0xffffff00U + 600U});
    CHECK(rcv.receiver().counters().repaired == 5);
    require_in_order(rcv, 0, 600);
}

// first_packet: a stream whose whole history (its trail) lies within max_recover_sqns is
// taken from its start, so a receiver that missed a new stream's first packets recovers them;
// an older one is joined at the first packet heard, and `joined` says where and how much of
// the source's history was not taken (docs/PROTOCOL.md §4).
TEST_CASE("late join: first_packet takes a young stream from its start, else the first sqn seen",
          "[protocol][join]") {
    Sim sim;
    auto& src = sim.add_source(source_config());
    sim.pump();
    publish_n(sim, src, 0, 50);
    sim.pump();
    auto& young = sim.add_receiver(receiver_config(19));  // 50 behind: within 1024
    auto c = receiver_config(21);
    c.max_recover_sqns = 20;  // 50 behind: further
    auto& late = sim.add_receiver(c);
    publish_n(sim, src, 50, 50);
    sim.run_for(50 * kMs, 100 * kUs);
    require_in_order(young, 0, 100);
    CHECK(young.count(Kind::loss) == 0);
    CHECK(young.receiver().counters().nak_sqns_sent >= 50);
    REQUIRE(young.events.front().kind == Kind::joined);
    CHECK(young.events.front().sqn == 0);
    CHECK(young.events.front().count == 0);
    require_in_order(late, 50, 50);
    CHECK(late.count(Kind::loss) == 0);
    CHECK(late.receiver().counters().nak_sent == 0);
    REQUIRE(late.events.front().kind == Kind::joined);
    CHECK(late.events.front().sqn == 50);
    CHECK(late.events.front().count == 50);  // the history it did not take: the app can tell
}

// A receiver that joins while another's repair is on the way: the RDATA of an old sqn must not
// start it back there (it would NAK everything from there to the lead; a flow member would
// report itself far behind: seen in execlog.kill_archiver, where the restarted archiver's
// gate started 17,401 packets back and was not counted).
TEST_CASE("late join: a repair for another receiver does not start a new one back there",
          "[protocol][join]") {
    auto sc = source_config();
    sc.timers.heartbeat_spm_ns = {};  // no SPM for a while: the repair is its first packet
    sc.timers.ambient_spm_ns = 10'000 * kMs;
    Sim sim;
    auto& src = sim.add_source(sc);
    auto& other = sim.add_receiver(receiver_config(27), drop({{kOdata, 5, 1}}));
    sim.pump();
    publish_n(sim, src, 0, 5);
    sim.run_for(50 * kMs, 100 * kUs);  // the other has the source's NLA (its SPMR's answer)
    publish_n(sim, src, 5, 95);
    sim.pump();
    auto lc = receiver_config(29);
    lc.max_recover_sqns = 50;  // the stream's 100 packets: not young (taken from its start)
    auto& late = sim.add_receiver(lc);
    sim.run_for(50 * kMs, 100 * kUs);  // the other's NAK, the RDATA of 5 to the group
    REQUIRE(other.receiver().counters().repaired == 1);
    // Its first packet, and no more: started there, it asked for 6-99 (95 RDATA).
    CHECK(late.receiver().counters().rdata_received == 1);
    CHECK(late.data().empty());
    publish_n(sim, src, 100, 10);
    sim.run_for(50 * kMs, 100 * kUs);
    require_in_order(late, 100, 10);
    CHECK(late.receiver().counters().nak_sent == 0);
    CHECK(late.count(Kind::loss) == 0);
}

TEST_CASE("late join: from_trail recovers the source's history, asking for an SPM first",
          "[protocol][join][spmr]") {
    auto sc = source_config();
    sc.timers.heartbeat_spm_ns = {};  // no heartbeats: only an SPMR brings the source's NLA
    Sim sim;
    auto& src = sim.add_source(sc);
    sim.pump();
    publish_n(sim, src, 0, 50);
    sim.pump();
    auto rc = receiver_config(21);
    rc.join = protocol::JoinPolicy::from_trail;
    auto& late = sim.add_receiver(rc);
    publish_n(sim, src, 50, 50);
    sim.run_for(100 * kMs, 100 * kUs);
    // Data before the first SPM: SPMR asked for the source's NLA, then the NAKs went out.
    CHECK(late.receiver().counters().spmr_sent >= 1);
    CHECK(src.source().counters().spmr_received >= 1);
    CHECK(late.receiver().counters().repaired == 50);
    require_in_order(late, 0, 100);
}

TEST_CASE("OPT_FIN: the receiver reports the source as left after draining", "[protocol][fin]") {
    Sim sim;
    auto& src = sim.add_source(source_config());
    auto& rcv = sim.add_receiver(receiver_config(23), drop({{kOdata, 2, 1}}));
    sim.pump();
    publish_n(sim, src, 0, 5);
    src.source().close(sim.now, *src.session);
    src.session->flush();
    CHECK(src.session->publish(make_message(9, 10), sim.now).error() == Errc::closed);
    sim.run_for(40 * kMs, 100 * kUs);
    require_in_order(rcv, 0, 5);  // the repair still happens after FIN
    // `left` waits for the FIN deadline (fin_limit), so that a forged FIN is cancelled by
    // the data that keeps coming before then.
    CHECK(rcv.count(Kind::left) == 0);
    sim.run_for(rcv.receiver().fin_limit_ns(), 100 * kUs);
    REQUIRE(rcv.count(Kind::left) == 1);
    CHECK(rcv.events.back().kind == Kind::left);
}

TEST_CASE("OPT_RST: everything missing is reported lost", "[protocol][rst]") {
    Sim sim;
    auto& src = sim.add_source(source_config());
    auto& rcv = sim.add_receiver(receiver_config(25), drop({{kOdata, 3, 1}}));
    sim.pump();
    publish_n(sim, src, 0, 6);
    src.source().reset(sim.now, *src.session);
    src.session->flush();
    sim.pump();
    REQUIRE(rcv.count(Kind::loss) == 1);
    CHECK(rcv.data().size() == 5);
    CHECK(rcv.count(Kind::left) == 1);
}

TEST_CASE("a silent source expires: missing data reported lost, then left", "[protocol][expiry]") {
    auto sc = source_config();
    Sim sim;
    auto& src = sim.add_source(sc);
    auto rc = receiver_config(27);
    rc.timers.peer_expiry_ns = 2 * protocol::kSec;
    rc.timers.nak_ncf_retries = 255;
    rc.timers.nak_rpt_ivl_ns = 500 * kMs;
    memory::LossyTransport::Config lc = drop({{kOdata, 3, 1}});
    auto& rcv = sim.add_receiver(rc, lc);
    sim.pump();
    publish_n(sim, src, 0, 6);
    sim.pump();
    rcv.lossy->config().drop = 1.0;  // the source falls silent (network cut)
    sim.run_for(3 * protocol::kSec, 1 * kMs);
    CHECK(rcv.count(Kind::loss) == 1);
    CHECK(rcv.data().size() == 5);
    CHECK(rcv.count(Kind::left) == 1);
    CHECK(rcv.receiver().peer_count() == 0);
}

TEST_CASE("rate limit and window back-pressure are returned values", "[protocol][flow]") {
    auto sc = source_config();
    sc.odata_rate_bytes_per_sec = 1'000'000;  // 1 MB/s: bucket depth ≈ one max APDU
    Sim sim;
    auto& src = sim.add_source(sc);
    auto& rcv = sim.add_receiver(receiver_config(29));
    sim.pump();
    std::uint64_t sent = 0;
    std::uint64_t limited = 0;
    for (int i = 0; i < 2000; ++i) {
        auto r = src.session->publish(make_message(sent, 1000), sim.now);
        if (r) {
            ++sent;
        } else {
            CHECK(r.error() == Errc::rate_limited);
            CHECK(is_transient(r.error()));
            ++limited;
            sim.run_for(100 * kUs, 100 * kUs);
        }
    }
    CHECK(limited > 0);
    // 1 MB/s over the elapsed time, plus the initial bucket: never more.
    const double elapsed_s = static_cast<double>(sim.now) / 1e9;
    CHECK(static_cast<double>(sent * 1024) <= 1'000'000 * elapsed_s + 30000);
    sim.run_for(10 * kMs, 100 * kUs);
    require_in_order(rcv, 0, sent, 1000);

    auto wc = source_config();
    wc.tsi.sport = 1001;
    wc.txw_sqns = 16;
    wc.txw_retention_ns = 1 * protocol::kSec;
    auto& held = sim.add_source(wc);
    for (int i = 0; i < 16; ++i) {
        REQUIRE(held.session->publish(make_message(1, 10), sim.now).has_value());
    }
    auto r = held.session->publish(make_message(1, 10), sim.now);
    CHECK(r.error() == Errc::back_pressured);
    sim.run_for(1 * protocol::kSec, 10 * kMs);
    CHECK(held.session->publish(make_message(1, 10), sim.now).has_value());
}

TEST_CASE("zero-copy claim/commit publishes in place", "[protocol][claim]") {
    Sim sim;
    auto& src = sim.add_source(source_config());
    auto& rcv = sim.add_receiver(receiver_config(31));
    sim.pump();
    auto& s = src.source();
    auto claim = s.claim(200, sim.now);
    REQUIRE(claim.has_value());
    const auto msg = make_message(77, 150);
    std::memcpy(claim->data(), msg.data(), msg.size());
    REQUIRE(s.commit(msg.size(), sim.now, *src.session).has_value());
    CHECK(s.claim(s.max_tsdu() + 1, sim.now).error() == Errc::message_too_large);
    sim.run_for(1 * kMs, 100 * kUs);
    REQUIRE(rcv.data().size() == 1);
    CHECK(rcv.data()[0] == msg);
}

TEST_CASE("malformed and foreign packets are counted and dropped, delivery goes on",
          "[protocol][malformed]") {
    Sim sim;
    auto& src = sim.add_source(source_config());
    auto& rcv = sim.add_receiver(receiver_config(33));
    auto& attacker = sim.add_receiver(receiver_config(34));
    sim.pump();
    publish_n(sim, src, 0, 5);
    std::vector<std::byte> junk(64, std::byte{0x04});
    const TxPacket bad{junk, {}, Route::downstream, {}};
    REQUIRE(attacker.mem->send_batch(std::span<const TxPacket>(&bad, 1)).has_value());
    auto other = source_config();
    other.dport = 7600;  // another session's port
    other.tsi.sport = 2000;
    sim.add_source(other);
    publish_n(sim, src, 5, 5);
    sim.run_for(5 * kMs, 100 * kUs);
    CHECK(rcv.session->counters().malformed_total() >= 1);
    CHECK(rcv.receiver().counters().foreign_dport >= 1);
    require_in_order(rcv, 0, 10);
}

TEST_CASE("a source-only session with upstream_poll_ns polls a quiet transport that often only",
          "[protocol][session]") {
    memory::MemoryNetwork net(memory::MemoryNetwork::Config{});
    auto a = net.attach();
    auto b = net.attach();
    pubsub::SessionConfig sc;
    sc.source = source_config();
    sc.upstream_poll_ns = 1 * kMs;
    auto src = std::move(*pubsub::Session::create(*a, sc));
    pubsub::SessionConfig rc;
    rc.receiver = receiver_config(3);
    rc.upstream_poll_ns = 1 * kMs;  // ignored: a receiver polls on every call
    auto rcv = std::move(*pubsub::Session::create(*b, rc));
    const std::array<std::byte, 40> junk{};
    const TxPacket p{junk, {}, Route::downstream, {}};
    std::int64_t t = 10 * kMs;
    CHECK(src->do_work(t) == 0);  // quiet: the next poll is due at t + 1 ms
    CHECK(rcv->do_work(t) == 0);
    REQUIRE(b->send_batch(std::span<const TxPacket>(&p, 1)).value() == 1);  // to a and b
    (void)rcv->do_work(t + 1);
    CHECK(rcv->counters().rx_packets == 1);  // its own copy (loopback), polled at once
    (void)src->do_work(t + kMs / 2);
    CHECK(src->counters().rx_packets == 0);  // not yet polled
    (void)src->do_work(t + kMs);
    CHECK(src->counters().rx_packets == 1);  // polled once the interval ended
}

namespace {

// Accepts at most `accept` packets per send_batch (0: the transport is stuck) and keeps a
// copy of every packet it took.
class ShortTransport final : public Transport {
public:
    std::size_t accept = 0;
    std::vector<std::vector<std::byte>> sent;
    [[nodiscard]] std::string_view name() const noexcept override { return "short"; }
    [[nodiscard]] TransportCaps caps() const noexcept override { return {1472, 64, 0}; }
    Result<std::size_t> send_batch(std::span<const TxPacket> packets) noexcept override {
        const std::size_t n = std::min(accept, packets.size());
        for (std::size_t i = 0; i < n; ++i) {
            std::vector<std::byte> b(packets[i].header.begin(), packets[i].header.end());
            b.insert(b.end(), packets[i].payload.begin(), packets[i].payload.end());
            sent.push_back(std::move(b));
        }
        return n;
    }
    Result<std::size_t> poll_rx(std::span<RxPacket> out) noexcept override {
        (void)out;
        return std::size_t{0};
    }
    void release_rx(std::size_t count) noexcept override { (void)count; }
    [[nodiscard]] int wakeup_fd() const noexcept override { return -1; }
    Result<bool> arm_wakeup() noexcept override { return Errc::unsupported; }
};

}  // namespace

TEST_CASE(
    "a stuck, then short-accepting transport: what was queued leaves first, intact, "
    "in order",
    "[protocol][session]") {
    // The transport takes nothing while 6000 messages wrap the source's window (256) and its
    // byte ring (sized for 257 full-size packets, ~2300 of these) twice, then a few per
    // send. The batch queued when it got stuck must leave first, with its own bytes.
    ShortTransport t;
    pubsub::SessionConfig sc;
    auto c = source_config();
    c.txw_sqns = 256;
    sc.source = c;
    auto s = std::move(*pubsub::Session::create(t, sc));
    // Sizes vary, so a stale reference would straddle other messages' packets.
    auto size_of = [](std::uint64_t i) {
        return 100 + (i % 7) * 13;
    };
    std::int64_t now = 1 * kMs;
    t.accept = 64;
    (void)s->do_work(now);  // the opening SPMs
    t.sent.clear();
    t.accept = 0;
    for (std::uint64_t i = 0; i < 6000; ++i) {
        REQUIRE(s->source()->send(make_message(i, size_of(i)), now, *s).has_value());
    }
    CHECK(s->counters().tx_dropped > 0);
    t.accept = 3;  // then a transport that takes a few at a time
    for (std::uint64_t i = 6000; i < 6300; ++i) {
        REQUIRE(s->source()->send(make_message(i, size_of(i)), now, *s).has_value());
        (void)s->do_work(now);
    }
    for (int k = 0; k < 100; ++k) {
        (void)s->do_work(now);
    }
    std::vector<std::uint64_t> order;
    for (const auto& b : t.sent) {
        pgm::Packet p;
        REQUIRE(pgm::parse(b, p) == pgm::ParseStatus::ok);  // checksum verified
        if (p.type != pgm::PacketType::odata) {
            continue;
        }
        const std::vector<std::byte> payload(p.payload.begin(), p.payload.end());
        const std::uint64_t i = index_of(payload);
        REQUIRE(payload == make_message(i, size_of(i)));  // its own bytes
        CHECK(p.sqn.value - c.initial_sqn.value == i);
        order.push_back(i);
    }
    // The 64 queued when the transport got stuck leave first, then all that came after it
    // recovered (what the stuck transport dropped in between is for NAKs to recover).
    REQUIRE(order.size() == 64 + 300);
    for (std::uint64_t k = 0; k < 64; ++k) {
        CHECK(order[k] == k);
    }
    for (std::uint64_t k = 0; k < 300; ++k) {
        CHECK(order[64 + k] == 6000 + k);
    }
}
