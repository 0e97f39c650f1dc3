// SPDX-License-Identifier: Apache-2.0
// The gateway's embedded store (LMDB): every bar, the instrument lists, the gaps and the last
// channel sequence number of each feed, so that a restart serves the same bars and knows
// where its feed left off. Written by the feed thread in batches (one transaction each).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bars.hpp"

struct MDB_env;

namespace md {

/// Where a feed (by id) left off: its last channel sequence number and the exchange time of
/// that tick.
struct FeedPosition {
    std::uint64_t last_seq = 0;
    std::uint64_t last_instant = 0;
};

/// What a commit writes (the latest value of each bar touched since the last one).
struct StoreBatch {
    struct Item {
        Code code = 0;
        Period period = Period::m1;
        Bar bar;
    };
    std::vector<Item> bars;
    std::vector<Instrument> instruments;
    std::vector<GapInterval> gaps;
    std::map<std::uint64_t, FeedPosition> feed_seq;  // by feed id
    [[nodiscard]] bool empty() const noexcept {
        return bars.empty() && instruments.empty() && gaps.empty() && feed_seq.empty();
    }
};

class LmdbStore {
public:
    /// Opens (creates) the store in directory `dir` (made if missing) with a map of
    /// `map_mib` MiB; nullptr and `error` on failure.
    static std::unique_ptr<LmdbStore> open(const std::string& dir,
                                           std::size_t map_mib,
                                           std::string& error);
    ~LmdbStore();
    LmdbStore(const LmdbStore&) = delete;
    LmdbStore& operator=(const LmdbStore&) = delete;
    LmdbStore(LmdbStore&&) = delete;
    LmdbStore& operator=(LmdbStore&&) = delete;

    /// Loads everything into `store` and `feed_seq`; returns the number of bars, or -1 and
    /// `error`.
    long long load(BarStore& store,
                   std::map<std::uint64_t, FeedPosition>& feed_seq,
                   std::string& error);
    /// Writes a batch in one transaction; false and `error` on failure.
    bool commit(const StoreBatch& batch, std::string& error);

private:
    explicit LmdbStore(MDB_env* env) noexcept : env_(env) {}
    MDB_env* env_;
    unsigned bars_dbi_ = 0;
    unsigned meta_dbi_ = 0;
};

}  // namespace md
