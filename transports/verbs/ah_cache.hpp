// SPDX-License-Identifier: Apache-2.0
#pragma once
// The unicast address-handle cache of a verbs channel (docs/RDMA.md §7): one slot per peer
// that NAKs or SPMRs go to, shared between the owner thread (the data path: finds, requests,
// evicts) and the control thread (creates the handles, which can block ~1 s on RoCE while the
// neighbour resolves, retries failures with back-off, frees evicted slots). No allocation,
// lock or system call on the owner's side: a slot changes hands through its atomic state.
//
// The slot protocol (the only transitions; who makes each):
//
//   free      -> requested   owner:   a new peer is heard (note_source / lookup)
//   requested -> ready       control: the handle was made (or found in the device's share)
//   requested -> failed      control: making it failed; retried at retry_at
//   failed    -> ready       control: a retry succeeded
//   failed    -> failed      control: a retry failed (the back-off doubles, up to 10 s)
//   requested, ready, failed -> evict   owner (forget, route change, table full: LRU) or
//                                       control (flush after a fabric event)
//   evict     -> free        control: the handle retired, the slot reusable
//
// The owner writes a slot's peer and route only while it is free; the control thread reads
// them only after it saw `requested`, and publishes the handle with `ready`. The control
// thread's transitions are compare-and-swaps, so an eviction racing a creation wins: the
// handle just made (never published, so never read) is dropped at once.
//
// Reclamation (quiescent states): the owner may have read a slot's handle just before the
// slot was evicted (by a flush on the event thread, say) and still be building a send with it.
// So the control thread destroys no handle the owner could have seen at once: a freed slot's
// handle goes on the retire list, tagged with a new value of the retire epoch, which the
// control thread publishes (release) after the slots it evicted. The owner echoes that epoch
// at its quiescent point (quiescent(): where it holds no handle; the transport calls it as
// send_batch, poll_rx and arm_wakeup begin). Once the echo reached a handle's tag, the owner
// has seen the slot evicted (acquire) before it could look it up again, and finished with
// the handle before it echoed (release): service() then lets it go. The list is preallocated
// (kRetired); when it is full, an evicted slot keeps its handle and stays `evict` (counted as
// deferred: kept alive, never destroyed early) until the owner moves on. drop_handles(), at
// teardown, lets every handle go, retired or not.
//
// No ibverbs here: a handle is an opaque pointer and the creation is a Maker's job, so the
// protocol is unit-tested without a device (tests/unit/ah_cache_test.cpp).

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <prizma/types.hpp>

#include "transports/verbs/device_policy.hpp"

namespace prizma::verbs {

class AhCache {
public:
    static constexpr std::size_t kSlots = 256;
    static constexpr std::size_t kRetired = kSlots;  ///< the retire list's capacity
    /// While handles wait on the owner: service() asks to run again within this (ms).
    static constexpr int kReclaimWaitMs = 100;
    using Clock = std::chrono::steady_clock;

    enum class State : std::uint8_t { free, requested, ready, failed, evict };

    /// What note_source() or lookup() did about a peer (owner thread).
    enum class Noted : std::uint8_t {
        known,          ///< the peer has a slot (requested, ready or failed) on this route
        route_changed,  ///< the peer has a slot on another route: evicted (IB: new LID/SL)
        requested,      ///< a free slot now asks for the peer's handle
        table_full,     ///< no free slot: the least recently used one evicted, if any
    };
    struct Note {
        Noted what = Noted::known;
        bool wake = false;  ///< the control thread has work: wake it
    };

