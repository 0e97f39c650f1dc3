// SPDX-License-Identifier: Apache-2.0
// What the channels count: the public ChannelCounters, the transports' named counters and
// events, and the stats file prizma-stat reads.
#include <algorithm>
#include <array>
#include <span>
#include <vector>

#include <prizma/context.hpp>

#include "lib/pubsub/channel.hpp"
#include "lib/pubsub/context_impl.hpp"
#include "lib/stats/stats_file.hpp"

namespace prizma {
namespace detail {

ChannelCounters snapshot(const Channel& ch) {
    ChannelCounters c;
    const auto& s = ch.session->counters();
    c.packets_sent = s.tx_packets;
    c.packets_received = s.rx_packets;
    c.bytes_sent = s.tx_bytes;
    c.bytes_received = s.rx_bytes;
    c.malformed = s.malformed_total();
    c.short_sends = s.tx_short;
    if (const auto* src = ch.session->source()) {
        const auto& k = src->counters();
        c.odata_sent = k.odata_sent;
        c.rdata_sent = k.rdata_sent;
        c.spm_sent = k.spm_sent;
        c.ncf_sent = k.ncf_sent;
        c.naks_received = k.nak_received;
        c.back_pressured = k.back_pressured;
        c.rate_limited = k.rate_limited;
        c.auth_refused = s.auth_refused;
        c.naks_ignored = k.nak_ignored;
        c.naks_requester_limited = k.nak_requester_limited;
        c.naks_budget_limited = k.nak_budget_limited;
        c.naks_repeat_limited = k.nak_repeat_limited;
        c.repairs_dropped = k.repairs_dropped;
        c.parity_refused = k.nak_parity;
        const auto& f = src->flow().counters();
        c.status_received = f.status_received;
        c.status_refused = f.status_refused;
        c.flow_receivers = src->flow().counted();
        c.flow_blocked = f.blocked;
        c.flow_evicted = f.evicted;
        c.flow_left = f.left;
        c.flow_address_refused = f.address_refused;
        c.flow_laggards = f.laggards;
    }
    if (const auto* rcv = ch.session->receiver()) {
        const auto& k = rcv->counters();
        c.messages_delivered = k.apdus_delivered;
        c.bytes_delivered = k.bytes_delivered;
        c.odata_received = k.odata_received;
        c.rdata_received = k.rdata_received;
        c.naks_sent = k.nak_sent;
        c.naks_suppressed = k.nak_suppressed;
        c.ncf_received = k.ncf_received;
        c.repaired = k.repaired;
        c.duplicates = k.duplicates;
        c.loss_events = k.loss_events;
        c.lost_sqns = k.lost_sqns;
        c.window_full = k.outside_window;
        c.sources = rcv->peer_count();
        c.auth_refused = s.auth_refused;
        c.sources_refused = k.peers_refused;
        c.sources_evicted = k.peers_evicted;
        c.packets_refused = k.refused;
        c.conflicts = k.conflicts;
        c.status_sent = k.status_sent;
        c.parity_dropped = k.parity_dropped;
        c.parity_refused += k.parity_refused;
        c.fec_spms = k.fec_spms;
    }
    return c;
}
/// The channel's transport counters (and the fault decorator's, when one wraps it) into

std::size_t fill_transport_counters(const Channel& ch, std::span<NamedCounter> out) noexcept {
    return std::min(out.size(), ch.transport->named_counters(out));
}

std::vector<NamedCounter> transport_counters_of(const Channel& ch) {
    std::vector<NamedCounter> out(35);  // 32 transport counters + 3 of a fault decorator
    out.resize(fill_transport_counters(ch, out));
    return out;
}

std::vector<TransportEvent> transport_events_of(Channel* ch) {
    std::vector<TransportEvent> out;
    if (ch != nullptr) {
        out.resize(16);
        out.resize(std::min(out.size(), ch->transport->take_events(out)));
    }
    return out;
}

}  // namespace detail

// Into the stats file: no allocation (the mapping is pre-faulted); the UDP transports' counters
// cost one getsockopt(SO_MEMINFO) per socket, 10 times a second.
void Context::Impl::write_stats() noexcept {
    std::array<NamedCounter, stats::kMaxCounters> buf{};
    stats.begin();
    for (std::size_t i = 0; i < channels.size() && i < stats::kMaxChannels; ++i) {
        const detail::Channel& ch = *channels[i];
        std::size_t n = stats::flatten(detail::snapshot(ch), buf);
        n += detail::fill_transport_counters(ch, std::span(buf).subspan(n));
        stats.values(i, std::span(buf).first(n));
        if (const auto* rcv = ch.session->receiver()) {
            std::array<protocol::PeerCounters, stats::kMaxSources> src{};
            const std::size_t k = rcv->source_counters(src);
            stats.sources(i, std::span(src).first(k), rcv->peer_count());
        }
        if (const auto* src = ch.session->source(); src != nullptr && src->flow().active()) {
            std::array<protocol::FlowReceiver, stats::kMaxSources * 8> rs{};
            const std::size_t k = src->flow().receivers(rs);
            stats.receivers(i, std::span(rs).first(k), src->flow().config(), src->next_sqn(),
                            Context::now_ns());
        }
    }
    stats.end();
}

std::string_view Context::stats_file() const noexcept {
    return impl_->stats.path();
}

std::string_view Context::stats_error() const noexcept {
    return impl_->stats_error;
}

ChannelCounters Context::counters() const noexcept {
    ChannelCounters sum;
    for (const auto& ch : impl_->channels) {
        sum += detail::snapshot(*ch);
    }
    return sum;
}

}  // namespace prizma
