// SPDX-License-Identifier: Apache-2.0
// Device-free parts of the verbs transport: the SA MCMemberRecord MAD layout (checked byte by
// byte against IBA §15.2.5.17 / docs/RDMA.md §6.2), and, when
// the transport is built, URI parsing, MGID mapping and GRH source extraction.
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "tests/support/catch.hpp"
#include "transports/verbs/sa_mad.hpp"
#if PRIZMA_HAVE_VERBS
#include "transports/verbs/verbs_transport.hpp"
#endif

using namespace prizma;  // NOLINT(google-build-using-namespace): test file
namespace sa = prizma::verbs::sa;

namespace {
std::uint8_t at(const std::array<std::byte, sa::kMadSize>& m, std::size_t i) {
    return std::to_integer<std::uint8_t>(m[i]);
}
}  // namespace

TEST_CASE("SA join MAD: MAD header, SA header and MCMemberRecord at the IBA offsets",
          "[verbs][sa]") {
    sa::McMemberRecord r;
    for (std::uint8_t i = 0; i < 16; ++i) {
        r.mgid[i] = static_cast<std::uint8_t>(0xf0 + i);
        r.port_gid[i] = static_cast<std::uint8_t>(0x10 + i);
    }
    r.qkey = 0x50474d31;
    r.mlid = 0xc001;
    r.mtu = (2U << 6U) | 3U;  // exactly 1024
    r.tclass = 0x2e;
    r.pkey = 0xffff;
    r.rate = (2U << 6U) | 3U;
    r.pkt_life = 0x12;
    r.sl = 0xa;
    r.flow_label = 0x12345;
    r.hop_limit = 0x40;
    r.scope = 2;
    r.join_state = sa::JoinState::full_member;
    const std::uint64_t mask = sa::join_mask(true);
    const auto m = sa::encode_request(sa::kMethodSet, 0x0102030405060708ULL, mask, r);
    // MAD common header
    CHECK(at(m, 0) == 1);     // BaseVersion
    CHECK(at(m, 1) == 0x03);  // MgmtClass SubnAdm
    CHECK(at(m, 2) == 2);     // ClassVersion
    CHECK(at(m, 3) == 0x02);  // Method Set
    CHECK(at(m, 4) == 0);     // Status
    CHECK(at(m, 5) == 0);
    for (std::size_t i = 0; i < 8; ++i) {
        CHECK(at(m, 8 + i) == i + 1);  // TransactionID, big-endian
    }
    CHECK(at(m, 16) == 0x00);  // AttributeID 0x0038
    CHECK(at(m, 17) == 0x38);
    // RMPP header and SM_Key zero
    for (std::size_t i = 24; i < 44; ++i) {
        CHECK(at(m, i) == 0);
    }
    // ComponentMask at 48, big-endian 64 bits
    std::uint64_t got_mask = 0;
    for (std::size_t i = 0; i < 8; ++i) {
        got_mask = (got_mask << 8U) | at(m, 48 + i);
    }
    CHECK(got_mask == mask);
    // MCMemberRecord at 56 (reference §4.1: MGID 0-15, PortGID 16-31, Q_Key 32-35, MLID 36-37,
    // MTU 38, TClass 39, P_Key 40-41, Rate 42, PktLifeTime 43, SL|FlowLabel|HopLimit 44-47,
    // Scope|JoinState 48)
    const std::size_t d = 56;
    for (std::size_t i = 0; i < 16; ++i) {
        CHECK(at(m, d + i) == 0xf0 + i);
        CHECK(at(m, d + 16 + i) == 0x10 + i);
    }
    CHECK(at(m, d + 32) == 0x50);
    CHECK(at(m, d + 35) == 0x31);
    CHECK(at(m, d + 36) == 0xc0);
    CHECK(at(m, d + 37) == 0x01);
    CHECK(at(m, d + 38) == 0x83);
    CHECK(at(m, d + 39) == 0x2e);
    CHECK(at(m, d + 40) == 0xff);
    CHECK(at(m, d + 41) == 0xff);
    CHECK(at(m, d + 42) == 0x83);
    CHECK(at(m, d + 43) == 0x12);
    // SL 0xa (4 bits) | FlowLabel 0x12345 (20 bits) | HopLimit 0x40 (8 bits) = 0xa1234540
    CHECK(at(m, d + 44) == 0xa1);
    CHECK(at(m, d + 45) == 0x23);
    CHECK(at(m, d + 46) == 0x45);
    CHECK(at(m, d + 47) == 0x40);
    CHECK(at(m, d + 48) == 0x21);  // scope 2, FullMember
    for (std::size_t i = d + 49; i < sa::kMadSize; ++i) {
        CHECK(at(m, i) == 0);
    }
}

