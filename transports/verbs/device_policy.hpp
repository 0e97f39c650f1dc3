// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace prizma::verbs::policy {

/// The decisions the verbs transport takes from what a device reports, as pure functions of
/// plain values (no libibverbs here): the transport feeds them the real device's attributes;
/// the unit tests feed them fake device tables (irdma's limits, mlx5's GID table, bnxt_re
/// without multicast, SA replies) and check every field. docs/RDMA.md cites the rules.

using Gid = std::array<std::uint8_t, 16>;

/// The part of ibv_device_attr the transport depends on.
struct DeviceLimits {
    std::uint32_t max_qp_wr = 0;
    std::uint32_t max_cqe = 0;
    std::uint32_t max_mcast_grp = 0;
    std::uint32_t max_mcast_qp_attach = 0;
    std::uint32_t max_total_mcast_qp_attach = 0;
};

/// Receive/send depths after clamping to the device (docs/RDMA.md §1).
struct Depths {
    std::size_t rx = 0;
    std::size_t tx = 0;
    bool clamped = false;
    std::string note;  ///< what was lowered and why, for the start-up log; empty if nothing
};
/// rx/tx depth lowered to max_qp_wr and max_cqe (each queue has a CQ of its own depth).
Depths clamp_depths(std::size_t rx, std::size_t tx, const DeviceLimits& dev);

/// The largest inline size <= `want` that `accepts` (ibv_create_qp with that
/// max_inline_data) takes, by bisection: devices refuse a QP whose inline request exceeds
/// their maximum (irdma: 101) rather than lowering it. -1 when even 0 is refused (the failure
/// is not about inline data). `attempts` counts the calls.
struct InlineGrant {
    long long granted = -1;
    int attempts = 0;
};
InlineGrant step_inline(std::size_t want, const std::function<bool(std::size_t)>& accepts);

/// True when the device can attach a UD QP to a multicast group at all.
bool has_ud_multicast(const DeviceLimits& dev) noexcept;
/// The error for a device without UD multicast (limits of 0, or ibv_attach_mcast's
/// EOPNOTSUPP/ENOSYS): says so plainly and names the alternatives.
std::string no_multicast_text(const std::string& device);
/// The error text for ibv_attach_mcast returning `rc` (the provider's code: it does not set
/// errno, so `rc` is the error, not errno).
std::string attach_error_text(const std::string& device, const std::string& mgid_text, int rc);

// -------------------------------------------------------------------------------------------
// GID selection (docs/RDMA.md §4)

enum class GidType : std::uint8_t { ib, roce_v1, roce_v2 };

/// One GID table entry as ibv_query_gid_ex reports it.
struct GidEntry {
    Gid gid{};
    GidType type = GidType::ib;
    std::uint32_t ifindex = 0;
    bool valid = false;  ///< the query succeeded and the entry is not all zero
};

bool is_v4_mapped(const Gid& g) noexcept;
bool is_link_local(const Gid& g) noexcept;  ///< fe80::/10

/// The index to use, -1 if none fits:
/// - InfiniBand: the entry holding `local` if given, else the first valid entry (index 0);
/// - RoCE: only RoCE v2 entries (v1 is layer 2 only: unroutable, no DSCP/ECN); with `local`
///   the v2 entry holding it (v1 and v2 entries carry the same GID; v1 comes first on mlx5
///   and bnxt_re); else the first v2 entry of the group's family, for IPv6 a global one before
///   the link-local default, so that unicast NAKs can cross routers.
int pick_gid(std::span<const GidEntry> table, bool infiniband, bool v4, const Gid* local);
/// "[i] gid (type)" for every valid entry: what the errors list.
std::string describe_gids(std::span<const GidEntry> table);

// -------------------------------------------------------------------------------------------
// Pinned memory (docs/RDMA.md §1, §11)

