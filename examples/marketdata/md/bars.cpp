// SPDX-License-Identifier: Apache-2.0
#include "bars.hpp"

#include <algorithm>

namespace md {

namespace {

constexpr std::uint64_t kDay = 100'000'000ULL;

int clamp_minute(std::uint32_t ms) noexcept {
    const int m = trading_minute(ms);
    if (m != 0) {
        return m;
    }
    return ms < kOpenAuctionMs ? 1 : kMinutesPerDay;
}

/// Marks the bars of `s` that overlap `g`; returns how many changed (each passed to `sink`).
template <typename Sink>
void mark_gap(std::vector<Bar>& s, Period p, const GapInterval& g, Sink&& sink) {
    const std::uint64_t first_label = g.from / kDay * 10'000;
    for (auto it = s.rbegin(); it != s.rend() && it->time >= first_label; ++it) {
        if ((it->flags & kBarGap) == 0 && overlaps(g, it->time, p)) {
            it->flags |= kBarGap;
            sink(p, *it);
        }
    }
}

}  // namespace

void fold(Bar& b, std::int32_t price, std::int64_t volume) noexcept {
    if (b.ticks == 0) {
        b.open = b.high = b.low = price;
    }
    b.high = std::max(b.high, price);
    b.low = std::min(b.low, price);
    b.close = price;
    b.volume += volume;
    b.turnover += std::int64_t{price} * volume;
    ++b.ticks;
}

bool overlaps(const GapInterval& g, std::uint64_t label, Period p) noexcept {
    const MinuteSpan span = bar_minutes(label, p);
    if (span.first == 0) {
        return false;
    }
    const std::uint64_t date = label / 10'000;
    const std::uint64_t d0 = g.from / kDay;
    const std::uint64_t d1 = g.to / kDay;
    if (date < d0 || date > d1) {
        return false;
    }
    const int lo = date == d0 ? clamp_minute(static_cast<std::uint32_t>(g.from % kDay)) : 1;
    const int hi =
        date == d1 ? clamp_minute(static_cast<std::uint32_t>(g.to % kDay)) : kMinutesPerDay;
    return span.first <= hi && lo <= span.last;
}

BarStore::Entry* BarStore::find(Code code) const {
    const std::shared_lock lock(index_mu_);
    const auto it = index_.find(code);
    return it == index_.end() ? nullptr : it->second.get();
}

BarStore::Entry& BarStore::get(Code code) {
    if (Entry* e = find(code)) {
        return *e;
    }
    const std::unique_lock lock(index_mu_);
    auto& slot = index_[code];
    if (!slot) {
        slot = std::make_unique<Entry>();
    }
    return *slot;
}

BarStore::Applied BarStore::apply(const Tick& t, const BarSink& on_bar) {
    if (trading_minute(t.time_ms) == 0) {
        return Applied::out_of_session;
    }
    Entry& e = get(t.code);
    struct Touched {
        Period p;
        Bar bar;
    };
    std::vector<Touched> touched;
    touched.reserve(kPeriodCount + 8);
    {
        const std::lock_guard lock(e.mu);
        SymbolBars& sb = e.bars;
        const std::uint64_t now = exchange_instant(t.date, t.time_ms);
        const bool seq_gap = sb.last_symbol_seq != 0 && t.symbol_seq > sb.last_symbol_seq + 1;
        for (const Period p : kPeriods) {
            auto& s = sb.series.at(static_cast<std::size_t>(p));
            const std::uint64_t label = bar_label(t.date, t.time_ms, p);
            auto it = std::lower_bound(s.begin(), s.end(), label,
                                       [](const Bar& b, std::uint64_t l) { return b.time < l; });
            if (it == s.end() || it->time != label) {
                Bar nb;
                nb.time = label;
                for (const GapInterval& g : gaps_) {  // only this thread writes gaps_
                    if (overlaps(g, label, p)) {
                        nb.flags |= kBarGap;
                    }
                }
                it = s.insert(it, nb);
            }
            if (t.symbol_seq == 0 || t.symbol_seq > it->sseq) {
                fold(*it, t.price, t.volume);
                it->sseq = t.symbol_seq;
                touched.push_back({p, *it});
            }
            if (seq_gap) {
                mark_gap(s, p, {sb.last_instant, now}, [&](Period pp, const Bar& b) {
                    touched.push_back({pp, b});
                });
            }
        }
        sb.last_symbol_seq = t.symbol_seq;
        sb.last_instant = std::max(sb.last_instant, now);
        e.version.fetch_add(1, std::memory_order_release);
    }
    if (on_bar) {
        for (const Touched& x : touched) {
            on_bar(t.code, x.p, x.bar);
        }
    }
    return Applied::bar;
}

void BarStore::apply(const Instrument& in) {
    Entry& e = get(in.code);
    const std::lock_guard lock(e.mu);
    e.bars.instrument = in;
}

void BarStore::load(Code code, Period p, const Bar& b) {
    Entry& e = get(code);
    const std::lock_guard lock(e.mu);
    auto& s = e.bars.series.at(static_cast<std::size_t>(p));
    auto it = std::lower_bound(s.begin(), s.end(), b.time,
                               [](const Bar& x, std::uint64_t l) { return x.time < l; });
    if (it != s.end() && it->time == b.time) {
        *it = b;
    } else {
        s.insert(it, b);
    }
    e.version.fetch_add(1, std::memory_order_release);
}

void BarStore::add_gap(const GapInterval& g, const BarSink& on_bar) {
    {
        const std::lock_guard lock(gaps_mu_);
        gaps_.push_back(g);
    }
    std::vector<std::pair<Code, Entry*>> all;
    {
        const std::shared_lock lock(index_mu_);
        for (const auto& [code, entry] : index_) {
            all.emplace_back(code, entry.get());
        }
    }
    for (const auto& [code, e] : all) {
        std::vector<std::pair<Period, Bar>> changed;
        {
            const std::lock_guard lock(e->mu);
            for (const Period p : kPeriods) {
                mark_gap(e->bars.series.at(static_cast<std::size_t>(p)), p, g,
                         [&](Period pp, const Bar& b) { changed.emplace_back(pp, b); });
            }
            if (!changed.empty()) {
                e->version.fetch_add(1, std::memory_order_release);
            }
        }
        if (on_bar) {
            for (const auto& [p, b] : changed) {
                on_bar(code, p, b);
            }
        }
    }
}

bool BarStore::fill(Code code, Period p, const Bar& theirs, const BarSink& on_bar) {
    Entry& e = get(code);
    {
        const std::lock_guard lock(e.mu);
        auto& s = e.bars.series.at(static_cast<std::size_t>(p));
        auto it = std::lower_bound(s.begin(), s.end(), theirs.time,
                                   [](const Bar& b, std::uint64_t l) { return b.time < l; });
        if (it == s.end() || it->time != theirs.time) {
            s.insert(it, theirs);
        } else if ((it->flags & kBarGap) != 0 && (theirs.flags & kBarGap) == 0
                   && theirs.sseq >= it->sseq) {
            *it = theirs;
        } else {
            return false;
        }
        e.version.fetch_add(1, std::memory_order_release);
    }
    if (on_bar) {
        on_bar(code, p, theirs);
    }
    return true;
}

bool BarStore::flagged(Code code, Period p, const GapInterval& g) const {
    const Entry* e = find(code);
    if (e == nullptr) {
        return false;
    }
    const std::lock_guard lock(e->mu);
    const auto& s = e->bars.series.at(static_cast<std::size_t>(p));
    const std::uint64_t first_label = g.from / kDay * 10'000;
    return std::any_of(s.rbegin(), s.rend(), [&](const Bar& b) {
        return b.time >= first_label && (b.flags & kBarGap) != 0 && overlaps(g, b.time, p);
    });
}

void BarStore::remove_gap(const GapInterval& g) {
    const std::lock_guard lock(gaps_mu_);
    std::erase(gaps_, g);
}

bool BarStore::known(Code code) const {
    return find(code) != nullptr;
}

bool BarStore::range(Code code,
                     Period p,
                     std::uint64_t from,
                     std::uint64_t to,
                     std::size_t limit,
                     std::vector<Bar>& out,
                     std::size_t* in_range) const {
    const Entry* e = find(code);
    if (e == nullptr) {
        return false;
    }
    const std::lock_guard lock(e->mu);
    const auto& s = e->bars.series.at(static_cast<std::size_t>(p));
    const auto lo = std::lower_bound(s.begin(), s.end(), from,
                                     [](const Bar& b, std::uint64_t l) { return b.time < l; });
    const auto hi =
        std::upper_bound(lo, s.end(), to, [](std::uint64_t l, const Bar& b) { return l < b.time; });
    const auto n = static_cast<std::size_t>(hi - lo);
    if (in_range != nullptr) {
        *in_range = n;
    }
    out.insert(out.end(), lo, lo + static_cast<std::ptrdiff_t>(std::min(n, limit)));
    return true;
}

bool BarStore::last(Code code, Period p, std::size_t n, std::vector<Bar>& out) const {
    const Entry* e = find(code);
    if (e == nullptr) {
        return false;
    }
    const std::lock_guard lock(e->mu);
    const auto& s = e->bars.series.at(static_cast<std::size_t>(p));
    const std::size_t k = std::min(n, s.size());
    out.insert(out.end(), s.end() - static_cast<std::ptrdiff_t>(k), s.end());
    return true;
}

bool BarStore::bar_at(Code code, Period p, std::uint64_t label, Bar& out) const {
    const Entry* e = find(code);
    if (e == nullptr) {
        return false;
    }
    const std::lock_guard lock(e->mu);
    const auto& s = e->bars.series.at(static_cast<std::size_t>(p));
    const auto it = std::lower_bound(s.begin(), s.end(), label,
                                     [](const Bar& b, std::uint64_t l) { return b.time < l; });
    if (it == s.end() || it->time != label) {
        return false;
    }
    out = *it;
    return true;
}

std::uint64_t BarStore::version(Code code) const {
    const Entry* e = find(code);
    return e == nullptr ? 0 : e->version.load(std::memory_order_acquire);
}

const std::atomic<std::uint64_t>* BarStore::version_counter(Code code) const {
    const Entry* e = find(code);
    return e == nullptr ? nullptr : &e->version;
}

std::vector<Code> BarStore::codes() const {
    std::vector<Code> out;
    {
        const std::shared_lock lock(index_mu_);
        for (const auto& kv : index_) {
            out.push_back(kv.first);
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<GapInterval> BarStore::gaps() const {
    const std::lock_guard lock(gaps_mu_);
    return gaps_;
}

Instrument BarStore::instrument(Code code) const {
    const Entry* e = find(code);
    if (e == nullptr) {
        return {};
    }
    const std::lock_guard lock(e->mu);
    return e->bars.instrument;
}

}  // namespace md
