// SPDX-License-Identifier: Apache-2.0
// The source state machine driven directly: packets out are captured and parsed.
#include "lib/protocol/source.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "lib/pgm/checksum.hpp"
#include "tests/support/catch.hpp"
#include "tests/support/sim.hpp"

using namespace prizma;  // NOLINT(google-build-using-namespace): test file
using pgm::PacketType;
using pgm::Sqn;
using protocol::kMs;

namespace {

struct Capture final : protocol::PacketSink {
    std::vector<std::vector<std::byte>> packets;
    void emit(const TxPacket& p) noexcept override {
        std::vector<std::byte> b(p.header.begin(), p.header.end());
        b.insert(b.end(), p.payload.begin(), p.payload.end());
        packets.push_back(std::move(b));
    }
    std::vector<pgm::Packet> parsed() const {
        std::vector<pgm::Packet> out;
        for (const auto& b : packets) {
            pgm::Packet p;
            REQUIRE(pgm::parse(b, p) == pgm::ParseStatus::ok);  // checksums verify too
            out.push_back(p);
        }
        return out;
    }
    std::size_t count(PacketType t) const {
        std::size_t n = 0;
        for (const auto& p : parsed()) {
            n += p.type == t ? 1U : 0U;
        }
        return n;
    }
};

std::vector<std::byte> nak(const protocol::SourceConfig& c,
                           Sqn s,
                           std::vector<Sqn> list = {},
                           pgm::Nla nla = pgm::Nla::ipv4(10, 0, 0, 1)) {
    pgm::PacketSpec spec;
    spec.type = PacketType::nak;
    spec.sport = c.dport;
    spec.dport = c.tsi.sport;
    spec.gsi = c.tsi.gsi;
    spec.sqn = s;
    spec.nla = nla;
    spec.group = c.group;
    spec.nak_list = list;
    std::vector<std::byte> b(pgm::encoded_size(spec));
    REQUIRE(pgm::encode(b, spec) == b.size());
    pgm::store_checksum(b, 0);
    return b;
}

pgm::Packet parse(const std::vector<std::byte>& b) {
    pgm::Packet p;
    REQUIRE(pgm::parse(b, p) == pgm::ParseStatus::ok);
    return p;
}

}  // namespace

TEST_CASE("source opens with 3 SPMs of an empty window, as OpenPGM", "[protocol][source]") {
    auto cfg = testing::source_config();
    auto src = std::move(*protocol::Source::create(cfg));
    Capture cap;
    src->open(0, cap);
    const auto p = cap.parsed();
    REQUIRE(p.size() == 3);
    for (std::uint32_t i = 0; i < 3; ++i) {
        CHECK(p[i].type == PacketType::spm);
        CHECK(p[i].sqn == Sqn{i});
        CHECK(p[i].trail == Sqn{0});
        CHECK(p[i].lead == Sqn{0xffffffffU});
        CHECK(p[i].nla == cfg.nla);
    }
}

TEST_CASE("ODATA checksums verify for every payload size, across the sqn wrap, sent or claimed",
          "[protocol][source][checksum]") {
    // send() sums the header from its values and the payload where it was copied from;
    // commit() sums the slot. Odd sizes, carries out of every 16-bit word (sqn and trail
    // near 2^32) and an empty payload must all give the checksum of the packet as sent.
    auto cfg = testing::source_config();
    cfg.initial_sqn = Sqn{0xfffffff0U};
    cfg.txw_sqns = 16;  // the trail moves too, across the wrap
    auto src = std::move(*protocol::Source::create(cfg));
    Capture out;
    src->open(0, out);
    std::vector<std::byte> apdu(1400);
    for (std::size_t i = 0; i < apdu.size(); ++i) {
        apdu[i] = static_cast<std::byte>(0xff - (i * 7) % 256);
    }
    std::size_t sent = 0;
    for (std::size_t size : {0U, 1U, 2U, 3U, 99U, 100U, 101U, 255U, 256U, 257U, 1000U, 1400U}) {
        for (int k = 0; k < 3; ++k) {
            const auto part = std::span<const std::byte>(apdu.data(), size);
            REQUIRE(src->send(part, 0, out).has_value());
            auto c = src->claim(size, 0);
            REQUIRE(c.has_value());
            std::copy(part.begin(), part.end(), c->begin());
            REQUIRE(src->commit(size, 0, out).has_value());
            sent += 2;
        }
    }
    std::size_t odata = 0;
    for (const auto& p : out.parsed()) {  // parse() verifies every checksum
        if (p.type == PacketType::odata) {
            ++odata;
            CHECK(p.checksum != 0);
        }
    }
    CHECK(odata == sent);
    CHECK(src->next_sqn() == Sqn{0xfffffff0U + static_cast<std::uint32_t>(sent)});
}