TEST_CASE("SA component masks: join vs create", "[verbs][sa]") {
    const auto j = sa::join_mask(false);
    CHECK(j
          == (sa::kCompMgid | sa::kCompPortGid | sa::kCompQkey | sa::kCompPkey | sa::kCompTclass
              | sa::kCompSl | sa::kCompFlowLabel | sa::kCompJoinState));
    CHECK((j & sa::kCompMlid) == 0);  // the SA assigns the MLID
    const auto c = sa::join_mask(true);
    CHECK((c & (sa::kCompMtuSel | sa::kCompMtu | sa::kCompRateSel | sa::kCompRate | sa::kCompScope))
          == (sa::kCompMtuSel | sa::kCompMtu | sa::kCompRateSel | sa::kCompRate | sa::kCompScope));
    CHECK(sa::kCompJoinState == 1ULL << 16U);
}

TEST_CASE("SA response decode: MLID and SL from the SA's answer, junk refused", "[verbs][sa]") {
    sa::McMemberRecord r;
    r.mgid[0] = 0xff;
    r.mlid = 0xc00a;
    r.sl = 3;
    r.flow_label = 7;
    r.join_state = sa::JoinState::send_only_full_member;
    auto m = sa::encode_request(sa::kMethodGetResp, 42, 0, r);
    sa::Response out;
    REQUIRE(sa::decode_response(m, out));
    CHECK(out.method == sa::kMethodGetResp);
    CHECK(out.tid == 42);
    CHECK(out.status == 0);
    CHECK(out.rec.mlid == 0xc00a);
    CHECK(out.rec.sl == 3);
    CHECK(out.rec.flow_label == 7);
    CHECK(out.rec.join_state == sa::JoinState::send_only_full_member);
    CHECK(out.rec.mgid == r.mgid);
    m[4] = std::byte{0x02};  // MAD status: e.g. 0x0200 "invalid field"
    REQUIRE(sa::decode_response(m, out));
    CHECK(out.status == 0x0200);
    CHECK_FALSE(sa::decode_response(std::span<const std::byte>(m.data(), 60), out));
    m[1] = std::byte{0x81};  // another management class
    CHECK_FALSE(sa::decode_response(m, out));
    m[1] = std::byte{0x03};
    m[17] = std::byte{0x35};  // another attribute
    CHECK_FALSE(sa::decode_response(m, out));
}

TEST_CASE("SA replies match on the low 32 bits of the transaction id, as the kernel leaves them",
          "[unit][verbs][sa]") {
    // ib_umad_write puts the agent's id in the top 32 bits of the TID we send; the SA's reply
    // carries that TID. Matched on all 64 bits, every join timed out (and leaked the membership).
    const std::uint64_t sent = 0x1122334455667788ULL;
    sa::McMemberRecord r;
    r.mlid = 0xc001;
    const std::uint64_t rewritten = (std::uint64_t{0x00000007} << 32U) | 0x55667788U;
    auto m = sa::encode_request(sa::kMethodGetResp, rewritten, 0, r);
    sa::Response out;
    REQUIRE(sa::decode_response(m, out));
    CHECK(out.tid == rewritten);
    CHECK(sa::same_transaction(sent, out.tid));
    CHECK_FALSE(sa::same_transaction(sent, rewritten + 1));          // another request's reply
    CHECK_FALSE(sa::same_transaction(sent, 0x1122334400000000ULL));  // same top half only
}

