// SPDX-License-Identifier: Apache-2.0
#pragma once
// This network namespace's UDP sockets as the kernel's socket-diagnostics netlink family
// reports them (NETLINK_SOCK_DIAG, inet_diag: what `ss -u` reads), instead of parsing the
// text of /proc/net/udp.
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <vector>

#include <prizma/error.hpp>
#include <prizma/result.hpp>

namespace prizma::udp {

/// One UDP socket (inet_diag_msg and its INET_DIAG_SKMEMINFO attribute).
struct UdpSocketInfo {
    int family = AF_INET;
    std::array<std::uint8_t, 16> local{};  ///< the bound address, network order (4 bytes: v4)
    std::uint16_t local_port = 0;          ///< host order
    std::uint32_t rqueue = 0;              ///< bytes queued for reading
    std::uint32_t uid = 0;
    std::uint64_t inode = 0;
    bool has_meminfo = false;      ///< the fields below came with the answer
    std::uint32_t rmem_alloc = 0;  ///< SK_MEMINFO_RMEM_ALLOC
    std::uint32_t rcvbuf = 0;      ///< SK_MEMINFO_RCVBUF
    std::uint32_t drops = 0;       ///< SK_MEMINFO_DROPS: datagrams dropped on receive
};

/// Most sockets one dump returns: more (another user's thousands of sockets on the port) are
/// counted in `UdpSockets::not_listed`, never stored.
inline constexpr std::size_t kMaxListedSockets = 4096;

struct UdpSockets {
    std::vector<UdpSocketInfo> sockets;
    std::size_t not_listed = 0;
};

/// The UDP sockets of `family` (AF_INET or AF_INET6; a v6 dump does not list v4 sockets) bound
/// to local port `port`, of this network namespace. Blocking (one netlink round trip, a few
/// ms at most); any thread. An Error names what failed: the netlink socket, the kernel's
/// refusal (no udp_diag in the kernel: "Operation not supported"), a malformed answer.
Result<UdpSockets, Error> udp_sockets_on_port(int family, std::uint16_t port);

}  // namespace prizma::udp