TEST_CASE("NAKs with a foreign NLA, group or ports are dropped, valid ones get NCF + RDATA",
          "[protocol][source]") {
    auto cfg = testing::source_config();
    auto src = std::move(*protocol::Source::create(cfg));
    Capture cap;
    src->open(0, cap);
    for (int i = 0; i < 5; ++i) {
        REQUIRE(src->send(testing::make_message(static_cast<std::uint64_t>(i), 100), 0, cap)
                    .has_value());
    }
    cap.packets.clear();
    const auto bad = nak(cfg, Sqn{2}, {}, pgm::Nla::ipv4(10, 0, 0, 99));
    src->on_packet(parse(bad), Endpoint{}, 1000, cap);
    CHECK(cap.packets.empty());
    CHECK(src->counters().nak_invalid == 1);

    const auto good = nak(cfg, Sqn{1}, {Sqn{3}, Sqn{4}});
    src->on_packet(parse(good), Endpoint{}, 2000, cap);
    const auto out = cap.parsed();
    REQUIRE(out.size() == 4);
    CHECK(out[0].type == PacketType::ncf);  // NCF first, mirroring the list
    CHECK(out[0].sqn == Sqn{1});
    CHECK(out[0].opts.nak_list_count == 2);
    for (std::size_t i = 1; i < 4; ++i) {
        CHECK(out[i].type == PacketType::rdata);
        CHECK(out[i].payload.size() == 100);
    }
    CHECK(out[1].sqn == Sqn{1});
    CHECK(out[3].sqn == Sqn{4});
    // NAK elimination: the same NAK again at once gets no second RDATA, and no NCF either:
    // nothing it asks for is coming (docs/PROTOCOL.md, "Publisher repair limits").
    cap.packets.clear();
    src->on_packet(parse(good), Endpoint{}, 3000, cap);
    CHECK(cap.count(PacketType::ncf) == 0);
    CHECK(cap.count(PacketType::rdata) == 0);
    CHECK(src->counters().nak_eliminated == 3);
    CHECK(src->counters().ncf_suppressed == 1);
    // The repeat interval is max(nak_elimination, nak_rdata_ivl / 2): a receiver NAKs again
    // only nak_rdata_ivl after an NCF. After it, the sqns are served again.
    const std::int64_t repeat =
        std::max(cfg.timers.nak_elimination_ns, cfg.timers.nak_rdata_ivl_ns / 2);
    cap.packets.clear();
    src->on_packet(parse(good), Endpoint{}, 2000 + repeat - 1, cap);
    CHECK(cap.count(PacketType::rdata) == 0);
    src->on_packet(parse(good), Endpoint{}, 2000 + repeat, cap);
    CHECK(cap.count(PacketType::ncf) == 1);
    CHECK(cap.count(PacketType::rdata) == 3);
}