#if PRIZMA_HAVE_VERBS
TEST_CASE("verbs:// URIs: device or address, group, dport, keys, errors name the value",
          "[verbs][uri]") {
    auto a = verbs::parse_uri("verbs://rxe0:1/239.192.0.1:7500?gid_index=1&qkey=0x11111111");
    REQUIRE(a.has_value());
    CHECK(a->device == "rxe0");
    CHECK(a->port == 1);
    CHECK(a->group == "239.192.0.1");
    CHECK(a->dport == 7500);
    CHECK(a->gid_index == 1);
    CHECK(a->qkey == 0x11111111U);
    auto b = verbs::parse_uri("verbs://192.0.2.1/[ff12::5047:4d31]:7600?rx_depth=64&mtu=1024");
    REQUIRE(b.has_value());
    CHECK(b->device.empty());
    CHECK(b->local_addr == "192.0.2.1");
    CHECK(b->group == "ff12::5047:4d31");
    CHECK(b->dport == 7600);
    CHECK(b->rx_depth == 64);
    auto c = verbs::parse_uri("verbs://[fe80::1]:2/192.0.2.9:7500?qpn=0x11");
    REQUIRE(c.has_value());
    CHECK(c->local_addr == "[fe80::1]");
    CHECK(c->port == 2);
    CHECK(c->dest_qpn == 0x11U);
    auto d = verbs::parse_uri("verbs://mlx5_0/239.1.1.1:1");
    REQUIRE(d.has_value());
    CHECK(d->device == "mlx5_0");
    CHECK(d->port == 1);

    const std::vector<std::pair<std::string, std::string>> bad{
        {"udp://239.1.1.1:7500", "verbs://"},
        {"verbs://rxe0", "verbs://DEVICE"},
        {"verbs://rxe0:0/239.1.1.1:7500", "HCA port '0'"},
        {"verbs://rxe0:1/239.1.1.1", "missing :DPORT"},
        {"verbs://rxe0:1/239.1.1.1:0", "'0'"},
        {"verbs://rxe0:1/239.1.1.300:7500", "239.1.1.300"},
        {"verbs://rxe0:1/239.1.1.1:7500?colour=red", "colour"},
        {"verbs://rxe0:1/239.1.1.1:7500?qkey=0x80010000", "qkey"},
        {"verbs://rxe0:1/239.1.1.1:7500?rx_depth=2", "rx_depth"},
        {"verbs://rxe0:1/239.1.1.1:7500?mtu=9000", "mtu"},
        {"verbs://rxe0:1/239.1.1.1:7500?qpn=1", "qpn"},
        {"verbs://[fe80::1/239.1.1.1:7500", "'['"},
    };
    for (const auto& [uri, needle] : bad) {
        auto r = verbs::parse_uri(uri);
        INFO(uri << " -> " << r.error().message());
        CHECK_FALSE(r.has_value());
        CHECK(r.error() == prizma::Errc::invalid_argument);  // the same code as udp:// and mem://
        CHECK(r.error().message().find(needle) != std::string::npos);
    }
    // The fault keys are the Context's (taken out before the factory sees the URI): the
    // transport's own grammar refuses them.
    CHECK_FALSE(verbs::parse_uri("verbs://rxe0/239.1.1.1:7500?loss=0.05").has_value());
}

TEST_CASE("MGID mapping: RoCE v2 IPv4-mapped, IPv6 as is, IB prizma signature", "[verbs][gid]") {
    std::array<std::uint8_t, 16> g{};
    REQUIRE(verbs::group_to_gid("239.1.2.3", false, 0xffff, g));
    const std::array<std::uint8_t, 16> v4{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, 3};
    CHECK(g == v4);
    CHECK(verbs::gid_is_multicast(g));
    REQUIRE(verbs::group_to_gid("ff12::5047:4d31", false, 0xffff, g));
    CHECK(g[0] == 0xff);
    CHECK(g[1] == 0x12);
    CHECK(g[14] == 0x4d);
    CHECK(g[15] == 0x31);
    REQUIRE(verbs::group_to_gid("239.1.2.3", true, 0x8001, g));
    const std::array<std::uint8_t, 16> ib{0xff, 0x12, 0x50, 0x47, 0x80, 0x01, 0, 0,
                                          0,    0,    0,    0,    0x0f, 1,    2, 3};
    CHECK(g == ib);
    REQUIRE(verbs::group_to_gid("192.0.2.1", false, 0xffff, g));
    CHECK_FALSE(verbs::gid_is_multicast(g));  // a unicast peer
    CHECK_FALSE(verbs::group_to_gid("rxe0", false, 0xffff, g));
}