    /// IB: the SA's path to a peer, asked once per slot (a query blocks up to ~1 s), not
    /// again on each retry of a failed creation. Kept in the slot, for the Maker only.
    struct PathMemo {
        bool known = false;
        policy::PathFacts path{};
    };
    /// A handle made (or found) by the Maker: `handle` is what the data path posts with,
    /// `hold` keeps it alive (its deleter destroys it when the last holder lets go).
    struct Made {
        void* handle = nullptr;
        std::shared_ptr<void> hold;
        bool shared = false;  ///< found in another channel's share, not made
    };
    /// Makes the handles (control thread only): ibv_create_ah in the transport, a fake in tests.
    class Maker {
    public:
        virtual ~Maker() = default;
        Maker() = default;
        Maker(const Maker&) = delete;
        Maker& operator=(const Maker&) = delete;
        Maker(Maker&&) = delete;
        Maker& operator=(Maker&&) = delete;
        /// The handle for `peer` reached on `route`; hold == nullptr when it cannot be made.
        virtual Made make(const Endpoint& peer,
                          const policy::SourceRoute& route,
                          PathMemo& memo) noexcept = 0;
        /// Told as it happens (for counters that must agree with the slot states at once): a
        /// handle made (or found shared) was published as ready; a creation failed.
        virtual void published(bool /*shared*/) noexcept {}
        virtual void failed() noexcept {}
    };
    /// What one service() did (control thread).
    struct Serviced {
        std::uint64_t created = 0;   ///< handles made
        std::uint64_t shared = 0;    ///< handles found in the device's share
        std::uint64_t failed = 0;    ///< creations that failed (retried with back-off)
        std::uint64_t freed = 0;     ///< evicted slots freed
        std::uint64_t retired = 0;   ///< handles put on the retire list (the owner may hold them)
        std::uint64_t released = 0;  ///< retired handles let go (the owner moved past them)
        std::uint64_t deferred = 0;  ///< evicted slots kept with their handle: the list is full
        int wait_ms = -1;            ///< until the next retry is due (1-10000); -1: none
    };

    AhCache() = default;
    AhCache(const AhCache&) = delete;
    AhCache& operator=(const AhCache&) = delete;
    AhCache(AhCache&&) = delete;
    AhCache& operator=(AhCache&&) = delete;
    ~AhCache() = default;

    // ---- owner thread ----
    /// The slot of `peer` (by GID and QPN) that is not free or evicted; kSlots if none.
    [[nodiscard]] std::size_t find(const Endpoint& peer) noexcept {
        if (last_ < high_water_ && matches(last_, peer)) {
            return last_;
        }
        for (std::size_t i = 0; i < high_water_; ++i) {
            if (matches(i, peer)) {
                last_ = i;
                return i;
            }
        }
        return kSlots;
    }
    /// A datagram came from `peer` on `route`: its slot is kept warm, or requested, or (the
    /// route changed) evicted so the next datagram requests a fresh handle. Inline: it runs
    /// for every datagram a subscriber receives.
    Note note_source(const Endpoint& peer,
                     const policy::SourceRoute& route,
                     bool infiniband) noexcept {
        if (const std::size_t i = find(peer); i != kSlots) {
            return touch(slots_[i], route, infiniband);
        }
        return request(peer, route);
    }
    /// The handle to send to `peer`, or nullptr when it is not ready (pending: the packet goes
    /// nowhere; PGM repeats NAKs and SPMRs). A peer never heard from is requested now, with an
    /// empty route (`note` says what happened then).
    void* lookup(const Endpoint& peer, Note& note) noexcept {
        const std::size_t i = find(peer);
        if (i == kSlots) {
            // Never heard from (an SPMR target named by an SPM's path address).
            note = request(peer, policy::SourceRoute{});
            return nullptr;
        }
        note = {Noted::known, false};
        Slot& s = slots_[i];
        s.last_use = ++clock_;
        if (s.state.load(std::memory_order_acquire) != State::ready) {
            return nullptr;
        }
        return s.handle.load(std::memory_order_relaxed);
    }
    /// The owner's quiescent point: it holds no handle from lookup() (no send is being built
    /// with one). Handles retired before it may go now. One acquire load; a release store only
    /// when the control thread retired something since the last call.
    void quiescent() noexcept {
        const std::uint64_t e = retire_epoch_.load(std::memory_order_acquire);
        if (e != echoed_) {
            echoed_ = e;
            owner_epoch_.store(e, std::memory_order_release);
        }
    }
    /// Evicts `peer`'s slot; true when there was one (wake the control thread).
    bool forget(const Endpoint& peer) noexcept;
    /// Slots whose handle is ready.
    [[nodiscard]] std::size_t ready_count() const noexcept;

