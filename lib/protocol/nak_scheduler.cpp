// SPDX-License-Identifier: Apache-2.0
// The receiver's loss detection and NAK state machine (RFC 3208 §6.3): gaps become missing
// sqns with a random back-off, NAKs go out oldest first in OPT_NAK_LIST batches, NCFs and other
// receivers' NAKs move the states, and retries spent or the repair deadline make a sqn lost.
#include <algorithm>
#include <array>

#include "lib/pgm/checksum.hpp"
#include "lib/protocol/peer.hpp"

namespace prizma::protocol {

using pgm::PacketSpec;
using pgm::PacketType;

// RFC 3208 §6.3: NAK_RB_IVL is chosen at random, uniformly over (0, NAK_BO_IVL].
std::int64_t Receiver::backoff(std::int64_t now_ns) noexcept {
    const std::uint64_t r = rng_();
    const auto ivl = static_cast<std::uint64_t>(cfg_.timers.nak_bo_ivl_ns);
    return now_ns + 1 + static_cast<std::int64_t>(r % ivl);
}

// Gap detection (§6.3): every sequence number in (lead, last] becomes missing and starts its
// back-off. Bounded by the receive window; what lies beyond is found again later.
void Receiver::mark_missing(Peer& p, Sqn last, std::int64_t now_ns) noexcept {
    if (!precedes(p.lead, last)) {
        return;
    }
    const Sqn window_end = p.next + (capacity_ - 1);
    if (precedes(window_end, last)) {
        last = window_end;
    }
    // One back-off draw for the whole gap found by one packet: a burst loss then goes out as
    // one NAK with OPT_NAK_LIST instead of a NAK per sequence number.
    const std::int64_t deadline = backoff(now_ns);
    const std::uint32_t mask = capacity_ - 1;
    for (Sqn s = p.lead + 1; precedes_or_equal(s, last); ++s) {
        p.wheel.cancel(s.value & mask);  // (beyond the lead: never linked; kept safe anyway)
        auto& sl = p.slot(s, mask);
        sl = Peer::Slot{};
        sl.state = SlotState::back_off;
        sl.missing_since = now_ns;
        p.wheel.arm(s.value & mask, deadline);
        ++p.missing;
    }
    p.nak_deadline = std::min(p.nak_deadline, deadline);
    p.lead = last;
}

void Receiver::lose(Peer& p, Sqn s) noexcept {
    auto& sl = p.slot(s, capacity_ - 1);
    if (is_missing(sl.state)) {
        --p.missing;
        p.wheel.cancel(s.value & (capacity_ - 1));
    }
    sl.state = SlotState::lost;
    bump(p, &ReceiverCounters::lost_sqns, &PeerCounters::lost_sqns);
}

void Receiver::lose_all_missing(Peer& p) noexcept {
    if (!p.started) {
        return;
    }
    const std::uint32_t mask = capacity_ - 1;
    // Only missing slots are armed; a stray one is just cancelled by drain().
    p.wheel.drain([&](std::uint32_t idx) {
        if (is_missing(p.slots[idx].state)) {
            lose(p, p.sqn_of(idx, mask));  // cancels it
        }
    });
    if (p.naks_parked) {  // missing without a timer (no SPM yet): found by a walk
        p.naks_parked = false;
        for (Sqn s = p.next; p.missing != 0 && p.in_range(s); ++s) {
            if (is_missing(p.slot(s, mask).state)) {
                lose(p, s);
            }
        }
    }
}

// The first SPM gives the source's NLA: the missing sqns parked without timers get them now.
void Receiver::unpark(Peer& p, std::int64_t now_ns) noexcept {
    if (!p.naks_parked || !p.started) {
        p.naks_parked = false;
        return;
    }
    p.naks_parked = false;
    const std::uint32_t mask = capacity_ - 1;
    const std::int64_t deadline = backoff(now_ns);
    for (Sqn s = p.next; p.in_range(s); ++s) {
        auto& sl = p.slot(s, mask);
        if (sl.state == SlotState::back_off && !p.wheel.armed(s.value & mask)) {
            sl.missing_since = now_ns;  // NAKing becomes possible only now
            p.wheel.arm(s.value & mask, deadline);
        }
    }
    p.nak_deadline = std::min(p.nak_deadline, deadline);
}

void Receiver::on_ncf(Peer& p, const pgm::Packet& pkt, std::int64_t now_ns) noexcept {
    bump(p, &ReceiverCounters::ncf_received, &PeerCounters::ncf_received);
    if (!p.started) {
        return;
    }
    const std::uint32_t mask = capacity_ - 1;
    const std::size_t total = pkt.requested_count();
    for (std::size_t i = 0; i < total; ++i) {
        const Sqn s = pkt.requested(i);
        if (precedes(s, p.next) || distance(p.next, s) >= static_cast<std::int32_t>(capacity_)) {
            continue;
        }
        if (precedes(p.lead, s)) {
            mark_missing(p, s, now_ns);  // §6.3: an NCF also reveals loss
        }
        auto& sl = p.slot(s, mask);
        // §6.3: NCF moves BACK-OFF / WAIT_NCF to WAIT_DATA. It does not restart WAIT_DATA, and
        // holds back a NAK of ours once only: NCFs every millisecond (another receiver's, or
        // forged) must not keep the repair waiting for ever.
        if (!is_missing(sl.state) || sl.state == SlotState::wait_data) {
            continue;
        }
        if (sl.state == SlotState::back_off) {
            if (sl.yielded) {
                continue;  // held back once already: this round NAKs
            }
            sl.yielded = true;
            ++counters_.nak_suppressed;  // another receiver's NAK was confirmed: ours not needed
        }
        sl.state = SlotState::wait_data;
        sl.ncf_retries = 0;
        p.wheel.arm(s.value & mask, now_ns + cfg_.timers.nak_rdata_ivl_ns);
        p.nak_deadline = std::min(p.nak_deadline, p.wheel.deadline(s.value & mask));
    }
}

// §6.3: a matching NAK from another receiver during back-off suppresses ours (WAIT_NCF).
void Receiver::on_peer_nak(Peer& p, const pgm::Packet& pkt, std::int64_t now_ns) noexcept {
    if (!p.started) {
        return;
    }
    const std::uint32_t mask = capacity_ - 1;
    const std::size_t total = pkt.requested_count();
    for (std::size_t i = 0; i < total; ++i) {
        const Sqn s = pkt.requested(i);
        if (!p.in_range(s)) {
            continue;
        }
        auto& sl = p.slot(s, mask);
        // Held back once per round at most, and a running WAIT_NCF is not restarted: another
        // host's NAKs (or forged ones) cannot keep ours from going out.
        if (sl.state == SlotState::back_off && !sl.yielded) {
            sl.state = SlotState::wait_ncf;
            sl.yielded = true;
            p.wheel.arm(s.value & mask, now_ns + cfg_.timers.nak_rpt_ivl_ns);
            ++counters_.nak_suppressed;
            p.nak_deadline = std::min(p.nak_deadline, p.wheel.deadline(s.value & mask));
        }
    }
}

// Takes the expired NAK timers from the wheel, oldest sqn first (§6.3 "NAKs sent in order"),
// sends the due ones as NAKs with OPT_NAK_LIST (≤ 62 + 1 per packet) and re-arms each timer.
void Receiver::run_naks(Peer& p, std::int64_t now_ns, PacketSink& sink) noexcept {
    const std::uint32_t mask = capacity_ - 1;
    const auto& t = cfg_.timers;
    // The due timers, from the buckets whose ticks have passed.
    due_.clear();
    std::int64_t next_deadline = p.wheel.collect_due(now_ns, due_);
    // §6.3: NAKs go out oldest sqn first, consecutive ones packed into OPT_NAK_LIST.
    const std::uint32_t base = p.next.value & mask;
    std::sort(due_.begin(), due_.end(), [&](std::uint32_t a, std::uint32_t b) {
        return ((a - base) & mask) < ((b - base) & mask);
    });
    std::array<Sqn, pgm::kMaxNakList + 1> batch{};
    std::size_t nb = 0;
    for (const std::uint32_t idx : due_) {
        auto& sl = p.slots[idx];
        const Sqn s = p.sqn_of(idx, mask);
        if (is_missing(sl.state)
            && now_ns >= std::min(sl.missing_since + repair_limit_ns_, p.fin_deadline)) {
            ++counters_.repair_timeouts;  // the absolute deadline: nothing extends it
            lose(p, s);
            continue;
        }
        switch (sl.state) {
            case SlotState::back_off:
                if (cfg_.passive) {
                    // A passive receiver never NAKs: it waits as if an NCF had come.
                    sl.state = SlotState::wait_data;
                    p.wheel.arm(idx, now_ns + t.nak_rdata_ivl_ns);
                } else if (!p.nla) {
                    // §6.2: no NAK before the first SPM. Parked without a timer until it comes
                    // (unpark): a source that never sends one costs no timer runs.
                    p.wheel.cancel(idx);
                    p.naks_parked = true;
                    if (p.spmr_deadline == kNever && p.spmrs < kMaxSpmrs) {
                        p.spmr_deadline = now_ns + t.spmr_expiry_ns;
                    }
                    continue;
                } else {
                    batch[nb++] = s;
                    sl.state = SlotState::wait_ncf;
                    sl.yielded = false;
                    ++sl.ncf_retries;
                    p.wheel.arm(idx, now_ns + t.nak_rpt_ivl_ns);
                }
                break;
            case SlotState::wait_ncf:
                if (sl.ncf_retries >= t.nak_ncf_retries) {
                    lose(p, s);
                    continue;
                }
                sl.state = SlotState::back_off;
                p.wheel.arm(idx, backoff(now_ns));
                break;
            case SlotState::wait_data:
                ++sl.data_retries;
                if (sl.data_retries >= t.nak_data_retries) {
                    lose(p, s);
                    continue;
                }
                sl.state = SlotState::back_off;
                sl.ncf_retries = 0;
                p.wheel.arm(idx, backoff(now_ns));
                break;
            default: break;
        }
        next_deadline = std::min(next_deadline, p.wheel.deadline(idx));
        if (nb == batch.size()) {
            send_nak(p, batch, sink);
            nb = 0;
        }
    }
    if (nb != 0) {
        send_nak(p, std::span<const Sqn>(batch.data(), nb), sink);
    }
    p.nak_deadline = std::min(next_deadline, p.wheel.next_armed());
}

void Receiver::send_nak(Peer& p, std::span<const Sqn> sqns, PacketSink& sink) noexcept {
    PacketSpec spec;
    spec.type = PacketType::nak;
    spec.sport = cfg_.dport;  // upstream: ports swapped (RFC 3208 §8.3)
    spec.dport = p.tsi.sport;
    spec.gsi = p.tsi.gsi;
    spec.sqn = sqns[0];
    spec.nla = p.nla.value_or(pgm::Nla{});
    spec.group = cfg_.group;
    spec.nak_list = sqns.subspan(1);
    const std::size_t n = pgm::encode(scratch_, spec);
    if (n == 0) {
        return;
    }
    pgm::store_checksum(std::span<std::byte>(scratch_.data(), n), 0);
    bump(p, &ReceiverCounters::nak_sent, &PeerCounters::nak_sent);
    bump(p, &ReceiverCounters::nak_sqns_sent, &PeerCounters::nak_sqns_sent, sqns.size());
    sink.emit(TxPacket{std::span<const std::byte>(scratch_.data(), n), {}, Route::unicast, p.from});
}

}  // namespace prizma::protocol
