// SPDX-License-Identifier: Apache-2.0
#include "transports/memory/memory_transport.hpp"

#include <algorithm>
#include <cstring>

namespace prizma::memory {

MemoryNetwork::~MemoryNetwork() {
    for (auto* t : endpoints_) {
        t->net_ = nullptr;
    }
}

std::unique_ptr<MemoryTransport> MemoryNetwork::attach() {
    std::unique_ptr<MemoryTransport> t(new MemoryTransport(*this, next_id_++));
    endpoints_.push_back(t.get());
    return t;
}

void MemoryNetwork::detach(MemoryTransport* t) noexcept {
    std::erase(endpoints_, t);
}

void MemoryNetwork::deliver(std::uint32_t from, const TxPacket& p) noexcept {
    if (p.route == Route::downstream) {
        for (auto* t : endpoints_) {
            if (!cfg_.loopback && t->id_ == from) {
                continue;
            }
            if (!t->push(from, p)) {
                ++overflow_;
            }
        }
        return;
    }
    if (p.to.family != kFamily) {
        return;  // not an address of this network: nowhere to go
    }
    std::uint32_t id = 0;
    std::memcpy(&id, p.to.addr.data(), sizeof id);
    for (auto* t : endpoints_) {
        if (t->id_ == id) {
            if (!t->push(from, p)) {
                ++overflow_;
            }
            return;
        }
    }
}

MemoryTransport::MemoryTransport(MemoryNetwork& net, std::uint32_t id)
    : net_(&net), id_(id), stride_(net.config().max_datagram) {
    const std::size_t n = net.config().ring_slots;
    ring_.resize(n * stride_);
    lengths_.resize(n);
    senders_.resize(n);
}

MemoryTransport::~MemoryTransport() {
    if (net_ != nullptr) {
        net_->detach(this);
    }
}

TransportCaps MemoryTransport::caps() const noexcept {
    return TransportCaps{stride_, net_ != nullptr ? net_->config().max_tx_batch : 64, 0};
}

Endpoint MemoryTransport::address_of(std::uint32_t id) noexcept {
    Endpoint e;
    e.family = kFamily;
    std::memcpy(e.addr.data(), &id, sizeof id);
    return e;
}

Endpoint MemoryTransport::address() const noexcept {
    return address_of(id_);
}

bool MemoryTransport::push(std::uint32_t from, const TxPacket& p) noexcept {
    const std::size_t len = p.header.size() + p.payload.size();
    const std::size_t n = lengths_.size();
    if (count_ == n || len > stride_) {
        return false;
    }
    const std::size_t idx = (head_ + count_) % n;
    std::byte* dst = ring_.data() + idx * stride_;
    if (!p.header.empty()) {
        std::memcpy(dst, p.header.data(), p.header.size());
    }
    if (!p.payload.empty()) {
        std::memcpy(dst + p.header.size(), p.payload.data(), p.payload.size());
    }
    lengths_[idx] = static_cast<std::uint32_t>(len);
    senders_[idx] = from;
    ++count_;
    return true;
}

Result<std::size_t> MemoryTransport::send_batch(std::span<const TxPacket> packets) noexcept {
    if (net_ == nullptr) {
        return Errc::closed;
    }
    for (const auto& p : packets) {
        net_->deliver(id_, p);
    }
    return packets.size();
}

Result<std::size_t> MemoryTransport::poll_rx(std::span<RxPacket> out) noexcept {
    const std::size_t n = lengths_.size();
    // Lent buffers stay untouched until release_rx; hand out only a contiguous prefix.
    const std::size_t k = std::min({out.size(), count_, n - head_});
    for (std::size_t i = 0; i < k; ++i) {
        const std::size_t idx = head_ + i;
        out[i] = RxPacket{std::span<const std::byte>(ring_.data() + idx * stride_, lengths_[idx]),
                          address_of(senders_[idx]), 0};
    }
    lent_ = k;
    return k;
}

void MemoryTransport::release_rx(std::size_t count) noexcept {
    count = std::min(count, lent_);
    head_ = (head_ + count) % lengths_.size();
    count_ -= count;
    lent_ = 0;
}

}  // namespace prizma::memory
