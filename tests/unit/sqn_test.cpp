// SPDX-License-Identifier: Apache-2.0
#include "lib/pgm/sqn.hpp"

#include <type_traits>

#include "tests/support/catch.hpp"

using prizma::pgm::distance;
using prizma::pgm::precedes;
using prizma::pgm::precedes_or_equal;
using prizma::pgm::span_count;
using prizma::pgm::Sqn;

namespace {
template <typename T>
concept LessComparable = requires(T a, T b) {
    a < b;
};
}  // namespace

TEST_CASE("Sqn has no ordering operators, only serial predicates", "[unit][sqn]") {
    STATIC_REQUIRE_FALSE(LessComparable<Sqn>);
    STATIC_REQUIRE(std::is_trivially_copyable_v<Sqn>);
}

TEST_CASE("serial arithmetic is correct across the 2^32 wrap", "[unit][sqn]") {
    const Sqn top{0xffffffffU};
    const Sqn zero{0};
    CHECK(precedes(top, zero));
    CHECK_FALSE(precedes(zero, top));
    CHECK(distance(top, zero) == 1);
    CHECK(distance(zero, top) == -1);
    CHECK(top + 1 == zero);
    CHECK(zero - 1 == top);
    CHECK(span_count(Sqn{0xfffffffeU}, Sqn{1}) == 4);
    CHECK(precedes(Sqn{0x7ffffff0U}, Sqn{0x80000010U}));
    CHECK(precedes_or_equal(Sqn{5}, Sqn{5}));
    CHECK_FALSE(precedes(Sqn{5}, Sqn{5}));
    // Half the number space away: RFC 1982 leaves it undefined; ours says "not before".
    CHECK(distance(Sqn{0}, Sqn{0x80000000U}) == INT32_MIN);
    CHECK_FALSE(precedes(Sqn{0}, Sqn{0x80000000U}));
    Sqn s{0xffffffffU};
    ++s;
    CHECK(s.value == 0);
}
