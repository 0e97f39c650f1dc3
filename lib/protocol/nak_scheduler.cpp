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

// NAK pacing (ReceiverConfig::nak_burst_sqns): credit for nak_burst_ sqns per NAK_RPT_IVL, at
// most nak_burst_ saved; each repair that arrives gives one back (on_data).
void Receiver::refill_tokens(Peer& p, std::int64_t now_ns) const noexcept {
    if (now_ns > p.tokens_ns) {
        const auto k = static_cast<double>(nak_burst_);
        p.nak_tokens = std::min(k, p.nak_tokens
                                       + k * static_cast<double>(now_ns - p.tokens_ns)
                                             / static_cast<double>(cfg_.timers.nak_rpt_ivl_ns));
        p.tokens_ns = now_ns;
    }
}

// The source is repairing us: a missing sqn of ours was filled within two NAK rounds. Retries
// are then not used up: a receiver that lost most of a window is repaired for as long as the
// repairs come (each fills a hole, so this ends), and its NAKs that the source refused for
// credit wait for it instead of turning into loss.
bool Receiver::progressing(const Peer& p, std::int64_t now_ns) const noexcept {
    const auto& t = cfg_.timers;
    return now_ns - p.progress_ns
           < 2 * (t.nak_bo_ivl_ns + std::max(t.nak_rpt_ivl_ns, t.nak_rdata_ivl_ns));
}

// A missing sqn waits in back-off without a timer (no NLA yet, or no NAK credit).
void Receiver::park(Peer& p, Sqn s) const noexcept {
    p.wheel.cancel(s.value & (capacity_ - 1));
    if (!p.naks_parked || precedes(s, p.park_from)) {
        p.park_from = s;
    }
    p.naks_parked = true;
}

// Arms the oldest parked sqns, as many as the NAK credit allows, due now.
void Receiver::unpark_paced(Peer& p, std::int64_t now_ns) const noexcept {
    if (!p.naks_parked || !p.nla || !p.started || cfg_.passive) {
        return;
    }
    auto budget = static_cast<std::uint32_t>(p.nak_tokens);  // refilled by run_naks
    if (budget == 0) {
        return;
    }
    const std::uint32_t mask = capacity_ - 1;
    Sqn s = precedes(p.park_from, p.next) ? p.next : p.park_from;
    for (; budget != 0 && p.in_range(s); ++s) {
        auto& sl = p.slot(s, mask);
        if (sl.state == SlotState::back_off && !p.wheel.armed(s.value & mask)) {
            p.wheel.arm(s.value & mask, now_ns);
            --budget;
        }
    }
    if (p.in_range(s)) {
        p.park_from = s;
    } else {
        p.naks_parked = false;
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
    refill_tokens(p, now_ns);  // once per run: the time does not move within it
    unpark_paced(p, now_ns);   // NAK credit came back: the oldest waiting ones are due now
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
        // The absolute deadline counts from the later of when the sqn went missing and the
        // source's last repair of ours: nothing another host sends extends it.
        if (is_missing(sl.state)
            && now_ns >= std::min(std::max(sl.missing_since, p.progress_ns) + repair_limit_ns_,
                                  p.fin_deadline)) {
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
                    park(p, s);
                    if (p.spmr_deadline == kNever && p.spmrs < kMaxSpmrs) {
                        p.spmr_deadline = now_ns + t.spmr_expiry_ns;
                    }
                    continue;
                } else {
                    if (p.nak_tokens < 1) {
                        park(p, s);  // waits for NAK credit: no retry used
                        continue;
                    }
                    p.nak_tokens -= 1;
                    batch[nb++] = s;
                    sl.state = SlotState::wait_ncf;
                    sl.yielded = false;
                    ++sl.ncf_retries;
                    p.wheel.arm(idx, now_ns + t.nak_rpt_ivl_ns);
                }
                break;
            case SlotState::wait_ncf:
                if (sl.ncf_retries >= t.nak_ncf_retries) {
                    if (!progressing(p, now_ns)) {
                        lose(p, s);
                        continue;
                    }
                    sl.ncf_retries = 0;  // refused for credit while we are repaired: again
                }
                sl.state = SlotState::back_off;
                p.wheel.arm(idx, backoff(now_ns));
                break;
            case SlotState::wait_data:
                ++sl.data_retries;
                if (sl.data_retries >= t.nak_data_retries) {
                    if (!progressing(p, now_ns)) {
                        lose(p, s);
                        continue;
                    }
                    sl.data_retries = 0;
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
    if (p.naks_parked && p.nla && !cfg_.passive) {
        // Waiting for credit: an eighth of the burst is earned per an eighth of NAK_RPT_IVL.
        next_deadline =
            std::min(next_deadline, now_ns + std::max<std::int64_t>(t.nak_rpt_ivl_ns / 8, 1));
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
