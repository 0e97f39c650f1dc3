// SPDX-License-Identifier: Apache-2.0
// The Source's repairs (docs/PROTOCOL.md, "Publisher repair limits"): NAKs answered with NCF
// and RDATA within each requester's credit and the repair budget, the repair queue. The rest of
// the Source (window, ODATA, SPM, timers) is source.cpp.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "lib/pgm/bytes.hpp"
#include "lib/pgm/checksum.hpp"
#include "lib/protocol/packed_ring.hpp"
#include "lib/protocol/source.hpp"

namespace prizma::protocol {

using pgm::PacketSpec;
using pgm::PacketType;

// ---- NAK → NCF + RDATA, within the repair limits ------------------------------------------

// Bytes of the packets in the transmit window, as they lie in the ring.
std::size_t Source::window_bytes() const noexcept {
    if (in_window() == 0) {
        return 0;
    }
    const std::size_t first = slots_[trail_.value & mask_].offset;
    return head_off_ > first ? head_off_ - first : buffers_.size() - first + head_off_;
}

Source::Requester* Source::find_requester(const Endpoint& from) noexcept {
    for (auto& r : requesters_) {
        if (r.used && r.family == from.family && r.addr == from.addr) {
            return &r;
        }
    }
    return nullptr;
}

// The table is small and fixed: a new host takes a free entry or the least recently heard
// one's (a flood of spoofed addresses then only resets honest hosts to a new one's credit).
Source::Requester& Source::requester(const Endpoint& from, std::int64_t now_ns) noexcept {
    Requester* r = find_requester(from);
    if (r == nullptr) {
        r = requesters_.data();
        for (auto& e : requesters_) {
            if (!e.used) {
                r = &e;
                break;
            }
            if (e.last_ns < r->last_ns) {
                r = &e;
            }
        }
        if (r->used) {
            ++counters_.requesters_replaced;
        }
        r->used = true;
        r->family = from.family;
        r->addr = from.addr;
        // Its fair share of the burst: new addresses (spoofed ones, each one NAK) cannot
        // mint more start credit than the budget holds.
        r->last_ns = now_ns;
        r->credit.bytes =
            std::min(min_credit_, std::max(repair_credit_.bytes, 0.0)
                                      / static_cast<double>(active_requesters(now_ns)));
        // A requester heard during an idle spell earns its share of the spell from its start:
        // a burst's receivers NAK after the spell has earned what they need.
        r->credit.mark = earning_bytes() - static_cast<std::uint64_t>(idle_spell_credit());
    }
    r->last_ns = now_ns;
    return *r;
}

std::size_t Source::active_requesters(std::int64_t now_ns) const noexcept {
    std::size_t n = 0;
    for (const auto& r : requesters_) {
        n += r.used && now_ns - r.last_ns < kActiveNs ? 1U : 0U;
    }
    return std::max<std::size_t>(n, 1);
}

// The rate meter keeps two intervals of at least kMeterNs: the ODATA rate before a hold is
// taken over the last one to two seconds. A hold's first refused send fixes that rate; held
// time is credited at it until a send goes through again.
double Source::recent_rate(std::int64_t end_ns) const noexcept {
    if (meter_ns_ < 0) {
        return 0.0;
    }
    // At least 1 ms: one packet sent alone is no rate.
    const std::int64_t span = std::max<std::int64_t>(end_ns - meter_ns_ + meter_prev_ns_, kMs);
    const std::uint64_t bytes = odata_bytes() - meter_bytes_ + meter_prev_bytes_;
    return static_cast<double>(bytes) / static_cast<double>(span);
}

void Source::note_held(bool held, std::int64_t now_ns) noexcept {
    if (held) {
        if (!held_) {
            held_ = true;
            held_count_ns_ = now_ns;
            held_rate_ = recent_rate(now_ns);
        }
        return;
    }
    const bool was_held = held_;
    if (held_) {
        count_held(now_ns);
        held_ = false;
    }
    if (meter_ns_ < 0 || now_ns - meter_ns_ >= kMeterNs) {
        // After a quiet spell of a meter interval or more (not a hold) the rate before is the
        // new burst's own: an interval spanning the spell would dilute it, and each burst's
        // idle spell would earn less than the first one's.
        const bool fresh = meter_ns_ < 0 || (!was_held && now_ns - last_data_ns_ >= kMeterNs);
        meter_prev_ns_ = fresh ? 0 : now_ns - meter_ns_;
        meter_prev_bytes_ = fresh ? 0 : odata_bytes() - meter_bytes_;
        meter_ns_ = now_ns;
        meter_bytes_ = odata_bytes();
    }
}

// A burst's receivers NAK after it, when the source may send nothing more: without this only
// the saved credit (64 packets) would repair them, whatever they lost. Idle time from one NAK
// round after the last data, up to the receivers' repair limit after it, earns at the rate the
// source sent at before (time held back by flow control is counted by count_held instead).
void Source::count_idle(std::int64_t now_ns) noexcept {
    if (held_) {
        return;
    }
    const std::int64_t from = std::max(last_data_ns_ + idle_grace_ns_, idle_counted_ns_);
    const std::int64_t to = std::min(now_ns, last_data_ns_ + idle_grace_ns_ + linger_cap_ns());
    if (idle_spell_ns_ != last_data_ns_) {
        idle_spell_ns_ = last_data_ns_;
        idle_spell_bytes_ = 0;
    }
    if (to > from) {
        const double room = kIdleWindows * static_cast<double>(window_bytes()) - idle_spell_bytes_;
        const double add =
            std::min(recent_rate(last_data_ns_) * static_cast<double>(to - from), room);
        if (add > 0) {
            idle_bytes_ += add;
            idle_spell_bytes_ += add;
        }
        idle_counted_ns_ = to;
    }
}

void Source::count_held(std::int64_t now_ns) noexcept {
    if (held_ && now_ns > held_count_ns_) {
        held_bytes_ += held_rate_ * static_cast<double>(now_ns - held_count_ns_);
        held_count_ns_ = now_ns;
    }
}

// Credit saved is bounded: the budget's share of what the transmit window holds (every
// packet in it repaired once: the most honest receivers can need, also after the source fell
// quiet), or the burst. A flood cashes that in once; after it, only new data earns credit.
// A requester earns its fair share: the budget split between the requesters heard within
// kActiveNs, at most requester_budget_percent. So many spoofed addresses together earn no
// more than the budget, and an honest requester among them keeps its share of it.
void Source::earn(Requester& rq, std::int64_t now_ns) noexcept {
    // In an idle spell the credit it earned may be saved whole (at most kIdleWindows windows),
    // so that a receiver that NAKs late in the spell still finds it.
    const double spell = idle_spell_credit() > 0 ? kIdleWindows : 1.0;
    const auto window = spell * static_cast<double>(window_bytes());
    const std::uint64_t sent = earning_bytes();  // held time counted by handle_nak
    repair_credit_.earn(sent, repair_fraction_, std::max(min_credit_, repair_fraction_ * window));
    const double share = std::min(
        requester_fraction_, repair_fraction_ / static_cast<double>(active_requesters(now_ns)));
    rq.credit.earn(sent, share, std::max(min_credit_, requester_fraction_ * window));
}

Source::Pay Source::pay(Requester& rq, std::size_t bytes) noexcept {
    const auto b = static_cast<double>(bytes);
    if (rq.credit.bytes < b) {
        return Pay::requester;
    }
    if (repair_credit_.bytes < b) {
        return Pay::budget;
    }
    rq.credit.bytes -= b;
    repair_credit_.bytes -= b;
    return Pay::ok;
}

void Source::handle_nak(const pgm::Packet& p,
                        const Endpoint& from,
                        std::int64_t now_ns,
                        PacketSink& sink) noexcept {
    // OpenPGM drops NAKs whose ports, source NLA or group NLA are not its own
    // (docs/PROTOCOL.md §6).
    if (p.sport != cfg_.dport || p.dport != cfg_.tsi.sport || p.nla != cfg_.nla
        || p.group != cfg_.group) {
        ++counters_.nak_invalid;
        return;
    }
    if (p.is_parity()) {
        // A parity NAK asks for parity packets of a transmission group (its sqn is the group
        // and a count): prizma has no FEC, so it is refused, not taken as a selective NAK for
        // that sqn. (prizma's SPMs announce no FEC, so an RFC 3208 receiver sends it none.)
        ++counters_.nak_parity;
        return;
    }
    ++counters_.nak_received;
    last_nak_ns_ = now_ns;
    count_held(now_ns);  // before a new requester's mark, and for earn()
    count_idle(now_ns);
    Requester& rq = requester(from, now_ns);
    earn(rq, now_ns);
    // What the NCF confirms: sqns queued for an RDATA, by this NAK or before it.
    std::array<Sqn, pgm::kMaxNakList + 1> confirmed{};
    std::size_t n_confirmed = 0;
    std::size_t n_in = 0;
    const std::size_t total = p.requested_count();
    for (std::size_t i = 0; i < total; ++i) {
        const Sqn s = p.requested(i);
        ++counters_.nak_sqns_received;
        if (!contains(s)) {
            ++counters_.nak_out_of_window;
            continue;
        }
        ++n_in;
        // Already queued: one RDATA answers every NAK for it.
        if (slot(s).repair_pending || admit(s, rq, now_ns)) {
            confirmed[n_confirmed++] = s;
        }
    }
    // RFC 3208 §5.2: an NCF to the group, at once, so that other receivers' NAKs for the same
    // data are suppressed; but only for data that will come, and within the budget.
    if (n_confirmed != 0) {
        send_ncf(p, std::span<const Sqn>(confirmed.data(), n_confirmed), rq, sink);
    } else if (n_in != 0) {
        ++counters_.ncf_suppressed;
    }
    if (n_in != total) {
        // Tell receivers the trail, so they report the loss instead of NAKing on: at once, but
        // at most once per spmr_answer_ivl (a lagging receiver's NAK storm must not become an
        // SPM storm into the same overfull receive buffers); a later one is scheduled.
        answer_with_spm(now_ns, sink);
    }
    flush_repairs(now_ns, sink);
}

bool Source::admit(Sqn s, Requester& rq, std::int64_t now_ns) noexcept {
    Slot& sl = slot(s);
    if (now_ns - sl.last_rdata_ns < repeat_ivl_ns_) {
        ++counters_.nak_eliminated;  // §5.3: an RDATA for it has just gone out
        return false;
    }
    // Flow control: a counted receiver the source waits for gets what it is missing outside
    // the NAK budget (the source earns no credit while it waits), and its own count of
    // max_repairs_per_sqn: in a NAK storm other receivers' NAKs use up a sqn's repairs, and a
    // refused repair would hold the source until it evicts the receiver. While a counted
    // receiver holds the source back, anything in the window its host asks for is repaired so:
    // what it consumed may be another subscription's on that host (a recorder whose flow gate
    // drains as far as its journal, which a second publisher's copy filled) that waits for
    // this sqn in order (docs/PROTOCOL.md §11).
    const std::uint32_t txw = mask_ + 1;
    const bool waited_for = flow_.active()
                            && (flow_.waits_for(rq.family, rq.addr, s)
                                || flow_.holds_back(rq.family, rq.addr, next_, txw));
    // max_repairs_per_sqn per host heard NAKing in the last kActiveNs (at most 255 in all): a
    // receiver that overflows its buffer loses a repair again, and several such hosts each
    // need their own repeats; what all the repeats cost stays within the budgets above.
    // (The requester table is walked only once the plain count is reached.)
    const auto repeats_spent = [&] {
        return sl.rdata_count >= cfg_.max_repairs_per_sqn
               && sl.rdata_count >= std::min<std::size_t>(
                      std::size_t{cfg_.max_repairs_per_sqn} * active_requesters(now_ns), UINT8_MAX);
    };
    if (waited_for ? sl.waited_count >= cfg_.max_repairs_per_sqn : repeats_spent()) {
        ++counters_.nak_repeat_limited;
        ++counters_.nak_ignored;
        return false;
    }
    const std::size_t wire = static_cast<std::size_t>(sl.header_len) + sl.tsdu_len;
    switch (waited_for ? Pay::ok : pay(rq, wire)) {
        case Pay::ok: break;
        case Pay::requester:
            ++counters_.nak_requester_limited;
            ++counters_.nak_ignored;
            return false;
        case Pay::budget:
            ++counters_.nak_budget_limited;
            ++counters_.nak_ignored;
            return false;
    }
    sl.repair_pending = true;
    if (waited_for && sl.waited_count != UINT8_MAX) {
        ++sl.waited_count;
    }
    ++counters_.rdata_queued;
    push_repair(s, waited_for ? 0U : static_cast<std::uint32_t>(wire));
    return true;
}

// The queue has a slot per window slot. An entry whose sqn left the window stays until it is
// reached (and dropped); when such entries fill the queue they are dropped at once, so that
// they never block or overwrite a live one: live entries are distinct in-window sqns other
// than `s`, so there is room after that.
void Source::push_repair(Sqn s, std::uint32_t paid) noexcept {
    if (repair_count_ > mask_) {
        drop_stale_repairs();
    }
    repair_queue_[(repair_head_ + repair_count_) & mask_] = QueuedRepair{s, paid};
    ++repair_count_;
}

void Source::drop_stale_repairs() noexcept {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < repair_count_; ++i) {
        const QueuedRepair q = repair_queue_[(repair_head_ + i) & mask_];
        if (contains(q.sqn)) {
            repair_queue_[(repair_head_ + kept++) & mask_] = q;
        } else {
            drop_repair(q);
        }
    }
    repair_count_ = kept;
}