TEST_CASE("a NAK for data that left the window gets an SPM with the trail, no RDATA",
          "[protocol][source]") {
    auto cfg = testing::source_config();
    cfg.txw_sqns = 8;
    cfg.max_fragments = 4;
    auto src = std::move(*protocol::Source::create(cfg));
    Capture cap;
    src->open(0, cap);
    for (int i = 0; i < 20; ++i) {
        REQUIRE(src->send(testing::make_message(1, 10), 0, cap).has_value());
    }
    CHECK(src->trail() == Sqn{12});
    cap.packets.clear();
    src->on_packet(parse(nak(cfg, Sqn{3})), Endpoint{}, 10, cap);
    const auto out = cap.parsed();
    REQUIRE(out.size() == 1);
    CHECK(out[0].type == PacketType::spm);
    CHECK(out[0].trail == Sqn{12});
    CHECK(out[0].lead == Sqn{19});
    CHECK(src->counters().nak_out_of_window == 1);
    // A storm of such NAKs (a receiver lagging by more than the window) gets one SPM per
    // spmr_answer_ivl, not one per NAK; the one held back goes out when the interval ends.
    cap.packets.clear();
    const std::int64_t ivl = cfg.timers.spmr_answer_ivl_ns;
    for (int i = 0; i < 100; ++i) {
        src->on_packet(parse(nak(cfg, Sqn{static_cast<std::uint32_t>(i % 10)})), Endpoint{},
                       20 + i * (ivl / 200), cap);
    }
    CHECK(src->counters().nak_out_of_window == 101);
    CHECK(cap.count(PacketType::spm) == 0);  // the first SPM went out at t=10, < ivl ago
    src->on_timer(10 + ivl, cap);
    CHECK(cap.count(PacketType::spm) == 1);
    src->on_packet(parse(nak(cfg, Sqn{3})), Endpoint{}, 10 + ivl + 1, cap);
    CHECK(cap.count(PacketType::spm) == 1);
    src->on_packet(parse(nak(cfg, Sqn{3})), Endpoint{}, 10 + 2 * ivl, cap);
    CHECK(cap.count(PacketType::spm) == 2);
    CHECK(cap.parsed().back().trail == Sqn{12});
}

TEST_CASE("SPMRs are answered at most once per interval, heartbeats follow data",
          "[protocol][source][spm]") {
    auto cfg = testing::source_config();
    auto src = std::move(*protocol::Source::create(cfg));
    Capture cap;
    src->open(0, cap);
    cap.packets.clear();
    pgm::PacketSpec spec;
    spec.type = PacketType::spmr;
    spec.sport = cfg.dport;
    spec.dport = cfg.tsi.sport;
    spec.gsi = cfg.tsi.gsi;
    std::vector<std::byte> spmr(16);
    REQUIRE(pgm::encode(spmr, spec) == 16);
    pgm::store_checksum(spmr, 0);
    src->on_packet(parse(spmr), Endpoint{}, 10 * kMs, cap);
    src->on_packet(parse(spmr), Endpoint{}, 10 * kMs + 1, cap);
    src->on_packet(parse(spmr), Endpoint{}, 10 * kMs + 2, cap);
    CHECK(cap.count(PacketType::spm) == 1);
    CHECK(src->next_deadline() == 10 * kMs + cfg.timers.spmr_answer_ivl_ns);
    src->on_timer(src->next_deadline(), cap);
    CHECK(cap.count(PacketType::spm) == 2);  // the held-back SPMRs got one more answer

    // Heartbeats: after data, SPMs at the configured growing intervals, then none.
    cap.packets.clear();
    const std::int64_t t0 = 20 * kMs;
    REQUIRE(src->send(testing::make_message(1, 10), t0, cap).has_value());
    std::vector<std::int64_t> spm_times;
    for (std::int64_t t = t0; t < t0 + 3 * protocol::kSec; t += 100 * protocol::kUs) {
        const std::size_t before = cap.count(PacketType::spm);
        src->on_timer(t, cap);
        if (cap.count(PacketType::spm) > before) {
            spm_times.push_back(t - t0);
        }
    }
    REQUIRE(spm_times.size() >= 4);
    CHECK(spm_times[0] == cfg.timers.heartbeat_spm_ns[0]);
    CHECK(spm_times[1] - spm_times[0] == cfg.timers.heartbeat_spm_ns[1]);
    CHECK(spm_times[2] - spm_times[1] == cfg.timers.heartbeat_spm_ns[2]);
}