/// The payload MTUs of a channel: what it receives (the port's active MTU: a peer may send
/// that much whatever this channel's `mtu=` is) and what it sends (`mtu=`, the group's).
struct Mtus {
    std::size_t rx = 0;
    std::size_t tx = 0;
};
/// Bytes of one receive slot (GRH + rx MTU) and one send slot.
std::size_t rx_stride(std::size_t mtu) noexcept;
std::size_t tx_stride(std::size_t mtu) noexcept;
/// The registered pool (page rounded) for the depths.
std::size_t pool_bytes(std::size_t rx, std::size_t tx, Mtus mtu) noexcept;
/// The pool plus the queues and CQs the kernel pins for the QP (64 bytes a WQE/CQE estimate).
std::size_t pinned_estimate(std::size_t rx, std::size_t tx, Mtus mtu) noexcept;
/// The largest rx depth (>= 8) whose pinned estimate fits in `limit`; 0 when even 8 does not.
std::size_t rx_depth_for_limit(std::size_t rx,
                               std::size_t tx,
                               Mtus mtu,
                               std::size_t limit) noexcept;
/// What to change when pinning `need` bytes failed: RLIMIT_MEMLOCK (`limit`, UINT64_MAX =
/// unlimited) in limits.conf / systemd / docker, CAP_IPC_LOCK, or smaller depths/pinned_max=.
std::string memlock_advice(std::size_t need, std::uint64_t limit);
/// What to change when the umad device of `ca` cannot be opened (`err`: errno of the open):
/// permissions (a udev rule), the ib_umad module.
std::string umad_advice(const std::string& ca, int port, int err);

// -------------------------------------------------------------------------------------------
// Address handles (docs/RDMA.md §7)

/// The fields of an ibv_ah_attr the transport sets (a mirror without libibverbs).
struct AhFields {
    bool is_global = true;
    Gid dgid{};
    std::uint32_t flow_label = 0;
    std::uint8_t sgid_index = 0;
    std::uint8_t hop_limit = 0;
    std::uint8_t traffic_class = 0;
    std::uint16_t dlid = 0;
    std::uint8_t sl = 0;
    std::uint8_t src_path_bits = 0;
    std::uint8_t port_num = 0;
    /// ibv_rate (the IBA rate code): the sender's injection rate cap, 0 = the port's rate.
    std::uint8_t static_rate = 0;
};

/// Where a received datagram came from, below the GID: what ibv_init_ah_from_wc uses.
struct SourceRoute {
    std::uint16_t slid = 0;
    std::uint8_t sl = 0;
    std::uint8_t dlid_path_bits = 0;
};

struct LocalPort {
    bool infiniband = false;
    std::uint8_t port = 1;
    std::uint8_t sgid_index = 0;
    std::uint8_t traffic_class = 0;
    std::uint8_t sl = 0;
};

/// The unicast AH back to a peer that sent us `route` (a NAK's or SPMR's target): on IB the
/// LRH needs DLID = the peer's LID (wc.slid), SL = wc.sl and our path bits (wc.dlid_path_bits);
/// the GRH names the peer's GID. On RoCE the LID fields are 0 and the GID does the routing.
AhFields unicast_ah(const LocalPort& lp, const Gid& peer, const SourceRoute& route) noexcept;
/// A source heard on another route than its cached handle's (IB: LID or SL; path bits too).
/// Never on RoCE: the GID routes there, and a completion's SL/LID fields carry nothing of the
/// route (a priority that may vary per packet would flush the handle over and over).
bool route_changed(const SourceRoute& cached, const SourceRoute& now, bool infiniband) noexcept;

