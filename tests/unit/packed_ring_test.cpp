// SPDX-License-Identifier: Apache-2.0
#include "lib/protocol/packed_ring.hpp"

#include "tests/support/catch.hpp"

using prizma::protocol::kNoFit;
using prizma::protocol::ring_fit;

TEST_CASE("packed ring placement: append, wrap, never over the oldest live record",
          "[unit][ring]") {
    CHECK(ring_fit(true, 700, 300, 128, 1024) == 0);        // empty: start over
    CHECK(ring_fit(true, 0, 0, 2048, 1024) == kNoFit);      // larger than the buffer
    CHECK(ring_fit(false, 256, 0, 128, 1024) == 256);       // after the newest
    CHECK(ring_fit(false, 960, 256, 128, 1024) == 0);       // end reached: wrap to 0
    CHECK(ring_fit(false, 960, 64, 128, 1024) == kNoFit);   // wrap would overwrite the oldest
    CHECK(ring_fit(false, 128, 512, 128, 1024) == 128);     // wrapped, room before the oldest
    CHECK(ring_fit(false, 384, 512, 128, 1024) == kNoFit);  // would end exactly at the oldest
}
