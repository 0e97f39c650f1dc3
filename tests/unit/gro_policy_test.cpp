// SPDX-License-Identifier: Apache-2.0
// gro=auto's switching rule on its own, without sockets (transports/udp/gro_policy.hpp).
#include "transports/udp/gro_policy.hpp"

#include "tests/support/catch.hpp"

using prizma::udp::GroPolicy;
using Action = GroPolicy::Action;

TEST_CASE("GRO policy: a burst switches on, kOffReads lone reads switch off", "[unit][gro]") {
    GroPolicy p;
    CHECK_FALSE(p.on());
    CHECK_FALSE(p.maybe_merged(true));  // never on: nothing can be merged
    // The one-datagram read after an empty poll is never a burst, however full.
    CHECK(p.after_read(false, 64, false, 64) == Action::none);
    // A batch read of kOnBatch - 1 is not a burst; of kOnBatch it is.
    CHECK(p.after_read(true, GroPolicy::kOnBatch - 1, false, 64) == Action::none);
    REQUIRE(p.after_read(true, GroPolicy::kOnBatch, false, 64) == Action::switch_on);
    p.switched(Action::switch_on, true);
    CHECK(p.on());
    CHECK(p.seen());
    CHECK(p.maybe_merged(true));         // recvfrom() brings no segment size
    CHECK_FALSE(p.maybe_merged(false));  // recvmmsg with GRO on always does
    // kOffReads - 1 lone unmerged reads keep it on; a merged or multi-datagram read restarts
    // the count.
    for (std::uint32_t i = 0; i + 1 < GroPolicy::kOffReads; ++i) {
        REQUIRE(p.after_read(false, 1, false, 64) == Action::none);
    }
    CHECK(p.after_read(true, 2, false, 64) == Action::none);  // restart
    for (std::uint32_t i = 0; i + 1 < GroPolicy::kOffReads; ++i) {
        REQUIRE(p.after_read(false, 1, false, 64) == Action::none);
    }
    CHECK(p.after_read(false, 1, true, 64) == Action::none);  // a merged one: restart
    for (std::uint32_t i = 0; i + 1 < GroPolicy::kOffReads; ++i) {
        REQUIRE(p.after_read(false, 1, false, 64) == Action::none);
    }
    REQUIRE(p.after_read(false, 1, false, 64) == Action::switch_off);  // exactly the kOffReads-th
    p.switched(Action::switch_off, true);
    CHECK_FALSE(p.on());
    CHECK(p.seen());  // was on: a datagram merged before may still be queued
    CHECK(p.maybe_merged(false));
    CHECK(p.maybe_merged(true));
}

TEST_CASE("GRO policy: small read batches, failed switches", "[unit][gro]") {
    GroPolicy p;
    // A read batch under kOnBatch: a batch read that fills it is a burst.
    CHECK(p.after_read(true, 3, false, 4) == Action::none);
    CHECK(p.after_read(true, 4, false, 4) == Action::switch_on);
    // A failed setsockopt leaves it off; the next burst asks again.
    p.switched(Action::switch_on, false);
    CHECK_FALSE(p.on());
    CHECK_FALSE(p.seen());
    CHECK(p.after_read(true, 4, false, 4) == Action::switch_on);
    p.switched(Action::switch_on, true);
    // A failed switch-off keeps it on and is retried only after kOffReads more lone reads.
    for (std::uint32_t i = 0; i + 1 < GroPolicy::kOffReads; ++i) {
        REQUIRE(p.after_read(false, 1, false, 4) == Action::none);
    }
    REQUIRE(p.after_read(false, 1, false, 4) == Action::switch_off);
    p.switched(Action::switch_off, false);
    CHECK(p.on());
    for (std::uint32_t i = 0; i + 1 < GroPolicy::kOffReads; ++i) {
        REQUIRE(p.after_read(false, 1, false, 4) == Action::none);
    }
    CHECK(p.after_read(false, 1, false, 4) == Action::switch_off);
    // gro=1 / the probe's start states.
    GroPolicy q;
    q.reset(true, false);
    CHECK(q.on());
    CHECK(q.seen());
    q.reset(false, true);
    CHECK_FALSE(q.on());
    CHECK(q.maybe_merged(false));
}