TEST_CASE("close sends 3 SPMs with OPT_FIN and still repairs", "[protocol][source][fin]") {
    auto cfg = testing::source_config();
    auto src = std::move(*protocol::Source::create(cfg));
    Capture cap;
    src->open(0, cap);
    REQUIRE(src->send(testing::make_message(1, 10), 0, cap).has_value());
    cap.packets.clear();
    src->close(1, cap);
    src->on_timer(2, cap);
    src->on_timer(3, cap);
    const auto out = cap.parsed();
    REQUIRE(out.size() == 3);
    for (const auto& p : out) {
        CHECK(p.type == PacketType::spm);
        CHECK(p.opts.fin);
    }
    cap.packets.clear();
    src->on_packet(parse(nak(cfg, Sqn{0})), Endpoint{}, 10, cap);
    CHECK(cap.count(PacketType::rdata) == 1);
}

TEST_CASE("RDATA respects its own rate budget and is sent later, not dropped",
          "[protocol][source][rate]") {
    auto cfg = testing::source_config();
    cfg.rdata_rate_bytes_per_sec = 100'000;  // depth ~ one max APDU (~23 KB)
    auto src = std::move(*protocol::Source::create(cfg));
    Capture cap;
    src->open(0, cap);
    for (int i = 0; i < 60; ++i) {
        REQUIRE(src->send(testing::make_message(1, 1400), 0, cap).has_value());
    }
    cap.packets.clear();
    std::vector<Sqn> list;
    for (std::uint32_t s = 1; s < 60; ++s) {
        list.push_back(Sqn{s});
    }
    src->on_packet(parse(nak(cfg, Sqn{0}, list)), Endpoint{}, 0, cap);
    const std::size_t first_burst = cap.count(PacketType::rdata);
    CHECK(first_burst > 0);
    CHECK(first_burst < 60);
    std::int64_t t = 0;
    while (cap.count(PacketType::rdata) < 60 && t < 5 * protocol::kSec) {
        t = src->next_deadline();
        src->on_timer(t, cap);
    }
    CHECK(cap.count(PacketType::rdata) == 60);
    // 60 x 1424 B at 100 kB/s after the initial bucket: the last RDATA waits ~0.6 s.
    CHECK(t > 300 * kMs);
}

TEST_CASE("repair limits are refused outside their bounds, named", "[protocol][source][config]") {
    auto why = [](const protocol::SourceConfig& c) {
        auto r = protocol::Source::create(c);
        REQUIRE_FALSE(r.has_value());
        return std::string(r.error().detail());
    };
    auto c = testing::source_config();
    c.repair_budget_percent = 0;
    CHECK(why(c) == "repair_budget_percent: 1 to 10000 percent");
    c = testing::source_config();
    c.requester_budget_percent = 10001;
    CHECK(why(c) == "requester_budget_percent: 1 to 10000 percent");
    c = testing::source_config();
    c.repair_burst_bytes = (1U << 30U) + 1;
    CHECK(why(c) == "repair_burst_bytes: 0 to 1073741824 bytes");
    c = testing::source_config();
    c.max_repairs_per_sqn = 0;
    CHECK(why(c) == "max_repairs_per_sqn: 1 to 255 RDATA");
}

TEST_CASE("a quiet source still repairs a small loss out of the credit it saved",
          "[protocol][source][budget]") {
    auto cfg = testing::source_config();
    auto src = std::move(*protocol::Source::create(cfg));
    Capture cap;
    src->open(0, cap);
    for (int i = 0; i < 10; ++i) {
        REQUIRE(src->send(testing::make_message(1, 1400), 0, cap).has_value());
    }
    cap.packets.clear();
    // An hour later: the saved credit (64 packets of max_tpdu) is still there, no more.
    std::vector<Sqn> list;
    for (std::uint32_t s = 1; s < 10; ++s) {
        list.push_back(Sqn{s});
    }
    const std::int64_t later = 3600 * protocol::kSec;
    src->on_packet(parse(nak(cfg, Sqn{0}, list)), Endpoint{}, later, cap);
    CHECK(cap.count(PacketType::rdata) == 10);
    CHECK(cap.count(PacketType::ncf) == 1);
    CHECK(src->counters().nak_ignored == 0);
}

