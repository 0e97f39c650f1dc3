// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string_view>

namespace prizma {

/// A snapshot of one channel's counters (publisher and subscriber fields both present; the
/// ones that do not apply stay 0).
struct ChannelCounters {
    // transport
    std::uint64_t packets_sent = 0;
    std::uint64_t packets_received = 0;
    std::uint64_t bytes_sent = 0;
    std::uint64_t bytes_received = 0;
    std::uint64_t malformed = 0;    ///< packets that failed validation (dropped)
    std::uint64_t short_sends = 0;  ///< the transport took fewer packets than offered
    // publisher
    std::uint64_t odata_sent = 0;
    std::uint64_t rdata_sent = 0;
    std::uint64_t spm_sent = 0;
    std::uint64_t ncf_sent = 0;
    std::uint64_t naks_received = 0;
    std::uint64_t back_pressured = 0;
    std::uint64_t rate_limited = 0;
    // subscriber
    std::uint64_t messages_delivered = 0;
    std::uint64_t bytes_delivered = 0;
    std::uint64_t odata_received = 0;
    std::uint64_t rdata_received = 0;
    std::uint64_t naks_sent = 0;
    std::uint64_t naks_suppressed = 0;
    std::uint64_t ncf_received = 0;
    std::uint64_t repaired = 0;
    std::uint64_t duplicates = 0;
    std::uint64_t loss_events = 0;
    std::uint64_t lost_sqns = 0;
    std::uint64_t window_full = 0;  ///< data beyond the receive window: dropped, NAKed later
    std::uint64_t sources = 0;      ///< sources currently known
};

/// One transport-specific counter (e.g. verbs `rx_ring_low`), for tools and logs.
struct NamedCounter {
    std::string_view name;  ///< a static string
    std::uint64_t value = 0;
};

}  // namespace prizma
