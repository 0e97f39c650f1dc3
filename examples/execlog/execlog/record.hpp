// SPDX-License-Identifier: Apache-2.0
// The ExecLog record: one fixed-layout, little-endian, 112-byte payload per stream record
// (docs/EXECLOG.md has the table). Every field is derived from the engine's input, time
// included, so two cores given the same input write the same bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace execlog {

/// The stream id the programs use unless told otherwise.
inline constexpr std::uint32_t kDefaultStreamId = 21;
inline constexpr std::size_t kRecordBytes = 112;

enum class RecordType : std::uint8_t {
    accepted = 1,     ///< a new order entered the book (before any trade it makes)
    rejected = 2,     ///< a request refused: `reason`
    trade = 3,        ///< one fill: the aggressor (taker) and the resting order (maker)
    cancelled = 4,    ///< cancelled on request: `last_qty` = the quantity cancelled
    replaced = 5,     ///< new price and quantity; the order loses its time priority
    expired = 6,      ///< the unfilled rest of an IOC or market order: `last_qty`
    session_end = 7,  ///< the input is over: `order_id` = inputs processed
    /// A cancel or replace request refused (`reason`): `order_id` the order it named,
    /// `orig_request_id` its current request (OrigClOrdID); when the order is resting (not the
    /// owner, bad quantity or price) the order's own fields (instrument, side, quantities);
    /// when it is not (unknown order), those are zero.
    cancel_rejected = 8,
    replace_rejected = 9,
};
/// The highest record type (types 1..kMaxRecordType are known).
inline constexpr std::uint8_t kMaxRecordType = 9;
enum class Side : std::uint8_t { buy = 1, sell = 2 };
enum class OrdType : std::uint8_t { market = 1, limit = 2 };  // FIX tag 40 values
enum class Tif : std::uint8_t { day = 0, ioc = 3 };           // FIX tag 59 values
enum class Reject : std::uint16_t {
    none = 0,
    unknown_instrument = 1,
    bad_quantity = 2,
    bad_price = 3,
    unknown_order = 4,  ///< cancel/replace of an order that is not resting
    not_owner = 5,      ///< cancel/replace from another account
};

/// One ExecLog record, decoded. Quantities in lots, prices in ticks (1/100 of a unit),
/// notional = sum of price x quantity of the order's fills so far.
struct Record {
    RecordType type = RecordType::accepted;
    Side side = Side::buy;  ///< the order's (trade: the taker's)
    OrdType ord_type = OrdType::limit;
    Tif tif = Tif::day;
    std::uint16_t instrument = 0;
    Reject reason = Reject::none;
    std::uint64_t time_ns = 0;  ///< input time (ns since the Unix epoch), never a local clock
    std::uint64_t order_id = 0;
    std::uint64_t request_id = 0;       ///< the request that caused it (FIX ClOrdID)
    std::uint64_t orig_request_id = 0;  ///< replace, cancel: the order's previous request
    std::uint32_t account = 0;
    std::uint32_t order_qty = 0;
    std::int64_t price = 0;  ///< limit price (0: market); trade: the trade price
    std::uint32_t last_qty = 0;
    std::uint32_t leaves = 0;
    std::uint32_t cum = 0;
    std::uint32_t maker_account = 0;
    std::uint64_t maker_order_id = 0;
    std::uint64_t maker_request_id = 0;
    std::uint32_t maker_leaves = 0;
    std::uint32_t maker_cum = 0;
    std::int64_t notional = 0;
    std::int64_t maker_notional = 0;
};

namespace detail {
template <typename T>
void put(std::span<std::byte> out, std::size_t at, T v) noexcept {
    std::memcpy(out.data() + at, &v, sizeof v);  // little-endian hosts only (x86-64, arm64)
}
template <typename T>
T get(std::span<const std::byte> in, std::size_t at) noexcept {
    T v{};
    std::memcpy(&v, in.data() + at, sizeof v);
    return v;
}
}  // namespace detail

