// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace prizma::protocol {

/// The bounds of one configuration value: the one place they are written. validate() checks
/// against them, the refusal texts are made from them, and the public option table
/// (prizma::channel_option_table, checked against docs/URI.md by a test) shows them.
struct Bound {
    enum class Kind : std::uint8_t { count, duration_ns };
    std::string_view field;  ///< the protocol-level name ("txw_sqns", "timers.nak_repeat")
    Kind kind = Kind::count;
    std::uint64_t min = 0;
    std::uint64_t max = 0;
    std::string_view unit;  ///< appended to a count's range ("packets"); may be empty

    [[nodiscard]] constexpr bool holds(std::uint64_t v) const noexcept {
        return v >= min && v <= max;
    }
    [[nodiscard]] constexpr bool holds_ns(std::int64_t v) const noexcept {
        return v >= 0 && holds(static_cast<std::uint64_t>(v));
    }
    /// What a value must be: "2 to 1048576 packets", "more than 0, at most 1 h".
    [[nodiscard]] std::string text() const;
    /// The refusal: "<field>: <text>".
    [[nodiscard]] std::string refusal() const;
};

inline constexpr std::uint64_t kHourNs = 3'600'000'000'000;

inline constexpr Bound kTxwSqns{"txw_sqns", Bound::Kind::count, 1, 1U << 24U, "packets"};
inline constexpr Bound kRxwSqns{"rxw_sqns", Bound::Kind::count, 2, 1U << 20U, "packets"};
inline constexpr Bound kMaxPeers{"max_peers", Bound::Kind::count, 1, 4096, ""};
inline constexpr Bound kAllowedGsis{"allowed_gsis", Bound::Kind::count, 0, 64, "GSIs"};
inline constexpr Bound kMaxFragments{"max_fragments", Bound::Kind::count, 1, 4096, ""};
inline constexpr Bound kRetention{"txw_retention_ns", Bound::Kind::duration_ns, 0, INT64_MAX, ""};

/// Publisher repair limits (docs/PROTOCOL.md, "Publisher repair limits").
inline constexpr Bound kRepairBudget{"repair_budget_percent", Bound::Kind::count, 1, 10000,
                                     "percent"};
inline constexpr Bound kRequesterBudget{"requester_budget_percent", Bound::Kind::count, 1, 10000,
                                        "percent"};
inline constexpr Bound kRepairBurst{"repair_burst_bytes", Bound::Kind::count, 0, 1U << 30U,
                                    "bytes"};
inline constexpr Bound kMaxRepairsPerSqn{"max_repairs_per_sqn", Bound::Kind::count, 1, 255,
                                         "RDATA"};

/// A closing publisher's quiet period (docs/PROTOCOL.md §3.2); negative: the default.
inline constexpr Bound kCloseQuiet{"close_quiet", Bound::Kind::duration_ns, 0, kHourNs, ""};

/// Flow control (docs/PROTOCOL.md, "Flow control").
inline constexpr Bound kFlowReceivers{"flow.max_receivers", Bound::Kind::count, 1, 4096, ""};
inline constexpr Bound kFlowTimeout{"flow.timeout", Bound::Kind::duration_ns, 1'000'000, kHourNs,
                                    ""};
inline constexpr Bound kFlowStatusIvl{"flow.status_interval", Bound::Kind::duration_ns, 1'000'000,
                                      kHourNs, ""};

/// The timers: intervals that must be positive, intervals that may be 0, retry counts.
inline constexpr Bound kNakBackoff{"timers.nak_backoff", Bound::Kind::duration_ns, 1, kHourNs, ""};
inline constexpr Bound kNakRepeat{"timers.nak_repeat", Bound::Kind::duration_ns, 1, kHourNs, ""};
inline constexpr Bound kNakRdata{"timers.nak_rdata", Bound::Kind::duration_ns, 1, kHourNs, ""};
inline constexpr Bound kNcfRetries{"timers.nak_ncf_retries", Bound::Kind::count, 1, 255, ""};
inline constexpr Bound kDataRetries{"timers.nak_data_retries", Bound::Kind::count, 1, 255, ""};
inline constexpr Bound kSpmrExpiry{"timers.spmr_expiry", Bound::Kind::duration_ns, 1, kHourNs, ""};
inline constexpr Bound kPeerExpiry{"timers.peer_expiry", Bound::Kind::duration_ns, 1, kHourNs, ""};
inline constexpr Bound kAmbientSpm{"timers.ambient_spm", Bound::Kind::duration_ns, 1, kHourNs, ""};
inline constexpr Bound kHeartbeatSpm{"timers.heartbeat_spm", Bound::Kind::duration_ns, 0, kHourNs,
                                     ""};
inline constexpr Bound kNakElimination{"timers.nak_elimination", Bound::Kind::duration_ns, 0,
                                       kHourNs, ""};
inline constexpr Bound kSpmrAnswer{"timers.spmr_answer", Bound::Kind::duration_ns, 0, kHourNs, ""};

}  // namespace prizma::protocol