/// What the SA's PathRecord to a peer says (IB).
struct PathFacts {
    std::uint16_t dlid = 0;
    std::uint8_t sl = 0;    ///< 4 bits
    std::uint8_t rate = 0;  ///< selector (2 bits) + rate code
};
/// A NAK's route made the SA's: the path's SL (QoS, DFSSSP and torus fabrics give a path an
/// SL of its own; the completion only shows the one the packet came in on), its LID (when
/// given) and its rate.
void apply_path(AhFields& a, const PathFacts& p) noexcept;
/// The AH of a configured unicast destination (publisher in unicast mode): on IB the LID must
/// be given (`dlid=`), since no datagram from the peer has told us.
AhFields configured_unicast_ah(const LocalPort& lp, const Gid& peer, std::uint16_t dlid) noexcept;
/// What the SA's MCMemberRecord says about the group's paths (IB).
struct GroupPath {
    std::uint8_t sl = 0;
    std::uint32_t flow_label = 0;
    std::uint8_t rate = 0;  ///< the record's rate byte: selector (2 bits) and rate code (6)
};
/// The group AH: DLID = the MLID from the SA (IB; 0 on RoCE); SL, flow label and static rate
/// from the SA's record when there is one. The static rate is the group's rate, as the
/// kernel's multicast client sets it: a faster publisher does not overrun the group's slower
/// links.
AhFields group_ah(const LocalPort& lp,
                  const Gid& mgid,
                  std::uint16_t mlid,
                  const GroupPath* sa,
                  std::uint8_t hop_limit) noexcept;

/// How long the control thread waits before rejoin attempt `attempt` (0: the first, after a
/// fabric event) given a random draw: spread over 0-250 ms at first (every host hears the
/// same SM event: no storm of joins at the SA), then 100 ms doubling to 30 s, each +-25%.
int rejoin_delay_ms(unsigned attempt, std::uint32_t random) noexcept;

/// A QP's state, as enum ibv_qp_state numbers it.
enum class QpState : std::uint8_t { reset = 0, init, rtr, rts, sqd, sqe, err };
enum class QpRecovery : std::uint8_t {
    none,    ///< ready to send (RTS, or draining to SQD): a late flushed completion
    to_rts,  ///< a send error stopped the send queue (SQE): back to RTS, same QP
    rebuild  ///< the error state (a fatal QP event; rxe after any send error), or not ready
};
/// What the owner thread does after a failed or flushed completion or a QP error event.
QpRecovery qp_recovery(QpState state) noexcept;

// -------------------------------------------------------------------------------------------
// Membership (docs/RDMA.md §6)

/// What create() does for the group: SA join (IB, every role: the SM creates a group only on
/// a full-member join and a publisher needs the MLID), QP attach (subscribers), IP join (RoCE
/// subscribers).
struct MembershipPlan {
    bool sa_join = false;
    bool attach_qp = false;
    bool ip_join = false;
};
MembershipPlan plan_membership(bool infiniband, bool multicast, bool subscriber) noexcept;

/// The MTU code (IBA: 1 = 256 ... 5 = 4096) -> bytes; 256 for anything else.
std::size_t mtu_code_bytes(unsigned code) noexcept;
/// The payload MTU: the group's (from the SA record's MTU code, IB), the port's active MTU,
/// and `cap` (0 = none), the smallest.
std::size_t effective_mtu(std::size_t port_mtu,
                          unsigned group_mtu_code,
                          bool have_group,
                          std::size_t cap) noexcept;

/// prizma's MGID signature for IPv4 groups on InfiniBand: ff12:5047:PKEY:0:0:0:0:0 | the
/// group's low 28 bits ("PG" instead of IPoIB's 0x401b, which OpenSM validates as IPoIB's).
constexpr std::uint16_t kMgidSignature = 0x5047;
/// IPv4 group (4 bytes) -> its InfiniBand MGID under prizma's signature.
Gid ib_mgid_v4(const std::uint8_t* group4, std::uint16_t pkey) noexcept;

/// The SA rate code (IBA 15.2.5.6 / ibv_rate) of a port's link: its active width (1x, 2x, 4x,
/// 8x, 12x as ibv_port_attr encodes it) times its lane speed (SDR ... NDR); the largest code
/// not above it, 0 when the width or speed is unknown. A group prizma creates runs at its
/// creator's link rate, not a fixed one.
std::uint8_t ib_rate_code(std::uint8_t active_width, std::uint32_t active_speed) noexcept;

}  // namespace prizma::verbs::policy
