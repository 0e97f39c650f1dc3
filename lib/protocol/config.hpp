// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <prizma/result.hpp>
#include <prizma/types.hpp>

#include "lib/pgm/packet.hpp"
#include "lib/protocol/flow_control.hpp"

namespace prizma::protocol {

using pgm::Sqn;

inline constexpr std::int64_t kUs = 1000;
inline constexpr std::int64_t kMs = 1000 * kUs;
inline constexpr std::int64_t kSec = 1000 * kMs;
inline constexpr std::int64_t kNever = INT64_MAX;

/// Every PGM timer and retry limit, in nanoseconds. RFC 3208 gives no defaults (§6.3); the
/// presets are named for the network they suit.
struct Timers {
    std::int64_t nak_bo_ivl_ns = 50 * kMs;      ///< §6.3 NAK back-off, random in (0, ivl]
    std::int64_t nak_rpt_ivl_ns = 200 * kMs;    ///< §6.3 wait for NCF before NAKing again
    std::int64_t nak_rdata_ivl_ns = 200 * kMs;  ///< §6.3 wait for RDATA after an NCF
    std::uint32_t nak_ncf_retries = 50;         ///< §6.3 NAKs without NCF before loss
    std::uint32_t nak_data_retries = 50;        ///< §6.3 NCFs without RDATA before loss
    std::int64_t spmr_expiry_ns = 250 * kMs;    ///< §13.5 wait for an SPM before sending SPMR
    std::int64_t peer_expiry_ns = 300 * kSec;   ///< silence after which a source is dropped
    std::int64_t ambient_spm_ns = 30 * kSec;    ///< §5.1.4 ambient SPM interval
    /// §5.1.5 heartbeat SPM intervals after the last data packet (0-terminated).
    std::array<std::int64_t, 10> heartbeat_spm_ns{100 * kMs,  100 * kMs, 100 * kMs, 100 * kMs,
                                                  1300 * kMs, 7 * kSec,  16 * kSec, 25 * kSec,
                                                  30 * kSec,  0};
    std::int64_t nak_elimination_ns = 10 * kMs;  ///< §5.3 one RDATA per sqn per interval
    std::int64_t spmr_answer_ivl_ns = 10 * kMs;  ///< §13.6 SPMRs answered at most this often
};

enum class Preset : std::uint8_t { wan, lan, rdma };

/// Timer presets: `wan` = the RFC-era values OpenPGM applications use, `lan` = one switch hop,
/// `rdma` = microsecond repair for kernel-bypass fabrics.
Timers preset(Preset p) noexcept;
/// Parses "wan" / "lan" / "rdma".
Result<Timers> preset(std::string_view name) noexcept;
/// Checks every value; the error's detail names the first bad one and its bounds.
Result<void, Error> validate(const Timers& t);
/// Worst-case span of the §6.3 retry chain: a back-off, then every NAK retry and every NCF
/// retry with a back-off each. A receiver repairs or reports a missing sqn within it; a
/// closing source lingers at most this long (docs/PROTOCOL.md §3.2, §4.1).
std::int64_t repair_limit_ns(const Timers& t) noexcept;
/// A closing source's quiet period from its timers: no NAK for two NAK rounds (2 × (NAK_BO_IVL
/// + max(NAK_RPT_IVL, NAK_RDATA_IVL))) plus the first two heartbeat intervals
/// (docs/PROTOCOL.md §3.2).
std::int64_t quiet_ns(const Timers& t) noexcept;

/// Late-join policy of a receiver (RFC 3208 §6.1, §9.4).
enum class JoinPolicy : std::uint8_t {
    first_packet,  ///< start at the first sqn seen (OpenPGM behaviour)
    from_trail,    ///< recover back to the source's trail (bounded by max_recover_sqns)
};

struct SourceConfig {
    Tsi tsi{};
    std::uint16_t dport = 7500;  ///< data-destination port
    pgm::Nla nla{};              ///< this source's path NLA (SPM, and checked in NAKs)
    pgm::Nla group{};            ///< the send group (checked in NAKs)
    std::uint32_t txw_sqns = 4096;
    /// A sent packet stays repairable at least this long: a full window whose oldest packet is
    /// younger returns Errc::back_pressured instead of evicting it. 0 = always evict.
    std::int64_t txw_retention_ns = 0;
    std::size_t max_tpdu = 1472;  ///< largest PGM packet (transport max datagram)
    std::size_t max_fragments = pgm::kMaxFragments;
    std::uint64_t odata_rate_bytes_per_sec = 0;  ///< 0 = unlimited
    std::uint64_t rdata_rate_bytes_per_sec = 0;  ///< separate repair budget; 0 = unlimited
    std::size_t rate_burst_bytes = 0;            ///< bucket depth; 0 = 1 ms of rate (≥ 1 APDU)
    /// Repair limits (docs/PROTOCOL.md, "Publisher repair limits"): every ODATA byte sent
    /// earns this many percent of a byte of RDATA + NCF, for all NAKs together ...
    std::uint32_t repair_budget_percent = 100;
    /// ... and for the NAKs of any one requester host (its address, any port).
    std::uint32_t requester_budget_percent = 50;
    /// The credit a source and a new requester start with, and the least that can be saved:
    /// 0 = 64 packets of max_tpdu. Beyond it, at most what was earned over the last
    /// max(nak_rpt_ivl, nak_rdata_ivl) is saved.
    std::size_t repair_burst_bytes = 0;
    /// RDATA for one sqn at most this many times (and at most once per max(nak_elimination,
    /// nak_rdata_ivl / 2)).
    std::uint32_t max_repairs_per_sqn = 16;
    /// quiet() waits this long after the later of the last data and the last NAK; -1 = the
    /// timers' own quiet period (quiet_ns(timers)). A channel on UDP, where OpenPGM receivers
    /// may listen, gets at least the wan preset's (docs/PROTOCOL.md §3.2).
    std::int64_t close_quiet_ns = -1;
    /// quiet() is true at the latest this long after the last data, whatever NAKs come: the
    /// receivers' repair limit. -1 = that of our own timers (repair_limit_ns(timers)); on UDP
    /// at least the wan preset's (25 s), OpenPGM receivers' usual retry chain. Never less
    /// than the quiet period.
    std::int64_t close_cap_ns = -1;
    bool checksum = true;  ///< may be false only on verbs (ICRC)
    /// Receiver-driven flow control (docs/PROTOCOL.md, "Flow control"); max = off.
    FlowConfig flow{};
    Sqn initial_sqn{};
    Timers timers{};
};

struct ReceiverConfig {
    std::uint16_t dport = 7500;  ///< only packets for this data-destination port are taken
    pgm::Nla group{};            ///< group NLA written in NAKs
    std::uint32_t rxw_sqns = 4096;
    std::size_t max_tpdu = 1472;
    std::size_t max_peers = 16;
    /// Sources whose storage (a slot per sqn and a payload ring of rxw_sqns x max_tpdu bytes)
    /// is allocated and paged in by create(), so that their first packet costs no more than
    /// any other. A source beyond them allocates at its first packet (not paged in: the pages
    /// fault in over the ring's first pass). At most max_peers.
    std::size_t preallocated_peers = 1;
    JoinPolicy join = JoinPolicy::first_packet;
    std::uint32_t max_recover_sqns = 1024;  ///< from_trail: history asked for at most
    bool passive = false;                   ///< never NAK (monitor)
    /// NAK pacing (docs/PROTOCOL.md §4.3): one source's sequence numbers asked for in one
    /// burst, and again per NAK_RPT_IVL, plus one for each repair that arrives (the repairs
    /// clock the NAKs). Repairs come to the group, so a receiver that NAKs a whole lost window
    /// at once makes its own receive buffer overflow with them (and with the NCFs): the rest
    /// wait, without timers and without using up retries. 0 = 512.
    std::uint32_t nak_burst_sqns = 0;
    std::uint64_t seed = 1;  ///< NAK back-off randomness
    /// Storage of all sources at once (window slots + payload ring each; see peer_bytes()),
    /// bytes; 0 = that of max(preallocated_peers, 4) sources. A new source past it is refused
    /// (counted) while an unconfirmed or silent source is made to leave for it.
    std::size_t storage_budget_bytes = 0;
    /// Keep a keyed fingerprint of every payload (~5 ns a packet) so that a second copy of a
    /// sequence number with other bytes is counted (conflicts), also after delivery. Off on
    /// authenticated channels: only the source can make a packet there.
    bool detect_conflicts = true;
    /// Only sources with one of these GSIs are taken (empty: any); at most 64.
    std::vector<Gsi> allowed_gsis;
    /// Flow control (docs/PROTOCOL.md, "Flow control"): send status messages (ACK with
    /// prizma's status option) to every source, where NAKs go: after each quarter window
    /// consumed and at least every status_ivl_ns; a leaving one on close.
    bool send_status = false;
    std::uint64_t receiver_id = 0;  ///< in status messages (random per channel)
    std::uint64_t status_tag = 0;   ///< its flow-control group; 0 = none
    std::int64_t status_ivl_ns = 200 * kMs;
    Timers timers{};
};

/// Bytes of the payload ring of a transmit window (one max-size packet per slot, rounded to
/// a cache line, for every slot and one more: the waste at the ring's end).
std::size_t txw_ring_bytes(const SourceConfig& c) noexcept;
/// Likewise for a receive window of one source (TSDUs: the data header is not kept).
std::size_t rxw_ring_bytes(const ReceiverConfig& c) noexcept;

/// Checks every value. On an error, `why` (when given) names the first bad field, followed by
/// ": " and what it must be ("rxw_sqns: 2 to 1048576 packets"), or alone for a timer
/// ("nak_rpt_ivl").
Result<void, Error> validate(const SourceConfig& c);
Result<void, Error> validate(const ReceiverConfig& c);

}  // namespace prizma::protocol
