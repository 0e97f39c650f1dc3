// SPDX-License-Identifier: Apache-2.0
#include "transports/verbs/ah_cache.hpp"

#include <algorithm>
#include <utility>

namespace prizma::verbs {

AhCache::Note AhCache::touch(Slot& s, const policy::SourceRoute& route, bool infiniband) noexcept {
    s.last_use = ++clock_;
    if (policy::route_changed(s.route, route, infiniband)) {
        // The source moved (a new LID or SL after an SM sweep): its cached handle would send
        // NAKs nowhere. Dropped; the next datagram from it requests a fresh one.
        s.state.store(State::evict, std::memory_order_release);
        return {Noted::route_changed, true};
    }
    return {Noted::known, false};
}

AhCache::Note AhCache::request(const Endpoint& peer, const policy::SourceRoute& route) noexcept {
    std::size_t lru = kSlots;
    for (std::size_t i = 0; i < kSlots; ++i) {
        Slot& s = slots_[i];
        const State st = s.state.load(std::memory_order_acquire);
        if (st == State::free) {
            s.peer = peer;
            s.route = route;
            s.last_use = ++clock_;
            s.state.store(State::requested, std::memory_order_release);
            high_water_ = std::max(high_water_, i + 1);
            last_ = i;
            return {Noted::requested, true};
        }
        if (st != State::evict && (lru == kSlots || s.last_use < slots_[lru].last_use)) {
            lru = i;
        }
    }
    // Full: give up the least recently used peer's slot; this one gets a slot when it is seen
    // again (after the control thread freed that one).
    if (lru == kSlots) {
        return {Noted::table_full, false};
    }
    slots_[lru].state.store(State::evict, std::memory_order_release);
    return {Noted::table_full, true};
}

bool AhCache::forget(const Endpoint& peer) noexcept {
    const std::size_t i = find(peer);
    if (i == kSlots) {
        return false;
    }
    slots_[i].state.store(State::evict, std::memory_order_release);
    return true;
}

std::size_t AhCache::ready_count() const noexcept {
    std::size_t used = 0;
    for (std::size_t i = 0; i < high_water_; ++i) {
        used += slots_[i].state.load(std::memory_order_relaxed) == State::ready ? 1U : 0U;
    }
    return used;
}

void AhCache::make(
    Slot& s, State& st, Clock::time_point now, Maker& maker, Serviced& out) noexcept {
    Made m = maker.make(s.peer, s.route, s.path);
    if (m.hold != nullptr) {
        s.handle.store(m.handle, std::memory_order_relaxed);
        s.hold = std::move(m.hold);
        s.failures = 0;
        if (s.state.compare_exchange_strong(st, State::ready, std::memory_order_acq_rel)) {
            ++(m.shared ? out.shared : out.created);
            maker.published(m.shared);
            st = State::ready;
            return;
        }
        // Lost to an eviction (st is now `evict`): never published, so the owner never read
        // it (it reads a handle only after `ready`). Let go at once, not retired.
        s.handle.store(nullptr, std::memory_order_relaxed);
        s.hold.reset();
        return;
    }
    ++out.failed;
    maker.failed();
    ++s.failures;
    // 10 ms, doubling, at most 10 s between attempts
    s.retry_at =
        now + std::chrono::milliseconds(10LL << std::min<std::uint32_t>(s.failures - 1, 10));
    if (s.state.compare_exchange_strong(st, State::failed, std::memory_order_acq_rel)) {
        st = State::failed;
    }
}

void AhCache::reclaim(Serviced& out) noexcept {
    const std::uint64_t passed = owner_epoch_.load(std::memory_order_acquire);
    while (retired_count_ != 0 && retired_[retired_head_].tag <= passed) {
        retired_[retired_head_].hold.reset();  // the handle goes with its last holder
        retired_head_ = (retired_head_ + 1) % kRetired;
        --retired_count_;
        ++out.released;
    }
}

AhCache::Serviced AhCache::service(Clock::time_point now, Maker& maker) noexcept {
    Serviced out;
    reclaim(out);
    // The tag of what this round retires: published after the slots are freed, so an owner
    // that echoes it has seen them evicted or free (not `ready` with the old handle).
    const std::uint64_t tag = retire_epoch_.load(std::memory_order_relaxed) + 1;
    auto next = Clock::time_point::max();
    for (Slot& s : slots_) {
        State st = s.state.load(std::memory_order_acquire);
        if (st == State::requested || (st == State::failed && now >= s.retry_at)) {
            make(s, st, now, maker, out);  // st: ready, failed, or evict (lost a race)
        }
        if (st == State::failed) {
            next = std::min(next, s.retry_at);
        }
        if (st == State::evict) {
            if (s.hold != nullptr) {
                // The owner may have read this handle before the eviction: retired, not
                // destroyed. No room: the slot keeps it and stays evicted (the safe side).
                if (retired_count_ == kRetired) {
                    ++out.deferred;
                    continue;
                }
                Retired& r = retired_[(retired_head_ + retired_count_) % kRetired];
                r.hold = std::move(s.hold);
                r.tag = tag;
                ++retired_count_;
                ++out.retired;
            }
            s.handle.store(nullptr, std::memory_order_relaxed);
            s.failures = 0;
            s.path = PathMemo{};
            s.state.store(State::free, std::memory_order_release);
            ++out.freed;
        }
    }
    if (out.retired != 0) {
        retire_epoch_.store(tag, std::memory_order_release);
    }
    if (next != Clock::time_point::max()) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
        out.wait_ms = static_cast<int>(std::clamp<long long>(ms + 1, 1, 10000));
    }
    if (retired_count_ != 0 || out.deferred != 0) {
        // Handles wait on the owner's next quiescent point: look again soon.
        out.wait_ms = out.wait_ms < 0 ? kReclaimWaitMs : std::min(out.wait_ms, kReclaimWaitMs);
    }
    return out;
}

std::size_t AhCache::flush() noexcept {
    std::size_t flushed = 0;
    for (Slot& s : slots_) {
        State st = s.state.load(std::memory_order_acquire);
        while (st == State::requested || st == State::ready || st == State::failed) {
            if (s.state.compare_exchange_weak(st, State::evict, std::memory_order_acq_rel)) {
                ++flushed;
                break;
            }
        }
    }
    return flushed;
}

void AhCache::drop_handles() noexcept {
    for (Slot& s : slots_) {
        s.handle.store(nullptr, std::memory_order_relaxed);
        s.hold.reset();  // the handle goes when no other channel holds it
    }
    for (; retired_count_ != 0; --retired_count_) {
        retired_[retired_head_].hold.reset();
        retired_head_ = (retired_head_ + 1) % kRetired;
    }
}

}  // namespace prizma::verbs
