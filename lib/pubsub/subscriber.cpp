// SPDX-License-Identifier: Apache-2.0
// Subscriber: the receiving end of a channel.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <prizma/context.hpp>

#include "lib/pubsub/channel.hpp"

namespace prizma {

std::string Subscriber::transport_description() const {
    return ch_ != nullptr ? ch_->transport->description() : std::string();
}

std::vector<TransportEvent> Subscriber::transport_events() {
    return detail::transport_events_of(ch_);
}

bool Subscriber::next(Message& out) noexcept {
    if (ch_ == nullptr) [[unlikely]] {
        return false;  // removed from its Context
    }
    ch_->owner->check("Subscriber::poll");
    protocol::Event ev;
    if (!ch_->session->receiver()->next_event(ev)) {
        return false;
    }
    // The payload span through two registers: next_event() stored its pointer and size
    // separately, and the 16-byte load the compiler merges them into stalls on store
    // forwarding (three quarters of this function's time at 5 M msgs/s).
    // Likewise sqn and count (two 4-byte stores, one merged 8-byte load).
    const std::byte* data = ev.payload.data();
    std::size_t size = ev.payload.size();
    std::uint32_t sqn = ev.sqn.value;
    std::uint32_t count = ev.count;
    // NOLINTNEXTLINE(hicpp-no-assembler): an empty compiler barrier, no instruction
    asm("" : "+r"(data), "+r"(size), "+r"(sqn), "+r"(count));
    out.kind = static_cast<MessageKind>(ev.kind);
    out.tsi = ev.tsi;
    out.sqn = Sqn{sqn};
    out.count = count;
    out.payload = std::span<const std::byte>(data, size);
    out.received = std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::nanoseconds(ev.rx_ns)));
    return true;
}

std::string Subscriber::local_address() const {
    return ch_ != nullptr ? ch_->transport->local_address_text() : std::string();
}

ChannelCounters Subscriber::counters() const noexcept {
    return ch_ != nullptr ? detail::snapshot(*ch_) : ChannelCounters{};
}

std::vector<NamedCounter> Subscriber::transport_counters() const {
    return ch_ != nullptr ? detail::transport_counters_of(*ch_) : std::vector<NamedCounter>{};
}

}  // namespace prizma
