// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
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
    std::uint64_t malformed = 0;     ///< packets that failed validation (dropped)
    std::uint64_t short_sends = 0;   ///< the transport took fewer packets than offered
    std::uint64_t auth_refused = 0;  ///< packets without a valid MAC (authenticated channels)
    // publisher
    std::uint64_t odata_sent = 0;
    std::uint64_t rdata_sent = 0;
    std::uint64_t spm_sent = 0;
    std::uint64_t ncf_sent = 0;
    std::uint64_t naks_received = 0;
    std::uint64_t back_pressured = 0;
    std::uint64_t rate_limited = 0;
    std::uint64_t naks_ignored = 0;            ///< NAKed sqns not repaired: over a limit or budget
    std::uint64_t naks_requester_limited = 0;  ///< ... over the NAKing host's share
    std::uint64_t naks_budget_limited = 0;     ///< ... over the publisher's repair budget
    std::uint64_t naks_repeat_limited = 0;     ///< ... repaired max_repairs_per_sqn times
    std::uint64_t repairs_dropped = 0;         ///< queued repairs dropped (evicted, over budget)
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
    std::uint64_t window_full = 0;      ///< data beyond the receive window: dropped, NAKed later
    std::uint64_t sources = 0;          ///< sources currently known
    std::uint64_t sources_refused = 0;  ///< new sources refused (table or memory full)
    std::uint64_t sources_evicted = 0;  ///< sources dropped to make room for a new one
    std::uint64_t packets_refused = 0;  ///< packets moving a source's state too far, or
                                        ///< from another sender than its pinned one
    std::uint64_t conflicts = 0;        ///< same sqn seen again with different bytes
    // FEC (RFC 3208 §11.8) is not implemented: parity is never taken for data.
    std::uint64_t parity_dropped = 0;  ///< parity ODATA/RDATA received and dropped
    std::uint64_t parity_refused = 0;  ///< parity NAKs and NCFs refused (either role)
    std::uint64_t fec_spms = 0;        ///< SPMs received that announce FEC (OPT_PARITY_PRM)
    // Flow control (docs/PROTOCOL.md, "Flow control"); status_sent is a subscriber's, the
    // rest a publisher's.
    std::uint64_t status_sent = 0;      ///< status messages sent to sources
    std::uint64_t status_received = 0;  ///< status messages taken
    std::uint64_t status_refused = 0;   ///< from another address for a known id, table full
    std::uint64_t flow_receivers = 0;   ///< receivers counted in the send limit now
    std::uint64_t flow_blocked = 0;     ///< offers refused: a receiver's window was full
    std::uint64_t flow_evicted = 0;     ///< receivers dropped: silent or stalled for the timeout
    std::uint64_t flow_left = 0;        ///< receivers that said they leave
    std::uint64_t flow_address_refused = 0;  ///< new receivers refused: their address had
                                             ///< max_receivers_per_address (in status_refused)
    std::uint64_t flow_laggards = 0;  ///< receivers evicted by the laggard rule (in flow_evicted)
};

/// One field of ChannelCounters: its name (as prizma-stat, stats files and JSON show it) and
/// its member.
struct CounterField {
    std::string_view name;
    std::uint64_t ChannelCounters::*member;
};

/// Every field of ChannelCounters, in declaration order: the one list that sums, stats files,
/// prizma-stat and the tools use. A field added to the struct and not here fails to compile.
inline constexpr std::array<CounterField, 48> kChannelCounterFields{{
    {"packets_sent", &ChannelCounters::packets_sent},
    {"packets_received", &ChannelCounters::packets_received},
    {"bytes_sent", &ChannelCounters::bytes_sent},
    {"bytes_received", &ChannelCounters::bytes_received},
    {"malformed", &ChannelCounters::malformed},
    {"short_sends", &ChannelCounters::short_sends},
    {"auth_refused", &ChannelCounters::auth_refused},
    {"odata_sent", &ChannelCounters::odata_sent},
    {"rdata_sent", &ChannelCounters::rdata_sent},
    {"spm_sent", &ChannelCounters::spm_sent},
    {"ncf_sent", &ChannelCounters::ncf_sent},
    {"naks_received", &ChannelCounters::naks_received},
    {"back_pressured", &ChannelCounters::back_pressured},
    {"rate_limited", &ChannelCounters::rate_limited},
    {"naks_ignored", &ChannelCounters::naks_ignored},
    {"naks_requester_limited", &ChannelCounters::naks_requester_limited},
    {"naks_budget_limited", &ChannelCounters::naks_budget_limited},
    {"naks_repeat_limited", &ChannelCounters::naks_repeat_limited},
    {"repairs_dropped", &ChannelCounters::repairs_dropped},
    {"messages_delivered", &ChannelCounters::messages_delivered},
    {"bytes_delivered", &ChannelCounters::bytes_delivered},
    {"odata_received", &ChannelCounters::odata_received},
    {"rdata_received", &ChannelCounters::rdata_received},
    {"naks_sent", &ChannelCounters::naks_sent},
    {"naks_suppressed", &ChannelCounters::naks_suppressed},
    {"ncf_received", &ChannelCounters::ncf_received},
    {"repaired", &ChannelCounters::repaired},
    {"duplicates", &ChannelCounters::duplicates},
    {"loss_events", &ChannelCounters::loss_events},
    {"lost_sqns", &ChannelCounters::lost_sqns},
    {"window_full", &ChannelCounters::window_full},
    {"sources", &ChannelCounters::sources},
    {"sources_refused", &ChannelCounters::sources_refused},
    {"sources_evicted", &ChannelCounters::sources_evicted},
    {"packets_refused", &ChannelCounters::packets_refused},
    {"conflicts", &ChannelCounters::conflicts},
    {"parity_dropped", &ChannelCounters::parity_dropped},
    {"parity_refused", &ChannelCounters::parity_refused},
    {"fec_spms", &ChannelCounters::fec_spms},
    {"status_sent", &ChannelCounters::status_sent},
    {"status_received", &ChannelCounters::status_received},
    {"status_refused", &ChannelCounters::status_refused},
    {"flow_receivers", &ChannelCounters::flow_receivers},
    {"flow_blocked", &ChannelCounters::flow_blocked},
    {"flow_evicted", &ChannelCounters::flow_evicted},
    {"flow_left", &ChannelCounters::flow_left},
    {"flow_address_refused", &ChannelCounters::flow_address_refused},
    {"flow_laggards", &ChannelCounters::flow_laggards},
}};
static_assert(sizeof(ChannelCounters) == kChannelCounterFields.size() * sizeof(std::uint64_t),
              "every ChannelCounters field must be listed in kChannelCounterFields");

/// Field by field sum (Context::counters() of several channels).
constexpr ChannelCounters& operator+=(ChannelCounters& to, const ChannelCounters& from) noexcept {
    for (const auto& f : kChannelCounterFields) {
        to.*f.member += from.*f.member;
    }
    return to;
}

/// One transport-specific counter (e.g. verbs `rx_ring_low`), for tools and logs.
struct NamedCounter {
    std::string_view name;  ///< a static string
    std::uint64_t value = 0;
};

}  // namespace prizma
