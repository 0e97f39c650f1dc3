// SPDX-License-Identifier: Apache-2.0
#include "lib/protocol/flow_control.hpp"

#include <algorithm>
#include <cstring>

namespace prizma::protocol {
namespace {

/// Signed distance from `a` to `b` in sequence space (positive: b after a).
std::int64_t gap(Sqn a, Sqn b) noexcept {
    return static_cast<std::int32_t>(b.value - a.value);
}

/// Status windows beyond this are taken as this (more than any receive window can be).
constexpr std::uint32_t kMaxWindow = 1U << 24U;

}  // namespace

FlowLimiter::FlowLimiter(const FlowConfig& cfg) : cfg_(cfg) {
    if (active()) {
        table_.resize(std::max<std::uint32_t>(cfg.max_receivers, 1));
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
    if (e != nullptr
        && (e->family != from.family
            || std::memcmp(e->addr.data(), from.addr.data(), e->addr.size()) != 0)) {
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
    if (e == nullptr) {
        if (free_entry == nullptr) {
            ++counters_.status_refused;  // table full
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
        // behind would stop everyone else until it caught up.
        if (gap(next, reach(*e, txw)) >= 0) {
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
    for (const Entry& e : table_) {
        if (!e.used || !e.r.admitted || !counts(e)) {
            continue;
        }
        const std::int64_t d = gap(next, reach(e, txw));
        room = any ? std::min(room, d) : d;
        any = true;
        ++group;
    }
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
    if (blocked_since_ns_ < 0) {
        blocked_since_ns_ = now_ns;
    }
}

std::int64_t FlowLimiter::on_timer(Sqn next, std::uint32_t txw, std::int64_t now_ns) noexcept {
    if (now_ns < next_sweep_ns_) {
        return next_sweep_ns_;
    }
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
        if (silent || stalled) {
            ++counters_.evicted;
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
