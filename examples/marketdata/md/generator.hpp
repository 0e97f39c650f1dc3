// SPDX-License-Identifier: Apache-2.0
// A seeded, replayable tick generator for an A-share-like market: the same configuration
// gives the same ticks on every host (own RNG, no std distributions).
//  - symbols: 600000.SH, 300525.SZ, 000001.SZ, then 600001.SH, 000002.SZ, 300001.SZ, ...
//  - each day: an instrument list (previous close, limits: ±10 %, ±20 % for 300xxx), then an
//    opening call-auction print per trading symbol at 09:25:00, continuous trading
//    09:30–11:30 and 13:00–14:57 (more ticks in the first minutes: the open's burst, and
//    before the close), and a closing call-auction print at 15:00:00;
//  - prices on a 0.01 grid inside the day's limits, volumes in lots of 100;
//  - 600001.SH rises to its upper limit every day; 000002.SZ (and every 500th symbol after
//    it) is suspended: listed, never trades.
#pragma once

#include <cstdint>
#include <vector>

#include "codec.hpp"

namespace md {

struct GeneratorConfig {
    std::uint64_t seed = 1;
    std::uint32_t symbols = 5000;
    std::uint64_t day_ticks = 1'000'000;  // continuous-session ticks per day
    std::uint32_t first_date = 20230818;
    std::uint32_t days = 1;
};

/// A deterministic 64-bit generator (splitmix64).
class Rng {
public:
    explicit Rng(std::uint64_t seed) noexcept : s_(seed) {}
    std::uint64_t next() noexcept {
        std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31U);
    }
    /// Uniform in [0, n), n > 0.
    std::uint64_t below(std::uint64_t n) noexcept { return next() % n; }

private:
    std::uint64_t s_;
};

/// The code of symbol `index` in the generator's universe.
Code generator_code(std::uint32_t index) noexcept;
/// True for the symbols that never trade (suspended).
bool generator_suspended(std::uint32_t index) noexcept;
/// The symbol that goes limit-up every day.
inline constexpr std::uint32_t kLimitUpIndex = 3;

class Generator {
public:
    explicit Generator(const GeneratorConfig& cfg);
    /// A stable identity of this configuration's tick stream.
    [[nodiscard]] std::uint64_t feed_id() const noexcept;
    /// Starts the next day: false after the last one. Fills `out` with its instrument list.
    bool start_day(std::vector<Instrument>& out);
    /// The next tick of the current day in exchange-time order; false at the day's end.
    bool next_tick(Tick& out);

private:
    struct Sym {
        Code code = 0;
        std::int32_t prev_close = 0;
        std::int32_t price = 0;
        std::int32_t up = 0;
        std::int32_t down = 0;
        std::uint32_t seq = 0;
        bool suspended = false;
        bool limit_up_runner = false;
    };
    void fill_minute();
    void fill_auction(std::uint32_t time_ms);
    Tick make_tick(std::uint32_t sym, std::uint32_t time_ms, bool auction);
    std::uint32_t pick_symbol();

    GeneratorConfig cfg_;
    Rng rng_;
    std::vector<Sym> syms_;
    std::vector<std::uint32_t> active_;
    std::vector<std::uint64_t> minute_ticks_;  // ticks per continuous minute (237)
    std::uint32_t date_ = 0;
    std::uint32_t day_ = 0;
    int phase_ = 0;  // 0 open auction, 1..237 continuous minutes, 238 close auction, 239 done
    std::vector<Tick> pending_;
    std::size_t pending_at_ = 0;
    std::uint64_t channel_seq_ = 0;
};

}  // namespace md
