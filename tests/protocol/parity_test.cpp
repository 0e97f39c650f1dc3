// SPDX-License-Identifier: Apache-2.0
// FEC parity packets (RFC 3208 §9, §11.8) at a prizma receiver and source, which implement no
// FEC: a parity packet carries a transmission group's sequence number and a Reed-Solomon code
// of the group's packets, so taken as data it would be silent corruption. The codec reads the
// parity bit and the FEC options; the receiver drops parity data before it touches a window and
// ignores parity NAKs and NCFs; the source refuses parity NAKs. Packets are laid out as
// OpenPGM 5.3 writes them (txw.c, source.c, receiver.c).
#include <cstring>
#include <vector>

#include "lib/pgm/bytes.hpp"
#include "lib/protocol/source.hpp"
#include "tests/support/rx_harness.hpp"

using namespace prizma;           // NOLINT(google-build-using-namespace): test file
using namespace prizma::testing;  // NOLINT(google-build-using-namespace): test file
using pgm::Packet;
using pgm::ParseStatus;

namespace {

// Sets the options byte's parity bit (and `extra` bits) and re-sums the packet.
std::vector<std::byte> as_parity(std::vector<std::byte> b, std::uint8_t extra = 0) {
    if (b.size() < pgm::kHeaderBytes) {
        return b;  // (no packet: parse() refuses it)
    }
    b[5] |= std::byte{static_cast<std::uint8_t>(pgm::kOptParity | extra)};
    pgm::store_be16(b.data() + 6, 0);
    pgm::store_be16(b.data() + 6, pgm::csum_finish(pgm::csum_partial(b)));
    return b;
}

// The payload OpenPGM's parity packet would carry: not any message's bytes.
std::vector<std::byte> code_bytes(std::size_t n) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i) {
        v[i] = std::byte{static_cast<std::uint8_t>(0xa5U ^ (i * 7U))};
    }
    return v;
}

// An SPM as OpenPGM sends it with FEC on (source.c): OPT_LENGTH, then OPT_PARITY_PRM
// (type 0x08 | OPT_END, length 8, an OPX byte, the P/O flags, the group size), options byte
// 0x03 (present, network-significant).
std::vector<std::byte> openpgm_fec_spm(const Forge& f,
                                       Sqn spm_sqn,
                                       std::uint8_t flags,
                                       std::uint32_t tgs) {
    auto s = f.base(PacketType::spm);
    s.sqn = spm_sqn;
    s.trail = Sqn{0};
    s.lead = Sqn{0} - 1;
    s.nla = f.nla;
    std::vector<std::byte> b(pgm::encoded_size(s));
    REQUIRE(pgm::encode(b, s) == b.size());
    const std::size_t at = b.size();
    const std::uint8_t opts[] = {0x00, 0x04, 0x00, 0x0c,  // OPT_LENGTH, total 12
                                 0x88, 0x08, 0x00, flags, 0, 0, 0, 0};
    b.resize(at + sizeof opts);
    std::memcpy(b.data() + at, opts, sizeof opts);
    pgm::store_be32(b.data() + at + 8, tgs);
    b[5] = std::byte{0x03};
    pgm::store_be16(b.data() + 6, pgm::csum_finish(pgm::csum_partial(b)));
    return b;
}

}  // namespace