/// Writes `r` into out[0, kRecordBytes).
inline void encode(const Record& r, std::span<std::byte> out) noexcept {
    using detail::put;
    put(out, 0, static_cast<std::uint8_t>(r.type));
    put(out, 1, static_cast<std::uint8_t>(r.side));
    put(out, 2, static_cast<std::uint8_t>(r.ord_type));
    put(out, 3, static_cast<std::uint8_t>(r.tif));
    put(out, 4, r.instrument);
    put(out, 6, static_cast<std::uint16_t>(r.reason));
    put(out, 8, r.time_ns);
    put(out, 16, r.order_id);
    put(out, 24, r.request_id);
    put(out, 32, r.orig_request_id);
    put(out, 40, r.account);
    put(out, 44, r.order_qty);
    put(out, 48, r.price);
    put(out, 56, r.last_qty);
    put(out, 60, r.leaves);
    put(out, 64, r.cum);
    put(out, 68, r.maker_account);
    put(out, 72, r.maker_order_id);
    put(out, 80, r.maker_request_id);
    put(out, 88, r.maker_leaves);
    put(out, 92, r.maker_cum);
    put(out, 96, r.notional);
    put(out, 104, r.maker_notional);
}

enum class DecodeStatus : std::uint8_t { ok, bad_size, unknown_type };

/// The record type byte of a payload (0 when empty).
inline std::uint8_t type_byte(std::span<const std::byte> in) noexcept {
    return in.empty() ? 0 : static_cast<std::uint8_t>(in[0]);
}

inline DecodeStatus decode(std::span<const std::byte> in, Record& r) noexcept {
    using detail::get;
    if (in.size() != kRecordBytes) {
        return DecodeStatus::bad_size;
    }
    const auto t = get<std::uint8_t>(in, 0);
    if (t < 1 || t > kMaxRecordType) {
        return DecodeStatus::unknown_type;
    }
    r.type = static_cast<RecordType>(t);
    r.side = static_cast<Side>(get<std::uint8_t>(in, 1));
    r.ord_type = static_cast<OrdType>(get<std::uint8_t>(in, 2));
    r.tif = static_cast<Tif>(get<std::uint8_t>(in, 3));
    r.instrument = get<std::uint16_t>(in, 4);
    r.reason = static_cast<Reject>(get<std::uint16_t>(in, 6));
    r.time_ns = get<std::uint64_t>(in, 8);
    r.order_id = get<std::uint64_t>(in, 16);
    r.request_id = get<std::uint64_t>(in, 24);
    r.orig_request_id = get<std::uint64_t>(in, 32);
    r.account = get<std::uint32_t>(in, 40);
    r.order_qty = get<std::uint32_t>(in, 44);
    r.price = get<std::int64_t>(in, 48);
    r.last_qty = get<std::uint32_t>(in, 56);
    r.leaves = get<std::uint32_t>(in, 60);
    r.cum = get<std::uint32_t>(in, 64);
    r.maker_account = get<std::uint32_t>(in, 68);
    r.maker_order_id = get<std::uint64_t>(in, 72);
    r.maker_request_id = get<std::uint64_t>(in, 80);
    r.maker_leaves = get<std::uint32_t>(in, 88);
    r.maker_cum = get<std::uint32_t>(in, 92);
    r.notional = get<std::int64_t>(in, 96);
    r.maker_notional = get<std::int64_t>(in, 104);
    return DecodeStatus::ok;
}

inline std::string_view to_string(RecordType t) noexcept {
    switch (t) {
        case RecordType::accepted: return "accepted";
        case RecordType::rejected: return "rejected";
        case RecordType::trade: return "trade";
        case RecordType::cancelled: return "cancelled";
        case RecordType::replaced: return "replaced";
        case RecordType::expired: return "expired";
        case RecordType::session_end: return "session_end";
        case RecordType::cancel_rejected: return "cancel_rejected";
        case RecordType::replace_rejected: return "replace_rejected";
    }
    return "unknown";
}

inline std::string_view to_string(Reject r) noexcept {
    switch (r) {
        case Reject::none: return "none";
        case Reject::unknown_instrument: return "unknown instrument";
        case Reject::bad_quantity: return "bad quantity";
        case Reject::bad_price: return "bad price";
        case Reject::unknown_order: return "unknown order";
        case Reject::not_owner: return "not the order's account";
    }
    return "unknown";
}

}  // namespace execlog
