// SPDX-License-Identifier: Apache-2.0
#include "transports/memory/lossy_transport.hpp"

#include <algorithm>
#include <cstring>

namespace prizma::memory {
namespace {

// Type and sqn of a PGM packet, without full validation (the decorator sits below the codec).
bool peek(std::span<const std::byte> p, std::uint8_t& type, std::uint32_t& sqn) noexcept {
    if (p.size() < 20) {
        return false;
    }
    type = std::to_integer<std::uint8_t>(p[4]);
    sqn = (std::to_integer<std::uint32_t>(p[16]) << 24U)
          | (std::to_integer<std::uint32_t>(p[17]) << 16U)
          | (std::to_integer<std::uint32_t>(p[18]) << 8U) | std::to_integer<std::uint32_t>(p[19]);
    return true;
}

}  // namespace

LossyTransport::LossyTransport(Transport& inner, Config cfg, std::function<std::int64_t()> clock)
    : inner_(inner),
      cfg_(std::move(cfg)),
      clock_(std::move(clock)),
      rng_(cfg_.seed, 1),
      stride_(inner.caps().rx_datagram()) {
    pool_.resize(cfg_.held_slots * stride_);
    free_.reserve(cfg_.held_slots);
    for (std::size_t i = cfg_.held_slots; i > 0; --i) {
        free_.push_back(static_cast<std::uint32_t>(i - 1));
    }
    held_.reserve(cfg_.held_slots);
    inner_rx_.resize(64);
    lent_slots_.reserve(cfg_.held_slots);
    tx_keep_.reserve(256);
}

LossyTransport::LossyTransport(std::unique_ptr<Transport> inner,
                               Config cfg,
                               std::function<std::int64_t()> clock)
    : LossyTransport(*inner, std::move(cfg), std::move(clock)) {
    owned_ = std::move(inner);
}

LossyTransport::~LossyTransport() = default;

std::size_t LossyTransport::named_counters(std::span<NamedCounter> out) const noexcept {
    const std::size_t fault = out.size() >= 3 ? 3 : 0;  // room kept for them
    const auto room = out.first(out.size() - fault);
    const std::size_t has = inner_.named_counters(room);
    std::size_t n = std::min(room.size(), has);
    if (fault != 0) {
        out[n++] = {"fault_dropped", stats_.dropped};
        out[n++] = {"fault_duplicated", stats_.duplicated};
        out[n++] = {"fault_reordered", stats_.reordered};
    }
    return has + 3;
}

double LossyTransport::uniform() noexcept {
    return rng_.uniform();
}

LossyTransport::Verdict LossyTransport::judge(std::span<const std::byte> pkt) noexcept {
    ++stats_.seen;
    std::uint8_t type = 0;
    std::uint32_t sqn = 0;
    if (!peek(pkt, type, sqn)) {
        return Verdict::pass;
    }
    for (auto& r : cfg_.drop_rules) {
        if (r.times != 0 && r.type == type && r.sqn == sqn) {
            --r.times;
            ++stats_.dropped;
            return Verdict::drop;
        }
    }
    if (type >= 32 || ((cfg_.type_mask >> type) & 1U) == 0) {
        return Verdict::pass;
    }
    // Always draw three numbers so a seed gives the same pattern whatever the probabilities.
    const double a = uniform();
    const double b = uniform();
    const double c = uniform();
    if (a < cfg_.drop) {
        ++stats_.dropped;
        return Verdict::drop;
    }
    if (b < cfg_.duplicate) {
        ++stats_.duplicated;
        return Verdict::duplicate;
    }
    if (c < cfg_.reorder && clock_) {
        ++stats_.reordered;
        return Verdict::reorder;
    }
    return Verdict::pass;
}

bool LossyTransport::hold(std::span<const std::byte> data,
                          const Endpoint& from,
                          std::int64_t ready_ns) noexcept {
    if (free_.empty() || data.size() > stride_) {
        ++stats_.overflow;
        return false;
    }
    const std::uint32_t slot = free_.back();
    free_.pop_back();
    std::memcpy(pool_.data() + slot * stride_, data.data(), data.size());
    held_.push_back(Held{ready_ns, order_++, slot, static_cast<std::uint32_t>(data.size()), from});
    return true;
}

Result<std::size_t> LossyTransport::send_batch(std::span<const TxPacket> packets) noexcept {
    if (!cfg_.on_send) {
        return inner_.send_batch(packets);
    }
    tx_keep_.clear();
    for (const auto& p : packets) {
        if (!p.payload.empty()) {
            tx_keep_.push_back(p);  // gathered packets: judged by header only
            continue;
        }
        switch (judge(p.header)) {
            case Verdict::drop: break;
            case Verdict::duplicate:
                tx_keep_.push_back(p);
                tx_keep_.push_back(p);
                break;
            default: tx_keep_.push_back(p); break;
        }
    }
    auto r = inner_.send_batch(tx_keep_);
    if (!r) {
        return r;
    }
    return packets.size();
}

Result<std::size_t> LossyTransport::poll_rx(std::span<RxPacket> out) noexcept {
    const std::int64_t t = now();
    if (!cfg_.on_send) {
        auto r = inner_.poll_rx(inner_rx_);
        if (!r) {
            return r;
        }
        for (std::size_t i = 0; i < *r; ++i) {
            const auto& rx = inner_rx_[i];
            const Verdict v = judge(rx.data);
            if (v == Verdict::drop) {
                continue;
            }
            const std::int64_t ready =
                t + cfg_.delay_ns + (v == Verdict::reorder ? cfg_.reorder_ns : 0);
            if (hold(rx.data, rx.from, ready) && v == Verdict::duplicate) {
                (void)hold(rx.data, rx.from, ready);
            }
        }
        inner_.release_rx(*r);
    } else {
        auto r = inner_.poll_rx(inner_rx_);
        if (!r) {
            return r;
        }
        for (std::size_t i = 0; i < *r; ++i) {
            (void)hold(inner_rx_[i].data, inner_rx_[i].from, t);
        }
        inner_.release_rx(*r);
    }
    // Hand out what is ready, oldest ready time first, arrival order among equals.
    std::sort(held_.begin(), held_.end(), [](const Held& x, const Held& y) {
        return x.ready_ns != y.ready_ns ? x.ready_ns < y.ready_ns : x.order < y.order;
    });
    std::size_t n = 0;
    lent_slots_.clear();
    while (n < out.size() && n < held_.size() && held_[n].ready_ns <= t) {
        const Held& h = held_[n];
        out[n] =
            RxPacket{std::span<const std::byte>(pool_.data() + h.slot * stride_, h.len), h.from, 0};
        lent_slots_.push_back(h.slot);
        ++n;
    }
    return n;
}

void LossyTransport::release_rx(std::size_t count) noexcept {
    count = std::min(count, lent_slots_.size());
    for (std::size_t i = 0; i < count; ++i) {
        free_.push_back(lent_slots_[i]);
    }
    held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(count));
    lent_slots_.clear();
}

}  // namespace prizma::memory
