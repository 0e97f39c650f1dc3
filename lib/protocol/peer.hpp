// SPDX-License-Identifier: Apache-2.0
#pragma once
// One source's receive state (Receiver::Peer): its window slots and payload ring, its NAK timer
// wheel, what its SPMs told, and where it is in its lifecycle. Private to the receiver's files:
// receiver.cpp (packets, SPMs, timers), peer_table.cpp (the table of sources and its storage),
// nak_scheduler.cpp (loss detection and the NAK state machine of RFC 3208 §6.3), delivery.cpp
// (in-order events, reassembly, loss and `left` events).

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "lib/protocol/packed_ring.hpp"
#include "lib/protocol/receiver.hpp"
#include "lib/protocol/timer_wheel.hpp"
#include "lib/runtime/page_buffer.hpp"

namespace prizma::protocol {

enum class SlotState : std::uint8_t {
    empty,      // beyond the lead, or already delivered
    back_off,   // §6.3 NAK_RB_IVL running
    wait_ncf,   // NAK sent, NAK_RPT_IVL running
    wait_data,  // NCF seen, NAK_RDATA_IVL running
    have,       // data stored
    lost,       // unrecoverable, to be reported
};

/// Where a source is in its life; every move is in receiver.cpp, peer_table.cpp or
/// delivery.cpp:
///   free -> live         its first packet claims the entry (claim_entry)
///   live -> finishing    an SPM with OPT_FIN, or the second with OPT_RST (on_spm)
///   finishing -> live    data past the FIN's lead: that FIN was not the source's (admit_data)
///   finishing -> left    `left` reported: FIN deadline passed (give_up), nothing missing
///   live, finishing -> expired   silent for peer_expiry, or evicted (expire)
///   left -> retired      expired after its `left` (expire)
///   expired -> free      `left` reported (its gaps first, as loss)
///   retired -> free      at the next event pass, without an event
/// Packets are taken in live and finishing only.
enum class PeerState : std::uint8_t { free, live, finishing, left, expired, retired };

inline bool is_missing(SlotState s) noexcept {
    return s == SlotState::back_off || s == SlotState::wait_ncf || s == SlotState::wait_data;
}

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
    PeerState state = PeerState::free;
    bool used = false;  // has held a source: its slots need clearing before the next one
    Tsi tsi{};
    PeerCounters counters{};
    Endpoint from{};
    // sender_key() of the pinned sender: sender and NLA are fixed by the first SPM.
    std::optional<Endpoint> sender;
    std::int64_t pinned_spm_ns = 0;  // last SPM from it
    Candidate cand{};
    std::uint8_t spmrs = 0;                         // SPMRs sent while no SPM came (capped)
    std::int64_t last_lead_ask_ns = INT64_MIN / 2;  // ask_lead
    Sqn dropped_lead{};  // the furthest sqn dropped outside the window (see admit_data)
    // Missing sqns waiting in back-off without timers: for the first SPM (no NLA yet), or for
    // NAK credit (nak_tokens); park_from is at or before the oldest of them.
    bool naks_parked = false;
    Sqn park_from{};
    double nak_tokens = 0;                     // NAK pacing: sqns that may be asked for now
    std::int64_t tokens_ns = 0;                // when nak_tokens was last refilled
    std::int64_t progress_ns = INT64_MIN / 2;  // a missing sqn of ours was last filled
    bool forget_pending = false;               // evicted: forget its address at the next timer run
    std::uint8_t rst_spms = 0;                 // SPMs with OPT_RST seen (two needed)
    Sqn fin_lead{};
    std::int64_t fin_deadline = kNever;  // FIN seen: what is missing is lost by then
    Sqn resync_from{};                   // a confirmed resync lost [resync_from, +resync_lost)
    std::uint32_t resync_lost = 0;
    Sqn tail_from{};  // an RST's lead past our window: lost, reported last
    std::uint32_t tail_lost = 0;
    bool give_up = false;  // expired, evicted, reset or past its FIN deadline: no more waiting
    // Reassembly of the APDU at `head` resumes at `next` (offset `off`): each fragment is
    // checked once, not at every poll while the APDU waits.
    struct Scan {
        Sqn head{};
        Sqn next{};
        std::uint32_t off = 0;
    };
    std::optional<Scan> scan;
    std::optional<pgm::Nla> nla;  // from its last SPM (none before the first)
    std::optional<Sqn> spm_sqn;   // of its last SPM taken
    bool started = false;         // `next` and `lead` hold: a window exists
    Sqn next{};                   // next sequence number to deliver
    Sqn lead{};                   // highest sequence number known (next - 1 when none)
    std::optional<Sqn> trail;     // the source's advertised trail
    std::int64_t last_heard_ns = 0;
    std::int64_t nak_deadline = kNever;
    std::int64_t spmr_deadline = kNever;
    std::uint32_t missing = 0;
    bool joined_pending = false;
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
    /// A FIN or RST was taken (and not undone by data past the FIN).
    [[nodiscard]] bool finished() const noexcept {
        return state == PeerState::finishing || state == PeerState::left;
    }
    [[nodiscard]] bool expired() const noexcept {
        return state == PeerState::expired || state == PeerState::retired;
    }
    /// Packets are taken: neither gone nor draining.
    [[nodiscard]] bool takes_packets() const noexcept {
        return state == PeerState::live || state == PeerState::finishing;
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

}  // namespace prizma::protocol
