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
#include "transports/verbs/verbs_counters.hpp"

namespace prizma::verbs {

/// Endpoint::family of a verbs peer: addr = its GID, qpn = its UD QP number.
constexpr std::uint16_t kFamilyVerbs = 27;  // AF_IB
/// Bytes in front of every received datagram: the Global Route Header.
constexpr std::size_t kGrhBytes = 40;
/// The QPN a multicast send goes to.
constexpr std::uint32_t kMulticastQpn = 0xFFFFFF;
/// Default group Q_Key ("PGM1"); the top bit is clear so no CAP_NET_RAW is needed.
constexpr std::uint32_t kDefaultQkey = 0x50474d31;

/// PGM over an InfiniBand/RoCE Unreliable Datagram QP (libibverbs; never librdmacm).
struct VerbsConfig {
    std::string device;      ///< e.g. "rxe0"; empty: found from `local_addr`
    std::string local_addr;  ///< an IP address or GID of the port to use (alternative to device)
    int port = 1;            ///< HCA port number
    int gid_index = -1;      ///< -1: the RoCE v2 GID of the group's family (IB: index 0)
    std::string group;       ///< multicast group (IPv4/IPv6), or a unicast peer's address/GID
    std::uint32_t dest_qpn = 0;  ///< unicast destination QP number (unicast groups only)
    std::uint32_t qkey = kDefaultQkey;
    /// Receive ring slots (kept full). UD has no receiver-not-ready retry: whatever arrives
    /// while the ring is empty is dropped by the NIC, so the ring must absorb the longest
    /// stall of the polling thread at full rate (4096 x 1 KiB MTU = 4.6 MB registered).
    std::size_t rx_depth = 4096;
    std::size_t tx_depth = 256;      ///< send queue entries
    std::size_t max_inline = 256;    ///< inline bytes requested; the QP's grant is used
    std::size_t mtu = 0;             ///< 0: the port's active MTU; else min(active, mtu)
    std::uint8_t hop_limit = 1;      ///< multicast hops (RoCE v2: the IP TTL)
    std::uint8_t traffic_class = 0;  ///< RoCE v2: the DSCP/ECN byte
    std::uint8_t sl = 0;             ///< service level
    bool attach = true;              ///< join + attach to the multicast group (subscribers)
    /// Most bytes to pin (pool + queues); 0: no bound. A bound below what rx_depth needs
    /// lowers rx_depth to fit (VerbsInfo::notes says so); below what 8 slots need is an error.
    std::size_t pinned_max = 0;
    std::uint16_t dlid = 0;  ///< IB unicast mode: the peer's LID; 0: the SA's PathRecord
    int comp_vector = -1;    ///< receive CQ completion vector; -1: spread over the device's
    /// Blocking mode: one CQ event per this many completions (ibv_modify_cq; 0/1: every one).
    std::uint16_t cq_moderation = 0;
    std::size_t batch = 32;  ///< completions polled / WRs chained per call
    /// The channel's data-destination port (the URI's DPORT), for the layer above.
    std::uint16_t dport = 0;
};

/// Parses `verbs://DEVICE[:PORT]/GROUP:DPORT?key=value&...` or
/// `verbs://LOCAL_ADDR/GROUP:DPORT?...` (LOCAL_ADDR: IPv4, or [IPv6/GID]). Keys: gid_index,
/// qkey, qpn, rx_depth, tx_depth, inline, mtu, hop_limit, tclass, sl, pinned_max, dlid,
/// comp_vector, cq_moderation; any other is refused.
/// Errors: Errc::invalid_argument with a detail naming the bad part.
Result<VerbsConfig, Error> parse_uri(std::string_view uri);
/// The same, from a URI already split into its parts (the registry's factory uses this).
Result<VerbsConfig, Error> config_from(const ChannelUri& uri);
/// The table of verbs:// query keys those two read (docs/URI.md is held to it by a test).
std::span<const runtime::UriKey<VerbsConfig>> uri_keys() noexcept;

/// The multicast GID a group address maps to on RoCE v2 (IPv4 a.b.c.d -> ::ffff:a.b.c.d,
/// IPv6 as is) or on InfiniBand (IPv4 -> ff12:5047:PKEY::a.b.c.d low 28 bits: prizma's own
/// signature 0x5047 "PG", not IPoIB's 0x401b; docs/RDMA.md §4).
/// False when `group` is not an IP address.
bool group_to_gid(std::string_view group,
                  bool infiniband,
                  std::uint16_t pkey,
                  std::array<std::uint8_t, 16>& gid) noexcept;
/// True for a multicast GID (ff00::/8) or an IPv4-mapped multicast address.
bool gid_is_multicast(const std::array<std::uint8_t, 16>& gid) noexcept;
/// The source GID of a received datagram from its 40-byte GRH area: a RoCE v2 IPv4 header
/// at offset 20 gives ::ffff:SRC, otherwise the IPv6/IB GRH's source GID.
std::array<std::uint8_t, 16> source_gid_from_grh(const std::uint8_t* grh) noexcept;

// VerbsCounters: transports/verbs/verbs_counters.hpp (one list of them).

/// What the transport found at start-up, for logs and tools.
struct VerbsInfo {
    std::string device;
    int port = 0;
    int gid_index = 0;
    std::string gid;  ///< textual
    bool infiniband = false;
    std::size_t mtu = 0;     ///< the largest datagram sent: mtu=, the group's, the port's
    std::size_t rx_mtu = 0;  ///< the largest received: the port's active MTU (receive slots)
    std::size_t max_inline = 0;
    std::uint32_t qpn = 0;
    std::string netdev;  ///< RoCE: the netdev behind the GID
    bool multicast = false;
    std::size_t rx_depth = 0;  ///< after clamping to the device and pinned_max
    std::size_t tx_depth = 0;
    std::size_t pinned_bytes = 0;  ///< pool + queues (estimate), what RLIMIT_MEMLOCK must allow
    std::uint16_t lid = 0;         ///< InfiniBand: the port's LID
    std::uint16_t mlid = 0;        ///< InfiniBand: the group's MLID (publishers join too)
    std::string notes;             ///< what was adjusted to the device (depths, inline), or empty
    int comp_vector = 0;           ///< the completion vector of the CQs
    int comp_vectors = 0;          ///< the device's count of them
    bool cq_moderated = false;     ///< cq_moderation= applied (ibv_modify_cq)
    bool fork_safe = false;        ///< registered memory survives a fork() of the process
    /// Channels of this process on the device when this one started (it included): they share
    /// one context, PD, async-event thread and the unicast address handles.
    std::size_t device_channels = 0;
};

/// What was chosen, on one line (Transport::description(), prizma-stat, the tools).
std::string describe(const VerbsInfo& info, std::uint32_t qkey);

class VerbsTransport final : public Transport {
public:
    /// Errors name what is missing and what exists (devices, ports, GIDs), with
    /// std::errc::no_such_device, io_error, not_enough_memory, ... or Errc::invalid_argument.
    static Result<std::unique_ptr<VerbsTransport>, Error> create(const VerbsConfig& cfg);
    ~VerbsTransport() override;
    VerbsTransport(const VerbsTransport&) = delete;
    VerbsTransport& operator=(const VerbsTransport&) = delete;
    VerbsTransport(VerbsTransport&&) = delete;
    VerbsTransport& operator=(VerbsTransport&&) = delete;