// The idle credit is earned afresh in every quiet spell: three bursts, each lost whole at one
// receiver twice over (its repairs lost once more), quiet spells between them: each burst's
// second round of NAKs is answered as the first burst's was: the rate the spell earns at is
// the burst's own, not diluted by the quiet spell before it.
TEST_CASE("idle credit is earned afresh in every quiet spell: each burst repaired alike",
          "[protocol][source][budget]") {
    auto cfg = testing::source_config();
    auto src = std::move(*protocol::Source::create(cfg));
    Capture cap;
    src->open(0, cap);
    constexpr std::uint32_t kBurst = 600;
    const std::int64_t spell = protocol::repair_limit_ns(cfg.timers) + 2 * protocol::kSec;
    const auto round = [&](std::uint32_t first, std::int64_t& t) {
        const std::size_t before = cap.count(PacketType::rdata);
        for (std::uint32_t s = first; s < first + kBurst; s += 63) {
            std::vector<Sqn> list;
            for (std::uint32_t k = s + 1; k < std::min(s + 63, first + kBurst); ++k) {
                list.push_back(Sqn{k});
            }
            src->on_packet(parse(nak(cfg, Sqn{s}, list)), Endpoint{}, t, cap);
        }
        for (int i = 0; i < 200; ++i) {  // 200 ms for the rate-paced repairs to go out
            t += kMs;
            src->on_timer(t, cap);
        }
        return cap.count(PacketType::rdata) - before;
    };
    std::vector<std::size_t> firsts;
    std::vector<std::size_t> seconds;
    for (std::uint32_t b = 0; b < 3; ++b) {
        std::int64_t t = static_cast<std::int64_t>(b) * spell;
        for (std::uint32_t i = 0; i < kBurst; ++i) {  // 1,000 B every 10 us: 100 MB/s
            REQUIRE(src->send(testing::make_message(i, 1000), t, cap).has_value());
            t += 10'000;
        }
        t += 20 * kMs;  // the receiver NAKs after its back-off
        firsts.push_back(round(b * kBurst, t));
        t += 50 * kMs;  // and again: the repairs were lost too
        seconds.push_back(round(b * kBurst, t));
    }
    INFO("first rounds " << firsts[0] << " " << firsts[1] << " " << firsts[2] << ", second "
                         << seconds[0] << " " << seconds[1] << " " << seconds[2]);
    // The first round of the first burst: a new requester's start credit and its share of
    // the spell (491 of 600 here); later bursts find at least as much.
    CHECK(firsts[0] >= kBurst * 3 / 4);
    CHECK(seconds[0] > 0);  // the idle spell's credit is what pays for it
    for (std::size_t b = 1; b < 3; ++b) {
        CHECK(firsts[b] >= firsts[0]);
        // Alike, within 5 %. (When the rate meter's interval spanned the quiet spell before a
        // burst, the third burst's second round got 311 of 600.)
        CHECK(seconds[b] + seconds[b] / 20 >= seconds[0]);
    }
}

