// SPDX-License-Identifier: Apache-2.0
#include "generator.hpp"

#include <algorithm>
#include <cmath>

namespace md {

namespace {

constexpr int kContinuousMinutes = 237;  // 09:30-11:30 and 13:00-14:57

std::uint32_t continuous_minute_start(int m) noexcept {  // m in 0..236
    return m < 120 ? kMorningOpenMs + static_cast<std::uint32_t>(m) * 60'000
                   : kAfternoonOpenMs + static_cast<std::uint32_t>(m - 120) * 60'000;
}

bool chinext(Code c) noexcept {
    return (c & 3U) == 1 && (c >> 2U) >= 300'000;
}

}  // namespace

Code generator_code(std::uint32_t index) noexcept {
    switch (index) {
        case 0: return make_code(600'000, 0);
        case 1: return make_code(300'525, 1);
        case 2: return make_code(1, 1);
        default: break;
    }
    const std::uint32_t k = index - 3;
    const std::uint32_t n = k / 3;
    if (k % 3 == 0) {
        return make_code(600'001 + n, 0);
    }
    if (k % 3 == 1) {
        return make_code(2 + n, 1);
    }
    const std::uint32_t num = 300'001 + n;
    return make_code(num >= 300'525 ? num + 1 : num, 1);
}

bool generator_suspended(std::uint32_t index) noexcept {
    return index >= 4 && (index - 4) % 500 == 0;
}

Generator::Generator(const GeneratorConfig& cfg) : cfg_(cfg), rng_(cfg.seed) {
    syms_.resize(cfg_.symbols);
    for (std::uint32_t i = 0; i < cfg_.symbols; ++i) {
        Sym& s = syms_[i];
        s.code = generator_code(i);
        s.prev_close = static_cast<std::int32_t>(300 + rng_.below(9'700));  // 3.00 .. 99.99
        s.suspended = generator_suspended(i);
        s.limit_up_runner = i == kLimitUpIndex;
        if (!s.suspended) {
            active_.push_back(i);
        }
    }
    // Ticks per continuous minute: weight 1, plus a burst decaying over the first minutes
    // of the morning (and, smaller, of the afternoon), plus the run-up to the close.
    std::vector<double> w(kContinuousMinutes);
    double total = 0;
    for (int m = 0; m < kContinuousMinutes; ++m) {
        double x = 1.0 + 6.0 * std::exp(-m / 4.0);
        if (m >= 120) {
            x += 1.0 * std::exp(-(m - 120) / 4.0);
        }
        if (m >= kContinuousMinutes - 10) {
            x += 0.8;
        }
        w[static_cast<std::size_t>(m)] = x;
        total += x;
    }
    std::uint64_t given = 0;
    for (int m = 0; m < kContinuousMinutes; ++m) {
        const auto share = static_cast<std::uint64_t>(static_cast<double>(cfg_.day_ticks)
                                                      * w[static_cast<std::size_t>(m)] / total);
        minute_ticks_.push_back(share);
        given += share;
    }
    minute_ticks_[0] += cfg_.day_ticks - given;  // the rounding remainder joins the burst
    date_ = cfg_.first_date;
    phase_ = 239;
}

std::uint64_t Generator::feed_id() const noexcept {
    Rng r(cfg_.seed ^ (std::uint64_t{cfg_.symbols} << 40U) ^ (cfg_.day_ticks << 8U)
          ^ (std::uint64_t{cfg_.first_date} << 20U) ^ cfg_.days);
    return r.next();
}

bool Generator::start_day(std::vector<Instrument>& out) {
    if (day_ >= cfg_.days) {
        return false;
    }
    if (day_ > 0) {
        date_ = next_weekday(date_);
        for (Sym& s : syms_) {
            s.prev_close = s.price;
        }
    }
    ++day_;
    out.clear();
    for (Sym& s : syms_) {
        const std::int32_t pct = chinext(s.code) ? 20 : 10;
        s.up = (s.prev_close * (100 + pct) + 50) / 100;
        s.down = (s.prev_close * (100 - pct) + 50) / 100;
        s.price = s.prev_close;
        out.push_back({s.code, date_, s.prev_close, s.up, s.down});
    }
    phase_ = 0;
    pending_.clear();
    pending_at_ = 0;
    return true;
}

std::uint32_t Generator::pick_symbol() {
    // A quarter of the ticks go to the busiest 5 % of the symbols.
    const std::uint64_t n = active_.size();
    const std::uint64_t r = rng_.next();
    const std::uint64_t hot = std::max<std::uint64_t>(1, n / 20);
    return active_[(r & 3U) == 0 ? (r >> 2U) % hot : (r >> 2U) % n];
}

Tick Generator::make_tick(std::uint32_t sym, std::uint32_t time_ms, bool auction) {
    Sym& s = syms_[sym];
    std::int32_t step = static_cast<std::int32_t>(rng_.below(5)) - 2;  // -2 .. +2 ticks
    if (s.limit_up_runner) {
        step = static_cast<std::int32_t>(rng_.below(8));  // drifts up to the limit
    }
    if (auction) {
        step *= 3;
    }
    s.price = std::clamp(s.price + step, s.down, s.up);
    Tick t;
    t.channel_seq = ++channel_seq_;
    t.symbol_seq = ++s.seq;
    t.code = s.code;
    t.date = date_;
    t.time_ms = time_ms;
    t.price = s.price;
    const std::uint64_t lots = 1 + rng_.below(20) * (1 + rng_.below(10));
    t.volume = static_cast<std::int64_t>(100 * (auction ? lots * 20 : lots));
    t.flags = (auction ? kTickAuction : 0U) | (s.price == s.up ? kTickLimitUp : 0U)
              | (s.price == s.down ? kTickLimitDown : 0U);
    return t;
}

void Generator::fill_auction(std::uint32_t time_ms) {
    pending_.clear();
    pending_at_ = 0;
    for (const std::uint32_t i : active_) {
        pending_.push_back(make_tick(i, time_ms, true));
    }
}

void Generator::fill_minute() {
    pending_.clear();
    pending_at_ = 0;
    const int m = phase_ - 1;
    const std::uint64_t n = minute_ticks_[static_cast<std::size_t>(m)];
    struct Slot {
        std::uint32_t time_ms;
        std::uint32_t sym;
    };
    std::vector<Slot> slots;
    slots.reserve(n);
    const std::uint32_t start = continuous_minute_start(m);
    for (std::uint64_t k = 0; k < n; ++k) {
        const auto off = static_cast<std::uint32_t>(rng_.below(60'000));
        slots.push_back({start + off, pick_symbol()});
    }
    std::stable_sort(slots.begin(), slots.end(),
                     [](const Slot& a, const Slot& b) { return a.time_ms < b.time_ms; });
    for (const Slot& s : slots) {
        pending_.push_back(make_tick(s.sym, s.time_ms, false));
    }
}

bool Generator::next_tick(Tick& out) {
    while (pending_at_ >= pending_.size()) {
        if (phase_ >= 239) {
            return false;
        }
        if (phase_ == 0) {
            fill_auction(kOpenAuctionMs);
        } else if (phase_ <= kContinuousMinutes) {
            fill_minute();
        } else {
            fill_auction(kCloseMs);
        }
        ++phase_;
    }
    out = pending_[pending_at_++];
    return true;
}

}  // namespace md