    [[nodiscard]] std::string_view name() const noexcept override { return "verbs"; }
    [[nodiscard]] TransportCaps caps() const noexcept override;
    [[nodiscard]] Result<std::size_t> send_batch(
        std::span<const TxPacket> packets) noexcept override;
    [[nodiscard]] Result<std::size_t> poll_rx(std::span<RxPacket> out) noexcept override;
    void release_rx(std::size_t count) noexcept override;
    [[nodiscard]] int wakeup_fd() const noexcept override;
    [[nodiscard]] Result<bool> arm_wakeup() noexcept override;
    void forget(const Endpoint& peer) noexcept override;
    [[nodiscard]] Endpoint local_endpoint() const noexcept override;
    [[nodiscard]] std::string local_address_text() const override;
    [[nodiscard]] std::string description() const override;
    std::size_t named_counters(std::span<NamedCounter> out) const noexcept override;
    /// Port, fabric and device events the control thread saw (from its counters).
    std::size_t take_events(std::span<TransportEvent> out) noexcept override;

    [[nodiscard]] const VerbsCounters& counters() const noexcept;
    [[nodiscard]] const VerbsInfo& info() const noexcept;
    /// The IP address behind the local GID (an IPv4-mapped GID gives IPv4), which the layer
    /// above announces as this host's address.
    [[nodiscard]] IpAddress local_ip() const noexcept;

private:
    friend struct VerbsTransportTesting;  // verbs_testing.hpp: fault injection for the VM tests
    struct Impl;
    explicit VerbsTransport(std::unique_ptr<Impl> impl) noexcept;
    std::unique_ptr<Impl> impl_;
};

}  // namespace prizma::verbs
