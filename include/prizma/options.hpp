// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <prizma/error.hpp>
#include <prizma/result.hpp>
#include <prizma/types.hpp>

namespace prizma {

/// The PGM timer presets: `wan` = the RFC-era values OpenPGM applications use (50 ms NAK
/// back-off), `lan` = one switch hop (2 ms), `rdma` = microsecond repair on kernel-bypass
/// fabrics (20 us).
enum class TimerPreset : std::uint8_t { wan, lan, rdma };

/// "wan", "lan", "rdma".
std::string_view to_string(TimerPreset preset) noexcept;
/// The preset named `name` ("wan", "lan", "rdma"), or nullopt.
std::optional<TimerPreset> parse_timer_preset(std::string_view name) noexcept;

/// Every PGM timer and retry limit of a channel (RFC 3208 §5, §6.3). Start from a preset and
/// change what you need: `auto t = Timers::of(TimerPreset::lan); t.nak_backoff = 500us;`.
/// Each value is checked when the channel is added; a bad one is refused by its name.
struct Timers {
    using ns = std::chrono::nanoseconds;
    ns nak_backoff{};                   ///< §6.3 NAK back-off, random in (0, this]; > 0, ≤ 1 h
    ns nak_repeat{};                    ///< §6.3 wait for an NCF before NAKing again; > 0, ≤ 1 h
    ns nak_rdata{};                     ///< §6.3 wait for RDATA after an NCF; > 0, ≤ 1 h
    std::uint32_t nak_ncf_retries = 0;  ///< NAKs without an NCF before loss; 1-255
    std::uint32_t nak_data_retries = 0;  ///< NCFs without RDATA before loss; 1-255
    ns spmr_expiry{};  ///< §13.5 wait for an SPM before asking with an SPMR; > 0, ≤ 1 h
    ns peer_expiry{};  ///< silence after which a source is dropped; > ambient_spm
    ns ambient_spm{};  ///< §5.1.4 ambient SPM interval; > 0, ≤ 1 h
    /// §5.1.5 heartbeat SPM intervals after the last data packet; a zero ends the list.
    std::array<ns, 10> heartbeat_spm{};
    ns nak_elimination{};  ///< §5.3 one RDATA per sequence number per this interval; ≤ 1 h
    ns spmr_answer{};      ///< §13.6 SPMRs answered at most this often; ≤ 1 h