TEST_CASE("codec: the parity bit, OPT_PARITY_PRM, OPT_PARITY_GRP and OPT_CURR_TGSIZE",
          "[protocol][parity]") {
    Forge f;
    SECTION("an OpenPGM FEC SPM: flags and group size read, checksum valid") {
        const auto b = openpgm_fec_spm(f, Sqn{3}, pgm::kParityPrmOnDemand, 8);
        Packet p;
        REQUIRE(pgm::parse(b, p) == ParseStatus::ok);
        CHECK(p.opts.has_parity_prm);
        CHECK(p.opts.parity_prm_flags == pgm::kParityPrmOnDemand);
        CHECK(p.opts.parity_group_size == 8);
        CHECK_FALSE(p.is_parity());
        // prizma's encoder writes the same bytes.
        auto s = f.base(PacketType::spm);
        s.sqn = Sqn{3};
        s.trail = Sqn{0};
        s.lead = Sqn{0} - 1;
        s.nla = f.nla;
        s.parity_prm_flags = pgm::kParityPrmOnDemand;
        s.parity_group_size = 8;
        CHECK(Forge::finish(s) == b);
    }
    SECTION("OPT_PARITY_PRM that OpenPGM refuses is refused") {
        Packet p;
        CHECK(pgm::parse(openpgm_fec_spm(f, Sqn{3}, 0, 8), p) == ParseStatus::bad_options);
        CHECK(pgm::parse(openpgm_fec_spm(f, Sqn{3}, 1, 1), p) == ParseStatus::bad_options);
        CHECK(pgm::parse(openpgm_fec_spm(f, Sqn{3}, 1, 256), p) == ParseStatus::bad_options);
        CHECK(pgm::parse(openpgm_fec_spm(f, Sqn{3}, 1, 12), p) == ParseStatus::bad_options);
        CHECK(pgm::parse(openpgm_fec_spm(f, Sqn{3}, 3, 128), p) == ParseStatus::ok);
    }
    SECTION("a parity RDATA with OPT_PARITY_GRP, OPT_CURR_TGSIZE and a var-pktlen trailer") {
        // Header, data fixed part, OPT_LENGTH, OPT_PARITY_GRP, OPT_CURR_TGSIZE | OPT_END.
        auto s = f.base(PacketType::rdata);
        s.sqn = Sqn{0x40 | 1};  // group 0x40, parity index 1
        s.trail = Sqn{0};
        s.tsdu_length = 12;  // 10 bytes of code + the 2-byte original length
        std::vector<std::byte> b(pgm::encoded_size(s));
        REQUIRE(pgm::encode(b, s) == b.size());
        const std::uint8_t opts[] = {0x00, 0x04, 0x00, 0x14, 0x09, 0x08, 0x00, 0x00, 0, 0,
                                     0,    5,    0x8a, 0x08, 0x00, 0x00, 0,    0,    0, 7};
        b.insert(b.end(), reinterpret_cast<const std::byte*>(opts),
                 reinterpret_cast<const std::byte*>(opts) + sizeof opts);
        const auto code = code_bytes(12);
        b.insert(b.end(), code.begin(), code.end());
        b[5] = std::byte{pgm::kOptPresent | pgm::kOptVarPktlen | pgm::kOptParity};
        pgm::store_be16(b.data() + 6, pgm::csum_finish(pgm::csum_partial(b)));
        Packet p;
        REQUIRE(pgm::parse(b, p) == ParseStatus::ok);
        CHECK(p.is_parity());
        CHECK(p.opts.has_parity_grp);
        CHECK(p.opts.parity_grp == 5);
        CHECK(p.opts.has_curr_tgsize);
        CHECK(p.opts.curr_tgsize == 7);
        CHECK(p.payload.size() == 12);
        // A var-pktlen parity packet shorter than its length trailer is refused.
        auto s1 = s;
        s1.tsdu_length = 1;
        const std::byte one[1] = {std::byte{9}};
        auto shrt = as_parity(Forge::finish(s1, one), pgm::kOptVarPktlen);
        CHECK(pgm::parse(shrt, p) == ParseStatus::bad_length);
        // The FEC options have a fixed length of 8.
        auto bad = b;
        if (bad.size() <= pgm::kDataHeaderBytes + 8) {
            FAIL("the packet is shorter than its options");
            return;
        }
        bad[pgm::kDataHeaderBytes + 5] = std::byte{12};
        pgm::store_be16(bad.data() + 6, 0);
        pgm::store_be16(bad.data() + 6, pgm::csum_finish(pgm::csum_partial(bad)));
        CHECK(pgm::parse(bad, p) == ParseStatus::bad_options);
    }
    SECTION("a parity packet's OPT_FRAGMENT is encoded: parsed, not checked as offsets") {
        const pgm::FragmentInfo garbage{Sqn{0x12345678}, 0xfffffff0U, 3};
        const auto payload = code_bytes(100);
        Packet p;
        const auto plain = f.data(Sqn{4}, Sqn{0}, payload, &garbage, PacketType::rdata);
        CHECK(pgm::parse(plain, p) == ParseStatus::bad_options);
        REQUIRE(pgm::parse(as_parity(plain), p) == ParseStatus::ok);
        CHECK(p.is_parity());
        CHECK(p.opts.has_fragment);
    }
}

TEST_CASE("a parity RDATA in a gap is dropped, the real repair fills it", "[protocol][parity]") {
    Rx rx;
    Stream st;
    st.open(rx);
    st.send(rx, 16, 8);  // sqn 8 lost; 16 is OpenPGM's usual group size
    // A parity packet of group 8 (index 0) carries sqn 8: exactly the gap.
    const auto code = code_bytes(100);
    rx.feed(as_parity(st.f.data(Sqn{8}, Sqn{0}, code, nullptr, PacketType::rdata)),
            kSourceOtherSocket);
    rx.feed(as_parity(st.f.data(Sqn{8}, Sqn{0}, code, nullptr, PacketType::odata)), kSource);
    CHECK(rx.counters().parity_dropped == 2);
    CHECK(rx.counters().rdata_received == 0);
    CHECK(rx.counters().repaired == 0);
    CHECK(rx.data_indices().size() == 8);  // still waiting at the gap
    // Parity beyond the lead opens no gap and moves nothing.
    rx.feed(as_parity(st.f.data(Sqn{40}, Sqn{0}, code, nullptr, PacketType::rdata)),
            kSourceOtherSocket);
    (void)rx.run_for(5 * kMs);
    CHECK(rx.net.naks_for(Sqn{8}) >= 1);  // the gap is NAKed as before
    for (std::uint32_t s = 16; s <= 40; ++s) {
        CHECK(rx.net.naks_for(Sqn{s}) == 0);
    }
    st.repair(rx, Sqn{8});
    require_all_delivered(rx, 16);  // byte for byte: make_message(i) checked by index
    for (const auto& g : rx.got) {
        if (g.kind == Kind::data) {
            std::uint64_t i = 0;
            std::memcpy(&i, g.payload.data(), 8);
            CHECK(g.payload == make_message(i, 100));
        }
    }
    std::array<protocol::PeerCounters, 1> src{};
    REQUIRE(rx.r->source_counters(src) == 1);
    CHECK(src[0].parity_dropped == 3);
}

