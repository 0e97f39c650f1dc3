// SPDX-License-Identifier: Apache-2.0
// The receiver's table of sources (docs/PROTOCOL.md §4): finding a source by TSI, claiming an
// entry and its storage within the budget, evicting the least useful source for a new one,
// expiry, and giving storage back.
#include <algorithm>
#include <new>

#include "lib/protocol/peer.hpp"

namespace prizma::protocol {

std::size_t Receiver::peer_count() const noexcept {
    return live_.size();
}

std::size_t Receiver::source_counters(std::span<PeerCounters> out) const noexcept {
    const std::size_t n = std::min(out.size(), live_.size());
    for (std::size_t i = 0; i < n; ++i) {
        out[i] = live_[i]->counters;
    }
    return n;
}

// By GSI and port, not a Tsi: a Tsi temporary built from small stores and copied as one
// 8-byte word stalled on store forwarding for every packet (a twentieth of the receiver).
Receiver::Peer* Receiver::find(const Gsi& gsi, std::uint16_t sport) noexcept {
    for (Peer* p : live_) {
        if (p->tsi.sport == sport && p->tsi.gsi == gsi) {
            return p;
        }
    }
    return nullptr;
}

// Storage for one source. Paged in (prefault): every page of the payload ring is present
// now, not faulted in at the first pass of the ring.
std::unique_ptr<Receiver::Peer> Receiver::new_peer(bool prefault) const {
    auto p = std::make_unique<Peer>();
    p->slots.resize(capacity_);
    p->wheel.bind(Peer::SlotLinks{p->slots.data()});
    p->buffers = runtime::PageBuffer(rxw_ring_bytes(cfg_), prefault);
    // Live payloads are at most one per window slot; delivered ones not yet reclaimed (stored
    // after the oldest live one, i.e. repairs) at most as many again.
    p->allocs.resize(2 * static_cast<std::size_t>(capacity_) + 2);
    return p;
}

// A new source: the storage of the first preallocated_peers was made by the constructor; an
// entry beyond them gets its storage when a source takes it, within the storage budget, and
// gives it back when its source leaves. A full table or budget makes the least useful source
// leave (evict_one) and refuses this one: its next packet finds the room.
Receiver::Peer* Receiver::find_or_add(const Gsi& gsi,
                                      std::uint16_t sport,
                                      std::int64_t now_ns) noexcept {
    if (Peer* p = find(gsi, sport)) {
        return p;
    }
    Peer* p = claim_entry(Tsi{gsi, sport}, now_ns);
    if (p == nullptr) {
        ++counters_.peers_refused;
        evict_one(now_ns);
    }
    return p;
}

Receiver::Peer* Receiver::claim_entry(const Tsi& tsi, std::int64_t now_ns) noexcept {
    std::unique_ptr<Peer>* entry = nullptr;
    for (auto& e : peers_) {  // an entry with storage first, then an empty one
        if (e && e->state == PeerState::free) {
            entry = &e;
            break;
        }
    }
    for (auto it = peers_.begin(); entry == nullptr && it != peers_.end(); ++it) {
        if (!*it && storage_used_ + peer_bytes_ <= storage_budget_) {
            try {
                *it = new_peer(false);
            } catch (const std::bad_alloc&) {
                ++counters_.alloc_failures;
                return nullptr;
            }
            storage_used_ += peer_bytes_;
            entry = &*it;
        }
    }
    if (entry == nullptr) {
        return nullptr;
    }
    Peer& p = **entry;
    auto slots = std::move(p.slots);
    auto buffers = std::move(p.buffers);
    auto allocs = std::move(p.allocs);
    if (p.used) {  // fresh storage is clear already: no pass over it at a join
        std::fill(slots.begin(), slots.end(), Peer::Slot{});
    }
    p = Peer{};
    p.used = true;
    p.slots = std::move(slots);
    p.buffers = std::move(buffers);
    p.allocs = std::move(allocs);
    p.wheel.bind(Peer::SlotLinks{p.slots.data()});
    p.wheel.reset(wheel_shift_);
    p.state = PeerState::live;
    p.tsi = tsi;
    p.counters.tsi = tsi;
    p.last_heard_ns = now_ns;
    p.joined_pending = true;
    ++counters_.peers_joined;
    live_.push_back(&p);  // capacity reserved: no allocation
    return &p;
}

// Makes one source leave for a new one: the least recently heard of those that never sent
// an SPM, else of those silent for two ambient SPM intervals (a live source sends one at
// least every interval). It leaves as an expired one does: its gaps are reported as loss and
// `left` follows; its entry is free once the application has taken those events.
void Receiver::evict_one(std::int64_t now_ns) noexcept {
    Peer* victim = nullptr;
    for (const bool confirmed : {false, true}) {
        for (Peer* p : live_) {
            if (p->expired() || p->spm_sqn.has_value() != confirmed) {
                continue;
            }
            if (confirmed && now_ns - p->last_heard_ns < 2 * cfg_.timers.ambient_spm_ns) {
                continue;
            }
            if (victim == nullptr || p->last_heard_ns < victim->last_heard_ns) {
                victim = p;
            }
        }
        if (victim != nullptr) {
            break;
        }
    }
    if (victim != nullptr) {
        ++counters_.peers_evicted;
        expire(*victim);
        victim->forget_pending = true;
    }
}

void Receiver::expire(Peer& p) noexcept {
    // Silent or evicted: after its `left` only its entry is left to free.
    p.state = p.state == PeerState::left ? PeerState::retired : PeerState::expired;
    p.give_up = true;
    lose_all_missing(p);
    p.nak_deadline = kNever;
    p.spmr_deadline = kNever;
}

// A source left: its storage goes back to the system unless it is one made at create().
void Receiver::free_storage(const Peer* p) noexcept {
    for (std::size_t i = cfg_.preallocated_peers; i < peers_.size(); ++i) {
        if (peers_[i].get() == p) {
            peers_[i].reset();
            storage_used_ -= peer_bytes_;
            return;
        }
    }
}

}  // namespace prizma::protocol
