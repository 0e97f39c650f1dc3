// SPDX-License-Identifier: Apache-2.0
// Raw UDP multicast baseline for bench/compare.sh: what the kernel alone does on this machine,
// with no protocol, no reliability and no copies beyond the socket's.
//
//   udp_perf send GROUP PORT COUNT SIZE mmsg|gso [RATE]   sendmmsg batches of 32, or UDP_SEGMENT
//   udp_perf recv GROUP PORT COUNT SIZE TIMEOUT_S [gro]    recvmmsg busy-poll (MSG_DONTWAIT)
//   udp_perf pong GROUP_A PORT_A GROUP_B PORT_B [block]    echo A onto B, busy-poll
//   udp_perf ping GROUP_A PORT_A GROUP_B PORT_B COUNT SIZE WARMUP [block]
//   udp_perf oneway-send GROUP PORT RATE COUNT SIZE      paced: datagram k due at start + k/RATE
//   udp_perf oneway-recv GROUP PORT COUNT [block]         receive time - due time, percentiles
//
// oneway: the sender sleeps (1 us timer slack) until 50 us before each datagram's due time,
// spins the rest, and puts the due time (CLOCK_MONOTONIC ns) in the datagram; the receiver
// takes (its receive time - that due time): "due -> received", measured from the schedule as
// execlog-risk's "input due -> applied" is (same host, one clock). Its `block` wait is
// recv(MSG_DONTWAIT) then epoll_wait with a long (1 s) timeout, as a consumer sleeps.
//
// ping/pong `block`: recv(MSG_DONTWAIT), and when it finds nothing, epoll_wait on the socket
// (what a sleeping component does); both set a 1 us timer slack, as prizma's tools do.
//
// Multicast always leaves through 127.0.0.1 (IP_MULTICAST_IF), never the default route. Every
// result is one JSON line on stdout. recv stops at COUNT datagrams' worth of messages or 0.5 s
// after the last one; it reports what arrived (raw UDP does not repair anything).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace {

std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "udp_perf: %s: %s\n", what, std::strerror(errno));
    std::exit(3);
}

[[noreturn]] void usage() {
    std::fprintf(stderr,
                 "usage: udp_perf send GROUP PORT COUNT SIZE mmsg|gso [RATE]\n"
                 "       udp_perf recv GROUP PORT COUNT SIZE TIMEOUT_S [gro]\n"
                 "       udp_perf pong GROUP_A PORT_A GROUP_B PORT_B [block]\n"
                 "       udp_perf ping GROUP_A PORT_A GROUP_B PORT_B COUNT SIZE WARMUP [block]\n"
                 "       udp_perf oneway-send GROUP PORT RATE COUNT SIZE\n"
                 "       udp_perf oneway-recv GROUP PORT COUNT [block]\n");
    std::exit(2);
}

std::uint64_t num(const char* s) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') {
        usage();
    }
    return v;
}

sockaddr_in group_addr(const char* group, std::uint64_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (inet_pton(AF_INET, group, &a.sin_addr) != 1 || port == 0 || port > 65535) {
        usage();
    }
    return a;
}

void setint(int fd, int level, int opt, int v, const char* what) {
    if (setsockopt(fd, level, opt, &v, sizeof v) != 0) {
        die(what);
    }
}

int tx_socket() {
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) {
        die("socket");
    }
    in_addr lo{};
    lo.s_addr = htonl(INADDR_LOOPBACK);
    if (setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof lo) != 0) {
        die("IP_MULTICAST_IF");
    }
    setint(fd, IPPROTO_IP, IP_MULTICAST_TTL, 0, "IP_MULTICAST_TTL");
    setint(fd, SOL_SOCKET, SO_SNDBUFFORCE, 8 << 20, "SO_SNDBUFFORCE");
    return fd;
}

