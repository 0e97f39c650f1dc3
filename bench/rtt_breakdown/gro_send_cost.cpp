// SPDX-License-Identifier: Apache-2.0
// What a receive socket's UDP_GRO setting costs a same-host sender: cycles per sendto() of an
// 88-byte datagram to a multicast group on 127.0.0.1 whose one receiver socket has UDP_GRO
// never set, set, or set and cleared again. A thread on CPU 1 busy-reads the three receiver
// sockets; the sender on CPU 0 sends one datagram every ~20 us and times sendto() with the
// TSC, taking the three settings in turn (500 sends each, rotated, 40 rounds), so that the
// machine's drift falls on all three alike. This is why gro=auto leaves UDP_GRO off until
// a burst comes (see transports/udp/udp_transport.hpp, GroMode).
//
//   gro_send_cost [ROUNDS]      prints p25/p50/p75 cycles per setting
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include <x86intrin.h>

#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace {

void pin(std::size_t cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof s, &s) != 0) {
        std::perror("gro_send_cost: warning: not pinned to its CPU");
    }
}

bool set_int(int fd, int level, int name, int value) {
    return setsockopt(fd, level, name, &value, sizeof value) == 0;
}

}  // namespace

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 40;
    if (rounds <= 0) {
        std::fprintf(stderr, "usage: gro_send_cost [ROUNDS > 0]\n");
        return 2;
    }
    constexpr std::size_t kModes = 3;
    constexpr std::array<const char*, kModes> kNames = {"UDP_GRO never set", "UDP_GRO on",
                                                        "UDP_GRO set, then cleared"};
    std::array<int, kModes> rx{};
    std::array<sockaddr_in, kModes> dst{};
    in_addr group{};
    in_addr lo{};
    (void)inet_pton(AF_INET, "239.193.7.1", &group);
    (void)inet_pton(AF_INET, "127.0.0.1", &lo);
    for (std::size_t m = 0; m < kModes; ++m) {
        rx[m] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        // Ports by process: two copies at once must not hear each other's datagrams.
        a.sin_port = htons(
            static_cast<std::uint16_t>(47100 + 3 * static_cast<std::size_t>(getpid() % 600) + m));
        a.sin_addr = group;
        const ip_mreq mr{group, lo};
        if (rx[m] < 0 || !set_int(rx[m], SOL_SOCKET, SO_REUSEADDR, 1)
            || bind(rx[m], reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0
            || setsockopt(rx[m], IPPROTO_IP, IP_ADD_MEMBERSHIP, &mr, sizeof mr) != 0
            || !set_int(rx[m], IPPROTO_IP, IP_MULTICAST_ALL, 0)) {
            std::perror("gro_send_cost: receiver socket");
            return 1;
        }
        if (m != 0 && !set_int(rx[m], SOL_UDP, UDP_GRO, 1)) {
            std::perror("gro_send_cost: UDP_GRO (kernel without it?)");
            return 1;
        }
        if (m == 2) {
            (void)set_int(rx[m], SOL_UDP, UDP_GRO, 0);
        }
        dst[m] = a;
    }
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> received{0};
    std::thread reader([&] {
        pin(1);
        std::array<char, 2048> b{};
        while (!stop.load(std::memory_order_relaxed)) {
            for (const int fd : rx) {
                if (recvfrom(fd, b.data(), b.size(), MSG_DONTWAIT, nullptr, nullptr) > 0) {
                    received.fetch_add(1, std::memory_order_relaxed);
                }
            }
        }
    });
    pin(0);
    const int tx = socket(AF_INET, SOCK_DGRAM, 0);
    if (tx < 0 || setsockopt(tx, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof lo) != 0
        || !set_int(tx, IPPROTO_IP, IP_MULTICAST_TTL, 0)) {
        std::perror("gro_send_cost: sender socket");
        stop = true;
        reader.join();
        return 1;
    }
    ::usleep(100'000);
    constexpr int kPer = 500;
    constexpr int kWarm = 20;  // the first sends after a switch of group are not counted
    std::array<std::vector<std::uint64_t>, kModes> cycles;
    std::array<char, 88> payload{};
    unsigned aux = 0;
    for (int r = 0; r < rounds; ++r) {
        for (std::size_t k = 0; k < kModes; ++k) {
            const std::size_t m = (k + static_cast<std::size_t>(r)) % kModes;
            for (int i = 0; i < kPer; ++i) {
                const std::uint64_t t0 = __rdtscp(&aux);
                (void)sendto(tx, payload.data(), payload.size(), 0,
                             reinterpret_cast<const sockaddr*>(&dst[m]), sizeof dst[m]);
                const std::uint64_t t1 = __rdtscp(&aux);
                if (i >= kWarm) {
                    cycles[m].push_back(t1 - t0);
                }
                const std::uint64_t until = __rdtsc() + 40'000;
                while (__rdtsc() < until) {
                }
            }
        }
    }
    ::usleep(10'000);
    stop = true;
    reader.join();
    std::printf("sendto() of 88 B to a same-host receiver socket, TSC cycles, %d rounds:\n",
                rounds);
    for (std::size_t m = 0; m < kModes; ++m) {
        auto& v = cycles[m];
        std::sort(v.begin(), v.end());
        std::printf("  %-26s p25 %6llu  p50 %6llu  p75 %6llu  (%zu sends)\n", kNames[m],
                    static_cast<unsigned long long>(v[v.size() / 4]),
                    static_cast<unsigned long long>(v[v.size() / 2]),
                    static_cast<unsigned long long>(v[v.size() * 3 / 4]), v.size());
    }
    const auto want = static_cast<std::uint64_t>(rounds) * kModes * kPer;
    std::printf("received %llu of %llu\n", static_cast<unsigned long long>(received.load()),
                static_cast<unsigned long long>(want));
    return received.load() == want ? 0 : 1;
}
