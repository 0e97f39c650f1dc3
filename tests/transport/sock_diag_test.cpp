// SPDX-License-Identifier: Apache-2.0
// The NETLINK_SOCK_DIAG dump of UDP sockets (transports/udp/sock_diag.hpp) against sockets
// this test opens: found by port and address, its queue and drops as the kernel counts them.
#include "transports/udp/sock_diag.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <optional>

#include "lib/posix/unique_fd.hpp"
#include "tests/support/catch.hpp"

using prizma::posix::UniqueFd;
using prizma::udp::udp_sockets_on_port;
using prizma::udp::UdpSocketInfo;

namespace {

/// A UDP socket bound to `addr` port 0 (IPv4 or IPv6 text); its port in `port`.
UniqueFd bound(int family, const char* addr, std::uint16_t& port) {
    UniqueFd fd(::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    REQUIRE(fd.valid());
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (family == AF_INET) {
        auto* a = reinterpret_cast<sockaddr_in*>(&ss);
        a->sin_family = AF_INET;
        REQUIRE(::inet_pton(AF_INET, addr, &a->sin_addr) == 1);
        len = sizeof(sockaddr_in);
    } else {
        auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
        a->sin6_family = AF_INET6;
        REQUIRE(::inet_pton(AF_INET6, addr, &a->sin6_addr) == 1);
        len = sizeof(sockaddr_in6);
    }
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) == 0);
    REQUIRE(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0);
    port = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                   : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    return fd;
}

/// The one socket of the dump on `port` whose inode is `fd`'s.
std::optional<UdpSocketInfo> find(int family, std::uint16_t port, int fd) {
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    auto r = udp_sockets_on_port(family, port);
    if (!r) {
        FAIL(r.error().message());
    }
    for (const auto& s : r->sockets) {
        if (s.inode == st.st_ino) {
            return s;
        }
    }
    return std::nullopt;
}

}  // namespace

TEST_CASE("sock_diag: a bound socket is listed with its address, port, uid and queue",
          "[udp][sock_diag]") {
    std::uint16_t port = 0;
    const UniqueFd rx = bound(AF_INET, "127.0.0.1", port);
    const int rcvbuf = 1;  // the kernel's minimum: a few datagrams fill it
    REQUIRE(::setsockopt(rx.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf) == 0);

    auto before = find(AF_INET, port, rx.get());
    REQUIRE(before);
    CHECK(before->family == AF_INET);
    CHECK(before->local_port == port);
    CHECK(std::memcmp(before->local.data(), "\x7f\x00\x00\x01", 4) == 0);
    CHECK(before->uid == ::geteuid());
    CHECK(before->rqueue == 0);
    REQUIRE(before->has_meminfo);
    CHECK(before->drops == 0);
    CHECK(before->rcvbuf > 0);

    // Datagrams nobody reads: the first ones queue, the rest are dropped (rcvbuf is full).
    std::uint16_t tx_port = 0;
    const UniqueFd tx = bound(AF_INET, "127.0.0.1", tx_port);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const std::array<char, 1000> payload{};
    for (int i = 0; i < 200; ++i) {
        REQUIRE(::sendto(tx.get(), payload.data(), payload.size(), 0,
                         reinterpret_cast<const sockaddr*>(&to), sizeof to)
                == static_cast<ssize_t>(payload.size()));
    }
    auto after = find(AF_INET, port, rx.get());
    REQUIRE(after);
    CHECK(after->rqueue > 0);
    CHECK(after->rmem_alloc > 0);
    CHECK(after->drops > 0);
    CHECK(after->drops < 200);
    // Another port's socket is not in this port's dump.
    CHECK_FALSE(find(AF_INET, port, tx.get()));
}

TEST_CASE("sock_diag: IPv6 sockets are in the IPv6 dump, not in the IPv4 one", "[udp][sock_diag]") {
    std::uint16_t port = 0;
    {
        const UniqueFd probe(::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0));
        sockaddr_in6 lo{};
        lo.sin6_family = AF_INET6;
        lo.sin6_addr = in6addr_loopback;
        if (!probe.valid()
            || ::bind(probe.get(), reinterpret_cast<const sockaddr*>(&lo), sizeof lo) != 0) {
            PRIZMA_SKIP("no IPv6 loopback here");
        }
    }
    const UniqueFd rx = bound(AF_INET6, "::1", port);
    auto s = find(AF_INET6, port, rx.get());
    REQUIRE(s);
    CHECK(s->family == AF_INET6);
    std::array<std::uint8_t, 16> loopback{};
    loopback[15] = 1;
    CHECK(s->local == loopback);
    CHECK_FALSE(find(AF_INET, port, rx.get()));
}

TEST_CASE("sock_diag: a family other than IPv4 or IPv6 is refused by name", "[udp][sock_diag]") {
    auto r = udp_sockets_on_port(AF_UNIX, 1);
    REQUIRE_FALSE(r);
    CHECK(r.error().message().find("AF_INET or AF_INET6") != std::string::npos);
}
