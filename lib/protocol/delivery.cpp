// SPDX-License-Identifier: Apache-2.0
// The receiver's delivery: each source's events in order (joined, data, loss, left), round
// robin over the sources, reassembly of fragmented APDUs (§9.2) and whole-APDU loss runs.
#include <algorithm>
#include <cstring>

#include "lib/protocol/peer.hpp"

namespace prizma::protocol {

bool Receiver::next_event(Event& out) noexcept {
    const std::size_t n = live_.size();
    if (n == 0) {
        return false;
    }
    if (rr_ >= n) {
        rr_ = 0;
    }
    for (std::size_t i = 0; i < n; ++i) {
        std::size_t j = rr_ + i;
        if (j >= n) {
            j -= n;
        }
        Peer* p = live_[j];
        const bool got = peer_event(*p, out);
        if (p->state == PeerState::free) {
            live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(j));  // a source left: rare
            free_storage(p);
            if (got) {
                return true;
            }
            return next_event(out);
        }
        if (got) {
            // Stay on this peer while it has events, for up to kDeliveryRun of them: then the
            // next peer's turn, so that one source's backlog never hides another's for long
            // (the copies of a hot-standby pair are compared as they come, docs/STREAMS.md).
            if (j != rr_) {
                rr_ = j;
                run_ = 0;
            }
            if (++run_ == kDeliveryRun) {
                run_ = 0;
                rr_ = j + 1 < n ? j + 1 : 0;
            }
            // Flow control: a status after each quarter window consumed (at the next timer run).
            if (p->status_due != kNever && p->next.value - p->status_pos.value >= status_step_) {
                p->status_due = 0;
            }
            return true;
        }
    }
    rr_ = rr_ + 1 < n ? rr_ + 1 : 0;
    run_ = 0;
    return false;
}

// A run of lost sequence numbers starting at `s`, as one loss event (whole APDUs: an orphan
// fragment tail joins the run). false: the run may still grow (its next sqn is under repair).
bool Receiver::loss_event(Peer& p, Sqn s, Event& out) noexcept {
    const std::uint32_t mask = capacity_ - 1;
    Sqn e = s;
    while (precedes(e, p.lead)) {
        auto& nx = p.slot(e + 1, mask);
        const bool orphan_tail = nx.state == SlotState::have && nx.has_fragment
                                 && nx.fragment.first_sqn != e + 1
                                 && precedes(nx.fragment.first_sqn, e + 1);
        if (nx.state != SlotState::lost && !orphan_tail) {
            break;
        }
        if (orphan_tail) {
            p.release(nx);
            nx.state = SlotState::lost;
            bump(p, &ReceiverCounters::lost_sqns, &PeerCounters::lost_sqns);
        }
        ++e;
    }
    if (precedes(e, p.lead) && is_missing(p.slot(e + 1, mask).state)) {
        // The next one is still being repaired and may be the tail of the same APDU:
        // wait, so that one loss event covers whole APDUs. Nothing could be delivered
        // past it before it resolves anyway.
        return false;
    }
    const std::uint32_t count = span_count(s, e);
    for (Sqn x = s; precedes_or_equal(x, e); ++x) {
        p.slot(x, mask).state = SlotState::empty;
    }
    p.next = e + 1;
    bump(p, &ReceiverCounters::loss_events, &PeerCounters::loss_events);
    out.kind = Event::Kind::loss;
    out.sqn = s;
    out.count = count;
    return true;
}

// The fragmented APDU whose first fragment is `s` (OPT_FRAGMENT, §9.2): delivered whole,
// waiting for fragments, or broken (its sequence numbers marked lost).
Receiver::Assembly Receiver::reassemble(Peer& p, Sqn s, Event& out) noexcept {
    const std::uint32_t mask = capacity_ - 1;
    auto& sl = p.slot(s, mask);
    const std::byte* base = p.buffers.data();
    // Fragments s, s+1, ... with consecutive offsets.
    const std::uint32_t apdu_len = sl.fragment.apdu_length;
    std::uint32_t off = 0;
    Sqn x = s;
    if (p.scan && p.scan->head == s) {
        x = p.scan->next;  // the fragments before it were checked by an earlier call
        off = p.scan->off;
    }
    p.scan.reset();
    bool broken = apdu_len > pgm::kMaxApduBytes;
    bool waiting = false;
    while (!broken && off < apdu_len) {
        ++counters_.reassembly_steps;
        if (distance(s, x) >= static_cast<std::int32_t>(kMaxApduFragments)) {
            broken = true;  // more fragments than any sender makes
            break;
        }
        if (!p.in_range(x) || distance(s, x) >= static_cast<std::int32_t>(capacity_)) {
            waiting = true;  // the rest is not even known yet
            break;
        }
        auto& fx = p.slot(x, mask);
        if (is_missing(fx.state)) {
            waiting = true;
            break;
        }
        if (fx.state != SlotState::have || !fx.has_fragment || fx.fragment.first_sqn != s
            || fx.fragment.offset != off || fx.fragment.apdu_length != apdu_len
            || (fx.len == 0 && off < apdu_len)) {
            broken = true;
            break;
        }
        off += fx.len;
        ++x;
    }
    if (!broken && off != apdu_len && !waiting) {
        broken = true;
    }
    if (waiting && p.give_up) {
        broken = true;  // the source is gone: the rest of this APDU will never come
    }
    if (broken) {
        // Inconsistent fragments: report the APDU's sequence numbers as lost.
        ++counters_.bad_fragment;
        const Sqn last = precedes(p.lead, x) ? p.lead : x;
        for (Sqn y = s; precedes_or_equal(y, last); ++y) {
            if (p.slot(y, mask).state != SlotState::lost) {
                if (is_missing(p.slot(y, mask).state)) {
                    --p.missing;
                    p.wheel.cancel(y.value & mask);
                }
                p.release(p.slot(y, mask));
                p.slot(y, mask).state = SlotState::lost;
                bump(p, &ReceiverCounters::lost_sqns, &PeerCounters::lost_sqns);
            }
        }
        return Assembly::broken;  // the caller now reports the lost run
    }
    if (waiting) {
        p.scan = Peer::Scan{s, x, off};
        return Assembly::waiting;
    }
    std::size_t pos = 0;
    std::int64_t last_rx = 0;  // the APDU was complete when its last fragment came
    for (Sqn y = s; precedes(y, x); ++y) {
        auto& fy = p.slot(y, mask);
        last_rx = std::max(last_rx, fy.rx_ns);
        std::memcpy(reassembly_.data() + pos, base + fy.off, fy.len);
        pos += fy.len;
        p.release(fy);
        fy.state = SlotState::empty;
    }
    p.next = x;
    bump(p, &ReceiverCounters::apdus_delivered, &PeerCounters::apdus_delivered);
    counters_.bytes_delivered += apdu_len;
    out.kind = Event::Kind::data;
    out.sqn = s;
    out.payload = std::span<const std::byte>(reassembly_.data(), apdu_len);
    out.rx_ns = last_rx;
    return Assembly::delivered;
}

