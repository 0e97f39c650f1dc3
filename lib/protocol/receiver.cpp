// SPDX-License-Identifier: Apache-2.0
// The receiver (docs/PROTOCOL.md §4): packets in (validation, SPM, data, the conflict check),
// timers (expiry, SPMR, status, the NAK runs), and the set-up. The peer table, the NAK
// scheduler and delivery are in peer_table.cpp, nak_scheduler.cpp and delivery.cpp.
#include "lib/protocol/receiver.hpp"

#include <sodium.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <new>

#include "lib/pgm/checksum.hpp"
#include "lib/protocol/peer.hpp"

namespace prizma::protocol {

using pgm::PacketSpec;
using pgm::PacketType;

namespace {

// Wheel tick: a power of two near a sixteenth of the shortest NAK interval (at least 1 us),
// so a bucket holds timers that are due together and the wheel spans ~32 intervals.
unsigned wheel_shift_for(const Timers& t) noexcept {
    const std::int64_t shortest =
        std::min({t.nak_bo_ivl_ns, t.nak_rpt_ivl_ns, t.nak_rdata_ivl_ns}) / 16;
    unsigned shift = 10;
    while (shift < 40 && (std::int64_t{1} << (shift + 1)) <= shortest) {
        ++shift;
    }
    return shift;
}

// Who sent a packet, as a source is pinned to it: the address (IP, GID, in-memory id) without
// the port or QP number. OpenPGM sends SPMs and RDATA from another socket than ODATA.
Endpoint sender_key(const Endpoint& from) noexcept {
    Endpoint e = from;
    e.port = 0;
    e.id = 0;
    return e;
}

// A keyed 64-bit fingerprint of a payload: SipHash-2-4 (libsodium's crypto_shorthash) under a
// random key drawn at construction, so two copies of one sqn with different bytes differ, and
// one who sees the traffic but not the key cannot make a copy with other bytes that does not.
// On the hot path (every stored packet, with detect_conflicts).
std::uint64_t fingerprint(std::span<const std::byte> b,
                          const std::array<unsigned char, 16>& key) noexcept {
    static_assert(crypto_shorthash_BYTES == 8 && crypto_shorthash_KEYBYTES == 16);
    unsigned char out[crypto_shorthash_BYTES];
    (void)crypto_shorthash(out, reinterpret_cast<const unsigned char*>(b.data()), b.size(),
                           key.data());
    std::uint64_t h = 0;
    std::memcpy(&h, out, sizeof h);
    return h;
}

// After a FIN the source only lingers: three rounds of NAK, NCF and RDATA.
std::int64_t fin_limit(const Timers& t) noexcept {
    return t.nak_bo_ivl_ns + 3 * (t.nak_bo_ivl_ns + t.nak_rpt_ivl_ns + t.nak_rdata_ivl_ns);
}

}  // namespace

Result<std::unique_ptr<Receiver>, Error> Receiver::create(const ReceiverConfig& cfg) {
    if (auto r = validate(cfg); !r) {
        return r.error();
    }
    if (sodium_init() < 0) {  // thread-safe; once per process does the work
        return Error(Errc::unsupported, "libsodium cannot be initialised");
    }
    try {
        return std::unique_ptr<Receiver>(new Receiver(cfg));
    } catch (const std::bad_alloc&) {
        return Error(std::make_error_code(std::errc::not_enough_memory),
                     "the receive windows of preallocated_peers sources: out of memory");
    }
}

Receiver::Receiver(const ReceiverConfig& cfg) : cfg_(cfg) {
    capacity_ = std::bit_ceil(cfg.rxw_sqns);
    stride_ = cfg.max_tpdu - pgm::kDataHeaderBytes;
    peer_bytes_ = rxw_ring_bytes(cfg) + capacity_ * sizeof(Peer::Slot)
                  + (2 * std::size_t{capacity_} + 2) * sizeof(Peer::Alloc);
    const std::size_t floor = std::max<std::size_t>(cfg.preallocated_peers, 1) * peer_bytes_;
    storage_budget_ = cfg.storage_budget_bytes != 0
                          ? std::max(cfg.storage_budget_bytes, floor)
                          : std::max<std::size_t>(cfg.preallocated_peers, 4) * peer_bytes_;
    repair_limit_ns_ = protocol::repair_limit_ns(cfg.timers);
    nak_burst_ = cfg.nak_burst_sqns != 0 ? cfg.nak_burst_sqns : kDefaultNakBurst;
    max_gap_ = std::min(capacity_, std::max(capacity_ / 16, 1024U));
    status_step_ = std::max(capacity_ / 4, 1U);
    fin_limit_ns_ = fin_limit(cfg.timers);
    peers_.resize(cfg.max_peers);
    for (std::size_t i = 0; i < cfg.preallocated_peers; ++i) {
        peers_[i] = new_peer(true);
        storage_used_ += peer_bytes_;
    }
    live_.reserve(cfg.max_peers);
    reassembly_.resize(pgm::kMaxApduBytes);
    scratch_.resize(512);
    due_.reserve(capacity_);
    wheel_shift_ = wheel_shift_for(cfg.timers);
    rng_ = runtime::Rng(cfg.seed, 0x2545F4914F6CDD1DULL);   // the salt of the first version
    randombytes_buf(print_key_.data(), print_key_.size());  // create() ran sodium_init()
}

Receiver::~Receiver() = default;

void Receiver::on_packet(const pgm::Packet& pkt,
                         const Endpoint& from,
                         std::int64_t now_ns,
                         PacketSink& sink,
                         std::int64_t rx_ns) noexcept {
    const bool upstream = pkt.is_upstream();
    // Downstream packets carry our data-destination port as dport; upstream ones as sport.
    if ((upstream ? pkt.sport : pkt.dport) != cfg_.dport) {
        ++counters_.foreign_dport;
        return;
    }
    if (!cfg_.allowed_gsis.empty()
        && std::find(cfg_.allowed_gsis.begin(), cfg_.allowed_gsis.end(), pkt.gsi)
               == cfg_.allowed_gsis.end()) {
        ++counters_.refused;  // not an allowed source: no state, no reply
        return;
    }
    const std::uint16_t sport = upstream ? pkt.dport : pkt.sport;  // the source's port
    if (pkt.is_parity()) {
        // FEC is not implemented: a parity packet's sequence number names a transmission
        // group (and its bytes are a code), so it must fill no gap and move no NAK state.
        // Dropped before it touches a window or a table; a known source's count shows it.
        switch (pkt.type) {
            case PacketType::odata:
            case PacketType::rdata:
                ++counters_.parity_dropped;
                if (Peer* known = find(pkt.gsi, sport)) {
                    ++known->counters.parity_dropped;
                }
                return;
            case PacketType::nak:
            case PacketType::ncf: ++counters_.parity_refused; return;
            default: break;
        }
    }
    if (upstream) {
        if (Peer* p = find(pkt.gsi, sport)) {
            if (pkt.type == PacketType::nak) {
                on_peer_nak(*p, pkt, now_ns);
            } else if (pkt.type == PacketType::spmr && p->spmr_deadline != kNever) {
                // §13.5: another receiver's SPMR suppresses ours.
                p->spmr_deadline = now_ns + cfg_.timers.spmr_expiry_ns;
                ++counters_.spmr_suppressed;
            }
        }
        return;
    }
    if (pkt.type != PacketType::spm && pkt.type != PacketType::odata
        && pkt.type != PacketType::rdata && pkt.type != PacketType::ncf) {
        return;
    }
    Peer* p =
        pkt.type == PacketType::ncf ? find(pkt.gsi, sport) : find_or_add(pkt.gsi, sport, now_ns);
    if (p == nullptr || !p->takes_packets()) {
        // Refused, being drained (a new session after expiry starts fresh), or gone: nothing
        // follows a source's `left`.
        return;
    }
    if (pkt.type != PacketType::spm && p->sender && sender_key(from) != *p->sender) {
        ++counters_.refused;  // data or NCF from another host than the source's SPMs
        return;
    }
    switch (pkt.type) {
        case PacketType::spm: on_spm(*p, pkt, from, now_ns); break;
        case PacketType::odata:
        case PacketType::rdata:
            p->last_heard_ns = now_ns;
            if (!p->nla) {
                p->from = from;
            }
            on_data(*p, pkt, now_ns, rx_ns != 0 ? rx_ns : now_ns);
            break;
        case PacketType::ncf:
            p->last_heard_ns = now_ns;
            on_ncf(*p, pkt, now_ns);
            break;
        default: break;
    }
    (void)sink;
}

void Receiver::start(Peer& p, Sqn first, std::optional<Sqn> trail) const noexcept {
    Sqn begin = first;
    if (trail && precedes(*trail, first)) {
        const auto back = static_cast<std::uint32_t>(distance(*trail, first));
        if (cfg_.join == JoinPolicy::from_trail) {
            // Recover back to the source's trail, but never more than max_recover_sqns.
            begin = first - std::min(back, cfg_.max_recover_sqns);
        } else if (back <= cfg_.max_recover_sqns) {
            // The head of a young stream (its whole history within max_recover_sqns): a
            // receiver that listened when the source began, but lost its first packets,
            // recovers them instead of starting later without a word (docs/PROTOCOL.md §4.1).
            begin = *trail;
        }
    }
    p.started = true;
    p.next = begin;
    p.lead = begin - 1;
    p.dropped_lead = begin - 1;
    p.trail_done = begin;
    if (cfg_.send_status) {
        p.status_pos = begin;
        p.status_due = 0;  // the source learns of this receiver at the next timer run
    }
}

// The source's trail (SPM, ODATA, RDATA) is the oldest sqn it can still repair: anything
// missing before it is unrecoverable (RFC 3208 §6.3 "cancellation").
void Receiver::apply_trail(Peer& p, std::int64_t now_ns) noexcept {
    if (!p.started || !p.trail || !precedes(p.next, *p.trail)) {
        p.trail_done = p.next;  // keeps the cursor within the window
        return;
    }
    (void)now_ns;
    // Data the source no longer holds and that we never heard of is lost too.
    Sqn last_gone = *p.trail - 1;
    const Sqn window_end = p.next + (capacity_ - 1);
    if (precedes(window_end, last_gone)) {
        last_gone = window_end;
    }
    const std::uint32_t mask = capacity_ - 1;
    // Sqns before trail_done were handled by an earlier call: each sqn is visited once, not
    // once per packet while the receiver is behind the source's trail.
    Sqn s = precedes(p.next, p.trail_done) && precedes_or_equal(p.trail_done, last_gone + 1)
                ? p.trail_done
                : p.next;
    p.trail_done = last_gone + 1;
    for (; precedes_or_equal(s, last_gone); ++s) {
        if (precedes(p.lead, s)) {
            p.wheel.cancel(s.value & mask);
            auto& sl = p.slot(s, mask);
            sl = Peer::Slot{};
            sl.state = SlotState::lost;
            bump(p, &ReceiverCounters::lost_sqns, &PeerCounters::lost_sqns);
            p.lead = s;
        } else if (is_missing(p.slot(s, mask).state)) {
            lose(p, s);
        }
    }
}

// The source's trail only moves forward (serial order); an older value is ignored.
void Receiver::note_trail(Peer& p, Sqn trail) noexcept {
    if (!p.trail || precedes(*p.trail, trail)) {
        p.trail = trail;
    }
}

// An SPM far ahead (is_far) or from another sender than the pinned one is applied only when
// kConfirmSpms of them agree (same sender and NLA, rising SPM sequence numbers in small steps,
// trails not going back), and one from another sender only while the pinned sender has been
// silent for two ambient SPM intervals. One spoofed SPM moves nothing.
bool Receiver::spm_confirmed(Peer& p,
                             const pgm::Packet& pkt,
                             const Endpoint& who,
                             std::int64_t now_ns) noexcept {
    const bool other = p.sender && (who != *p.sender || pkt.nla != p.nla);
    const bool far = p.spm_sqn && is_far(p, pkt);
    if (!other && !far) {
        p.cand.count = 0;
        return true;
    }
    if (other && now_ns - p.pinned_spm_ns < 2 * cfg_.timers.ambient_spm_ns) {
        return false;  // the pinned sender is alive
    }
    auto& c = p.cand;
    const bool follows = c.count != 0 && c.sender == who && c.nla == pkt.nla
                         && precedes(c.spm_sqn, pkt.sqn) && distance(c.spm_sqn, pkt.sqn) <= 64
                         && !precedes(pkt.trail, c.trail);
    if (follows) {
        ++c.count;
    } else {
        c = Peer::Candidate{who, pkt.nla, pkt.sqn, pkt.trail, 1};
    }
    c.spm_sqn = pkt.sqn;
    c.trail = pkt.trail;
    if (c.count < kConfirmSpms) {
        return false;
    }
    c.count = 0;
    if (other) {
        ++counters_.repins;
        p.sender = who;
    }
    return true;
}

// Further than one packet may move a source: the SPM sequence by more than kMaxSpmJump, the
// trail past the end of our window, or the lead more than a window past ours.
bool Receiver::is_far(const Peer& p, const pgm::Packet& pkt) const noexcept {
    if (precedes(*p.spm_sqn, pkt.sqn)
        && distance(*p.spm_sqn, pkt.sqn) > static_cast<std::int32_t>(kMaxSpmJump)) {
        return true;
    }
    if (!p.started) {
        return false;
    }
    const Sqn window_end = p.next + (capacity_ - 1);
    return precedes(window_end, pkt.trail)
           || (precedes(p.lead, pkt.lead)
               && distance(p.lead, pkt.lead) > static_cast<std::int32_t>(capacity_));
}

// A confirmed move of the window to `begin`: everything before it is lost (one loss event).
void Receiver::resync(Peer& p, Sqn begin) noexcept {
    if (!p.started || !precedes(p.next, begin)) {
        return;
    }
    const std::uint32_t mask = capacity_ - 1;
    p.wheel.drain([](std::uint32_t) {});
    std::uint32_t counted = 0;  // lost sqns already counted in lost_sqns
    for (Sqn s = p.next; p.in_range(s); ++s) {
        auto& sl = p.slot(s, mask);
        counted += sl.state == SlotState::lost ? 1U : 0U;
        p.release(sl);
        sl = Peer::Slot{};
    }
    const auto gone = static_cast<std::uint32_t>(distance(p.next, begin));
    bump(p, &ReceiverCounters::lost_sqns, &PeerCounters::lost_sqns, gone - counted);
    ++counters_.resyncs;
    if (p.resync_lost == 0) {
        p.resync_from = p.next;
    }  // else: an earlier resync not yet reported; one event covers both ranges
    p.resync_lost = static_cast<std::uint32_t>(distance(p.resync_from, begin));
    p.missing = 0;
    p.next = begin;
    p.lead = begin - 1;
    p.dropped_lead = begin - 1;
    p.trail_done = begin;
    p.scan.reset();
    p.nak_deadline = kNever;
}

// Everything up to `last` that we have not seen becomes missing (within the window) and the
// rest past the window a tail run, reported once the window is drained (before `left`).
void Receiver::lose_tail(Peer& p, Sqn last, std::int64_t now_ns) noexcept {
    if (!p.started || !precedes(p.lead, last)) {
        return;
    }
    mark_missing(p, last, now_ns);
    if (precedes(p.lead, last) && p.tail_lost == 0) {  // past the window's end
        p.tail_from = p.lead + 1;
        p.tail_lost = static_cast<std::uint32_t>(distance(p.lead, last));
        bump(p, &ReceiverCounters::lost_sqns, &PeerCounters::lost_sqns, p.tail_lost);
    }
}

void Receiver::on_spm(Peer& p,
                      const pgm::Packet& pkt,
                      const Endpoint& from,
                      std::int64_t now_ns) noexcept {
    ++counters_.spm_received;
    const Endpoint who = sender_key(from);
    const bool same = !p.sender || (who == *p.sender && pkt.nla == p.nla);
    // §6.2: SPMs are sequenced; only a newer one (within half the number space) counts.
    if (same && p.spm_sqn && !precedes(*p.spm_sqn, pkt.sqn)) {
        return;
    }
    if (precedes(pkt.lead + 1, pkt.trail) || !spm_confirmed(p, pkt, who, now_ns)) {
        ++counters_.refused;  // a trail past the lead, too far, or another sender
        return;
    }
    if (p.started && precedes(p.next + (capacity_ - 1), pkt.trail)) {
        resync(p, pkt.trail);  // confirmed: the source's window has left ours behind
    }
    p.last_heard_ns = now_ns;
    p.sender = who;
    p.pinned_spm_ns = now_ns;
    p.from = from;
    p.spm_sqn = pkt.sqn;
    p.nla = pkt.nla;
    // OPT_PARITY_PRM: what FEC the source offers (shown per source; prizma uses none).
    p.counters.fec_group_size = pkt.opts.has_parity_prm ? pkt.opts.parity_group_size : 0;
    p.counters.fec_modes = pkt.opts.has_parity_prm ? pkt.opts.parity_prm_flags : 0;
    if (pkt.opts.has_parity_prm) {
        ++counters_.fec_spms;
    }
    p.spmr_deadline = kNever;
    p.spmrs = 0;
    if (!pkt.opts.rst) {
        p.rst_spms = 0;  // two RSTs in a row count, not two an hour apart
    }
    if (pkt.opts.rst) {
        // OPT_RST (§9.8): the source aborted; nothing missing will ever come. Two are needed
        // (a source sends three), so one forged packet cannot turn repairs into loss.
        if (++p.rst_spms < 2) {
            return;
        }
        if (!p.started) {
            start(p, pkt.lead + 1, std::nullopt);
        }
        p.state = PeerState::finishing;
        lose_tail(p, pkt.lead, now_ns);  // what it sent and we never saw is lost too
        lose_all_missing(p);
        p.give_up = true;
        return;
    }
    if (!p.started) {
        // Empty window: lead = trail - 1. first_packet starts after the current lead.
        start(p, pkt.lead + 1, pkt.trail);
    }
    unpark(p, now_ns);
    note_trail(p, pkt.trail);
    apply_trail(p, now_ns);
    // §6.3: SPM_LEAD beyond what we have reveals tail loss.
    mark_missing(p, pkt.lead, now_ns);
    if (pkt.opts.fin) {
        // What is missing gets a few more rounds while the source lingers, then is lost.
        p.state = PeerState::finishing;
        p.fin_lead = pkt.lead;
        p.fin_deadline = std::min(p.fin_deadline, now_ns + fin_limit_ns_);
    }
}

// The same sqn again, still held or delivered lately: different bytes are counted (never
// silent); which copy was the source's, only authentication can tell.
void Receiver::check_conflict(Peer& p, Sqn s, const pgm::Packet& pkt) noexcept {
    const auto& sl = p.slot(s, capacity_ - 1);
    if (!sl.has_print || sl.print_sqn != s) {
        return;
    }
    if (sl.len != pkt.payload.size() || sl.print != fingerprint(pkt.payload, print_key_)) {
        ++counters_.conflicts;
    }
}

// Counts a data packet and takes what it tells of the source (start, trail, a FIN that was
// not one); false when it goes no further: oversize, inconsistent, a duplicate, or outside
// the window.
bool Receiver::admit_data(Peer& p, const pgm::Packet& pkt, std::int64_t now_ns) noexcept {
    const bool is_rdata = pkt.type == PacketType::rdata;
    if (is_rdata) {
        bump(p, &ReceiverCounters::rdata_received, &PeerCounters::rdata_received);
    } else {
        bump(p, &ReceiverCounters::odata_received, &PeerCounters::odata_received);
    }
    counters_.bytes_received += pkt.raw.size();
    if (pkt.payload.size() > stride_) {
        ++counters_.oversize;
        return false;
    }
    const Sqn s = pkt.sqn;
    if (precedes(s, pkt.trail)) {
        ++counters_.refused;  // a source's trail is never past the packet it is in
        return false;
    }
    if (!p.started && is_rdata) {
        // A repair for another receiver tells nothing of where the source is now: starting at
        // it (an old sqn) would NAK everything from there to the lead, or count a recovering
        // flow member a window further back than it is. ODATA or an SPM starts the window.
        return false;
    }
    if (!p.started) {
        Sqn first = s;
        if (pkt.opts.has_fragment && precedes(pkt.opts.fragment.first_sqn, s)
            && distance(pkt.opts.fragment.first_sqn, s) < static_cast<std::int32_t>(capacity_)) {
            first = pkt.opts.fragment.first_sqn;  // start at the APDU's head, NAK the rest
        }
        start(p, first, pkt.trail);
        if (p.spmr_deadline == kNever && !p.nla && p.spmrs < kMaxSpmrs) {
            // §13: data before any SPM: ask for one after SPMR_EXPIRY unless another asks.
            p.spmr_deadline = now_ns + cfg_.timers.spmr_expiry_ns;
        }
    }
    if (precedes(s, p.next)) {
        if (distance(s, p.next) <= static_cast<std::int32_t>(capacity_)) {
            check_conflict(p, s, pkt);
        }
        bump(p, &ReceiverCounters::duplicates, &PeerCounters::duplicates);
        return false;
    }
    if (distance(p.next, s) >= static_cast<std::int32_t>(capacity_)) {
        // No room: dropped now, NAKed once the window moves. Its trail is not taken: one
        // packet must not move a source by more than a window. Its sqn is remembered (up to
        // max_gap_ past the window) so that the gap our own drops leave is not taken for a
        // forged jump when the window moves on.
        ++counters_.outside_window;
        if (distance(p.next, s) < static_cast<std::int32_t>(capacity_ + max_gap_)
            && precedes(p.dropped_lead, s)) {
            p.dropped_lead = s;
        }
        return false;
    }
    note_trail(p, pkt.trail);
    if (p.state == PeerState::finishing && p.rst_spms < 2 && precedes(p.fin_lead, s)) {
        p.state = PeerState::live;  // data after the FIN: that FIN was not the source's
        p.fin_deadline = kNever;
    }
    return true;
}

void Receiver::on_data(Peer& p,
                       const pgm::Packet& pkt,
                       std::int64_t now_ns,
                       std::int64_t rx_ns) noexcept {
    if (!admit_data(p, pkt, now_ns)) {
        return;
    }
    const Sqn s = pkt.sqn;
    const std::uint32_t mask = capacity_ - 1;
    const bool beyond_lead = precedes(p.lead, s);
    const Sqn known = precedes(p.lead, p.dropped_lead) ? p.dropped_lead : p.lead;
    if (beyond_lead && precedes(known, s)
        && distance(known, s) > static_cast<std::int32_t>(max_gap_)) {
        // One packet opens at most max_gap_ missing sqns: beyond that, the source's own SPM
        // (asked for at once) tells the lead, and the gap is NAKed from there.
        ++counters_.refused;
        ask_lead(p, now_ns);
        return;
    }
    bool was_missing = false;
    if (!beyond_lead) {
        const auto st = p.slot(s, mask).state;
        if (st == SlotState::have || st == SlotState::lost) {
            check_conflict(p, s, pkt);
            bump(p, &ReceiverCounters::duplicates, &PeerCounters::duplicates);
            apply_trail(p, now_ns);
            return;
        }
        was_missing = is_missing(st);
    }
    Peer::Slot fresh{};
    std::byte* dst = p.store(fresh, pkt.payload.size());
    if (dst == nullptr) {
        // No buffer space: dropped now; as a missing sqn it is NAKed again later.
        ++counters_.outside_window;
        if (beyond_lead) {
            mark_missing(p, s, now_ns);
        }
        apply_trail(p, now_ns);
        return;
    }
    if (beyond_lead) {
        mark_missing(p, s - 1, now_ns);
        p.lead = s;
    }
    auto& sl = p.slot(s, mask);
    if (was_missing) {
        --p.missing;
        p.wheel.cancel(s.value & mask);
        bump(p, &ReceiverCounters::repaired, &PeerCounters::repaired);
        // A repair clocks the next NAK (pacing) and shows that the source repairs us.
        p.progress_ns = now_ns;
        p.nak_tokens = std::min(static_cast<double>(nak_burst_), p.nak_tokens + 1);
        if (p.naks_parked && p.nak_tokens >= static_cast<double>(pgm::kMaxNakList + 1)) {
            p.nak_deadline = std::min(p.nak_deadline, now_ns);  // a full NAK list's worth
        }
    }
    sl = fresh;
    sl.state = SlotState::have;
    sl.rx_ns = rx_ns;
    if (cfg_.detect_conflicts) {
        sl.has_print = true;
        sl.print_sqn = s;
        sl.print = fingerprint(pkt.payload, print_key_);
    }
    sl.len = static_cast<std::uint16_t>(pkt.payload.size());
    sl.has_fragment = pkt.opts.has_fragment;
    sl.fragment = pkt.opts.fragment;
    if (!pkt.payload.empty()) {
        std::memcpy(dst, pkt.payload.data(), pkt.payload.size());
    }
    apply_trail(p, now_ns);
}

void Receiver::on_timer(std::int64_t now_ns, PacketSink& sink) noexcept {
    for (Peer* pp : live_) {
        Peer& p = *pp;
        if (p.forget_pending) {
            p.forget_pending = false;
            sink.forget(p.from);  // evicted: e.g. the verbs address handle of its source
        }
        if (!p.expired() && now_ns - p.last_heard_ns >= cfg_.timers.peer_expiry_ns) {
            expire(p);
            sink.forget(p.from);  // e.g. the verbs address handle of its source
            continue;
        }
        if (p.expired()) {
            continue;
        }
        if (p.finished() && now_ns >= p.fin_deadline) {
            p.give_up = true;  // an APDU still waiting for fragments is lost now
        }
        spmr_timer(p, now_ns, sink);
        if (now_ns >= p.status_due) {
            send_status(p, false, sink);
            p.status_due = now_ns + cfg_.status_ivl_ns;
        }
        if (p.missing != 0 && now_ns >= p.nak_deadline) {
            run_naks(p, now_ns, sink);
        } else if (p.missing == 0) {
            p.nak_deadline = kNever;
        }
    }
}

// Data far past the lead: an SPMR for the source's lead, at most once per SPMR_EXPIRY.
void Receiver::ask_lead(Peer& p, std::int64_t now_ns) const noexcept {
    if (cfg_.passive || now_ns - p.last_lead_ask_ns < cfg_.timers.spmr_expiry_ns) {
        return;
    }
    p.last_lead_ask_ns = now_ns;
    if (p.spmr_deadline == kNever && p.spmrs < kMaxSpmrs) {
        p.spmr_deadline = now_ns;
    }
}

// §13.5: SPMRs for a source heard without SPM, at doubling intervals, kMaxSpmrs at most
// (ambient SPMs come anyway): a forged source costs every receiver a few packets, not a stream.
void Receiver::spmr_timer(Peer& p, std::int64_t now_ns, PacketSink& sink) noexcept {
    if (now_ns < p.spmr_deadline) {
        return;
    }
    if (p.spmrs >= kMaxSpmrs) {
        p.spmr_deadline = kNever;
        return;
    }
    send_spmr(p, sink);
    ++p.spmrs;
    // Without an SPM yet: again at doubling intervals. A known source asked for its lead
    // (ask_lead): once; the next far packet asks again.
    p.spmr_deadline =
        p.spm_sqn.has_value() ? kNever : now_ns + (cfg_.timers.spmr_expiry_ns << p.spmrs);
}

// SPMR (§13): header only, multicast (so other receivers suppress theirs) and unicast to the
// source as OpenPGM does.
void Receiver::send_spmr(Peer& p, PacketSink& sink) noexcept {
    PacketSpec spec;
    spec.type = PacketType::spmr;
    spec.sport = cfg_.dport;
    spec.dport = p.tsi.sport;
    spec.gsi = p.tsi.gsi;
    const std::size_t n = pgm::encode(scratch_, spec);
    if (n == 0) {
        return;
    }
    pgm::store_checksum(std::span<std::byte>(scratch_.data(), n), 0);
    counters_.spmr_sent += 1;
    const std::span<const std::byte> bytes(scratch_.data(), n);
    sink.emit(TxPacket{bytes, {}, Route::downstream, {}});
    sink.emit(TxPacket{bytes, {}, Route::unicast, p.from});
}

// Flow control: ACK (RX_MAX = the lead) with prizma's status option, where NAKs go.
void Receiver::send_status(Peer& p, bool leaving, PacketSink& sink) noexcept {
    pgm::StatusInfo st;
    st.consumed = p.next;
    st.window = capacity_;
    st.receiver_id = cfg_.receiver_id;
    st.tag = cfg_.status_tag;
    st.leaving = leaving;
    PacketSpec spec;
    spec.type = PacketType::ack;
    spec.sport = cfg_.dport;  // upstream, as a NAK
    spec.dport = p.tsi.sport;
    spec.gsi = p.tsi.gsi;
    spec.sqn = p.lead;
    spec.status = &st;
    const std::size_t n = pgm::encode(scratch_, spec);
    if (n == 0) {
        return;
    }
    pgm::store_checksum(std::span<std::byte>(scratch_.data(), n), 0);
    p.status_pos = p.next;
    ++counters_.status_sent;
    sink.emit(TxPacket{std::span<const std::byte>(scratch_.data(), n), {}, Route::unicast, p.from});
}

void Receiver::leave(PacketSink& sink) noexcept {
    for (Peer* pp : live_) {
        Peer& p = *pp;
        if (p.status_due != kNever && !p.expired()) {
            send_status(p, true, sink);
            p.status_due = kNever;
        }
    }
}

std::int64_t Receiver::next_deadline() const noexcept {
    std::int64_t d = kNever;
    for (const Peer* pp : live_) {
        const Peer& p = *pp;
        if (!p.expired()) {
            d = std::min({d, p.nak_deadline, p.spmr_deadline, p.status_due,
                          p.last_heard_ns + cfg_.timers.peer_expiry_ns});
            if (p.finished() && !p.give_up) {
                d = std::min(d, p.fin_deadline);
            }
        }
    }
    return d;
}

}  // namespace prizma::protocol
