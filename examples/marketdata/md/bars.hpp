// SPDX-License-Identifier: Apache-2.0
// Bars built from ticks, and the store shared between the feed thread (the only writer) and
// the HTTP loops (readers): one mutex per code, held only to copy bars in or out, and a
// read-mostly index of codes.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "codec.hpp"
#include "core.hpp"

namespace md {

inline constexpr std::uint32_t kBarGap = 1;  // ticks of this bar may be missing

struct Bar {
    std::uint64_t time = 0;  // label YYYYMMDDHHMM (end of the bar)
    std::int32_t open = 0;   // prices in 0.01
    std::int32_t high = 0;
    std::int32_t low = 0;
    std::int32_t close = 0;
    std::int64_t volume = 0;    // shares
    std::int64_t turnover = 0;  // in 0.01 (sum of price * volume)
    std::uint32_t flags = 0;
    std::uint32_t ticks = 0;
    /// The symbol sequence number of the last tick folded in: the bar holds every tick of its
    /// code and interval up to it (unless flagged kBarGap), so a copy of an earlier tick,
    /// replayed or heard again after a restart or a late join, is not counted twice.
    std::uint32_t sseq = 0;
    std::uint32_t spare = 0;  // no padding: bars are stored as bytes (LMDB)
    friend bool operator==(const Bar&, const Bar&) = default;
};

/// Folds a trade into `b` (a new bar when b.ticks == 0).
void fold(Bar& b, std::int32_t price, std::int64_t volume) noexcept;

/// Where ticks may be missing: from the last tick before a loss to the first one after it,
/// in exchange time (exchange_instant()).
struct GapInterval {
    std::uint64_t from = 0;
    std::uint64_t to = 0;
    friend bool operator==(const GapInterval&, const GapInterval&) = default;
};

/// True when a bar of period `p` labelled `label` overlaps the gap.
bool overlaps(const GapInterval& g, std::uint64_t label, Period p) noexcept;

/// All bars of one code.
struct SymbolBars {
    std::array<std::vector<Bar>, kPeriodCount> series;
    Instrument instrument;  // the latest instrument record (zeros when none came)
    std::uint32_t last_symbol_seq = 0;
    std::uint64_t last_instant = 0;  // exchange time of the last tick applied
};

class BarStore {
public:
    /// What apply() did to one tick.
    enum class Applied { bar, duplicate, out_of_session };

    /// Feed thread only. Folds the tick into the code's six bars (each bar that already holds
    /// it, by Bar::sseq, is left alone); a symbol sequence gap marks the bars between the
    /// code's previous tick and this one. The bars touched are passed to
    /// `on_bar(code, period, bar)` after the lock is released.
    using BarSink = std::function<void(Code, Period, const Bar&)>;
    Applied apply(const Tick& t, const BarSink& on_bar);
    /// Feed thread only: the instrument list of a day (makes the code known).
    void apply(const Instrument& in);
    /// Loads a bar (restart from a store).
    void load(Code code, Period p, const Bar& b);
    /// Records a gap; every bar overlapping it gets kBarGap (now and when made later).
    void add_gap(const GapInterval& g, const BarSink& on_bar);

    /// Feed thread only: another gateway's copy of a bar (from Redis) replaces ours when ours
    /// is missing, or gap-flagged while theirs is complete and holds every tick ours does
    /// (theirs.sseq >= ours.sseq). True (and `on_bar` called) when it did.
    bool fill(Code code, Period p, const Bar& theirs, const BarSink& on_bar);
    /// Feed thread only: does the code hold a gap-flagged bar of period `p` overlapping `g`?
    [[nodiscard]] bool flagged(Code code, Period p, const GapInterval& g) const;
    /// Feed thread only: forgets a gap (its bars were filled): bars made later are not flagged.
    void remove_gap(const GapInterval& g);

    /// Any thread: is the code known (listed or traded)?
    [[nodiscard]] bool known(Code code) const;
    /// Any thread: copies the bars with from <= time <= to, at most `limit` (counting all the
    /// ones in range into *in_range when given). Returns false for an unknown code.
    bool range(Code code,
               Period p,
               std::uint64_t from,
               std::uint64_t to,
               std::size_t limit,
               std::vector<Bar>& out,
               std::size_t* in_range = nullptr) const;
    /// Any thread: the last `n` bars (oldest first).
    bool last(Code code, Period p, std::size_t n, std::vector<Bar>& out) const;
    /// Any thread: the bar labelled `label`, if present.
    bool bar_at(Code code, Period p, std::uint64_t label, Bar& out) const;
    /// Any thread: how many times the code's bars changed (for ETags).
    [[nodiscard]] std::uint64_t version(Code code) const;
    /// Any thread: the code's change counter itself (valid as long as the store; a code is
    /// never removed), nullptr for an unknown code. Lets an answer cache check its entries
    /// without a lookup.
    [[nodiscard]] const std::atomic<std::uint64_t>* version_counter(Code code) const;
    /// Any thread: every known code, sorted.
    [[nodiscard]] std::vector<Code> codes() const;
    [[nodiscard]] std::vector<GapInterval> gaps() const;
    [[nodiscard]] Instrument instrument(Code code) const;

private:
    struct Entry {
        mutable std::mutex mu;
        SymbolBars bars;
        std::atomic<std::uint64_t> version{0};
    };
    Entry* find(Code code) const;
    Entry& get(Code code);

    mutable std::shared_mutex index_mu_;
    std::unordered_map<Code, std::unique_ptr<Entry>> index_;
    mutable std::mutex gaps_mu_;
    std::vector<GapInterval> gaps_;
};

}  // namespace md
