// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <prizma/result.hpp>
#include <prizma/transport.hpp>
#include <prizma/transport_registry.hpp>

#include "lib/runtime/uri_keys.hpp"
#include "transports/udp/gro_policy.hpp"

namespace prizma::udp {

/// Receive-side UDP_GRO (the kernel hands a GSO burst over as one merged datagram).
enum class GroMode : std::uint8_t {
    off,  ///< never: a GSO burst is cut into datagrams by the kernel, read in batches
    on,   ///< always
    /// On while datagrams come in bursts, off while they come one at a time (the default).
    /// A burst needs GRO to stay cheap; a socket with UDP_GRO makes each datagram sent to it
    /// from this host cost the *sender* up to 480 cycles more (measured: 0-7% of a sendto).
    /// Never set until the first burst: setting it once turns on the kernel's UDP
    /// encapsulation hooks for the socket's life. See kGroOnBatch and kGroOffReads.
    adaptive,
};

/// PGM over UDP, OpenPGM's encapsulation: the PGM packet is the whole UDP payload.
struct UdpConfig {
    std::string group;  ///< downstream destination: multicast group or unicast address
    /// UDP port, multicast and unicast alike (OpenPGM: both equal). Unicast datagrams (repair
    /// requests) go to this port of the peer's address, whatever port the peer sent from:
    /// OpenPGM's encapsulation, where a source listens on the channel's port only.
    std::uint16_t port = 0;
    std::string iface;  ///< local interface address (required for multicast)
    int ttl = 1;        ///< multicast hops; 0 = this host only (same-host subscribers)
    int tos = 0;        ///< IP_TOS / IPV6_TCLASS byte (DSCP << 2 | ECN); 0 = default
    /// The channel's data-destination port (the URI's dport), for the layer above: the
    /// transport itself never looks inside the datagrams. 0 = not given (7500).
    std::uint16_t dport = 0;
    bool loop = true;  ///< IP_MULTICAST_LOOP (same-host subscribers need it)
    /// SO_RCVBUF wanted: SO_RCVBUFFORCE first (CAP_NET_ADMIN goes past net.core.rmem_max),
    /// then SO_RCVBUF; the granted size is read back (rcvbuf_capped when smaller).
    int rcvbuf = 32 << 20;
    int sndbuf = 8 << 20;  ///< likewise (SO_SNDBUFFORCE, then SO_SNDBUF)
    bool gso = true;       ///< UDP_SEGMENT for runs of same-size packets, if the kernel has it
    GroMode gro = GroMode::adaptive;  ///< UDP_GRO on receive, if the kernel has it
    int busy_poll_us = 0;             ///< SO_BUSY_POLL; 0 = off
    /// Sources: also bind iface:port, so unicast NAKs/SPMRs sent to our NLA reach this socket
    /// (a specific address wins over same-host wildcard sockets). Receivers must not.
    bool bind_unicast = false;
    /// Join the multicast group. A publisher-only channel need not: NAKs and SPMRs reach it by
    /// unicast (bind_unicast), and not joining spares every send a loopback copy to itself.
    /// A multicast channel that does not join has no group socket; without bind_unicast too
    /// it sends from an unbound socket (an ephemeral source port).
    bool join = true;
    /// Source-specific multicast (sources=A,B): join the group for these senders only, so the
    /// kernel drops every other host's datagrams to it (an allow-list by address; IGMPv3 /
    /// MLDv2 on the network). Empty: any source (IP_ADD_MEMBERSHIP).
    std::vector<std::string> sources;
    std::size_t max_datagram = 0;  ///< 0 = 1472 (IPv4) / 1452 (IPv6)
    /// Splits a datagram merged by GRO that arrived without its segment size (one read after
    /// GRO was switched off). Without it such a datagram is handed up whole.
    FrameLength frame_length = nullptr;
    std::size_t batch = 64;
};

/// Parses `udp://GROUP:PORT?iface=ADDR&dport=N&ttl=N&tos=N&loop=0|1&rcvbuf=N&sndbuf=N&gso=0|1&
/// gro=0|1|auto&busy_poll=US&sources=A,B` ([v6]:PORT for IPv6). Any other key is refused, naming
/// it. Errors: Errc::invalid_argument with a detail naming the bad part.
Result<UdpConfig, Error> parse_uri(std::string_view uri);
/// The same, from a URI already split into its parts (the registry's factory uses this).
Result<UdpConfig, Error> config_from(const ChannelUri& uri);
/// The table of udp:// query keys those two read (docs/URI.md is held to it by a test).
std::span<const runtime::UriKey<UdpConfig>> uri_keys() noexcept;

struct UdpCounters {
    std::uint64_t rx_datagrams = 0;
    std::uint64_t rx_gro_segments = 0;
    /// gro=auto: times UDP_GRO was switched on or off on a receive socket.
    std::uint64_t rx_gro_switches = 0;
    /// Receive sockets with UDP_GRO on now (gro=auto switches it; gro=1 keeps it on).
    std::uint64_t rx_gro_active = 0;
    /// Datagrams the kernel dropped at the sockets (buffer full): their SO_MEMINFO drop count.
    std::uint64_t rx_kernel_drops = 0;
    /// Kernel memory the receive sockets' queues hold now (SO_MEMINFO rmem_alloc: the
    /// datagrams waiting to be read plus the kernel's per-datagram overhead).
    std::uint64_t rx_queued_bytes = 0;
    /// Reads of one datagram with recvfrom() after an empty poll (see poll_rx).
    std::uint64_t rx_single_reads = 0;
    /// Datagrams longer than a receive slot (gro=0: max_datagram + 64 bytes), dropped.
    std::uint64_t rx_truncated = 0;
    std::uint64_t tx_datagrams = 0;
    std::uint64_t tx_syscalls = 0;
    std::uint64_t tx_gso_sends = 0;
    /// Buffers handed to the kernel for the datagrams sent; pieces that lie back to back in
    /// memory (a packed send batch) share one, so a GSO run is usually one.
    std::uint64_t tx_iovecs = 0;
    std::uint64_t tx_errors = 0;
    std::uint64_t rcvbuf_capped = 0;  ///< 1 when SO_RCVBUF read back smaller than asked
    int rcvbuf_effective = 0;
    int sndbuf_effective = 0;
    int busy_poll_us = 0;  ///< SO_BUSY_POLL granted (read back), 0 = off or refused
};

class UdpTransport final : public Transport {
public:
    /// Errors: Errc::invalid_argument (addresses), or the OS error of socket set-up, each with
    /// a detail naming what failed.
    static Result<std::unique_ptr<UdpTransport>, Error> create(const UdpConfig& cfg);
    ~UdpTransport() override;
    UdpTransport(const UdpTransport&) = delete;
    UdpTransport& operator=(const UdpTransport&) = delete;
    UdpTransport(UdpTransport&&) = delete;
    UdpTransport& operator=(UdpTransport&&) = delete;