int rx_socket(const sockaddr_in& group) {
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) {
        die("socket");
    }
    setint(fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR");
    setint(fd, SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20, "SO_RCVBUFFORCE");  // as prizma and pgm_perf
    setint(fd, IPPROTO_IP, IP_MULTICAST_ALL, 0, "IP_MULTICAST_ALL");
    if (bind(fd, reinterpret_cast<const sockaddr*>(&group), sizeof group) != 0) {
        die("bind");
    }
    ip_mreq m{};
    m.imr_multiaddr = group.sin_addr;
    m.imr_interface.s_addr = htonl(INADDR_LOOPBACK);
    if (setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) != 0) {
        die("IP_ADD_MEMBERSHIP");
    }
    return fd;
}

int do_send(char** av, int ac) {
    const sockaddr_in dst = group_addr(av[2], num(av[3]));
    const std::uint64_t count = num(av[4]);
    const std::size_t size = num(av[5]);
    const std::string how = av[6];
    const std::uint64_t rate = ac > 7 ? num(av[7]) : 0;
    if (size < 8 || size > 65000 || (how != "mmsg" && how != "gso")) {
        usage();
    }
    const int fd = tx_socket();
    const bool gso = how == "gso";
    // GSO: up to 64 segments and 64 KiB per call; sendmmsg: 32 datagrams per call.
    const std::size_t batch = gso ? std::min<std::size_t>(64, 65000 / size) : 32;
    std::vector<std::byte> buf(batch * size);
    std::vector<mmsghdr> msgs(batch);
    std::vector<iovec> iov(batch);
    const std::int64_t start = now_ns();
    std::uint64_t sent = 0;
    while (sent < count) {
        if (rate != 0) {  // pace by schedule: message k leaves at start + k / rate
            const auto due = start + static_cast<std::int64_t>(sent * 1'000'000'000 / rate);
            while (now_ns() < due) {
            }
        }
        const std::size_t n = std::min<std::uint64_t>(batch, count - sent);
        for (std::size_t k = 0; k < n; ++k) {
            const std::uint64_t seq = sent + k;
            std::memcpy(buf.data() + k * size, &seq, 8);
        }
        if (gso) {
            iovec v{buf.data(), n * size};
            alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(std::uint16_t))] = {};
            msghdr h{};
            h.msg_name = const_cast<sockaddr_in*>(&dst);
            h.msg_namelen = sizeof dst;
            h.msg_iov = &v;
            h.msg_iovlen = 1;
            if (n > 1) {
                h.msg_control = ctl;
                h.msg_controllen = sizeof ctl;
                cmsghdr* c = CMSG_FIRSTHDR(&h);
                c->cmsg_level = SOL_UDP;
                c->cmsg_type = UDP_SEGMENT;
                c->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));
                const auto seg = static_cast<std::uint16_t>(size);
                std::memcpy(CMSG_DATA(c), &seg, sizeof seg);
            }
            if (sendmsg(fd, &h, 0) < 0) {
                if (errno == ENOBUFS || errno == EAGAIN) {
                    continue;
                }
                die("sendmsg");
            }
            sent += n;
        } else {
            for (std::size_t k = 0; k < n; ++k) {
                iov[k] = iovec{buf.data() + k * size, size};
                msgs[k] = mmsghdr{};
                msgs[k].msg_hdr.msg_name = const_cast<sockaddr_in*>(&dst);
                msgs[k].msg_hdr.msg_namelen = sizeof dst;
                msgs[k].msg_hdr.msg_iov = &iov[k];
                msgs[k].msg_hdr.msg_iovlen = 1;
            }
            const int r = sendmmsg(fd, msgs.data(), static_cast<unsigned>(n), 0);
            if (r < 0) {
                if (errno == ENOBUFS || errno == EAGAIN) {
                    continue;
                }
                die("sendmmsg");
            }
            sent += static_cast<std::uint64_t>(r);
        }
    }
    const double secs = static_cast<double>(now_ns() - start) / 1e9;
    std::printf(
        "{\"mode\":\"send\",\"how\":\"%s\",\"count\":%llu,\"size\":%zu,\"seconds\":%.6f,"
        "\"msgs_per_sec\":%.0f}\n",
        how.c_str(), static_cast<unsigned long long>(count), size, secs,
        static_cast<double>(count) / secs);
    close(fd);
    return 0;
}

