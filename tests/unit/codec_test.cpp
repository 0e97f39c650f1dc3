// SPDX-License-Identifier: Apache-2.0
#include <array>
#include <cstring>
#include <vector>

#include "lib/pgm/bytes.hpp"
#include "lib/pgm/checksum.hpp"
#include "lib/pgm/packet.hpp"
#include "tests/support/catch.hpp"

using namespace prizma::pgm;  // NOLINT(google-build-using-namespace): test file
using prizma::Gsi;

namespace {

const Gsi kGsi{{0x40, 0x5e, 0xcb, 0xd1, 0x5c, 0xcd}};

std::vector<std::byte> build(const PacketSpec& spec, std::span<const std::byte> payload = {}) {
    std::vector<std::byte> out(encoded_size(spec) + payload.size());
    const std::size_t n = encode(out, spec);
    REQUIRE(n == encoded_size(spec));
    if (!payload.empty()) {
        std::memcpy(out.data() + n, payload.data(), payload.size());
    }
    store_checksum(std::span<std::byte>(out.data(), n), csum_partial(payload));
    return out;
}

}  // namespace

TEST_CASE("ODATA round-trips and has the OpenPGM layout", "[unit][codec]") {
    std::array<std::byte, 100> payload{};
    for (std::size_t i = 0; i < payload.size(); ++i) {
        payload[i] = static_cast<std::byte>(i);
    }
    PacketSpec s;
    s.type = PacketType::odata;
    s.sport = 4660;
    s.dport = 7500;
    s.gsi = kGsi;
    s.tsdu_length = 100;
    s.sqn = Sqn{42};
    s.trail = Sqn{7};
    const auto bytes = build(s, payload);
    REQUIRE(bytes.size() == 124);
    CHECK(load_be16(bytes.data()) == 4660);
    CHECK(std::to_integer<int>(bytes[4]) == 0x04);
    CHECK(std::to_integer<int>(bytes[5]) == 0x00);  // no options on an unfragmented APDU
    Packet p;
    REQUIRE(parse(bytes, p) == ParseStatus::ok);
    CHECK(p.type == PacketType::odata);
    CHECK(p.sqn == Sqn{42});
    CHECK(p.trail == Sqn{7});
    CHECK(p.gsi == kGsi);
    CHECK(p.payload.size() == 100);
    CHECK(std::memcmp(p.payload.data(), payload.data(), 100) == 0);
    CHECK_FALSE(p.opts.has_fragment);
    CHECK(p.source_tsi().sport == 4660);
}

TEST_CASE("OPT_FRAGMENT is 16 bytes after OPT_LENGTH, options byte 0x01", "[unit][codec]") {
    std::vector<std::byte> payload(1424, std::byte{0x5a});
    const FragmentInfo f{Sqn{18}, 2848, 8000};
    PacketSpec s;
    s.type = PacketType::rdata;
    s.sport = 4660;
    s.dport = 7500;
    s.gsi = kGsi;
    s.tsdu_length = 1424;
    s.sqn = Sqn{20};
    s.fragment = &f;
    const auto bytes = build(s, payload);
    CHECK(bytes.size() == 1468);
    CHECK(std::to_integer<int>(bytes[5]) == 0x01);
    CHECK(std::to_integer<int>(bytes[24]) == 0x00);  // OPT_LENGTH
    CHECK(load_be16(bytes.data() + 26) == 20);
    CHECK(std::to_integer<int>(bytes[28]) == 0x81);  // OPT_FRAGMENT | OPT_END
    CHECK(std::to_integer<int>(bytes[29]) == 16);
    Packet p;
    REQUIRE(parse(bytes, p) == ParseStatus::ok);
    REQUIRE(p.opts.has_fragment);
    CHECK(p.opts.fragment.first_sqn == Sqn{18});
    CHECK(p.opts.fragment.offset == 2848);
    CHECK(p.opts.fragment.apdu_length == 8000);
    CHECK(p.opts.total_length == 20);
}

TEST_CASE("NAK with OPT_NAK_LIST: ports swapped, NLAs, network-significant bit", "[unit][codec]") {
    const std::array<Sqn, 3> list{Sqn{44}, Sqn{55}, Sqn{92}};
    PacketSpec s;
    s.type = PacketType::nak;
    s.sport = 7500;
    s.dport = 4660;
    s.gsi = kGsi;
    s.sqn = Sqn{37};
    s.nla = Nla::ipv4(127, 0, 0, 1);
    s.group = Nla::ipv4(239, 192, 0, 1);
    s.nak_list = list;
    const auto bytes = build(s);
    CHECK(bytes.size() == 56);
    CHECK(std::to_integer<int>(bytes[5]) == 0x03);
    Packet p;
    REQUIRE(parse(bytes, p) == ParseStatus::ok);
    CHECK(p.is_upstream());
    CHECK(p.source_tsi().sport == 4660);
    CHECK(p.nla == Nla::ipv4(127, 0, 0, 1));
    CHECK(p.group == Nla::ipv4(239, 192, 0, 1));
    REQUIRE(p.opts.nak_list_count == 3);
    CHECK(p.opts.nak_list_at(0) == Sqn{44});
    CHECK(p.opts.nak_list_at(2) == Sqn{92});
}

