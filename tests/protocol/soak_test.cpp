// SPDX-License-Identifier: Apache-2.0
// Randomized soak: 100k+ messages, 3 receivers, 10% loss + duplicates + reordering, several
// seeds. Every receiver gets every APDU exactly once and in order, or an explicit loss event.
#include <cstring>
#include <vector>

#include "tests/support/catch.hpp"
#include "tests/support/sim.hpp"

using namespace prizma;           // NOLINT(google-build-using-namespace): test file
using namespace prizma::testing;  // NOLINT(google-build-using-namespace): test file
using protocol::kMs;
using protocol::kUs;
using Kind = protocol::Event::Kind;

namespace {

void soak(std::uint64_t seed, std::uint64_t messages, std::uint32_t txw, bool expect_loss) {
    INFO("seed " << seed);
    auto sc = source_config();
    sc.txw_sqns = txw;
    Sim sim(memory::MemoryNetwork::Config{1472, 4096, 64});
    auto& src = sim.add_source(sc);
    std::vector<Sim::Node*> rcvs;
    for (std::uint64_t r = 0; r < 3; ++r) {
        memory::LossyTransport::Config lc;
        lc.seed = seed * 10 + r;
        lc.drop = 0.10;
        lc.duplicate = 0.02;
        lc.reorder = 0.02;
        lc.reorder_ns = 40 * kUs;
        auto rc = receiver_config(seed * 100 + r);
        rc.rxw_sqns = 8192;
        rcvs.push_back(&sim.add_receiver(rc, lc));
    }
    sim.pump();
    // Mixed sizes, some fragmented; 20 messages per 50 µs step.
    std::vector<std::uint32_t> first_sqn(messages);
    std::vector<std::uint32_t> last_sqn(messages);
    for (std::uint64_t i = 0; i < messages; ++i) {
        const std::size_t size = (i % 97 == 0) ? 3000 : 8 + (i * 7) % 200;
        for (;;) {
            auto r = src.session->publish(make_message(i, size), sim.now);
            if (r) {
                first_sqn[i] = r->value;
                last_sqn[i] = src.source().next_sqn().value - 1;
                break;
            }
            REQUIRE(is_transient(r.error()));
            sim.run_for(10 * kUs, 10 * kUs);
        }
        if (i % 20 == 19) {
            sim.run_for(500 * kUs, 250 * kUs);  // 40k msgs/s against 2-10 ms repair timers
        }
    }
    sim.run_for(500 * kMs, 200 * kUs);
    for (auto* r : rcvs) {
        std::uint64_t expect = 0;
        std::uint64_t lost_msgs = 0;
        bool partial = false;  // the last loss event ended inside message `expect`
        std::uint32_t partial_next = 0;
        for (const auto& e : r->events) {
            if (e.kind == Kind::data) {
                std::uint64_t idx = 0;
                std::memcpy(&idx, e.payload.data(), 8);
                REQUIRE(idx == expect);  // exactly once, in order
                const std::size_t size = (idx % 97 == 0) ? 3000 : 8 + (idx * 7) % 200;
                REQUIRE(e.payload == make_message(idx, size));
                ++expect;
            } else if (e.kind == Kind::loss) {
                // Loss events name sequence numbers. They start where the last delivery or loss
                // ended (nothing skipped silently); an APDU whose head was reported lost before
                // its tail arrived may continue in the next, adjacent, event.
                REQUIRE(e.sqn == (partial ? partial_next : first_sqn[expect]));
                const std::uint32_t end = e.sqn + e.count - 1;
                const std::uint64_t before = expect;
                while (expect < messages && last_sqn[expect] - e.sqn <= end - e.sqn) {
                    ++expect;
                }
                partial =
                    expect < messages && static_cast<std::int32_t>(end - first_sqn[expect]) >= 0;
                partial_next = end + 1;
                lost_msgs += expect - before + (partial ? 1U : 0U);
                continue;
            }
            REQUIRE_FALSE(partial);
        }
        CHECK(expect == messages);
        const auto& c = r->receiver().counters();
        CHECK(c.duplicates > 0);
        if (expect_loss) {
            CHECK(c.repaired > 0);
            CHECK(lost_msgs > 0);  // the window really was exceeded, and it was reported
        } else {
            CHECK(c.repaired > messages / 20);
            CHECK(lost_msgs == 0);
        }
        UNSCOPED_INFO("receiver: repaired " << c.repaired << " naks " << c.nak_sent << " lost msgs "
                                            << lost_msgs << " loss events " << c.loss_events);
    }
}

}  // namespace

TEST_CASE("soak: 100k messages, 3 receivers, 10% loss + dup + reorder, large window",
          "[protocol][soak]") {
    for (std::uint64_t seed : {1U, 2U, 3U}) {
        soak(seed, 100000, 65536, false);
    }
}

TEST_CASE("soak: small transmit window forces reported losses, never silent ones",
          "[protocol][soak]") {
    for (std::uint64_t seed : {4U, 5U}) {
        soak(seed, 30000, 64, true);
    }
}
