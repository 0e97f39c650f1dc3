// SPDX-License-Identifier: Apache-2.0
#pragma once
// The state of one UdpTransport, shared by its files (private to transports/udp/):
//   udp_config.cpp      the udp:// grammar over a uri_keys table, address parsing
//   udp_setup.cpp       create()'s steps: addresses, sockets, joins, buffers, GSO/GRO, rings
//   udp_datapath.cpp    send_batch (sendmmsg, GSO), poll_rx (recvmmsg, GRO), release_rx,
//                       arm_wakeup
//   udp_transport.cpp   the Transport face: counters, description, caps

#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "lib/posix/errors.hpp"
#include "lib/posix/unique_fd.hpp"
#include "transports/udp/gro_policy.hpp"
#include "transports/udp/udp_transport.hpp"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace prizma::udp {

constexpr std::uint16_t kFamily4 = 4;
constexpr std::uint16_t kFamily6 = 6;
constexpr std::size_t kGroBuffer = 65536;
constexpr std::size_t kMaxGsoSegments = 64;

using posix::errno_code;

using posix::UniqueFd;

struct Addr {
    sockaddr_storage ss{};
    socklen_t len = 0;
    [[nodiscard]] int family() const noexcept { return ss.ss_family; }
    [[nodiscard]] bool is_multicast() const noexcept {
        if (family() == AF_INET) {
            const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
            return IN_MULTICAST(ntohl(a->sin_addr.s_addr));
        }
        const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&ss);
        return IN6_IS_ADDR_MULTICAST(&a6->sin6_addr);
    }
    const sockaddr* sa() const noexcept { return reinterpret_cast<const sockaddr*>(&ss); }
};

// ---- helpers (udp_config.cpp) ----
bool make_addr(const std::string& host, std::uint16_t port, Addr& out) noexcept;

// ---- helpers shared by set-up and the data path (inline: poll_rx and adapt_gro use them) ----
inline Endpoint to_endpoint(const sockaddr_storage& ss) noexcept {
    Endpoint e;
    if (ss.ss_family == AF_INET) {
        const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
        e.family = kFamily4;
        e.port = ntohs(a->sin_port);
        std::memcpy(e.addr.data(), &a->sin_addr, 4);
    } else if (ss.ss_family == AF_INET6) {
        const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
        e.family = kFamily6;
        e.port = ntohs(a->sin6_port);
        std::memcpy(e.addr.data(), &a->sin6_addr, 16);
    }
    return e;
}

template <typename T>
bool set_opt(int fd, int level, int name, T value) noexcept {
    return ::setsockopt(fd, level, name, &value, sizeof value) == 0;
}

struct UdpTransport::Impl {
    // Set-up, in the order create() runs them.
    Result<void, Error> resolve(unsigned& ifindex);      // addresses, interface, datagram size
    Result<void, Error> open_sockets();                  // bound sockets and their buffers
    Result<void, Error> join(unsigned ifindex);          // group membership, multicast sends, tos
    Result<void, Error> join_sources(unsigned ifindex);  // sources=: source-specific joins
    void read_back(UdpCounters& c) const noexcept;       // buffer sizes the kernel granted
    bool setup_gro() noexcept;                           // UDP_GRO per GroMode; true if merging
    void size_rings(bool gro_on);                        // receive slots and send scratch
    // send_batch's pieces.
    std::size_t gather_run(std::span<const TxPacket> packets,
                           std::size_t& consumed,
                           std::size_t& niov,
                           mmsghdr& m,
                           bool gso) noexcept;
    int send_messages(std::size_t nmsg, bool lone_packet) noexcept;
    // poll_rx's pieces.
    static constexpr int kTruncated = -2;
    int read_datagrams(int fd, std::size_t slot, std::size_t n, UdpCounters& counters) noexcept;
    std::size_t segment_size(std::size_t i, std::size_t fi, bool single_read) noexcept;
    bool ready_sockets(std::array<int, 2>& fds) const noexcept;

    UdpConfig cfg;
    int fam = AF_INET;
    Addr group;
    Addr iface;
    bool multicast = false;
    UniqueFd rx;           // group:port (joined), or a unicast group address of this host
    UniqueFd uc;           // iface:port, for unicast NAKs/SPMRs; also the send socket when present
    UniqueFd ep;           // epoll over those present, the wakeup fd
    bool watched = false;  // the sockets are in ep (from the first arm_wakeup() on)
    int tx = -1;
    std::size_t max_datagram = 0;
    // receive
    std::size_t rx_slot = 0;
    std::vector<std::byte> rx_buf;
    std::vector<mmsghdr> rx_msgs;
    std::vector<iovec> rx_iov;
    std::vector<sockaddr_storage> rx_from;
    std::vector<std::array<char, 64>> rx_ctl;
    std::vector<RxPacket> pending;  // segments received that did not fit the caller's span
    std::size_t pending_pos = 0;
    std::size_t lent = 0;         // handed out by the last poll_rx
    RxPacket* lent_to = nullptr;  // ...straight into the caller's span, or from pending
    // The sender address of the last datagram, raw and converted: consecutive datagrams
    // mostly come from one source, and a freshly built Endpoint copied into each segment
    // stalled on store forwarding.
    sockaddr_storage last_sa{};
    socklen_t last_sa_len = 0;
    Endpoint last_from{};
    bool poll_uc_first = false;
    std::array<bool, 2> quiet{};   // the last read of rx, uc found nothing
    std::array<GroPolicy, 2> gro;  // UDP_GRO of rx, uc: on now, was on, gro=auto's switching
    // send
    std::vector<mmsghdr> tx_msgs;
    std::vector<iovec> tx_iov;
    std::vector<Addr> tx_addr;
    std::vector<std::array<char, 64>> tx_ctl;

    /// Restores what recvmmsg overwrote in receive header i (lengths and flags).
    void reset_rx(std::size_t i) noexcept {
        mmsghdr& m = rx_msgs[i];
        m.msg_len = 0;
        m.msg_hdr.msg_namelen = sizeof(sockaddr_storage);
        m.msg_hdr.msg_controllen = rx_ctl[i].size();
        m.msg_hdr.msg_flags = 0;
    }
};

}  // namespace prizma::udp