TEST_CASE("SPM with OPT_FIN, and IPv6 (GID) NLAs", "[unit][codec]") {
    PacketSpec s;
    s.type = PacketType::spm;
    s.sport = 4660;
    s.dport = 7500;
    s.gsi = kGsi;
    s.sqn = Sqn{9};
    s.trail = Sqn{0};
    s.lead = Sqn{4};
    s.nla = Nla::ipv4(127, 0, 0, 1);
    s.fin = true;
    auto bytes = build(s);
    CHECK(bytes.size() == 44);
    CHECK(std::to_integer<int>(bytes[36 + 4]) == 0x8e);  // OPT_FIN | OPT_END
    Packet p;
    REQUIRE(parse(bytes, p) == ParseStatus::ok);
    CHECK(p.opts.fin);
    CHECK(p.lead == Sqn{4});

    Nla gid;
    gid.afi = kAfiIpv6;
    for (std::size_t i = 0; i < 16; ++i) {
        gid.addr[i] = static_cast<std::uint8_t>(0xfe - i);
    }
    s.nla = gid;
    s.fin = false;
    s.rst = true;
    s.rst_code = 5;
    bytes = build(s);
    REQUIRE(parse(bytes, p) == ParseStatus::ok);
    CHECK(p.nla == gid);
    CHECK(p.opts.rst);
    CHECK(p.opts.rst_code == 5);
}

TEST_CASE("OPT_JOIN and OPT_SYN on ODATA, NCF and SPMR", "[unit][codec]") {
    const Sqn join{100};
    PacketSpec s;
    s.type = PacketType::odata;
    s.sport = 1;
    s.dport = 2;
    s.sqn = Sqn{200};
    s.join_min = &join;
    s.syn = true;
    auto bytes = build(s);
    Packet p;
    REQUIRE(parse(bytes, p) == ParseStatus::ok);
    CHECK(p.opts.has_join);
    CHECK(p.opts.join_min == Sqn{100});
    CHECK(p.opts.syn);

    PacketSpec n;
    n.type = PacketType::ncf;
    n.sport = 4660;
    n.dport = 7500;
    n.sqn = Sqn{11};
    n.nla = Nla::ipv4(127, 0, 0, 1);
    n.group = Nla::ipv4(239, 192, 0, 1);
    bytes = build(n);
    CHECK(bytes.size() == 36);
    REQUIRE(parse(bytes, p) == ParseStatus::ok);
    CHECK(p.type == PacketType::ncf);
    CHECK_FALSE(p.is_upstream());

    PacketSpec r;
    r.type = PacketType::spmr;
    r.sport = 7500;
    r.dport = 4660;
    bytes = build(r);
    CHECK(bytes.size() == 16);
    REQUIRE(parse(bytes, p) == ParseStatus::ok);
    CHECK(p.type == PacketType::spmr);
}

TEST_CASE("encode refuses small buffers and missing NLAs", "[unit][codec]") {
    PacketSpec s;
    s.type = PacketType::nak;
    std::array<std::byte, 64> buf{};
    CHECK(encode(buf, s) == 0);  // no NLA family
    s.nla = Nla::ipv4(1, 2, 3, 4);
    s.group = Nla::ipv4(239, 1, 1, 1);
    CHECK(encode(std::span<std::byte>(buf.data(), 20), s) == 0);
    CHECK(encode(buf, s) == 36);
}

TEST_CASE("wire_length finds each packet's end from its own fields, 0 when it cannot",
          "[unit][codec]") {
    std::vector<std::vector<std::byte>> all;
    std::vector<std::byte> payload(333, std::byte{0x11});
    const FragmentInfo f{Sqn{18}, 0, 900};
    const std::array<Sqn, 2> list{Sqn{5}, Sqn{6}};
    PacketSpec d;
    d.type = PacketType::odata;
    d.tsdu_length = 333;
    all.push_back(build(d, payload));  // no options
    d.fragment = &f;
    all.push_back(build(d, payload));  // OPT_LENGTH + OPT_FRAGMENT
    PacketSpec spm;
    spm.type = PacketType::spm;
    spm.nla = Nla::ipv4(127, 0, 0, 1);
    all.push_back(build(spm));
    Nla gid;
    gid.afi = kAfiIpv6;
    spm.nla = gid;
    spm.fin = true;
    all.push_back(build(spm));  // IPv6 NLA and an option
    PacketSpec nak;
    nak.type = PacketType::nak;
    nak.nla = Nla::ipv4(127, 0, 0, 1);
    nak.group = gid;
    nak.nak_list = list;
    all.push_back(build(nak));
    nak.type = PacketType::ncf;
    nak.nak_list = {};
    all.push_back(build(nak));
    PacketSpec spmr;
    spmr.type = PacketType::spmr;
    all.push_back(build(spmr));
    for (const auto& b : all) {
        Packet p;
        REQUIRE(parse(b, p) == ParseStatus::ok);
        INFO("type " << static_cast<int>(p.type) << ", " << b.size() << " bytes");
        CHECK(wire_length(b) == b.size());
        // At the front of a longer buffer (a merged datagram) it still ends there.
        std::vector<std::byte> two(b);
        two.insert(two.end(), all[0].begin(), all[0].end());
        CHECK(wire_length(two) == b.size());
        // Cut short: 0 before the fixed part is whole, never a length inside the cut.
        for (std::size_t cut = 0; cut < b.size(); ++cut) {
            const std::size_t n = wire_length(std::span<const std::byte>(b.data(), cut));
            CHECK((n == 0 || n == b.size()));
        }
    }
    // Unknown type, POLL, and options that do not start with OPT_LENGTH: unknowable.
    auto bad = all[1];
    bad[4] = std::byte{0x7f};
    CHECK(wire_length(bad) == 0);
    bad[4] = std::byte{0x01};  // POLL
    CHECK(wire_length(bad) == 0);
    bad = all[1];
    bad[24] = std::byte{0x01};  // OPT_FRAGMENT where OPT_LENGTH must be
    CHECK(wire_length(bad) == 0);
    bad = all[2];
    store_be16(bad.data() + 28, 3);  // SPM NLA AFI 3
    CHECK(wire_length(bad) == 0);
}
