// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace prizma::protocol {

/// One entry's place in a TimerWheel: kept by the caller next to the entry's own data (a
/// receive slot), so that a timer run touches one cache line per entry, not two.
struct TimerLink {
    static constexpr std::uint32_t kNil = 0xffffffffU;
    std::uint32_t next = kNil;
    std::uint32_t prev = kNil;
    std::uint32_t bucket = kNil;
    std::int64_t deadline = INT64_MAX;
};

/// The links of entries kept in a plain vector (tests, or callers without entries of their own).
struct VectorLinks {
    std::vector<TimerLink>* links = nullptr;
    TimerLink& operator[](std::uint32_t i) const noexcept { return (*links)[i]; }
};

/// A hashed timer wheel over entries 0 .. capacity-1 (a receiver's window slots: the NAK
/// timers of missing sequence numbers, RFC 3208 §6.3). Each armed entry is linked into the
/// bucket of its deadline's tick, so a timer run visits only the buckets whose time has come,
/// never the whole window (a receiver far behind may miss tens of thousands at once). The
/// links live where `Links` (an accessor: `TimerLink& operator[](idx)`) says; the entries must
/// start unlinked (TimerLink{}). Sans-I/O and allocation-free; unit-tested on its own.
template <typename Links>
class TimerWheel {
public:
    static constexpr std::uint32_t kBuckets = 512;
    static constexpr std::uint32_t kNil = TimerLink::kNil;
    static constexpr std::int64_t kNever = INT64_MAX;

    /// Where the links are (again, after the entries' storage moved).
    void bind(Links links) noexcept { links_ = links; }
    /// Disarms everything (the caller clears the entries' links); ticks are 2^shift ns from
    /// now on.
    void reset(unsigned shift) noexcept {
        buckets_.fill(kNil);
        bits_.fill(0);
        tick_ = 0;
        shift_ = shift;
    }
    [[nodiscard]] unsigned shift() const noexcept { return shift_; }

    /// (Re)arms entry idx for `deadline_ns`. A deadline in a tick already visited lands in
    /// the current tick's bucket (it is due at the next run).
    void arm(std::uint32_t idx, std::int64_t deadline_ns) noexcept {
        cancel(idx);
        TimerLink& l = links_[idx];
        l.deadline = deadline_ns;
        const std::int64_t tick = std::max(deadline_ns >> shift_, tick_);
        const auto b = static_cast<std::uint32_t>(tick) & (kBuckets - 1);
        l.bucket = b;
        l.prev = kNil;
        l.next = buckets_[b];
        if (l.next != kNil) {
            links_[l.next].prev = idx;
        }
        buckets_[b] = idx;
        bits_[b >> 6U] |= std::uint64_t{1} << (b & 63U);
    }
    /// Disarms entry idx (nothing when it is not armed).
    void cancel(std::uint32_t idx) noexcept {
        TimerLink& l = links_[idx];
        if (l.bucket == kNil) {
            return;
        }
        if (l.prev != kNil) {
            links_[l.prev].next = l.next;
        } else {
            buckets_[l.bucket] = l.next;
            if (l.next == kNil) {
                bits_[l.bucket >> 6U] &= ~(std::uint64_t{1} << (l.bucket & 63U));
            }
        }
        if (l.next != kNil) {
            links_[l.next].prev = l.prev;
        }
        l.next = l.prev = l.bucket = kNil;
    }
    [[nodiscard]] bool armed(std::uint32_t idx) const noexcept {
        return links_[idx].bucket != kNil;
    }
    /// The deadline entry idx was last armed for.
    [[nodiscard]] std::int64_t deadline(std::uint32_t idx) const noexcept {
        return links_[idx].deadline;
    }

    /// Appends to `due` every armed entry whose deadline is at or before now_ns (still armed:
    /// the caller re-arms or cancels each), visiting only the buckets of the ticks that passed
    /// since the last run (all of them, once, when more than a whole turn has). Returns the
    /// earliest deadline still ahead in the current tick (kNever: none); next_armed() gives
    /// the ones after it.
    std::int64_t collect_due(std::int64_t now_ns, std::vector<std::uint32_t>& due) noexcept {
        const std::int64_t now_tick = now_ns >> shift_;
        std::int64_t later = kNever;
        for (std::int64_t tick = std::max(tick_, now_tick - (kBuckets - 1)); tick <= now_tick;
             ++tick) {
            const auto b = static_cast<std::uint32_t>(tick) & (kBuckets - 1);
            for (std::uint32_t i = buckets_[b]; i != kNil; i = links_[i].next) {
                const std::int64_t d = links_[i].deadline;
                if (d <= now_ns) {
                    due.push_back(i);  // the caller reserves room for every entry
                } else if ((d >> shift_) <= now_tick) {
                    later = std::min(later, d);
                }
            }
        }
        tick_ = now_tick;
        return later;
    }
    /// Start of the first tick after the current one whose bucket holds a timer (kNever: none).
    [[nodiscard]] std::int64_t next_armed() const noexcept {
        for (std::uint32_t k = 1; k <= kBuckets; ++k) {
            const auto b = static_cast<std::uint32_t>(tick_ + k) & (kBuckets - 1);
            const std::uint64_t w = bits_[b >> 6U] >> (b & 63U);
            if (w == 0) {
                k += 63U - (b & 63U);  // rest of this word is empty
                continue;
            }
            k += static_cast<std::uint32_t>(std::countr_zero(w));
            return std::min(tick_ + k, tick_ + kBuckets) << shift_;
        }
        return kNever;
    }
    /// Calls f(idx) for every armed entry until none is left; each is cancelled after f
    /// returns, if f did not cancel it itself.
    template <typename F>
    void drain(F&& f) noexcept {
        for (std::uint32_t b = 0; b < kBuckets; ++b) {
            while (buckets_[b] != kNil) {
                const std::uint32_t idx = buckets_[b];
                f(idx);
                cancel(idx);  // nothing when f did it: never loops on an entry
            }
        }
    }

private:
    Links links_{};
    std::array<std::uint32_t, kBuckets> buckets_{};
    std::array<std::uint64_t, kBuckets / 64> bits_{};  // non-empty buckets
    std::int64_t tick_ = 0;                            // first tick not yet fully visited
    unsigned shift_ = 10;                              // tick = 2^shift ns
};

}  // namespace prizma::protocol