    /// The values of a preset.
    static Timers of(TimerPreset preset) noexcept;
};

/// One key of a channel's packet authentication: 16 secret bytes and the id packets name it
/// by (so keys can be rotated: receivers hold the old and the new one for a while).
struct AuthKey {
    std::uint32_t id = 0;
    std::array<std::uint8_t, 16> bytes{};
};

/// Packet authentication (docs/PROTOCOL.md, "Authentication"): every packet between prizma
/// peers carries a keyed MAC; packets without a valid one, or whose sender clock is more
/// than max_clock_skew away (replays), are dropped and counted (`auth_refused`).
struct AuthOptions {
    /// 1 to 4 keys with distinct ids; the first signs, any of them verifies.
    std::vector<AuthKey> keys;
    /// Largest difference between a sender's clock and ours (both UTC). Sequence numbers
    /// wrap after about an hour at 1 M messages/s: an old packet replayed is refused long
    /// before it could be taken for a new one.
    std::chrono::seconds max_clock_skew{30};
};

/// Reads a key file: one key per line, `ID HEX` (a decimal id, 32 hex digits), `#` comments;
/// the first key signs. The file must be a regular file of the caller's own with no group or
/// other permission bits (0600 or 0400): anything else is refused. The key never appears in
/// an error.
Result<AuthOptions, Error> read_key_file(const std::string& path);

/// Receiver-driven flow control (docs/PROTOCOL.md, "Flow control"): how far a publisher may
/// run ahead of its receivers.
enum class FlowControl : std::uint8_t {
    max,     ///< never wait for anyone (PGM as it is, and the default): no status messages
    min,     ///< never more than the slowest live receiver's window ahead
    tagged,  ///< the same over the receivers carrying `FlowOptions::tag` only
};
/// "max", "min", "tagged".
std::string_view to_string(FlowControl strategy) noexcept;
/// The strategy named `name`, or nullopt.
std::optional<FlowControl> parse_flow_control(std::string_view name) noexcept;

/// Flow control of one channel. On a publisher: the strategy it paces itself by. On a
/// subscriber: any strategy but `max` makes it send status messages (its consumed position and
/// window) to every source, carrying `tag` (tagged needs one). URI keys: `flow=`, `flow_tag=`,
/// `flow_group=`, `flow_timeout_ms=` (they override these).
struct FlowOptions {
    FlowControl strategy = FlowControl::max;
    std::uint64_t tag = 0;  ///< the group: a subscriber's own, the one a tagged publisher counts
    /// Publisher, tagged: offers return Errc::back_pressured until this many tagged receivers
    /// are counted.
    std::uint32_t min_group = 0;
    /// Publisher: a receiver silent this long, or holding the publisher back this long without
    /// consuming anything, is dropped from the group (counted `flow_evicted`). Also the
    /// laggard rule's measure: a receiver that alone holds the publisher back more than half
    /// of the time, by an excess of `timeout`, is evicted and its address benched for
    /// `timeout` (doubling with each repeat; counted `flow_laggards`).
    std::chrono::milliseconds timeout{5000};
    std::uint32_t max_receivers = 64;  ///< publisher: receivers tracked at once
    /// Publisher: receivers tracked at once from one IP address; more are refused (counted
    /// `flow_address_refused`). Without a key_file, anyone on the group can send status
    /// messages: this keeps one host from filling the table with made-up receiver ids.
    std::uint32_t max_receivers_per_address = 4;
    /// Subscriber: a status at least this often (and after each quarter window consumed).
    std::chrono::milliseconds status_interval{200};
};

/// Per-channel settings. Channel URIs carry the addressing; these carry the protocol.
struct ChannelOptions {
    /// Timer preset (default lan), unless `timers` is set.
    TimerPreset preset = TimerPreset::lan;
    /// Every timer, overriding the preset (start from Timers::of(preset)).
    std::optional<Timers> timers;
    /// Transmit / receive window, packets. A publisher's message spans at most 16 of them
    /// (OpenPGM's fragment limit), or window_sqns when that is smaller.
    std::uint32_t window_sqns = 1U << 16U;
    /// Publisher: keep each packet repairable at least this long; a full window then returns
    /// Errc::back_pressured instead of dropping history. 0 = always advance.
    std::chrono::nanoseconds retention{0};
    std::uint64_t rate_bytes_per_sec = 0;  ///< ODATA budget, 0 = unlimited
    /// RDATA budget (token bucket, 1 ms deep), 0 = unlimited. The default paces the repair of
    /// a lost burst so that a receiver with a default socket buffer (an OpenPGM one, or any
    /// non-root process: 208 KiB) takes it in rather than losing it again (docs/PROTOCOL.md
    /// §3.1): 64 MB/s, ~200,000 RDATA of 300 bytes a second.
    std::uint64_t repair_rate_bytes_per_sec = kDefaultRepairRate;
    static constexpr std::uint64_t kDefaultRepairRate = 64'000'000;
    /// Publisher: Publisher::quiet() waits this long after the later of its last message and
    /// the last NAK (serving repairs) before it says the publisher can close. Negative: the
    /// default, the preset's own quiet period (lan 27 ms), and on udp://, where OpenPGM
    /// receivers may listen, at least 700 ms (the wan preset's: a heartbeat SPM reveals the
    /// tail, OpenPGM's usual NAK back-off is 50 ms and its repeat 200 ms). An application
    /// that knows its receivers may shorten it (docs/PROTOCOL.md §3.2). At most 1 h.
    std::chrono::nanoseconds close_quiet{-1};
    /// Publisher: every data byte sent earns this many percent of a byte of repair (RDATA +
    /// NCF) for all NAKs together, and requester_budget_percent for the NAKs of any one host:
    /// no NAK traffic makes the publisher send more than that on top of its data (see
    /// docs/PROTOCOL.md, "Publisher repair limits").
    std::uint32_t repair_budget_percent = 100;
    std::uint32_t requester_budget_percent = 50;
    /// Publisher: RDATA of one sequence number at most this many times in all.
    std::uint32_t max_repairs_per_sqn = 16;
    /// Subscriber late join: false = start at the first packet seen (OpenPGM), true = recover
    /// back to the source's trail (at most max_recover_sqns).
    bool recover_history = false;
    std::uint32_t max_recover_sqns = 1024;
    std::size_t max_sources = 16;
    /// Subscriber: sources whose receive storage (window_sqns slots and a payload ring of
    /// window_sqns x the largest packet payload, ~96 MiB at the defaults on UDP) is allocated
    /// and paged in when the channel is added. A source beyond them gets its storage at its
    /// first packet: an allocation on the owner thread and page faults over the ring's first
    /// pass (the storage is then reused by later sources). Set it to the sources expected at
    /// once, e.g. 2 for a hot-standby pair. At most max_sources.
    std::size_t preallocated_sources = 1;
    /// Subscriber: storage of all sources at once (each: the receive storage above), bytes;
    /// 0 = that of max(preallocated_sources, 4) sources. A new source beyond it is refused
    /// (sources_refused) while one that never sent an SPM, or fell silent, leaves for it.
    std::size_t memory_budget_bytes = 0;
    /// Subscriber: keep a keyed fingerprint of every payload so that a second copy of a
    /// sequence number with other bytes (a forgery, without a key) is counted as `conflicts`,
    /// also after delivery. Costs a hash of each payload (~5 ns at 100 bytes, ~35 ns at 500:
    /// docs/PERFORMANCE.md); off on authenticated channels, where only the source signs.
    bool detect_conflicts = true;
    bool passive = false;  ///< subscriber never NAKs (with flow keys it still sends status)
    /// Publisher: the GSI of its TSI (default: the Context's, random per Context). A fixed
    /// one lets subscribers allow this publisher by name (allowed_sources).
    std::optional<Gsi> gsi;
    /// Subscriber: take only sources with one of these GSIs (at most 64; empty: any). Packets
    /// of any other source are dropped before they make state (`packets_refused`).
    std::vector<Gsi> allowed_sources;
    /// Packet authentication between prizma peers (or `key_file=PATH` in the URI: not both).
    /// Unset: packets are as OpenPGM sends them, and any MAC option is ignored.
    std::optional<AuthOptions> auth;
    std::uint16_t source_port = 0;  ///< PGM TSI source port; 0 = random
    /// Receiver-driven flow control (off: `max`).
    FlowOptions flow{};
};

/// One row of the ChannelOptions reference, from the table the library checks options with:
/// the same bounds make the refusal texts (`window_sqns = 1: 2 to 1048576 packets`), and a
/// test holds docs/URI.md to them.
struct OptionInfo {
    std::string_view name;        ///< the ChannelOptions field
    std::string_view applies_to;  ///< "publisher", "subscriber" or "both"
    std::string bounds;           ///< what a value must be, as a refusal says it
    /// The field's value in `o` as text ("65536", "0 ns", "lan", "false").
    std::string (*value)(const ChannelOptions& o) = nullptr;
};

/// Every ChannelOptions field, in declaration order.
std::span<const OptionInfo> channel_option_table();

}  // namespace prizma
