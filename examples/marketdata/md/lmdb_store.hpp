// SPDX-License-Identifier: Apache-2.0
// The gateway's embedded store (LMDB): every bar, the instrument lists, the gaps and the last
// channel sequence number of each feed, so that a restart serves the same bars and knows
// where its feed left off. Written by the feed thread in batches (one transaction each).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
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

/// Where this gateway is in the feed's lossless stream: the epoch and the next record
/// sequence to apply (a recorder's replay resumes there after a restart).
struct StreamPosition {
    std::uint32_t epoch = 0;
    std::uint32_t spare = 0;  // no padding: stored as bytes
    std::uint64_t next = 0;
    friend bool operator==(const StreamPosition&, const StreamPosition&) = default;
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
    std::optional<StreamPosition> stream;            // after the records these come from
    [[nodiscard]] bool empty() const noexcept {
        return bars.empty() && instruments.empty() && gaps.empty() && feed_seq.empty() && !stream;
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

    /// Loads everything into `store`, `feed_seq` and `stream` (unset when none was stored);
    /// returns the number of bars, or -1 and `error`. The bars, feed positions and stream
    /// position were written in one transaction, so they agree.
    long long load(BarStore& store,
                   std::map<std::uint64_t, FeedPosition>& feed_seq,
                   std::optional<StreamPosition>& stream,
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
