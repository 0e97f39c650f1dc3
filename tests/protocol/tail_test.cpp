// SPDX-License-Identifier: Apache-2.0
// Tail loss at close: a publisher that lingers until quiet and then sends its FIN, receivers
// at 5% loss on every packet type that also miss the last messages. Over many seeded trials
// every receiver ends with every message delivered or reported lost, within the bound the
// timers give (docs/PROTOCOL.md §3.2, §4.1), never still waiting.
#include <algorithm>
#include <vector>

#include "tests/support/catch.hpp"
#include "tests/support/sim.hpp"

using namespace prizma;           // NOLINT(google-build-using-namespace): test file
using namespace prizma::testing;  // NOLINT(google-build-using-namespace): test file
using protocol::kMs;
using Kind = protocol::Event::Kind;

namespace {

constexpr std::uint8_t kOdata = 0x04;

struct Trial {
    std::int64_t closed_at = 0;   // when the source sent its FIN (after lingering)
    std::int64_t lingered = 0;    // from the last message to the FIN
    std::int64_t settled_at = 0;  // when the last receiver had every sqn delivered or lost
    std::uint64_t delivered = 0;
    std::uint64_t lost = 0;
};

// Messages delivered plus sequence numbers reported lost, per receiver.
std::uint64_t accounted(const Sim::Node& r) {
    std::uint64_t n = 0;
    for (const auto& e : r.events) {
        n += e.kind == Kind::data ? 1U : 0U;
        n += e.kind == Kind::loss ? e.count : 0U;
    }
    return n;
}

Trial run(protocol::Preset preset, std::uint64_t seed, std::uint32_t n) {
    Sim sim;
    Trial t;
    std::vector<Sim::Node*> rcvs;
    for (std::uint64_t k = 0; k < 3; ++k) {
        memory::LossyTransport::Config lc;
        lc.seed = seed * 7 + k;
        lc.drop = 0.05;  // every packet type: SPM, ODATA, RDATA, NCF
        // The last messages are lost too (each receiver its own share of them).
        lc.drop_rules.push_back({kOdata, n - 1 - static_cast<std::uint32_t>(k), 1});
        lc.drop_rules.push_back({kOdata, n - 4, 1});
        rcvs.push_back(&sim.add_receiver(receiver_config(seed + k, preset), lc));
    }
    auto& src = sim.add_source(source_config(preset));
    sim.pump();
    for (std::uint64_t i = 0; i < n; ++i) {
        REQUIRE(src.session->publish(make_message(i, 200), sim.now).has_value());
        sim.run_for(100'000, 50'000);
    }
    const std::int64_t last = sim.now;
    while (!src.source().quiet(sim.now)) {
        sim.run_for(kMs, 100'000);
    }
    t.lingered = sim.now - last;
    t.closed_at = sim.now;
    src.source().close(sim.now, *src.session);
    src.session->flush();
    const auto done = [&] {
        return std::all_of(rcvs.begin(), rcvs.end(),
                           [&](const Sim::Node* r) { return accounted(*r) >= n; });
    };
    while (!done() && sim.now - t.closed_at < 120 * protocol::kSec) {
        sim.run_for(kMs, 100'000);
    }
    t.settled_at = sim.now;
    for (const auto* r : rcvs) {
        t.delivered += r->data().size();
        t.lost += r->receiver().counters().lost_sqns;
        CHECK(accounted(*r) == n);  // each message once: delivered or lost, never both
    }
    return t;
}

}  // namespace

TEST_CASE("tail loss at close: every receiver settles within the FIN bound, most repaired",
          "[protocol][tail]") {
    for (const auto preset : {protocol::Preset::lan, protocol::Preset::wan}) {
        const auto timers = protocol::preset(preset);
        auto probe = protocol::Receiver::create(receiver_config(1, preset));
        REQUIRE(probe);
        const std::int64_t fin_limit = (*probe)->fin_limit_ns();
        const std::int64_t ivl = std::max(timers.nak_rpt_ivl_ns, timers.nak_rdata_ivl_ns);
        std::uint64_t delivered = 0;
        std::uint64_t lost = 0;
        const int trials = preset == protocol::Preset::lan ? 40 : 12;
        for (int seed = 1; seed <= trials; ++seed) {
            INFO("preset " << int(preset) << " seed " << seed);
            const Trial t = run(preset, static_cast<std::uint64_t>(seed), 300);
            // Settled within the FIN bound (plus one NAK interval for the last timer run).
            CHECK(t.settled_at - t.closed_at <= fin_limit + ivl);
            delivered += t.delivered;
            lost += t.lost;
        }
        INFO("delivered " << delivered << " lost " << lost);
        // The linger repairs the tail: nearly everything arrives, the rest is reported.
        CHECK(lost * 1000 <= delivered + lost);
    }
}

TEST_CASE("a quiet publisher lingers for NAKs still coming, at most the repair deadline",
          "[protocol][tail]") {
    const auto cfg = source_config(protocol::Preset::wan);
    auto src = std::move(*protocol::Source::create(cfg));
    struct Null final : protocol::PacketSink {
        void emit(const TxPacket&) noexcept override {}
    } sink;
    src->open(0, sink);
    const auto m = make_message(1, 100);
    REQUIRE(src->send(m, 0, sink).has_value());
    const std::int64_t quiet = src->quiet_ns();
    CHECK_FALSE(src->quiet(quiet - 1));
    CHECK(src->quiet(quiet));
    // A NAK keeps it from being quiet for another quiet period after it.
    pgm::PacketSpec nak;
    nak.type = pgm::PacketType::nak;
    nak.sport = cfg.dport;
    nak.dport = cfg.tsi.sport;
    nak.gsi = cfg.tsi.gsi;
    nak.sqn = Sqn{0};
    nak.nla = cfg.nla;
    nak.group = cfg.group;
    std::vector<std::byte> b(pgm::encoded_size(nak));
    REQUIRE(pgm::encode(b, nak) == b.size());
    pgm::store_checksum(b, 0);
    pgm::Packet p;
    REQUIRE(pgm::parse(b, p) == pgm::ParseStatus::ok);
    const std::int64_t at = quiet / 2;
    src->on_packet(p, Endpoint{}, at, sink);
    CHECK_FALSE(src->quiet(quiet));
    CHECK(src->quiet(at + quiet));
    // NAKs without end: the cap (the receivers' repair deadline) ends the linger anyway.
    std::int64_t t = at;
    while (t < src->linger_cap_ns()) {
        t += quiet / 2;
        src->on_packet(p, Endpoint{}, t, sink);
    }
    CHECK(src->quiet(src->linger_cap_ns()));
}