TEST_CASE("requesters are told apart by address, not port, a full table forgets the oldest",
          "[protocol][source][budget]") {
    auto cfg = testing::source_config();
    cfg.requester_budget_percent = 1;
    cfg.repair_burst_bytes = 1500;  // a new requester: one 1000-byte RDATA (and its NCF)
    auto src = std::move(*protocol::Source::create(cfg));
    Capture cap;
    src->open(0, cap);
    for (int i = 0; i < 100; ++i) {
        REQUIRE(src->send(testing::make_message(1, 1000), 0, cap).has_value());
    }
    cap.packets.clear();
    auto from = [](std::uint8_t host, std::uint16_t port) {
        Endpoint e;
        e.family = 2;
        e.port = port;
        e.addr[3] = host;
        return e;
    };
    // Two sqns from one host on two ports: its one share answers the first only.
    src->on_packet(parse(nak(cfg, Sqn{0})), from(1, 1000), 10, cap);
    src->on_packet(parse(nak(cfg, Sqn{1})), from(1, 2000), 20, cap);
    CHECK(cap.count(PacketType::rdata) == 1);
    CHECK(src->counters().nak_requester_limited == 1);
    // 64 other hosts fill the table and push host 1 out: it comes back as a new requester.
    // (One every 2 s: a host heard within the last second would share the budget with it.)
    const std::int64_t apart = 2 * protocol::kSec;
    for (std::uint8_t h = 2; h < 2 + protocol::Source::kMaxRequesters; ++h) {
        src->on_packet(parse(nak(cfg, Sqn{h})), from(h, 1000), apart * h, cap);
    }
    CHECK(src->counters().requesters_replaced == 1);
    CHECK(cap.count(PacketType::rdata) == 1 + protocol::Source::kMaxRequesters);
    src->on_packet(parse(nak(cfg, Sqn{1})), from(1, 1000),
                   apart * (2 + protocol::Source::kMaxRequesters), cap);
    CHECK(cap.count(PacketType::rdata) == 2 + protocol::Source::kMaxRequesters);
    CHECK(src->counters().requesters_replaced == 2);
}

TEST_CASE("an NNAK for an in-window sqn is counted, and nothing is sent: no NCF, no RDATA",
          "[protocol][source][nnak]") {
    auto cfg = testing::source_config();
    auto src = std::move(*protocol::Source::create(cfg));
    Capture cap;
    src->open(0, cap);
    for (int i = 0; i < 5; ++i) {
        REQUIRE(src->send(testing::make_message(static_cast<std::uint64_t>(i), 100), 0, cap)
                    .has_value());
    }
    cap.packets.clear();
    // The NAK the source answers below, as an NNAK (RFC 3208 §8.3: a null NAK, sent by a
    // network element that suppressed NAKs; a source answers it with nothing).
    auto nnak = nak(cfg, Sqn{2});
    nnak[4] = std::byte{static_cast<std::uint8_t>(PacketType::nnak)};
    pgm::store_checksum(nnak, 0);
    src->on_packet(parse(nnak), Endpoint{}, kMs, cap);
    CHECK(src->counters().nnak_received == 1);
    CHECK(src->counters().nak_received == 0);
    CHECK(cap.packets.empty());
    src->on_timer(kMs, cap);  // nothing queued for later either
    CHECK(cap.count(PacketType::ncf) == 0);
    CHECK(cap.count(PacketType::rdata) == 0);
    CHECK(src->counters().ncf_sent == 0);
    CHECK(src->counters().rdata_sent == 0);
    // The same sqn as a NAK: answered (the NNAK above was one the source could serve).
    cap.packets.clear();
    src->on_packet(parse(nak(cfg, Sqn{2})), Endpoint{}, 2 * kMs, cap);
    CHECK(cap.count(PacketType::ncf) == 1);
    CHECK(cap.count(PacketType::rdata) == 1);
}

TEST_CASE("a NAK for the sqn after the lead (not sent yet) gets no NCF and no RDATA",
          "[protocol][source]") {
    auto cfg = testing::source_config();
    auto src = std::move(*protocol::Source::create(cfg));
    Capture cap;
    src->open(0, cap);
    for (int i = 0; i < 5; ++i) {
        REQUIRE(src->send(testing::make_message(static_cast<std::uint64_t>(i), 100), 0, cap)
                    .has_value());
    }
    cap.packets.clear();
    src->on_packet(parse(nak(cfg, Sqn{5})), Endpoint{}, kMs, cap);  // lead + 1
    src->on_timer(kMs, cap);
    CHECK(src->counters().nak_out_of_window == 1);
    CHECK(cap.count(PacketType::ncf) == 0);
    CHECK(cap.count(PacketType::rdata) == 0);
    CHECK(src->counters().rdata_queued == 0);
    // The lead itself is served.
    src->on_packet(parse(nak(cfg, Sqn{4})), Endpoint{}, 2 * kMs, cap);
    CHECK(cap.count(PacketType::rdata) == 1);
}