    // ---- control thread ----
    /// Lets go of the retired handles the owner moved past, makes what is requested or due
    /// for a retry, frees what is evicted (its handle retired).
    Serviced service(Clock::time_point now, Maker& maker) noexcept;
    /// Evicts every requested, ready or failed slot (after a fabric event the routes they
    /// hold may be stale); -> how many.
    std::size_t flush() noexcept;

    // ---- either thread, when the other one is stopped (teardown, tests) ----
    /// Drops every handle, the retired ones too (before the PD goes); the slots stay as they
    /// are.
    void drop_handles() noexcept;
    /// Handles on the retire list (control thread, or when the owner is stopped).
    [[nodiscard]] std::size_t retired_count() const noexcept { return retired_count_; }
    [[nodiscard]] State state(std::size_t slot) const noexcept {
        return slots_[slot].state.load(std::memory_order_acquire);
    }

private:
    struct Slot {
        std::atomic<State> state{State::free};
        // Written by the owner thread while free, read by the control thread after
        // `requested`.
        Endpoint peer{};
        policy::SourceRoute route{};
        std::uint64_t last_use = 0;  // owner thread only
        // Written by the control thread, published by `ready`. Atomic because a flush (control
        // or event thread) may free the slot while the owner reads a handle it saw ready.
        std::atomic<void*> handle{nullptr};
        // Control thread only.
        std::shared_ptr<void> hold;  // maybe shared with other channels (§1.1)
        std::uint32_t failures = 0;
        Clock::time_point retry_at{};
        PathMemo path;
    };
    [[nodiscard]] bool matches(std::size_t i, const Endpoint& peer) const noexcept {
        const State st = slots_[i].state.load(std::memory_order_relaxed);
        return st != State::free && st != State::evict && slots_[i].peer.id == peer.id
               && slots_[i].peer.addr == peer.addr;
    }
    // Owner thread: a known peer heard again (on `route`); a new peer given a free slot.
    Note touch(Slot& s, const policy::SourceRoute& route, bool infiniband) noexcept;
    Note request(const Endpoint& peer, const policy::SourceRoute& route) noexcept;
    // Control thread: one slot's turn; `st` is its state as loaded, updated by a lost race.
    static void make(
        Slot& s, State& st, Clock::time_point now, Maker& maker, Serviced& out) noexcept;

    // Control thread: a handle the owner may have read, kept until the owner echoed `tag`.
    struct Retired {
        std::shared_ptr<void> hold;
        std::uint64_t tag = 0;
    };
    // Control thread: the retired handles the owner has moved past, let go.
    void reclaim(Serviced& out) noexcept;

    std::array<Slot, kSlots> slots_;
    // The retire list: a ring in retirement order (so in tag order). Control thread only.
    std::array<Retired, kRetired> retired_;
    std::size_t retired_head_ = 0;
    std::size_t retired_count_ = 0;
    // Written by the control thread (release) after the slots it freed; read by the owner.
    std::atomic<std::uint64_t> retire_epoch_{0};
    // The retire epoch as the owner last saw it at a quiescent point; read by the control
    // thread (acquire).
    std::atomic<std::uint64_t> owner_epoch_{0};
    std::uint64_t echoed_ = 0;    // owner: what it stored in owner_epoch_ last
    std::size_t high_water_ = 0;  // owner: slots below this index may be in use
    std::size_t last_ = kSlots;   // owner: the last slot found (one source: no scan)
    std::uint64_t clock_ = 0;     // owner: the LRU clock
};

}  // namespace prizma::verbs
