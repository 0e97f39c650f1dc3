// SPDX-License-Identifier: Apache-2.0
#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "lib/pgm/bytes.hpp"
#include "lib/pgm/checksum.hpp"
#include "lib/pgm/packet.hpp"
#include "tests/support/catch.hpp"

using namespace prizma::pgm;  // NOLINT(google-build-using-namespace): test file

namespace {

// Through at(): GCC 12 at -O3 takes b.data() of a copied vector for a possible null pointer
// (-Wnull-dereference) when it is written directly.
void set_be16(std::vector<std::byte>& b, std::size_t off, std::uint16_t v) {
    b.at(off) = std::byte{static_cast<std::uint8_t>(v >> 8U)};
    b.at(off + 1) = std::byte{static_cast<std::uint8_t>(v & 0xffU)};
}

void refresh_checksum(std::vector<std::byte>& b) {
    set_be16(b, 6, 0);
    set_be16(b, 6, csum_finish(csum_partial(b)));
}

std::vector<std::byte> nak_with_list() {
    const std::array<Sqn, 2> list{Sqn{5}, Sqn{6}};
    PacketSpec s;
    s.type = PacketType::nak;
    s.sport = 7500;
    s.dport = 1000;
    s.sqn = Sqn{4};
    s.nla = Nla::ipv4(10, 0, 0, 1);
    s.group = Nla::ipv4(239, 0, 0, 1);
    s.nak_list = list;
    std::vector<std::byte> b(encoded_size(s));
    REQUIRE(encode(b, s) == b.size());
    refresh_checksum(b);
    return b;
}

std::vector<std::byte> fragment_odata() {
    const FragmentInfo f{Sqn{1}, 0, 100};
    PacketSpec s;
    s.type = PacketType::odata;
    s.sport = 1000;
    s.dport = 7500;
    s.sqn = Sqn{1};
    s.fragment = &f;
    s.tsdu_length = 40;
    std::vector<std::byte> b(encoded_size(s) + 40, std::byte{0x11});
    REQUIRE(encode(b, s) == b.size() - 40);
    refresh_checksum(b);
    return b;
}

}  // namespace

TEST_CASE("every truncation of valid packets is refused without overreading", "[unit][malformed]") {
    for (const auto& good : {nak_with_list(), fragment_odata()}) {
        Packet p;
        REQUIRE(parse(good, p) == ParseStatus::ok);
        for (std::size_t n = 0; n < good.size(); ++n) {
            // Exact-size heap copy so ASan catches any read past the end.
            std::vector<std::byte> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
            INFO("length " << n);
            CHECK(parse(cut, p, ParseConfig{false, false}) != ParseStatus::ok);
        }
    }
}

TEST_CASE("lying lengths, option loops, bad AFIs and bad checksums are refused",
          "[unit][malformed]") {
    Packet p;
    SECTION("TSDU length larger than the datagram") {
        auto b = fragment_odata();
        set_be16(b, 14, 41);
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::bad_length);
    }
    SECTION("OPT_LENGTH total past the end") {
        auto b = fragment_odata();
        set_be16(b, 26, 0x7fff);
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::truncated);
    }
    SECTION("zero-length option (would loop forever)") {
        auto b = fragment_odata();
        b.at(29) = std::byte{0};
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::bad_options);
    }
    SECTION("option length running past OPT_LENGTH's total") {
        auto b = fragment_odata();
        b.at(29) = std::byte{60};
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::bad_options);
    }
    SECTION("first option is not OPT_LENGTH") {
        auto b = fragment_odata();
        b.at(24) = std::byte{0x01};
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::bad_options);
    }
    SECTION("no OPT_END on the last option") {
        auto b = fragment_odata();
        b.at(28) = std::byte{0x01};
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::bad_options);
    }
    SECTION("fragment offset beyond the APDU") {
        auto b = fragment_odata();
        store_be32(b.data() + 36, 90);  // offset 90 + 40 bytes > 100
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::bad_options);
    }
    SECTION("NAK list length not a whole number of sequence numbers") {
        auto b = nak_with_list();
        b.at(41) = std::byte{11};
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::bad_options);
    }
    SECTION("bad AFI") {
        auto b = nak_with_list();
        set_be16(b, 20, 3);
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::bad_afi);
    }
    SECTION("zero checksum on data is refused, allowed only when configured (verbs)") {
        auto b = fragment_odata();
        set_be16(b, 6, 0);
        CHECK(parse(b, p) == ParseStatus::zero_checksum);
        CHECK(parse(b, p, ParseConfig{true, true}) == ParseStatus::ok);
    }
    SECTION("flipped bit fails the checksum") {
        auto b = fragment_odata();
        b[b.size() - 1] ^= std::byte{0x80};
        CHECK(parse(b, p) == ParseStatus::bad_checksum);
    }
    SECTION("unknown type and version bits") {
        auto b = nak_with_list();
        b.at(4) = std::byte{0x07};
        CHECK(parse(b, p) == ParseStatus::bad_type);
        b.at(4) = std::byte{0x48};
        CHECK(parse(b, p) == ParseStatus::bad_type);
    }
    SECTION("unknown options are skipped by length") {
        auto b = fragment_odata();
        b.at(28) = std::byte{0x80 | 0x21};  // unknown type, still END
        refresh_checksum(b);
        REQUIRE(parse(b, p) == ParseStatus::ok);
        CHECK(p.opts.unknown_count == 1);
        CHECK_FALSE(p.opts.has_fragment);
    }
}