// Nothing deliverable. A finished (FIN/RST) or expired source leaves once drained.
bool Receiver::left_event(Peer& p, Event& out) noexcept {
    const bool drained = !p.started || p.missing == 0;
    // A FIN'd source leaves only once its FIN deadline has passed (give_up) with no data past
    // the FIN's lead: a forged FIN is cancelled by the data that keeps coming before then.
    const bool leaving =
        (p.state == PeerState::finishing && p.give_up) || p.state == PeerState::expired;
    if (leaving && drained && (!p.started || !p.in_range(p.next))) {
        ++counters_.peers_left;
        out.kind = Event::Kind::left;
        // An expired source's entry is free for a new one; a finished one stays (ignoring
        // what it still sends) until it expires too.
        p.state = p.state == PeerState::expired ? PeerState::free : PeerState::left;
        return true;
    }
    if (p.state == PeerState::retired) {
        p.state = PeerState::free;
    }
    return false;
}

// Produces the next in-order event of one peer, advancing its window first.
bool Receiver::peer_event(Peer& p, Event& out) noexcept {
    out = Event{};
    out.tsi = p.tsi;
    // `joined` once the window has a start (or the source goes before it has one): its sqn is
    // where delivery starts, its count the sqns the source still held before it that this
    // receiver does not take (late join past max_recover_sqns): the application can tell.
    if (p.joined_pending && (p.started || !p.takes_packets())) {
        p.joined_pending = false;
        out.kind = Event::Kind::joined;
        if (p.started) {
            out.sqn = p.next;
            if (p.trail && precedes(*p.trail, p.next)) {
                out.count = static_cast<std::uint32_t>(distance(*p.trail, p.next));
            }
        }
        return true;
    }
    if (p.joined_pending) {
        return false;  // nothing before `joined`
    }
    if (p.resync_lost != 0) {  // a confirmed resync skipped this range
        bump(p, &ReceiverCounters::loss_events, &PeerCounters::loss_events);
        out.kind = Event::Kind::loss;
        out.sqn = p.resync_from;
        out.count = p.resync_lost;
        p.resync_lost = 0;
        return true;
    }
    const std::uint32_t mask = capacity_ - 1;
    while (p.started && p.in_range(p.next)) {
        const Sqn s = p.next;
        auto& sl = p.slot(s, mask);
        if (sl.state == SlotState::have && sl.has_fragment && sl.fragment.first_sqn != s) {
            // The head of this APDU is gone (lost or never seen): the tail is lost with it.
            p.release(sl);
            sl.state = SlotState::lost;
            bump(p, &ReceiverCounters::lost_sqns, &PeerCounters::lost_sqns);
        }
        if (sl.state == SlotState::lost) {
            if (loss_event(p, s, out)) {
                return true;
            }
            break;  // the run may still grow: wait for its repair
        }
        if (sl.state != SlotState::have) {
            break;  // missing: wait for repair
        }
        const std::byte* base = p.buffers.data();
        if (!sl.has_fragment) {
            // Released now, but the bytes stay untouched until the next packet is stored.
            p.release(sl);
            sl.state = SlotState::empty;
            p.next = s + 1;
            bump(p, &ReceiverCounters::apdus_delivered, &PeerCounters::apdus_delivered);
            counters_.bytes_delivered += sl.len;
            out.kind = Event::Kind::data;
            out.sqn = s;
            out.payload = std::span<const std::byte>(base + sl.off, sl.len);
            out.rx_ns = sl.rx_ns;
            return true;
        }
        const Assembly a = reassemble(p, s, out);
        if (a == Assembly::delivered) {
            return true;
        }
        if (a == Assembly::waiting) {
            break;
        }
        // broken: its sequence numbers are now lost; the loop reports them
    }
    if (p.tail_lost != 0 && p.started && !p.in_range(p.next)) {  // lose_tail's run, last
        bump(p, &ReceiverCounters::loss_events, &PeerCounters::loss_events);
        out.kind = Event::Kind::loss;
        out.sqn = p.tail_from;
        out.count = p.tail_lost;
        p.next = p.tail_from + p.tail_lost;
        p.lead = p.next - 1;
        p.tail_lost = 0;
        return true;
    }
    return left_event(p, out);
}

}  // namespace prizma::protocol
