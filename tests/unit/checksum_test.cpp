// SPDX-License-Identifier: Apache-2.0
#include "lib/pgm/checksum.hpp"

#include <cstdint>
#include <random>
#include <vector>

#include "lib/pgm/bytes.hpp"
#include "tests/support/catch.hpp"

using namespace prizma::pgm;  // NOLINT(google-build-using-namespace): test file

namespace {
std::vector<std::byte> random_bytes(std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::byte> v(n);
    for (auto& b : v) {
        b = static_cast<std::byte>(rng());
    }
    return v;
}
}  // namespace

TEST_CASE("RFC 1071 example sums to the published value", "[unit][checksum]") {
    // RFC 1071 §3: 00 01 f2 03 f4 f5 f6 f7 -> sum 0xddf2
    const std::vector<std::byte> d{std::byte{0x00}, std::byte{0x01}, std::byte{0xf2},
                                   std::byte{0x03}, std::byte{0xf4}, std::byte{0xf5},
                                   std::byte{0xf6}, std::byte{0xf7}};
    CHECK(csum_partial(d) == 0xddf2);
    CHECK(csum_reference(d) == 0xddf2);
}

TEST_CASE("fast checksum equals the reference for every length and alignment", "[unit][checksum]") {
    const auto buf = random_bytes(9000, 7);
    for (std::size_t off = 0; off < 8; ++off) {
        for (std::size_t len :
             {0U, 1U, 2U, 3U, 7U, 8U, 31U, 32U, 33U, 63U, 100U, 1023U, 1024U, 1500U, 8192U}) {
            const std::span<const std::byte> s(buf.data() + off, len);
            INFO("off " << off << " len " << len);
            CHECK(csum_partial(s) == csum_reference(s));
        }
    }
}

TEST_CASE("fast checksum equals the reference for every short length, random and all-ones",
          "[unit][checksum]") {
    // All-ones words carry out of every addition: the end-around carries must all come back.
    const auto rnd = random_bytes(600, 11);
    const std::vector<std::byte> ones(600, std::byte{0xff});
    for (const auto* buf : {&rnd, &ones}) {
        for (std::size_t off = 0; off < 3; ++off) {
            for (std::size_t len = 0; len + off <= buf->size(); ++len) {
                const std::span<const std::byte> s(buf->data() + off, len);
                INFO("off " << off << " len " << len << " ones " << (buf == &ones));
                REQUIRE(csum_partial(s) == csum_reference(s));
            }
        }
    }
}

TEST_CASE("sums of blocks combine, with a byte swap for odd offsets", "[unit][checksum]") {
    const auto buf = random_bytes(301, 9);
    const std::span<const std::byte> all(buf);
    for (std::size_t cut : {0U, 1U, 2U, 17U, 24U, 150U, 300U}) {
        const auto a = csum_partial(all.first(cut));
        const auto b = csum_partial(all.subspan(cut));
        CHECK(csum_add(a, b, cut % 2 == 1) == csum_partial(all));
    }
}

TEST_CASE("finished checksum verifies, zero is sent as 0xffff", "[unit][checksum]") {
    auto pkt = random_bytes(124, 3);
    store_be16(pkt.data() + 6, 0);
    store_be16(pkt.data() + 6, csum_finish(csum_partial(pkt)));
    CHECK(csum_verify(pkt));
    pkt[40] ^= std::byte{0x01};
    CHECK_FALSE(csum_verify(pkt));
    CHECK(csum_finish(0xffff) == 0xffff);  // complement would be 0 = "no checksum"
    CHECK(csum_finish(0x1234) == static_cast<std::uint16_t>(~0x1234));
}

TEST_CASE("RFC 1624 incremental update matches a full recompute", "[unit][checksum]") {
    auto pkt = random_bytes(64, 5);
    store_be16(pkt.data() + 6, 0);
    const std::uint16_t hc = csum_finish(csum_partial(pkt));
    const std::uint16_t old_word = load_be16(pkt.data() + 4);
    const std::uint16_t new_word =
        static_cast<std::uint16_t>(old_word ^ 0x0100U);  // ODATA -> RDATA
    store_be16(pkt.data() + 4, new_word);
    const std::uint16_t full = csum_finish(csum_partial(pkt));
    store_be16(pkt.data() + 6, csum_update16(hc, old_word, new_word));
    CHECK(csum_verify(pkt));
    CHECK(load_be16(pkt.data() + 6) == full);
}