    [[nodiscard]] std::string_view name() const noexcept override { return "udp"; }
    [[nodiscard]] TransportCaps caps() const noexcept override;
    [[nodiscard]] Result<std::size_t> send_batch(
        std::span<const TxPacket> packets) noexcept override;
    [[nodiscard]] Result<std::size_t> poll_rx(std::span<RxPacket> out) noexcept override;
    void release_rx(std::size_t count) noexcept override;
    [[nodiscard]] int wakeup_fd() const noexcept override;
    std::size_t named_counters(std::span<NamedCounter> out) const noexcept override;
    [[nodiscard]] Result<bool> arm_wakeup() noexcept override;
    [[nodiscard]] bool rx_follows_wakeup() const noexcept override;
    [[nodiscard]] std::string description() const override;

    /// A snapshot; rx_kernel_drops and rx_queued_bytes are read from the sockets (SO_MEMINFO)
    /// on each call.
    [[nodiscard]] UdpCounters counters() const noexcept;
    [[nodiscard]] bool gso_enabled() const noexcept { return gso_; }
    /// Merged datagrams may arrive: gro=1, or gro=auto (receive slots are then 64 KiB).
    [[nodiscard]] bool gro_enabled() const noexcept { return gro_; }
    /// gro=auto: a batch read of at least this many datagrams at once (a burst cut up by the
    /// kernel, or a queue that built up; or of a whole batch, when the read batch is smaller)
    /// switches UDP_GRO on for that socket...
    static constexpr std::size_t kGroOnBatch = GroPolicy::kOnBatch;
    /// ...and this many reads in a row of one datagram each, none merged, switch it off.
    static constexpr std::uint32_t kGroOffReads = GroPolicy::kOffReads;
    /// The address and port this transport sends from (as receivers see it in `from`).
    [[nodiscard]] Endpoint local_endpoint() const noexcept override { return local_; }

private:
    struct Impl;
    explicit UdpTransport(std::unique_ptr<Impl> impl) noexcept;
    void adapt_gro(
        int fd, GroPolicy& policy, bool batch, std::size_t datagrams, bool merged) noexcept;
    std::unique_ptr<Impl> impl_;
    UdpCounters counters_;
    Endpoint local_{};
    bool gso_ = false;
    bool gro_ = false;
};

}  // namespace prizma::udp
