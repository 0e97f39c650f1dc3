// SPDX-License-Identifier: Apache-2.0
#include "lib/protocol/receiver.hpp"

#include <sodium.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <new>

#include "lib/pgm/checksum.hpp"
#include "lib/protocol/packed_ring.hpp"
#include "lib/protocol/timer_wheel.hpp"
#include "lib/runtime/page_buffer.hpp"

namespace prizma::protocol {

using pgm::PacketSpec;
using pgm::PacketType;

namespace {

enum class SlotState : std::uint8_t {
    empty,      // beyond the lead, or already delivered
    back_off,   // §6.3 NAK_RB_IVL running
    wait_ncf,   // NAK sent, NAK_RPT_IVL running
    wait_data,  // NCF seen, NAK_RDATA_IVL running
    have,       // data stored
    lost,       // unrecoverable, to be reported
};

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

bool is_missing(SlotState s) noexcept {
    return s == SlotState::back_off || s == SlotState::wait_ncf || s == SlotState::wait_data;
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

struct Receiver::Peer {
    struct Slot {
        SlotState state = SlotState::empty;
        std::uint8_t ncf_retries = 0;
        std::uint8_t data_retries = 0;
        bool has_fragment = false;
        bool has_buf = false;
        std::uint16_t len = 0;
        std::uint32_t off = 0;    // payload offset in `buffers`
        std::uint32_t alloc = 0;  // index of its record in `allocs`
        pgm::FragmentInfo fragment{};
        std::int64_t rx_ns = 0;  // when it was received
        // Missing: when it was found missing (the absolute repair deadline counts from it).
        std::int64_t missing_since = 0;
        // Another host's NAK or NCF held back our NAK once: the next round NAKs regardless.
        bool yielded = false;
        bool has_print = false;  // `print` is the fingerprint of print_sqn's payload
        Sqn print_sqn{};         // kept after delivery: a later copy is still compared
        std::uint64_t print = 0;
        TimerLink timer{};  // its NAK timer's place in the wheel while missing
    };
    // SPMs that would move the window too far or change the sender, until kConfirmSpms agree.
    struct Candidate {
        Endpoint sender{};
        pgm::Nla nla{};
        Sqn spm_sqn{};
        Sqn trail{};
        std::uint8_t count = 0;
    };
    // Payloads are packed into `buffers` in arrival order; records in `allocs` (same order)
    // let the oldest space be reclaimed once delivered, even when repairs arrive late.
    struct Alloc {
        std::uint32_t off = 0;
        bool freed = false;
    };
    bool in_use = false;
    bool used = false;  // has held a source: its slots need clearing before the next one
    Tsi tsi{};
    PeerCounters counters{};
    Endpoint from{};
    bool pinned = false;             // sender and NLA fixed by the first SPM
    Endpoint sender{};               // sender_key() of the pinned sender
    std::int64_t pinned_spm_ns = 0;  // last SPM from it
    Candidate cand{};
    std::uint8_t spmrs = 0;                         // SPMRs sent while no SPM came (capped)
    std::int64_t last_lead_ask_ns = INT64_MIN / 2;  // ask_lead
    Sqn dropped_lead{};           // the furthest sqn dropped outside the window (see admit_data)
    bool naks_parked = false;     // missing sqns waiting, without timers, for the first SPM
    bool forget_pending = false;  // evicted: forget its address at the next timer run
    std::uint8_t rst_spms = 0;    // SPMs with OPT_RST seen (two needed)
    Sqn fin_lead{};
    std::int64_t fin_deadline = kNever;  // FIN seen: what is missing is lost by then
    Sqn resync_from{};                   // a confirmed resync lost [resync_from, +resync_lost)
    std::uint32_t resync_lost = 0;
    Sqn tail_from{};  // an RST's lead past our window: lost, reported last
    std::uint32_t tail_lost = 0;
    bool give_up = false;  // expired, evicted, reset or past its FIN deadline: no more waiting
    // Reassembly of the APDU at scan_head resumes at scan_next (offset scan_off): each
    // fragment is checked once, not at every poll while the APDU waits.
    bool scan_valid = false;
    Sqn scan_head{};
    Sqn scan_next{};
    std::uint32_t scan_off = 0;
    bool has_nla = false;
    pgm::Nla nla{};
    bool has_spm = false;
    Sqn spm_sqn{};
    bool started = false;
    Sqn next{};  // next sequence number to deliver
    Sqn lead{};  // highest sequence number known (next - 1 when none)
    bool has_trail = false;
    Sqn trail{};  // the source's advertised trail
    std::int64_t last_heard_ns = 0;
    std::int64_t nak_deadline = kNever;
    std::int64_t spmr_deadline = kNever;
    std::uint32_t missing = 0;
    bool joined_pending = false;
    bool finished = false;  // FIN or RST seen
    bool expired = false;
    bool left_reported = false;
    Sqn trail_done{};  // apply_trail has handled every sqn before this one
    // Flow control: the consumed position of the last status sent, and when the next is due.
    Sqn status_pos{};
    std::int64_t status_due = kNever;
    std::vector<Slot> slots;
    // NAK timers (§6.3) of the missing sqns, by slot index; the links are in the slots.
    struct SlotLinks {
        Slot* slots = nullptr;
        TimerLink& operator[](std::uint32_t i) const noexcept { return slots[i].timer; }
    };
    TimerWheel<SlotLinks> wheel;
    // Not a vector: a peer allocated at its first packet must not zero ~100 MB then (a pause
    // of tens of ms on the owner thread); its pages come at their first use.
    runtime::PageBuffer buffers;
    std::vector<Alloc> allocs;
    std::size_t alloc_first = 0;  // oldest live record
    std::size_t alloc_count = 0;
    std::size_t head_off = 0;

    std::byte* store(Slot& sl, std::size_t len) noexcept {
        const std::size_t n = (len + 63) & ~std::size_t{63};
        if (alloc_count == allocs.size()) {
            return nullptr;
        }
        const std::size_t off =
            ring_fit(alloc_count == 0, head_off, allocs[alloc_first].off, n, buffers.size());
        if (off == kNoFit) {
            return nullptr;
        }
        // Wrapped by a compare, not `%`: the ring's size is no power of two, and a 64-bit
        // division per packet was a third of on_data's time.
        std::size_t idx = alloc_first + alloc_count;
        if (idx >= allocs.size()) {
            idx -= allocs.size();
        }
        allocs[idx] = Alloc{static_cast<std::uint32_t>(off), false};
        ++alloc_count;
        head_off = off + n;
        sl.has_buf = true;
        sl.off = static_cast<std::uint32_t>(off);
        sl.alloc = static_cast<std::uint32_t>(idx);
        return buffers.data() + off;
    }
    void release(Slot& sl) noexcept {
        if (!sl.has_buf) {
            return;
        }
        sl.has_buf = false;
        allocs[sl.alloc].freed = true;
        while (alloc_count != 0 && allocs[alloc_first].freed) {
            if (++alloc_first == allocs.size()) {
                alloc_first = 0;
            }
            --alloc_count;
        }
    }

    Slot& slot(Sqn s, std::uint32_t mask) noexcept { return slots[s.value & mask]; }
    /// The sqn held by slot idx, for a slot inside [next, next + capacity).
    [[nodiscard]] Sqn sqn_of(std::uint32_t idx, std::uint32_t mask) const noexcept {
        return next + ((idx - (next.value & mask)) & mask);
    }
    [[nodiscard]] bool in_range(Sqn s) const noexcept {
        return precedes_or_equal(next, s) && precedes_or_equal(s, lead);
    }
};

inline void Receiver::bump(Peer& p,
                           std::uint64_t ReceiverCounters::*total,
                           std::uint64_t PeerCounters::*own,
                           std::uint64_t n) noexcept {
    counters_.*total += n;
    p.counters.*own += n;
}

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
    rng_ = cfg.seed * 0x9E3779B97F4A7C15ULL + 0x2545F4914F6CDD1DULL;
    randombytes_buf(print_key_.data(), print_key_.size());  // create() ran sodium_init()
}

Receiver::~Receiver() = default;

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

// RFC 3208 §6.3: NAK_RB_IVL is chosen at random, uniformly over (0, NAK_BO_IVL].
std::int64_t Receiver::backoff(std::int64_t now_ns) noexcept {
    rng_ ^= rng_ >> 12U;
    rng_ ^= rng_ << 25U;
    rng_ ^= rng_ >> 27U;
    const std::uint64_t r = rng_ * 0x2545F4914F6CDD1DULL;
    const auto ivl = static_cast<std::uint64_t>(cfg_.timers.nak_bo_ivl_ns);
    return now_ns + 1 + static_cast<std::int64_t>(r % ivl);
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
        if (e && !e->in_use) {
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
    p.in_use = true;
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
            if (p->expired || p->has_spm != confirmed) {
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
    p.expired = true;
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
    if (p == nullptr || p->expired || p->left_reported) {
        // Refused, being drained (a new session after expiry starts fresh), or gone: nothing
        // follows a source's `left`.
        return;
    }
    if (pkt.type != PacketType::spm && p->pinned && sender_key(from) != p->sender) {
        ++counters_.refused;  // data or NCF from another host than the source's SPMs
        return;
    }
    switch (pkt.type) {
        case PacketType::spm: on_spm(*p, pkt, from, now_ns); break;
        case PacketType::odata:
        case PacketType::rdata:
            p->last_heard_ns = now_ns;
            if (!p->has_nla) {
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

void Receiver::start(Peer& p, Sqn first, Sqn trail, bool has_trail) const noexcept {
    Sqn begin = first;
    if (cfg_.join == JoinPolicy::from_trail && has_trail && precedes(trail, first)) {
        // Recover back to the source's trail, but never more than max_recover_sqns.
        const auto back = static_cast<std::uint32_t>(distance(trail, first));
        begin = first - std::min(back, cfg_.max_recover_sqns);
    }
    p.started = true;
    p.next = begin;
    p.lead = begin - 1;
    p.dropped_lead = begin - 1;
    p.trail_done = begin;
    if (cfg_.send_status && !cfg_.passive) {
        p.status_pos = begin;
        p.status_due = 0;  // the source learns of this receiver at the next timer run
    }
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

// The source's trail (SPM, ODATA, RDATA) is the oldest sqn it can still repair: anything
// missing before it is unrecoverable (RFC 3208 §6.3 "cancellation").
void Receiver::apply_trail(Peer& p, std::int64_t now_ns) noexcept {
    if (!p.started || !p.has_trail || !precedes(p.next, p.trail)) {
        p.trail_done = p.next;  // keeps the cursor within the window
        return;
    }
    (void)now_ns;
    // Data the source no longer holds and that we never heard of is lost too.
    Sqn last_gone = p.trail - 1;
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
    if (!p.has_trail || precedes(p.trail, trail)) {
        p.trail = trail;
    }
    p.has_trail = true;
}

// An SPM far ahead (is_far) or from another sender than the pinned one is applied only when
// kConfirmSpms of them agree (same sender and NLA, rising SPM sequence numbers in small steps,
// trails not going back), and one from another sender only while the pinned sender has been
// silent for two ambient SPM intervals. One spoofed SPM moves nothing.
bool Receiver::spm_confirmed(Peer& p,
                             const pgm::Packet& pkt,
                             const Endpoint& who,
                             std::int64_t now_ns) noexcept {
    const bool other = p.pinned && (who != p.sender || pkt.nla != p.nla);
    const bool far = p.has_spm && is_far(p, pkt);
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
    if (precedes(p.spm_sqn, pkt.sqn)
        && distance(p.spm_sqn, pkt.sqn) > static_cast<std::int32_t>(kMaxSpmJump)) {
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
    p.scan_valid = false;
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

void Receiver::on_spm(Peer& p,
                      const pgm::Packet& pkt,
                      const Endpoint& from,
                      std::int64_t now_ns) noexcept {
    ++counters_.spm_received;
    const Endpoint who = sender_key(from);
    const bool same = !p.pinned || (who == p.sender && pkt.nla == p.nla);
    // §6.2: SPMs are sequenced; only a newer one (within half the number space) counts.
    if (same && p.has_spm && !precedes(p.spm_sqn, pkt.sqn)) {
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
    p.pinned = true;
    p.sender = who;
    p.pinned_spm_ns = now_ns;
    p.from = from;
    p.has_spm = true;
    p.spm_sqn = pkt.sqn;
    p.has_nla = true;
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
            start(p, pkt.lead + 1, pkt.trail, false);
        }
        p.finished = true;
        lose_tail(p, pkt.lead, now_ns);  // what it sent and we never saw is lost too
        lose_all_missing(p);
        p.give_up = true;
        return;
    }
    if (!p.started) {
        // Empty window: lead = trail - 1. first_packet starts after the current lead.
        start(p, pkt.lead + 1, pkt.trail, true);
    }
    unpark(p, now_ns);
    note_trail(p, pkt.trail);
    apply_trail(p, now_ns);
    // §6.3: SPM_LEAD beyond what we have reveals tail loss.
    mark_missing(p, pkt.lead, now_ns);
    if (pkt.opts.fin) {
        // What is missing gets a few more rounds while the source lingers, then is lost.
        p.finished = true;
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
    if (!p.started) {
        Sqn first = s;
        if (pkt.opts.has_fragment && precedes(pkt.opts.fragment.first_sqn, s)
            && distance(pkt.opts.fragment.first_sqn, s) < static_cast<std::int32_t>(capacity_)) {
            first = pkt.opts.fragment.first_sqn;  // start at the APDU's head, NAK the rest
        }
        start(p, first, pkt.trail, true);
        if (p.spmr_deadline == kNever && !p.has_nla && p.spmrs < kMaxSpmrs) {
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
    if (p.finished && p.rst_spms < 2 && precedes(p.fin_lead, s)) {
        p.finished = false;  // data after the FIN: that FIN was not the source's
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

void Receiver::on_timer(std::int64_t now_ns, PacketSink& sink) noexcept {
    for (Peer* pp : live_) {
        Peer& p = *pp;
        if (p.forget_pending) {
            p.forget_pending = false;
            sink.forget(p.from);  // evicted: e.g. the verbs address handle of its source
        }
        if (!p.expired && now_ns - p.last_heard_ns >= cfg_.timers.peer_expiry_ns) {
            expire(p);
            sink.forget(p.from);  // e.g. the verbs address handle of its source
            continue;
        }
        if (p.expired) {
            continue;
        }
        if (p.finished && now_ns >= p.fin_deadline) {
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
    p.spmr_deadline = p.has_spm ? kNever : now_ns + (cfg_.timers.spmr_expiry_ns << p.spmrs);
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
                } else if (!p.has_nla) {
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
    spec.nla = p.nla;
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
        if (p.status_due != kNever && !p.expired) {
            send_status(p, true, sink);
            p.status_due = kNever;
        }
    }
}

std::int64_t Receiver::next_deadline() const noexcept {
    std::int64_t d = kNever;
    for (const Peer* pp : live_) {
        const Peer& p = *pp;
        if (!p.expired) {
            d = std::min({d, p.nak_deadline, p.spmr_deadline, p.status_due,
                          p.last_heard_ns + cfg_.timers.peer_expiry_ns});
            if (p.finished && !p.give_up) {
                d = std::min(d, p.fin_deadline);
            }
        }
    }
    return d;
}

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
        if (!p->in_use) {
            live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(j));  // a source left: rare
            free_storage(p);
            if (got) {
                return true;
            }
            return next_event(out);
        }
        if (got) {
            rr_ = j;  // stay on this peer while it has events
            // Flow control: a status after each quarter window consumed (at the next timer run).
            if (p->status_due != kNever && p->next.value - p->status_pos.value >= status_step_) {
                p->status_due = 0;
            }
            return true;
        }
    }
    rr_ = rr_ + 1 < n ? rr_ + 1 : 0;
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
    if (p.scan_valid && p.scan_head == s) {
        x = p.scan_next;  // the fragments before it were checked by an earlier call
        off = p.scan_off;
    }
    p.scan_valid = false;
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
        p.scan_valid = true;
        p.scan_head = s;
        p.scan_next = x;
        p.scan_off = off;
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
    if (!p.left_reported && drained && ((p.finished && p.give_up) || p.expired)
        && (!p.started || !p.in_range(p.next))) {
        p.left_reported = true;
        ++counters_.peers_left;
        out.kind = Event::Kind::left;
        if (p.expired) {
            p.in_use = false;  // slot free for a new source
        }
        return true;
    }
    if (p.expired && p.left_reported) {
        p.in_use = false;
    }
    return false;
}

// Produces the next in-order event of one peer, advancing its window first.
bool Receiver::peer_event(Peer& p, Event& out) noexcept {
    out = Event{};
    out.tsi = p.tsi;
    if (p.joined_pending) {
        p.joined_pending = false;
        out.kind = Event::Kind::joined;
        return true;
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
