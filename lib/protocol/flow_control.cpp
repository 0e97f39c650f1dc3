// SPDX-License-Identifier: Apache-2.0
#include "lib/protocol/flow_control.hpp"

#include <algorithm>

namespace prizma::protocol {
namespace {

/// Signed distance from `a` to `b` in sequence space (positive: b after a).
std::int64_t gap(Sqn a, Sqn b) noexcept {
    return static_cast<std::int32_t>(b.value - a.value);
}

/// Status windows beyond this are taken as this (more than any receive window can be).
constexpr std::uint32_t kMaxWindow = 1U << 24U;

/// Longest bench: timeout_ns × 2^kMaxStrikes.
constexpr std::uint32_t kMaxStrikes = 6;

}  // namespace

const FlowLimiter::Bench* FlowLimiter::benched(std::uint16_t family,
                                               const std::array<std::uint8_t, 16>& addr,
                                               std::int64_t now_ns) const noexcept {
    for (const Bench& b : benches_) {
        if (b.strikes > 0 && b.family == family && b.addr == addr) {
            return now_ns < b.until_ns ? &b : nullptr;
        }
    }
    return nullptr;
}

void FlowLimiter::bench(const Entry& e, std::int64_t now_ns) noexcept {
    // Its own slot (strikes remembered), else a free one, else the one whose bench ends first.
    Bench* slot = nullptr;
    for (Bench& b : benches_) {
        if (b.strikes > 0 && b.family == e.family && b.addr == e.addr) {
            slot = &b;
            break;
        }
    }
    if (slot == nullptr) {
        for (Bench& b : benches_) {
            if (slot == nullptr
                || (slot->strikes > 0 && (b.strikes == 0 || b.until_ns < slot->until_ns))) {
                slot = &b;
            }
        }
        if (slot == nullptr) {
            return;
        }
        *slot = Bench{e.addr, e.family, 0, 0};
    }
    slot->strikes = std::min(slot->strikes + 1, kMaxStrikes + 1);
    slot->until_ns = now_ns + (cfg_.timeout_ns << (slot->strikes - 1));
}

void FlowLimiter::account(std::int64_t now_ns) noexcept {
    const std::int64_t from = accounted_ns_ < 0 ? now_ns : accounted_ns_;
    accounted_ns_ = now_ns;
    const std::int64_t dt = std::max<std::int64_t>(now_ns - from, 0);
    // Held: a send was refused in [from, now) (statuses come every status_interval; a limit
    // that creeps on by a few packets each time still leaves the publisher waiting).
    const std::int64_t held = blocked_in_interval_ || blocked_since_ns_ >= 0 ? dt : 0;
    blocked_in_interval_ = false;
    for (Entry& e : table_) {
        if (!e.used) {
            continue;
        }
        e.held_ns = &e == holder_ ? e.held_ns + held - (dt - held) : e.held_ns - dt;
        e.held_ns = std::max<std::int64_t>(e.held_ns, 0);
    }
}

FlowLimiter::FlowLimiter(const FlowConfig& cfg) : cfg_(cfg) {
    if (active()) {
        table_.resize(std::max<std::uint32_t>(cfg.max_receivers, 1));
        benches_.resize(table_.size());
    }
    gate_closed_ = cfg.strategy == FlowStrategy::tagged && cfg.min_group > 0;
}

void FlowLimiter::on_status(const pgm::StatusInfo& st,
                            const Endpoint& from,
                            Sqn next,
                            std::uint32_t txw,
                            std::int64_t now_ns) noexcept {
    if (!active()) {
        return;
    }
    // A receiver cannot have consumed what was not sent, and a zero window is no receiver.
    if (st.window == 0 || gap(st.consumed, next) < 0) {
        ++counters_.status_refused;
        return;
    }
    Entry* e = nullptr;
    Entry* free_entry = nullptr;
    for (Entry& x : table_) {
        if (!x.used) {
            free_entry = free_entry != nullptr ? free_entry : &x;
        } else if (x.r.id == st.receiver_id) {
            e = &x;
            break;
        }
    }
    if (e != nullptr && !same_address(*e, from)) {
        ++counters_.status_refused;  // the id is bound to the address it first came from
        return;
    }
    if (st.leaving) {
        if (e != nullptr) {
            ++counters_.left;
            drop(*e);
            recompute(next, txw);
        }
        return;
    }
    account(now_ns);
    if (e == nullptr) {
        const auto same = std::count_if(table_.begin(), table_.end(), [&](const Entry& x) {
            return x.used && same_address(x, from);
        });
        if (free_entry == nullptr || static_cast<std::uint32_t>(same) >= cfg_.max_per_address) {
            ++counters_.status_refused;  // table full, or this address's share of it
            counters_.address_refused += free_entry != nullptr ? 1U : 0U;
            return;
        }
        e = free_entry;
        *e = Entry{};
        e->used = true;
        e->r.id = st.receiver_id;
        e->r.consumed = st.consumed;
        e->family = from.family;
        e->addr = from.addr;
        e->progress_ns = now_ns;
        if (next_sweep_ns_ == INT64_MAX) {
            next_sweep_ns_ = now_ns + std::max<std::int64_t>(cfg_.timeout_ns / 4, 1);
        }
    }
    ++counters_.status_received;
    e->r.last_heard_ns = now_ns;
    e->r.tag = st.tag;
    e->r.window = std::min(st.window, kMaxWindow);
    if (gap(e->r.consumed, st.consumed) > 0) {  // an older, reordered status moves nothing
        e->r.consumed = st.consumed;
        e->progress_ns = now_ns;
    }
    if (!e->r.admitted) {
        // Counted only once its window reaches what the source sends now: a late joiner far
        // behind would stop everyone else until it caught up. A benched address waits.
        if (gap(next, reach(*e, txw)) >= 0 && benched(e->family, e->addr, now_ns) == nullptr) {
            e->r.admitted = true;
            ++admitted_;
        } else {
            ++counters_.not_admitted;
        }
    }
    recompute(next, txw);
}

void FlowLimiter::drop(Entry& e) noexcept {
    if (e.r.admitted) {
        --admitted_;
    }
    e = Entry{};
}

void FlowLimiter::recompute(Sqn next, std::uint32_t txw) noexcept {
    bool any = false;
    std::int64_t room = 0;
    std::size_t group = 0;
    std::size_t at_min = 0;
    const Entry* slowest = nullptr;
    for (const Entry& e : table_) {
        if (!e.used || !e.r.admitted || !counts(e)) {
            continue;
        }
        const std::int64_t d = gap(next, reach(e, txw));
        if (!any || d < room) {
            room = d;
            slowest = &e;
            at_min = 0;
        }
        at_min += d == room ? 1U : 0U;
        any = true;
        ++group;
    }
    holder_ = group >= 2 && at_min == 1 ? slowest : nullptr;
    const Sqn limit = next + static_cast<std::uint32_t>(room);
    if (!any || !limited_ || gap(limit_, limit) > 0) {
        blocked_since_ns_ = -1;  // the limit moved on: whoever held it is moving
    }
    limited_ = any;
    limit_ = limit;
    counted_ = group;
    gate_closed_ = cfg_.strategy == FlowStrategy::tagged && group < cfg_.min_group;
}

void FlowLimiter::note_blocked(std::int64_t now_ns) noexcept {
    ++counters_.blocked;
    blocked_in_interval_ = true;
    if (blocked_since_ns_ < 0) {
        blocked_since_ns_ = now_ns;
    }
}

std::int64_t FlowLimiter::on_timer(Sqn next, std::uint32_t txw, std::int64_t now_ns) noexcept {
    if (now_ns < next_sweep_ns_) {
        return next_sweep_ns_;
    }
    account(now_ns);
    bool any = false;
    bool changed = false;
    const bool stalled_publisher =
        blocked_since_ns_ >= 0 && now_ns - blocked_since_ns_ >= cfg_.timeout_ns;
    for (Entry& e : table_) {
        if (!e.used) {
            continue;
        }
        const bool silent = now_ns - e.r.last_heard_ns >= cfg_.timeout_ns;
        // Holding the publisher back for the timeout without consuming anything: a stopped
        // consumer that still answers, or a forged one.
        const bool stalled = stalled_publisher && e.r.admitted && counts(e) && limited_
                             && reach(e, txw) == limit_
                             && now_ns - e.progress_ns >= cfg_.timeout_ns;
        // The laggard rule: it alone held the publisher back more than half of the time, for an
        // excess of timeout_ns.
        const bool laggard = e.held_ns >= cfg_.timeout_ns;
        if (silent || stalled || laggard) {
            ++counters_.evicted;
            if (laggard && !silent && !stalled) {
                ++counters_.laggards;
                bench(e, now_ns);
            }
            drop(e);
            changed = true;
        } else {
            any = true;
        }
    }
    if (changed) {
        recompute(next, txw);
    }
    next_sweep_ns_ = any ? now_ns + std::max<std::int64_t>(cfg_.timeout_ns / 4, 1) : INT64_MAX;
    return next_sweep_ns_;
}

bool FlowLimiter::waits_for(std::uint16_t family,
                            const std::array<std::uint8_t, 16>& addr,
                            Sqn s) const noexcept {
    return std::any_of(table_.begin(), table_.end(), [&](const Entry& e) {
        return e.used && e.r.admitted && counts(e) && e.family == family && e.addr == addr
               && gap(e.r.consumed, s) >= 0;
    });
}

bool FlowLimiter::holds_back(std::uint16_t family,
                             const std::array<std::uint8_t, 16>& addr,
                             Sqn next,
                             std::uint32_t txw) const noexcept {
    return std::any_of(table_.begin(), table_.end(), [&](const Entry& e) {
        return e.used && e.r.admitted && counts(e) && e.family == family && e.addr == addr
               && gap(next, reach(e, txw)) <= 0;
    });
}

bool FlowLimiter::all_consumed(Sqn next) const noexcept {
    return std::all_of(table_.begin(), table_.end(), [&](const Entry& e) {
        return !e.used || !e.r.admitted || !counts(e) || gap(e.r.consumed, next) <= 0;
    });
}

std::size_t FlowLimiter::receivers(std::span<FlowReceiver> out) const noexcept {
    std::size_t n = 0;
    for (const Entry& e : table_) {
        if (e.used && n < out.size()) {
            out[n++] = e.r;
        }
    }
    return n;
}

}  // namespace prizma::protocol