// A repair that will not be sent: its credit goes back to the budget (the requester that paid
// may be gone from the table, so only the budget's share is refunded), within the budget's
// saved-credit bound.
void Source::drop_repair(const QueuedRepair& q) noexcept {
    ++counters_.repairs_dropped;
    repair_credit_.bytes += static_cast<double>(q.paid);
}

void Source::send_ncf(const pgm::Packet& p,
                      std::span<const Sqn> sqns,
                      Requester& rq,
                      PacketSink& sink) noexcept {
    PacketSpec spec;
    spec.type = PacketType::ncf;
    spec.sport = cfg_.tsi.sport;
    spec.dport = cfg_.dport;
    spec.gsi = cfg_.tsi.gsi;
    spec.sqn = sqns[0];
    spec.nla = p.nla;
    spec.group = p.group;
    spec.nak_list = sqns.subspan(1);
    if (pay(rq, pgm::encoded_size(spec)) != Pay::ok) {
        ++counters_.ncf_suppressed;  // the RDATA still comes
        return;
    }
    const std::size_t n = pgm::encode(scratch_, spec);
    if (n == 0) {
        return;
    }
    if (cfg_.checksum) {
        pgm::store_checksum(std::span<std::byte>(scratch_.data(), n), 0);
    }
    ++counters_.ncf_sent;
    counters_.bytes_sent += n;
    other_bytes_ += n;
    sink.emit(TxPacket{std::span<const std::byte>(scratch_.data(), n), {}, Route::downstream, {}});
}

