// SPDX-License-Identifier: Apache-2.0
// Joins an InfiniBand multicast group through the SA with prizma's SaMembership (libibumad,
// no verbs), as a verbs:// channel on an IB port does, and leaves it when its standard input
// closes. Run against a real OpenSM on an ibsim fabric (tests/verbs/sa/opensm_sim.sh), under
// libumad2sim, where only MADs are simulated.
//
//   sa_join_probe CA PORT IPV4_GROUP
//
// The MGID is the one a verbs:// channel of that group uses on InfiniBand (prizma's signature,
// ff12:5047:ffff::..., policy::ib_mgid_v4). Prints "joined mgid MGID mlid 0x... qkey 0x...
// gid GID", with GIDs as inet_ntop writes them, then reads commands, one per line:
//   rejoin       joins again, as after a client reregister: "rejoined mlid 0x..." or
//                "rejoin failed: WHY"
//   path GID     the SA's PathRecord to GID: "path dlid 0x... sl N mtu N" or "path failed: WHY"
// and at end of input leaves and prints "left". Exits 1 (saying why) when the join fails.
//
//   sa_join_probe CA PORT path GID     only the PathRecord query, printed as above
#include <arpa/inet.h>
#include <infiniband/umad.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "transports/verbs/device_policy.hpp"
#include "transports/verbs/ib_sa.hpp"

namespace sa = prizma::verbs::sa;

int main(int argc, char** argv) {
    if (argc != 4 && argc != 5) {
        std::fprintf(stderr, "usage: sa_join_probe CA PORT IPV4_GROUP [QKEY] | CA PORT path GID\n");
        return 2;
    }
    const std::string ca = argv[1];
    const int port = std::atoi(argv[2]);
    if (umad_init() < 0) {
        std::fprintf(stderr, "sa_join_probe: umad_init failed\n");
        return 1;
    }
    umad_port_t p{};
    if (umad_get_port(ca.c_str(), port, &p) < 0) {
        std::fprintf(stderr, "sa_join_probe: no port %d on %s\n", port, ca.c_str());
        return 1;
    }
    sa::McMemberRecord want;
    std::memcpy(want.port_gid.data(), &p.gid_prefix, 8);  // both in network order
    std::memcpy(want.port_gid.data() + 8, &p.port_guid, 8);
    umad_release_port(&p);
    if (std::strcmp(argv[3], "path") == 0 && argc == 5) {
        std::array<std::uint8_t, 16> dgid{};
        if (inet_pton(AF_INET6, argv[4], dgid.data()) != 1) {
            std::fprintf(stderr, "sa_join_probe: %s is no GID\n", argv[4]);
            return 2;
        }
        auto pr = prizma::verbs::query_path(ca, port, want.port_gid, dgid, 0xffff);
        if (!pr) {
            std::printf("path failed: %s\n", pr.error().message().c_str());
            return 1;
        }
        std::printf("path dlid 0x%04x sl %u mtu %u\n", pr->dlid, unsigned{pr->sl},
                    unsigned{pr->mtu});
        return 0;
    }
    std::array<std::uint8_t, 4> group{};
    if (inet_pton(AF_INET, argv[3], group.data()) != 1) {
        std::fprintf(stderr, "sa_join_probe: %s is no IPv4 group\n", argv[3]);
        return 2;
    }
    want.mgid = prizma::verbs::policy::ib_mgid_v4(group.data(), 0xffff);
    want.qkey =
        argc > 4 ? static_cast<std::uint32_t>(std::strtoul(argv[4], nullptr, 0)) : 0x80010000U;
    want.pkey = 0xffff;
    want.join_state = sa::JoinState::full_member;
    want.mtu = (2U << 6U) | 4U;   // exactly 2048
    want.rate = (2U << 6U) | 3U;  // exactly 10 Gb/s (4x SDR, ibsim's links)
    want.scope = 2;
    auto m = prizma::verbs::SaMembership::join(ca, port, want);
    if (!m) {
        std::fprintf(stderr, "sa_join_probe: %s\n", m.error().message().c_str());
        return 1;
    }
    const auto& r = (*m)->record();
    char text[INET6_ADDRSTRLEN] = {};
    (void)inet_ntop(AF_INET6, r.mgid.data(), text, sizeof text);
    std::printf("joined mgid %s", text);
    (void)inet_ntop(AF_INET6, want.port_gid.data(), text, sizeof text);
    std::printf(" mlid 0x%04x qkey 0x%08x gid %s\n", r.mlid, r.qkey, text);
    std::fflush(stdout);
    std::string line;
    while (std::getline(std::cin, line)) {
        if (line == "rejoin") {
            if (auto j = (*m)->rejoin(); j) {
                std::printf("rejoined mlid 0x%04x\n", (*m)->record().mlid);
            } else {
                std::printf("rejoin failed: %s\n", j.error().message().c_str());
            }
        } else if (line.rfind("path ", 0) == 0) {
            std::array<std::uint8_t, 16> dgid{};
            if (inet_pton(AF_INET6, line.c_str() + 5, dgid.data()) != 1) {
                std::printf("path failed: %s is no GID\n", line.c_str() + 5);
            } else if (auto pr = prizma::verbs::query_path(ca, port, want.port_gid, dgid, 0xffff);
                       pr) {
                std::printf("path dlid 0x%04x sl %u mtu %u\n", pr->dlid, unsigned{pr->sl},
                            unsigned{pr->mtu});
            } else {
                std::printf("path failed: %s\n", pr.error().message().c_str());
            }
        }
        std::fflush(stdout);
    }
    m->reset();
    std::printf("left\n");
    return 0;
}
