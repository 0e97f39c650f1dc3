// SPDX-License-Identifier: Apache-2.0
// The deterministic matching engine of execlog-core: price-time priority per instrument;
// limit, market, IOC, cancel and replace. Its output depends on its input only (no clock, no
// address, no hash order), so a hot-standby copy fed the same input writes the same records.
#pragma once

#include <cstdint>
#include <limits>
#include <list>
#include <map>
#include <unordered_map>
#include <vector>

#include "execlog/record.hpp"

namespace execlog {

/// One request to the engine.
struct Input {
    enum class Kind : std::uint8_t { new_order, cancel, replace };
    Kind kind = Kind::new_order;
    std::uint64_t time_ns = 0;
    std::uint64_t request_id = 0;  ///< unique per input; a new order's order id is its own
    std::uint32_t account = 0;
    std::uint16_t instrument = 0;  ///< new orders
    Side side = Side::buy;
    OrdType ord_type = OrdType::limit;
    Tif tif = Tif::day;
    std::uint32_t qty = 0;           ///< new, replace (the new leaves quantity)
    std::int64_t price = 0;          ///< new limit, replace
    std::uint64_t target_order = 0;  ///< cancel, replace
};

/// The largest quantity of an order, in lots: of a new order, and of a replaced order's filled
/// plus new leaves quantity (an order's quantity never grows past it).
inline constexpr std::uint32_t kMaxQty = 1'000'000;
/// The highest limit price, in ticks (92,233,720,368.54 units). Every trade is at a resting
/// limit price, so with an order's quantity within kMaxQty its notional (the sum of price x
/// quantity of its fills) is at most kMaxPrice x kMaxQty, which fits an int64: an order past
/// either limit is rejected (bad price, bad quantity), never computed with.
inline constexpr std::int64_t kMaxPrice = std::numeric_limits<std::int64_t>::max() / kMaxQty;
static_assert(kMaxPrice * std::int64_t{kMaxQty} > 0);  // a constant: an overflow would not compile

/// What the engine refused.
struct EngineCounters {
    std::uint64_t rejected = 0;      ///< rejected records made (every reason)
    std::uint64_t out_of_range = 0;  ///< of them: a price or quantity past kMaxPrice, kMaxQty
};

class Engine {
public:
    explicit Engine(std::uint16_t instruments) : books_(instruments) {}
    /// Runs one input; appends the records it makes to `out` (not cleared).
    void process(const Input& in, std::vector<Record>& out);
    /// The record that closes the session (after `inputs` inputs, at `time_ns`).
    static Record session_end(std::uint64_t inputs, std::uint64_t time_ns);
    [[nodiscard]] std::size_t resting_orders() const noexcept { return orders_.size(); }
    [[nodiscard]] const EngineCounters& counters() const noexcept { return counters_; }

private:
    struct Order {
        std::uint64_t id = 0;
        std::uint64_t request_id = 0;
        std::uint32_t account = 0;
        std::uint16_t instrument = 0;
        Side side = Side::buy;
        OrdType ord_type = OrdType::limit;
        Tif tif = Tif::day;
        std::int64_t price = 0;
        std::uint32_t leaves = 0;
        std::uint32_t cum = 0;
        std::int64_t notional = 0;
        std::list<std::uint64_t>::iterator at;  ///< its place in the price level's queue
    };
    using Level = std::list<std::uint64_t>;
    struct Book {
        std::map<std::int64_t, Level, std::greater<>> bids;  // best (highest) first
        std::map<std::int64_t, Level> asks;                  // best (lowest) first
    };

    void new_order(const Input& in, std::vector<Record>& out);
    void cancel(const Input& in, std::vector<Record>& out);
    void replace(const Input& in, std::vector<Record>& out);
    /// Matches `taker` against the other side; the taker is not in the book.
    void match(Order& taker, OrdType type, std::vector<Record>& out);
    template <typename Side_>
    void match_side(Side_& levels, Order& taker, OrdType type, std::vector<Record>& out);
    void rest(Order& o);
    void unrest(Order& o);
    /// The rejection of `in` (counted).
    Record reject(const Input& in, Reject why);
    /// The rejection of a cancel or replace `in` (counted); `o` the order it names, if resting.
    Record reject_change(const Input& in, const Order* o, Reject why);
    /// A price or quantity check of a new order or a replace: Reject::none if it passes (the
    /// replaced order's filled quantity `cum` counts against kMaxQty).
    Reject check_limits(const Input& in, bool market, std::uint32_t cum);
    static Record base(const Order& o, RecordType type, std::uint64_t time_ns);

    std::vector<Book> books_;
    std::unordered_map<std::uint64_t, Order> orders_;  // resting orders only; never iterated
    std::uint64_t time_ns_ = 0;
    EngineCounters counters_;
};

}  // namespace execlog