int do_recv(char** av, int ac) {
    const sockaddr_in grp = group_addr(av[2], num(av[3]));
    const std::uint64_t count = num(av[4]);
    const std::size_t size = num(av[5]);
    const auto timeout_ns = static_cast<std::int64_t>(num(av[6])) * 1'000'000'000;
    const bool gro = ac > 7 && std::string(av[7]) == "gro";
    if (size < 8) {
        usage();
    }
    const int fd = rx_socket(grp);
    if (gro) {
        setint(fd, SOL_UDP, UDP_GRO, 1, "UDP_GRO");
    }
    constexpr std::size_t kBatch = 32;
    const std::size_t slot = gro ? 65536 : size + 64;
    std::vector<std::byte> buf(kBatch * slot);
    std::vector<mmsghdr> msgs(kBatch);
    std::vector<iovec> iov(kBatch);
    std::uint64_t got = 0;
    std::int64_t first = 0;
    std::int64_t last = 0;
    const std::int64_t begin = now_ns();
    while (got < count) {
        for (std::size_t k = 0; k < kBatch; ++k) {
            iov[k] = iovec{buf.data() + k * slot, slot};
            msgs[k] = mmsghdr{};
            msgs[k].msg_hdr.msg_iov = &iov[k];
            msgs[k].msg_hdr.msg_iovlen = 1;
        }
        const int r = recvmmsg(fd, msgs.data(), kBatch, MSG_DONTWAIT, nullptr);
        const std::int64_t t = now_ns();
        if (r <= 0) {
            if (r < 0 && errno != EAGAIN && errno != EINTR) {
                die("recvmmsg");
            }
            if ((got == 0 && t - begin > timeout_ns) || (got != 0 && t - last > 500'000'000)) {
                break;
            }
            continue;
        }
        for (int k = 0; k < r; ++k) {
            got += (msgs[static_cast<std::size_t>(k)].msg_len + size - 1) / size;
        }
        if (first == 0) {
            first = t;
        }
        last = t;
    }
    const double secs = static_cast<double>(last - first) / 1e9;
    const double rate = secs > 0 ? static_cast<double>(got) / secs : 0.0;
    std::printf(
        "{\"mode\":\"recv\",\"count\":%llu,\"received\":%llu,\"seconds\":%.6f,"
        "\"msgs_per_sec\":%.0f,\"mb_per_sec\":%.2f}\n",
        static_cast<unsigned long long>(count), static_cast<unsigned long long>(got), secs, rate,
        rate * static_cast<double>(size) / 1e6);
    close(fd);
    return got >= count ? 0 : 1;
}

// The p-th percentile (0-100) of sorted samples, nearest rank; 0 when there are none.
std::int64_t percentile(const std::vector<std::int64_t>& sorted, double p) {
    if (sorted.empty()) {
        return 0;
    }
    const auto rank = static_cast<std::size_t>(p / 100.0 * static_cast<double>(sorted.size()));
    return sorted[std::min(rank, sorted.size() - 1)];
}

// How ping and pong wait for a datagram: busy-polling, or sleeping in epoll_wait (ep >= 0).
struct Waiter {
    int fd = -1;
    int ep = -1;
    explicit Waiter(int sock, bool block) : fd(sock) {
        (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
        if (block) {
            ep = epoll_create1(EPOLL_CLOEXEC);
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.fd = fd;
            if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
                die("epoll");
            }
        }
    }
    // One datagram into buf; its length, or -1 after timeout_ns.
    long recv(std::byte* buf, std::size_t cap, std::int64_t timeout_ns) const {
        const std::int64_t until = now_ns() + timeout_ns;
        for (;;) {
            const ssize_t r = ::recv(fd, buf, cap, MSG_DONTWAIT);
            if (r >= 0) {
                return r;
            }
            if (errno != EAGAIN && errno != EINTR) {
                die("recv");
            }
            const std::int64_t left = until - now_ns();
            if (left < 0) {
                return -1;
            }
            if (ep >= 0) {
                epoll_event ev{};
                (void)epoll_wait(
                    ep, &ev, 1,
                    static_cast<int>(std::min<std::int64_t>(left / 1'000'000 + 1, 1000)));
            }
        }
    }
};