TEST_CASE("random mutations never crash the parser", "[unit][malformed]") {
    std::mt19937 rng(12345);
    const std::vector<std::vector<std::byte>> seeds{nak_with_list(), fragment_odata()};
    Packet p;
    std::size_t accepted = 0;
    for (int i = 0; i < 200000; ++i) {
        auto b = seeds[static_cast<std::size_t>(i) % seeds.size()];
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < flips; ++k) {
            b[rng() % b.size()] = static_cast<std::byte>(rng());
        }
        b.resize(rng() % (b.size() + 8));
        if (parse(b, p, ParseConfig{true, false}) == ParseStatus::ok) {
            ++accepted;
            REQUIRE(p.payload.data() + p.payload.size() <= b.data() + b.size());
        }
    }
    CHECK(accepted < 200000);
}

namespace {

/// An SPM with OPT_FIN: header 16 + SPM 12 + NLA 8, then OPT_LENGTH (4) and OPT_FIN (4): the
/// options end where the packet ends (no TSDU).
std::vector<std::byte> spm_with_fin() {
    PacketSpec s;
    s.type = PacketType::spm;
    s.sport = 1000;
    s.dport = 7500;
    s.nla = Nla::ipv4(10, 0, 0, 1);
    s.fin = true;
    std::vector<std::byte> b(encoded_size(s));
    REQUIRE(encode(b, s) == b.size());
    REQUIRE(b.size() == 44);
    refresh_checksum(b);
    return b;
}

bool is_defined_type(unsigned t) {
    // RFC 3208 §8 (lib/pgm/packet.hpp): SPM, POLL, POLR, ODATA, RDATA, NAK, NNAK, NCF, SPMR,
    // and ACK (PGMCC, an OpenPGM extension). Version bits (the high nibble) are zero.
    switch (t) {
        case 0x00:
        case 0x01:
        case 0x02:
        case 0x04:
        case 0x05:
        case 0x08:
        case 0x09:
        case 0x0a:
        case 0x0c:
        case 0x0d: return true;
        default: return false;
    }
}

}  // namespace

TEST_CASE("an option one byte past the end of the packet is refused, the exact fit accepted",
          "[unit][malformed][boundary]") {
    Packet p;
    const auto fit = spm_with_fin();
    REQUIRE(parse(fit, p) == ParseStatus::ok);  // OPT_FIN's 4 bytes end with the packet
    CHECK(p.opts.fin);
    CHECK(p.opts.total_length == 8);
    SECTION("the last option's length one past the end (OPT_LENGTH's total exact)") {
        auto b = fit;
        b.at(41) = std::byte{5};  // OPT_FIN's length
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::bad_options);
    }
    SECTION("OPT_LENGTH's total and the last option one past the end") {
        auto b = fit;
        set_be16(b, 38, 9);  // OPT_LENGTH's total
        b.at(41) = std::byte{5};
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::truncated);  // refused by the total, before the walk
    }
    SECTION("OPT_LENGTH's total one past the end, the options themselves exact") {
        auto b = fit;
        set_be16(b, 38, 9);
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::truncated);
    }
    SECTION("one byte more in the packet: the options still fit, the byte is a TSDU") {
        auto b = fit;
        b.push_back(std::byte{0x42});
        b.push_back(std::byte{0});
        set_be16(b, 14, 2);
        refresh_checksum(b);
        REQUIRE(parse(b, p) == ParseStatus::ok);
        CHECK(p.payload.size() == 2);
    }
}