TEST_CASE("parity NCFs and another receiver's parity NAKs suppress nothing", "[protocol][parity]") {
    Rx rx;
    Stream st;
    st.open(rx);
    st.send(rx, 16, 8);
    // During the back-off: a parity NCF and a parity NAK naming sqn 8 (OpenPGM's parity NAK
    // for group 8 asking one packet: 8 | 0). Selective ones would hold our NAK back.
    rx.feed(as_parity(st.f.ncf(Sqn{8})), kSourceOtherSocket);
    rx.feed(as_parity(st.f.nak(Sqn{8})), host(77));
    CHECK(rx.counters().parity_refused == 2);
    CHECK(rx.counters().nak_suppressed == 0);
    CHECK(rx.counters().ncf_received == 0);
    const auto& t = rx.r->config().timers;
    (void)rx.run_for(t.nak_bo_ivl_ns + kMs);
    CHECK(rx.net.naks_for(Sqn{8}) == 1);
    // The same packets without the parity bit do suppress (the control).
    Rx rx2;
    Stream st2;
    st2.open(rx2);
    st2.send(rx2, 16, 8);
    rx2.feed(st2.f.nak(Sqn{8}), host(77));
    CHECK(rx2.counters().nak_suppressed == 1);
}

TEST_CASE("an SPM's OPT_PARITY_PRM is shown per source", "[protocol][parity]") {
    Rx rx;
    Forge f;
    rx.feed(openpgm_fec_spm(f, Sqn{0}, pgm::kParityPrmProactive | pgm::kParityPrmOnDemand, 16),
            kSourceOtherSocket);
    CHECK(rx.counters().fec_spms == 1);
    std::array<protocol::PeerCounters, 1> src{};
    REQUIRE(rx.r->source_counters(src) == 1);
    CHECK(src[0].fec_group_size == 16);
    CHECK(src[0].fec_modes == 3);
    // A later SPM without it: FEC off again.
    auto s = f.base(PacketType::spm);
    s.sqn = Sqn{1};
    s.trail = Sqn{0};
    s.lead = Sqn{0} - 1;
    s.nla = f.nla;
    rx.feed(Forge::finish(s), kSourceOtherSocket);
    REQUIRE(rx.r->source_counters(src) == 1);
    CHECK(src[0].fec_group_size == 0);
    CHECK(src[0].fec_modes == 0);
}

TEST_CASE("a source refuses a parity NAK and repairs the selective one", "[protocol][parity]") {
    auto sc = source_config();
    auto made = protocol::Source::create(sc);
    REQUIRE(made);
    auto& src = **made;
    Net out;
    std::int64_t now = kSec;
    src.open(now, out);
    for (std::uint64_t i = 0; i < 16; ++i) {
        REQUIRE(src.send(make_message(i, 100), now, out));
    }
    const auto nak = [&](bool parity) {
        auto s = pgm::PacketSpec{};
        s.type = PacketType::nak;
        s.sport = sc.dport;
        s.dport = sc.tsi.sport;
        s.gsi = sc.tsi.gsi;
        s.sqn = Sqn{3};  // parity: group 0, four packets
        s.nla = sc.nla;
        s.group = sc.group;
        s.parity = parity;
        return Forge::finish(s);
    };
    out.sent.clear();
    Packet p;
    auto b = nak(true);
    REQUIRE(pgm::parse(b, p) == ParseStatus::ok);
    src.on_packet(p, host(20), now += kMs, out);
    CHECK(src.counters().nak_parity == 1);
    CHECK(src.counters().nak_received == 0);
    CHECK(out.count(PacketType::ncf) == 0);
    CHECK(out.count(PacketType::rdata) == 0);
    CHECK(src.repairs_queued() == 0);
    b = nak(false);
    REQUIRE(pgm::parse(b, p) == ParseStatus::ok);
    src.on_packet(p, host(20), now += kMs, out);
    CHECK(out.count(PacketType::ncf) == 1);
    CHECK(out.count(PacketType::rdata) == 1);
    REQUIRE(out.sent.back().sqns.size() == 1);
    CHECK(out.sent.back().sqns[0] == Sqn{3});
}
