// SPDX-License-Identifier: Apache-2.0
// prizma_sim: runs the simulator (tests/sim/net_sim.hpp) on one scenario given by its options
// (what a failing run prints), or on a range of seeds:
//   prizma_sim --seeds 1:500 [--wide]       every seed's drawn scenario, one line each
//   prizma_sim --seed 7 --msg-bytes 1000 ... the scenario exactly as repro() printed it
// Exit 0 when every run kept the guarantee, 1 when one broke it, 2 on a bad argument.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/sim/net_sim.hpp"

namespace {

void print(const prizma::sim::Scenario& s, const prizma::sim::Outcome& o) {
    std::uint64_t delivered = 0;
    std::uint64_t lost = 0;
    std::uint64_t drops = 0;
    for (const auto& r : o.receivers) {
        delivered += r.delivered;
        lost += r.reported_lost + r.before_start;
        drops += r.kernel_drops;
    }
    std::printf("%s seed %" PRIu64 ": %s%s delivered %" PRIu64 ", lost (reported) %" PRIu64
                ", kernel drops %" PRIu64 ", rdata %" PRIu64 ", refused %" PRIu64
                ", repaired %.1f ms after the burst%s%s\n",
                o.ok ? "ok  " : "FAIL", s.seed, s.in_envelope() ? "envelope" : "edge", "",
                delivered, lost, drops, o.rdata_sent,
                o.requester_limited + o.budget_limited + o.repeat_limited,
                static_cast<double>(o.repaired_ns - o.burst_end_ns) / 1e6, o.ok ? "" : "\n     ",
                o.ok ? "" : (o.why + "\n     " + prizma::sim::repro(s)).c_str());
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    std::uint64_t from = 0;
    std::uint64_t to = 0;
    bool wide = false;
    std::vector<std::string> rest;
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--wide") {
            wide = true;
        } else if (args[i] == "--seeds" && i + 1 < args.size()) {
            const std::string& v = args[++i];
            const auto colon = v.find(':');
            from = std::strtoull(v.c_str(), nullptr, 10);
            to = colon == std::string::npos ? from
                                            : std::strtoull(v.c_str() + colon + 1, nullptr, 10);
            if (to < from || from == 0) {
                std::fprintf(stderr, "prizma_sim: --seeds A:B with 1 <= A <= B\n");
                return 2;
            }
        } else {
            rest.push_back(args[i]);
        }
    }
    int rc = 0;
    if (from != 0) {
        for (std::uint64_t seed = from; seed <= to; ++seed) {
            const auto s = prizma::sim::draw(seed, wide);
            const auto o = prizma::sim::run(s);
            print(s, o);
            rc |= o.ok ? 0 : 1;
        }
        return rc;
    }
    prizma::sim::Scenario s;
    std::string error;
    if (!prizma::sim::parse_args(rest, s, error)) {
        std::fprintf(stderr, "prizma_sim: %s\n", error.c_str());
        return 2;
    }
    const auto o = prizma::sim::run(s);
    print(s, o);
    std::printf("  source: odata %" PRIu64 ", rdata %" PRIu64 ", refused: requester %" PRIu64
                ", budget %" PRIu64 ", repeats %" PRIu64 "\n",
                o.odata_sent, o.rdata_sent, o.requester_limited, o.budget_limited,
                o.repeat_limited);
    for (std::size_t i = 0; i < o.receivers.size(); ++i) {
        const auto& r = o.receivers[i];
        std::printf(
            "  receiver %zu: delivered %u, lost %u, before start %u, silent %u, kernel drops "
            "%" PRIu64 ", NAKs %" PRIu64 ", loss events %" PRIu64 "\n",
            i, r.delivered, r.reported_lost, r.before_start, r.silent, r.kernel_drops, r.naks,
            r.loss_events);
    }
    return o.ok ? 0 : 1;
}
