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

void refresh_checksum(std::vector<std::byte>& b) {
    store_be16(b.data() + 6, 0);
    store_be16(b.data() + 6, csum_finish(csum_partial(b)));
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
        store_be16(b.data() + 14, 41);
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::bad_length);
    }
    SECTION("OPT_LENGTH total past the end") {
        auto b = fragment_odata();
        store_be16(b.data() + 26, 0x7fff);
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::truncated);
    }
    SECTION("zero-length option (would loop forever)") {
        auto b = fragment_odata();
        b[29] = std::byte{0};
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::bad_options);
    }
    SECTION("option length running past OPT_LENGTH's total") {
        auto b = fragment_odata();
        b[29] = std::byte{60};
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::bad_options);
    }
    SECTION("first option is not OPT_LENGTH") {
        auto b = fragment_odata();
        b[24] = std::byte{0x01};
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::bad_options);
    }
    SECTION("no OPT_END on the last option") {
        auto b = fragment_odata();
        b[28] = std::byte{0x01};
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
        b[41] = std::byte{11};
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::bad_options);
    }
    SECTION("bad AFI") {
        auto b = nak_with_list();
        store_be16(b.data() + 20, 3);
        refresh_checksum(b);
        CHECK(parse(b, p) == ParseStatus::bad_afi);
    }
    SECTION("zero checksum on data is refused, allowed only when configured (verbs)") {
        auto b = fragment_odata();
        store_be16(b.data() + 6, 0);
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
        b[4] = std::byte{0x07};
        CHECK(parse(b, p) == ParseStatus::bad_type);
        b[4] = std::byte{0x48};
        CHECK(parse(b, p) == ParseStatus::bad_type);
    }
    SECTION("unknown options are skipped by length") {
        auto b = fragment_odata();
        b[28] = std::byte{0x80 | 0x21};  // unknown type, still END
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