bool block_arg(int ac, char** av, int at) {
    if (ac <= at) {
        return false;
    }
    if (std::string(av[at]) != "block") {
        usage();
    }
    return true;
}

int do_pong(int ac, char** av) {
    const sockaddr_in a = group_addr(av[2], num(av[3]));
    const sockaddr_in b = group_addr(av[4], num(av[5]));
    const Waiter rx(rx_socket(a), block_arg(ac, av, 6));
    const int tx = tx_socket();
    std::vector<std::byte> buf(65536);
    std::fprintf(stderr, "udp_perf: pong ready\n");
    for (;;) {
        const long n = rx.recv(buf.data(), buf.size(), 3'600'000'000'000);
        if (n > 0
            && sendto(tx, buf.data(), static_cast<std::size_t>(n), 0,
                      reinterpret_cast<const sockaddr*>(&b), sizeof b)
                   < 0) {
            die("sendto");
        }
    }
}

int do_ping(int ac, char** av) {
    const sockaddr_in a = group_addr(av[2], num(av[3]));
    const sockaddr_in b = group_addr(av[4], num(av[5]));
    const std::uint64_t count = num(av[6]);
    const std::size_t size = num(av[7]);
    const std::uint64_t warmup = num(av[8]);
    if (size < 8 || size > 65000 || count == 0) {
        usage();
    }
    const Waiter rx(rx_socket(b), block_arg(ac, av, 9));
    const int tx = tx_socket();
    std::vector<std::byte> out(size);
    std::vector<std::byte> in(65536);
    std::vector<std::int64_t> rtt;
    rtt.reserve(count);
    std::uint64_t lost = 0;
    const std::int64_t begin = now_ns();
    for (std::uint64_t i = 0; i < warmup + count; ++i) {
        std::memcpy(out.data(), &i, 8);
        const std::int64_t t0 = now_ns();
        if (sendto(tx, out.data(), size, 0, reinterpret_cast<const sockaddr*>(&a), sizeof a) < 0) {
            die("sendto");
        }
        for (;;) {  // wait for this seq; a stale echo of a lost round is skipped
            const long n = rx.recv(in.data(), in.size(), 1'000'000'000);
            if (n < 0) {
                if (i == 0) {
                    std::fprintf(stderr, "udp_perf: no pong within 1 s\n");
                    return 1;
                }
                ++lost;
                break;
            }
            std::uint64_t seq = 0;
            std::memcpy(&seq, in.data(), 8);
            if (seq == i) {
                if (i >= warmup) {
                    rtt.push_back(now_ns() - t0);
                }
                break;
            }
        }
    }
    const double secs = static_cast<double>(now_ns() - begin) / 1e9;
    std::sort(rtt.begin(), rtt.end());
    auto pct = [&](double p) {
        return percentile(rtt, p);
    };
    std::printf(
        "{\"mode\":\"ping\",\"count\":%llu,\"size\":%zu,\"lost\":%llu,\"rtt_ns\":{\"min\":%lld,"
        "\"p50\":%lld,\"p90\":%lld,\"p99\":%lld,\"p99_9\":%lld,\"max\":%lld},"
        "\"round_trips_per_sec\":%.0f}\n",
        static_cast<unsigned long long>(count), size, static_cast<unsigned long long>(lost),
        static_cast<long long>(pct(0)), static_cast<long long>(pct(50)),
        static_cast<long long>(pct(90)), static_cast<long long>(pct(99)),
        static_cast<long long>(pct(99.9)), static_cast<long long>(pct(100)),
        static_cast<double>(warmup + count) / secs);
    return lost == 0 ? 0 : 1;
}

// Datagram k carries its due time (ns, CLOCK_MONOTONIC = steady_clock here) and k.
int do_oneway_send(char** av) {
    const sockaddr_in dst = group_addr(av[2], num(av[3]));
    const std::uint64_t rate = num(av[4]);
    const std::uint64_t count = num(av[5]);
    const std::size_t size = num(av[6]);
    if (size < 16 || size > 65000 || rate == 0 || count == 0) {
        usage();
    }
    (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
    const int fd = tx_socket();
    std::vector<std::byte> buf(size);
    constexpr std::int64_t kSpinNs = 50'000;
    const std::int64_t start = now_ns() + 10'000'000;
    std::int64_t worst_late = 0;
    for (std::uint64_t k = 0; k < count; ++k) {
        const std::int64_t due = start + static_cast<std::int64_t>(k * 1'000'000'000 / rate);
        if (due - now_ns() > kSpinNs) {
            const std::int64_t wake = due - kSpinNs;
            timespec ts{};
            ts.tv_sec = wake / 1'000'000'000;
            ts.tv_nsec = wake % 1'000'000'000;
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
            }
        }
        while (now_ns() < due) {
        }
        worst_late = std::max(worst_late, now_ns() - due);
        std::memcpy(buf.data(), &due, 8);
        std::memcpy(buf.data() + 8, &k, 8);
        if (sendto(fd, buf.data(), size, 0, reinterpret_cast<const sockaddr*>(&dst), sizeof dst)
            < 0) {
            die("sendto");
        }
    }
    std::printf(
        "{\"mode\":\"oneway-send\",\"count\":%llu,\"size\":%zu,\"rate\":%llu,"
        "\"worst_send_late_ns\":%lld}\n",
        static_cast<unsigned long long>(count), size, static_cast<unsigned long long>(rate),
        static_cast<long long>(worst_late));
    close(fd);
    return 0;
}

int do_oneway_recv(int ac, char** av) {
    const sockaddr_in grp = group_addr(av[2], num(av[3]));
    const std::uint64_t count = num(av[4]);
    const bool block = block_arg(ac, av, 5);
    if (count == 0) {
        usage();
    }
    const Waiter rx(rx_socket(grp), block);
    std::vector<std::byte> in(65536);
    std::vector<std::int64_t> late;
    late.reserve(count);
    std::int64_t timeout = 30'000'000'000;  // the first one: the sender starts after this
    while (late.size() < count) {
        const long n = rx.recv(in.data(), in.size(), timeout);
        const std::int64_t t = now_ns();
        if (n < 0) {
            break;  // the rest was lost (or never sent)
        }
        if (n < 16) {
            continue;
        }
        std::int64_t due = 0;
        std::memcpy(&due, in.data(), 8);
        late.push_back(t - due);
        timeout = 1'000'000'000;
    }
    const std::size_t got = late.size();
    std::sort(late.begin(), late.end());
    auto pct = [&](double p) {
        return static_cast<double>(percentile(late, p)) / 1e3;
    };
    std::printf(
        "{\"mode\":\"oneway-recv\",\"wait\":\"%s\",\"measured\":\"due -> received\","
        "\"count\":%llu,\"received\":%zu,\"us\":{\"p50\":%.1f,\"p99\":%.1f,"
        "\"p99_9\":%.1f,\"max\":%.1f}}\n",
        block ? "block" : "spin", static_cast<unsigned long long>(count), got, pct(50), pct(99),
        pct(99.9), pct(100));
    return got == count ? 0 : 1;
}

}  // namespace

int main(int ac, char** av) {
    if (ac < 2) {
        usage();
    }
    const std::string mode = av[1];
    if (mode == "send" && (ac == 7 || ac == 8)) {
        return do_send(av, ac);
    }
    if (mode == "recv" && (ac == 7 || ac == 8)) {
        return do_recv(av, ac);
    }
    if (mode == "pong" && (ac == 6 || ac == 7)) {
        return do_pong(ac, av);
    }
    if (mode == "ping" && (ac == 9 || ac == 10)) {
        return do_ping(ac, av);
    }
    if (mode == "oneway-send" && ac == 7) {
        return do_oneway_send(av);
    }
    if (mode == "oneway-recv" && (ac == 5 || ac == 6)) {
        return do_oneway_recv(ac, av);
    }
    usage();
}
