// SPDX-License-Identifier: Apache-2.0
// The ping tool's log-linear histogram: bucket bounds, relative error, percentiles.
#include "examples/tools/histogram.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/support/catch.hpp"

using prizma::tools::Histogram;

TEST_CASE("histogram: every value lands in a bucket whose bounds hold it, within 1/64",
          "[unit][histogram]") {
    std::mt19937_64 rng(7);
    std::vector<std::uint64_t> values = {0, 1, 127, 128, 129, 255, 256, 1000, 65535, 65536};
    for (int i = 0; i < 100000; ++i) {
        values.push_back(rng() >> (rng() % 47 + 17));  // spread over 2^0 .. 2^47
    }
    for (const std::uint64_t v : values) {
        const std::size_t i = Histogram::index_of(v);
        REQUIRE(i < Histogram::kBuckets);
        const std::uint64_t hi = Histogram::upper_of(i);
        const std::uint64_t lo = i == 0 ? 0 : Histogram::upper_of(i - 1) + 1;
        INFO("v=" << v << " bucket " << i << " [" << lo << ", " << hi << "]");
        REQUIRE(lo <= v);
        REQUIRE(v <= hi);
        REQUIRE(static_cast<double>(hi - lo) <= static_cast<double>(lo) / 64.0 + 1.0);
    }
    // Beyond the range (~39 h in ns): the last bucket, never out of bounds.
    CHECK(Histogram::index_of(~std::uint64_t{0}) == Histogram::kBuckets - 1);
    CHECK(Histogram::index_of(std::uint64_t{1} << 50) == Histogram::kBuckets - 1);
    // Exact below 128; contiguous, increasing bounds all the way up.
    CHECK(Histogram::index_of(100) == 100);
    for (std::size_t i = 1; i < Histogram::kBuckets; ++i) {
        REQUIRE(Histogram::upper_of(i) > Histogram::upper_of(i - 1));
        REQUIRE(Histogram::index_of(Histogram::upper_of(i)) == i);
        REQUIRE(Histogram::index_of(Histogram::upper_of(i - 1) + 1) == i);
    }
}

TEST_CASE("histogram: percentiles match the sorted data within a bucket", "[unit][histogram]") {
    std::mt19937_64 rng(11);
    std::lognormal_distribution<double> lat(9.5, 0.6);  // ~13 us median, long tail (ns)
    Histogram h;
    std::vector<std::uint64_t> v;
    for (int i = 0; i < 200000; ++i) {
        const auto x = static_cast<std::uint64_t>(lat(rng));
        v.push_back(x);
        h.record(x);
    }
    std::sort(v.begin(), v.end());
    CHECK(h.count() == v.size());
    CHECK(h.min() == v.front());
    CHECK(h.max() == v.back());
    for (const double p : {1.0, 50.0, 90.0, 99.0, 99.9, 99.99}) {
        const std::size_t rank =
            static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size()))) - 1;
        const std::uint64_t exact = v[rank];
        const std::uint64_t got = h.percentile(p);
        INFO("p" << p << " exact " << exact << " histogram " << got);
        CHECK(got >= exact);
        CHECK(static_cast<double>(got - exact) <= static_cast<double>(exact) / 64.0 + 1.0);
    }
    CHECK(h.percentile(100) == v.back());
    h.reset();
    CHECK(h.count() == 0);
    CHECK(h.percentile(50) == 0);
}
