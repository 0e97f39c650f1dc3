// SPDX-License-Identifier: Apache-2.0
// The simulator's seeds (tests/sim/net_sim.hpp): every drawn scenario keeps the guarantee.
#include <cstdlib>

#include "tests/sim/net_sim.hpp"
#include "tests/support/catch.hpp"

namespace {

std::uint64_t env_or(const char* name, std::uint64_t dflt) {
    const char* v = std::getenv(name);
    return v != nullptr ? std::strtoull(v, nullptr, 10) : dflt;
}

void run_seeds(std::uint64_t from, std::uint64_t count, bool wide) {
    for (std::uint64_t seed = from; seed < from + count; ++seed) {
        const auto s = prizma::sim::draw(seed, wide);
        const auto o = prizma::sim::run(s);
        INFO(prizma::sim::repro(s));
        INFO(o.why);
        REQUIRE(o.ok);
    }
}

}  // namespace

TEST_CASE("sim: drawn scenarios keep the guarantee (quick seeds)", "[sim]") {
    run_seeds(env_or("PRIZMA_SIM_FIRST_SEED", 1), env_or("PRIZMA_SIM_SEEDS", 40), false);
}