TEST_CASE("GRH source: RoCE v2 IPv4 header at offset 20, else the GRH's SGID", "[verbs][gid]") {
    std::array<std::uint8_t, 40> grh{};
    // IPv4 header 192.0.2.1 -> 239.1.1.1, with a valid header checksum
    const std::uint8_t ip[20] = {0x45, 0, 0,   60, 0, 0, 0x40, 0, 1, 17,
                                 0,    0, 192, 0,  2, 1, 239,  1, 1, 1};
    std::memcpy(&grh[20], ip, 20);
    std::uint32_t s = 0;
    for (std::size_t i = 0; i < 20; i += 2) {
        s += (std::uint32_t{grh[20 + i]} << 8U) | grh[20 + i + 1];
    }
    s = (s & 0xffffU) + (s >> 16U);
    s = ~s & 0xffffU;
    grh[30] = static_cast<std::uint8_t>(s >> 8U);
    grh[31] = static_cast<std::uint8_t>(s);
    auto g = verbs::source_gid_from_grh(grh.data());
    const std::array<std::uint8_t, 16> want{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1};
    CHECK(g == want);
    // IPv6 / IB GRH: version 6, SGID at 8..23
    std::array<std::uint8_t, 40> g6{};
    g6[0] = 0x60;
    for (std::uint8_t i = 0; i < 16; ++i) {
        g6[8 + i] = static_cast<std::uint8_t>(0xa0 + i);
    }
    auto h = verbs::source_gid_from_grh(g6.data());
    CHECK(h[0] == 0xa0);
    CHECK(h[15] == 0xaf);
    // when the first word says IPv6 (ambiguous), a corrupted IPv4 checksum is not taken for an
    // IPv4 header
    grh[0] = 0x60;
    grh[31] ^= 1U;
    CHECK(verbs::source_gid_from_grh(grh.data()) != want);
}

TEST_CASE("verbs transport: no device gives a clear error, never a crash", "[verbs]") {
    verbs::VerbsConfig c;
    c.device = "prizma_no_such_dev";
    c.group = "239.1.1.1";
    auto t = verbs::VerbsTransport::create(c);
    REQUIRE_FALSE(t.has_value());
    const std::string err = t.error().message();
    INFO(err);
    // Either no device at all (this machine) or a list of the ones that exist (a VM).
    CHECK((err.find("no RDMA devices") != std::string::npos
           || err.find("prizma_no_such_dev") != std::string::npos));
}

TEST_CASE("verbs: what was chosen, on one line for the tools and prizma-stat", "[verbs][unit]") {
    verbs::VerbsInfo i;
    i.device = "mlx5_0";
    i.port = 1;
    i.gid_index = 3;
    i.gid = "::ffff:10.0.0.1";
    i.netdev = "eth1";
    i.qpn = 0x1a;
    i.mtu = 4096;
    i.multicast = true;
    i.rx_depth = 4096;
    i.tx_depth = 1024;
    i.max_inline = 188;
    i.comp_vector = 2;
    i.comp_vectors = 8;
    i.notes = "rx_depth 8192 -> 4096 (device max_qp_wr)";
    const std::string roce = verbs::describe(i, 0x50474d31);
    CHECK(roce
          == "verbs mlx5_0 port 1 gid[3] ::ffff:10.0.0.1 (RoCE, netdev eth1) qpn 0x1a mtu 4096 "
             "qkey 0x50474d31 rx_depth 4096 tx_depth 1024 inline 188 comp_vector 2/8; "
             "rx_depth 8192 -> 4096 (device max_qp_wr)");
    i.infiniband = true;
    i.lid = 0x17;
    i.mlid = 0xc001;
    i.notes.clear();
    const std::string ib = verbs::describe(i, 0x12345678);
    CHECK_THAT(ib, Catch::Contains("(InfiniBand, lid 0x17)") && Catch::Contains("mlid 0xc001")
                       && Catch::Contains("qkey 0x12345678") && !Catch::Contains(";"));
    CHECK_THAT(ib, !Catch::Contains("receives"));
    // mtu=1024 on a 4096 port: what it receives is said, since it differs
    i.mtu = 1024;
    i.rx_mtu = 4096;
    CHECK_THAT(
        verbs::describe(i, 1),
        Catch::Contains("mtu 1024 ") && Catch::EndsWith("comp_vector 2/8 receives up to 4096"));
    i.rx_mtu = 1024;
    CHECK_THAT(verbs::describe(i, 1), !Catch::Contains("receives"));
}
#endif