// RDATA from the window (RFC 3208 §5.3): original sqn and options, current trail. The header
// is rebuilt; the payload's checksum contribution is the cached ODATA one (no re-sum).
void Source::flush_repairs(std::int64_t now_ns, PacketSink& sink) noexcept {
    repair_retry_ns_ = kNever;
    while (repair_count_ != 0) {
        const QueuedRepair q = repair_queue_[repair_head_ & mask_];
        const Sqn s = q.sqn;
        if (!contains(s)) {
            repair_head_ = (repair_head_ + 1) & mask_;
            --repair_count_;
            drop_repair(q);  // fell off the window while queued
            continue;
        }
        Slot& sl = slot(s);
        const std::size_t wire = static_cast<std::size_t>(sl.header_len) + sl.tsdu_len;
        if (!rdata_bucket_.take(wire, now_ns)) {
            repair_retry_ns_ = rdata_bucket_.when_available(wire, now_ns);
            return;
        }
        repair_head_ = (repair_head_ + 1) & mask_;
        --repair_count_;
        PacketSpec spec;
        spec.type = PacketType::rdata;
        spec.sport = cfg_.tsi.sport;
        spec.dport = cfg_.dport;
        spec.gsi = cfg_.tsi.gsi;
        spec.tsdu_length = sl.tsdu_len;
        spec.sqn = s;
        spec.trail = trail_;
        spec.fragment = sl.has_fragment ? &sl.fragment : nullptr;
        const std::size_t hlen = pgm::encode(scratch_, spec);
        if (cfg_.checksum) {
            // Payload sum = ODATA packet sum - ODATA header sum (ones' complement), so only
            // the headers are summed again, never the payload.
            std::byte* odata = slot_buf(s);
            const std::uint16_t stored = pgm::load_be16(odata + 6);
            pgm::store_be16(odata + 6, 0);
            const std::uint16_t odata_hdr =
                pgm::csum_partial(std::span<const std::byte>(odata, sl.header_len));
            pgm::store_be16(odata + 6, stored);
            const auto payload_sum =
                pgm::csum_add(sl.packet_sum, static_cast<std::uint16_t>(~odata_hdr));
            pgm::store_checksum(std::span<std::byte>(scratch_.data(), hlen), payload_sum);
        }
        sl.repair_pending = false;
        sl.last_rdata_ns = now_ns;
        if (sl.rdata_count != UINT8_MAX) {
            ++sl.rdata_count;
        }
        ++counters_.rdata_sent;
        counters_.bytes_sent += hlen + sl.tsdu_len;
        other_bytes_ += hlen + sl.tsdu_len;
        sink.emit(TxPacket{std::span<const std::byte>(scratch_.data(), hlen),
                           std::span<const std::byte>(slot_buf(s) + sl.header_len, sl.tsdu_len),
                           Route::downstream,
                           {}});
    }
}

}  // namespace prizma::protocol