TEST_CASE("every undefined PGM type byte is refused as bad_type, with a valid checksum",
          "[unit][malformed][boundary]") {
    // A header-only packet (TSDU length 0, no options) of each of the 256 type byte values,
    // its checksum valid: only the type can refuse it.
    std::size_t defined = 0;
    for (unsigned t = 0; t < 256; ++t) {
        INFO("type byte 0x" << std::hex << t);
        std::vector<std::byte> b(kHeaderBytes);
        store_be16(b.data(), 1000);
        set_be16(b, 2, 7500);
        b.at(4) = static_cast<std::byte>(t);
        refresh_checksum(b);
        REQUIRE(csum_verify(b));
        Packet p;
        const ParseStatus st = parse(b, p);
        if (is_defined_type(t)) {
            ++defined;
            CHECK(st != ParseStatus::bad_type);
            if (t == 0x01 || t == 0x02 || t == 0x0c) {
                CHECK(st == ParseStatus::ok);  // POLL, POLR, SPMR: header only
            } else {
                CHECK(st == ParseStatus::truncated);  // their fixed part (ACK: RX_MAX, bitmap)
            }
        } else {
            CHECK(st == ParseStatus::bad_type);
            CHECK(wire_length(b) == 0);
        }
    }
    CHECK(defined == 10);
}

TEST_CASE("a fragment ending exactly at its APDU's end is accepted, one byte past is refused",
          "[unit][malformed][boundary]") {
    Packet p;
    auto b = fragment_odata();      // 40 bytes of an APDU of 100
    store_be32(b.data() + 36, 60);  // offset 60: bytes 60..99
    refresh_checksum(b);
    REQUIRE(parse(b, p) == ParseStatus::ok);
    CHECK(p.opts.fragment.offset == 60);
    store_be32(b.data() + 36, 61);  // bytes 61..100: one past the APDU
    refresh_checksum(b);
    CHECK(parse(b, p) == ParseStatus::bad_options);
    store_be32(b.data() + 36, 100);  // offset at the APDU's end, with data
    refresh_checksum(b);
    CHECK(parse(b, p) == ParseStatus::bad_options);
}

TEST_CASE("option lengths other than their own are refused: OPT_FRAGMENT 20, OPT_JOIN 12",
          "[unit][malformed][boundary]") {
    Packet p;
    // OPT_FRAGMENT with 4 bytes more (its length and OPT_LENGTH's total both say so).
    auto b = fragment_odata();
    b.insert(b.begin() + 44, 4, std::byte{0});
    b.at(29) = std::byte{20};
    set_be16(b, 26, static_cast<std::uint16_t>(load_be16(b.data() + 26) + 4));
    refresh_checksum(b);
    CHECK(parse(b, p) == ParseStatus::bad_options);
    // OPT_JOIN of 12 bytes.
    const Sqn join{7};
    PacketSpec s;
    s.type = PacketType::odata;
    s.sport = 1000;
    s.dport = 7500;
    s.join_min = &join;
    std::vector<std::byte> j(encoded_size(s));
    REQUIRE(encode(j, s) == j.size());
    refresh_checksum(j);
    REQUIRE(parse(j, p) == ParseStatus::ok);
    REQUIRE(p.opts.has_join);
    j.insert(j.end(), 4, std::byte{0});
    j[29] = std::byte{12};
    store_be16(j.data() + 26, static_cast<std::uint16_t>(load_be16(j.data() + 26) + 4));
    refresh_checksum(j);
    CHECK(parse(j, p) == ParseStatus::bad_options);
}
