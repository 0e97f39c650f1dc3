// SPDX-License-Identifier: Apache-2.0
// runtime::Rng, the library's one generator: seeded draws are those of the xorshift64* each
// user had inline before (a seed's loss pattern and NAK back-offs stay as they were), the
// zero state is avoided, uniform() stays in [0, 1), and from_entropy() differs between calls.
#include "lib/runtime/rng.hpp"

#include <cstdint>
#include <random>
#include <set>

#include "tests/support/catch.hpp"

using prizma::runtime::Rng;

namespace {

// The generator as the receiver and LossyTransport wrote it out before runtime::Rng.
std::uint64_t reference_next(std::uint64_t& s) {
    s ^= s >> 12U;
    s ^= s << 25U;
    s ^= s >> 27U;
    return s * 0x2545F4914F6CDD1DULL;
}

}  // namespace

TEST_CASE("Rng draws what the inline xorshift64* drew, for the receiver's and the injector's salts",
          "[unit][rng]") {
    for (const std::uint64_t salt : {std::uint64_t{1}, std::uint64_t{0x2545F4914F6CDD1DULL}}) {
        for (const std::uint64_t seed : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{42},
                                         std::uint64_t{0xdeadbeefcafef00dULL}}) {
            std::uint64_t s = seed * 0x9E3779B97F4A7C15ULL + salt;
            Rng rng(seed, salt);
            for (int i = 0; i < 1000; ++i) {
                REQUIRE(rng() == reference_next(s));
            }
        }
    }
}

TEST_CASE("Rng::uniform is the top 53 bits of a draw: 0 <= u < 1", "[unit][rng]") {
    Rng a(7, 1);
    Rng b(7, 1);
    for (int i = 0; i < 10000; ++i) {
        const double u = a.uniform();
        REQUIRE(u >= 0.0);
        REQUIRE(u < 1.0);
        REQUIRE(u == static_cast<double>(b() >> 11U) * 0x1.0p-53);
    }
}

TEST_CASE("Rng never starts in the all-zero state, which would draw zeros forever", "[unit][rng]") {
    // seed * golden + salt == 0 (mod 2^64) for salt = -(seed * golden).
    const std::uint64_t seed = 3;
    const std::uint64_t salt = 0 - seed * 0x9E3779B97F4A7C15ULL;
    Rng rng(seed, salt);
    std::set<std::uint64_t> seen;
    for (int i = 0; i < 100; ++i) {
        seen.insert(rng());
    }
    CHECK(seen.size() == 100);
    CHECK(seen.count(0) == 0);
}

TEST_CASE("Rng::from_entropy gives different sequences and is a standard bit generator",
          "[unit][rng]") {
    Rng a = Rng::from_entropy();
    Rng b = Rng::from_entropy();
    // Two 64-bit seeds from the OS colliding on three draws: 2^-64 odds.
    CHECK((a() != b() || a() != b() || a() != b()));
    std::uniform_int_distribution<int> d(1, 6);
    for (int i = 0; i < 1000; ++i) {
        const int x = d(a);
        REQUIRE(x >= 1);
        REQUIRE(x <= 6);
    }
}
