// SPDX-License-Identifier: Apache-2.0
// Publisher and Claim: the sending end of a channel.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <prizma/context.hpp>

#include "lib/pubsub/channel.hpp"

namespace prizma {

namespace {

/// The time offered data is stamped with. A clock read costs ~40 ns on this kind of machine,
/// a sixth of a 100-byte message's whole cost at 3 M msgs/s, so the offers that fill one
/// send batch share the time read at its first. A source whose rate limit or retention
/// needs exact times reads the clock every time. The stamp otherwise only schedules the
/// heartbeat SPMs after the data, which leave with the batch, at most a batch later.
std::int64_t offer_stamp(detail::Channel& ch) noexcept {
    if (ch.session->tx_batch_start() || ch.session->source()->needs_exact_time()) {
        ch.stamp_ns = Context::now_ns();
    }
    return ch.stamp_ns;
}

}  // namespace

Result<Sqn> Publisher::offer(std::span<const std::byte> message) noexcept {
    if (ch_ == nullptr) [[unlikely]] {
        return Errc::closed;  // removed from its Context
    }
    // Queued in the channel's batch: it leaves at the next Context::poll() or when the batch
    // is full, so bursts go out in one sendmmsg / GSO send.
    ch_->owner->check("Publisher::offer");
    auto r = ch_->session->source()->send(message, offer_stamp(*ch_), *ch_->session);
    if (!r) {
        return r.error();
    }
    return *r;
}

Result<Claim> Publisher::try_claim(std::size_t n) noexcept {
    if (ch_ == nullptr) [[unlikely]] {
        return Errc::closed;
    }
    ch_->owner->check("Publisher::try_claim");
    auto r = ch_->session->source()->claim(n, offer_stamp(*ch_));
    if (!r) {
        return r.error();
    }
    return Claim(ch_, *r);
}

void Publisher::flush() noexcept {
    if (ch_ == nullptr) {
        return;
    }
    ch_->owner->check("Publisher::flush");
    ch_->session->flush();
}

void Publisher::close() noexcept {
    if (ch_ == nullptr) {
        return;
    }
    ch_->owner->check("Publisher::close");
    ch_->session->source()->close(Context::now_ns(), *ch_->session);
    ch_->session->flush();
}

bool Publisher::quiet() const noexcept {
    return ch_ != nullptr && ch_->session->source()->quiet(Context::now_ns());
}

std::chrono::nanoseconds Publisher::linger_cap() const noexcept {
    return std::chrono::nanoseconds(ch_ != nullptr ? ch_->session->source()->linger_cap_ns() : 0);
}

std::size_t Publisher::max_message_size() const noexcept {
    return ch_ != nullptr ? ch_->session->source()->max_apdu() : 0;
}
std::size_t Publisher::max_packet_payload() const noexcept {
    return ch_ != nullptr ? ch_->session->source()->max_tsdu() : 0;
}
Tsi Publisher::tsi() const noexcept {
    return ch_ != nullptr ? ch_->session->source()->config().tsi : Tsi{};
}
ChannelCounters Publisher::counters() const noexcept {
    return ch_ != nullptr ? detail::snapshot(*ch_) : ChannelCounters{};
}
std::vector<FlowReceiverInfo> Publisher::flow_receivers() const {
    std::vector<FlowReceiverInfo> out;
    if (ch_ == nullptr) {
        return out;
    }
    const auto* src = ch_->session->source();
    const auto& flow = src->flow();
    std::vector<protocol::FlowReceiver> rs(flow.config().max_receivers);
    rs.resize(flow.receivers(rs));
    const std::int64_t now = Context::now_ns();
    for (const auto& r : rs) {
        FlowReceiverInfo i;
        i.id = r.id;
        i.tag = r.tag;
        i.consumed = r.consumed;
        i.window = r.window;
        i.lag = src->next_sqn().value - r.consumed.value;
        i.since_heard = std::chrono::nanoseconds(now - r.last_heard_ns);
        i.counted = r.admitted
                    && (flow.config().strategy != protocol::FlowStrategy::tagged
                        || r.tag == flow.config().tag);
        out.push_back(i);
    }
    return out;
}

std::vector<TransportEvent> Publisher::transport_events() {
    return detail::transport_events_of(ch_);
}

std::string Publisher::transport_description() const {
    return ch_ != nullptr ? ch_->transport->description() : std::string();
}

std::vector<NamedCounter> Publisher::transport_counters() const {
    return ch_ != nullptr ? detail::transport_counters_of(*ch_) : std::vector<NamedCounter>{};
}

Claim& Claim::operator=(Claim&& o) noexcept {
    if (this != &o) {
        if (ch_ != nullptr) {
            ch_->session->source()->abort_claim();
        }
        ch_ = std::exchange(o.ch_, nullptr);
        buf_ = o.buf_;
    }
    return *this;
}

Claim::~Claim() {
    if (ch_ != nullptr) {
        ch_->session->source()->abort_claim();
    }
}

Result<Sqn> Claim::commit(std::size_t used) noexcept {
    if (ch_ == nullptr) {
        return Errc::invalid_argument;
    }
    auto* ch = std::exchange(ch_, nullptr);
    ch->owner->check("Claim::commit");
    auto r = ch->session->source()->commit(used, offer_stamp(*ch), *ch->session);
    ch->session->flush();
    if (!r) {
        return r.error();
    }
    return *r;
}

}  // namespace prizma
