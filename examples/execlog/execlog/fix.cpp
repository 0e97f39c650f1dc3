// SPDX-License-Identifier: Apache-2.0
#include "execlog/fix.hpp"

#include <fmt/core.h>

namespace execlog {
namespace {

// Howard Hinnant's civil_from_days.
void civil(std::int64_t days, int& y, unsigned& m, unsigned& d) {
    days += 719468;
    const std::int64_t era = (days >= 0 ? days : days - 146096) / 146097;
    const auto doe = static_cast<unsigned>(days - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    d = doy - (153 * mp + 2) / 5 + 1;
    m = mp < 10 ? mp + 3 : mp - 9;
    y = static_cast<int>(static_cast<std::int64_t>(yoe) + era * 400 + (m <= 2 ? 1 : 0));
}

// |v| without overflow (-INT64_MIN does not fit an int64): record fields come off the wire.
std::uint64_t magnitude(std::int64_t v) {
    return v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
}

/// One order's view of a record: what its ExecutionReport says.
struct Leg {
    std::uint64_t order_id = 0;
    std::uint64_t request_id = 0;
    std::uint32_t account = 0;
    Side side = Side::buy;
    std::uint32_t order_qty = 0;
    OrdType ord_type = OrdType::limit;
    std::int64_t price = 0;  // 0: no Price(44)
    Tif tif = Tif::day;
    std::uint32_t leaves = 0;
    std::uint32_t cum = 0;
    std::int64_t notional = 0;
};

// FIX 4.4 OrdStatus(39) of a live order: New, or Partially filled once something traded.
char live_status(std::uint32_t cum) {
    return cum == 0 ? '0' : '1';
}

char fill_status(std::uint32_t leaves) {
    return leaves == 0 ? '2' : '1';
}

std::string reject_text(const Record& r) {
    if (r.type == RecordType::rejected && r.reason == Reject::unknown_order) {
        return "duplicate order id";  // a new order: the only way it names a known order
    }
    return std::string(to_string(r.reason));
}

using Fields = std::vector<std::pair<int, std::string>>;

void add(Fields& f, int tag, std::string value) {
    f.emplace_back(tag, std::move(value));
}

/// An ExecutionReport (35=8) of `l`; `exec_type`, `status`; the record's own extras.
FixMessage report(std::uint64_t sequence,
                  int leg_no,
                  const Leg& l,
                  char exec_type,
                  char status,
                  const Record& r) {
    FixMessage m;
    m.msg_type = '8';
    m.account = l.account;
    Fields& f = m.fields;
    add(f, 37, fmt::format("{}", l.order_id));
    add(f, 11, fmt::format("{}", l.request_id));
    if (r.type == RecordType::cancelled || r.type == RecordType::replaced) {
        add(f, 41, fmt::format("{}", r.orig_request_id));
    }
    add(f, 17, fmt::format("{}-{}", sequence, leg_no));
    add(f, 150, std::string(1, exec_type));
    add(f, 39, std::string(1, status));
    add(f, 1, fmt::format("{}", l.account));
    add(f, 55, fmt::format("S{}", r.instrument));
    add(f, 54, l.side == Side::buy ? "1" : "2");
    add(f, 38, fmt::format("{}", l.order_qty));
    add(f, 40, fmt::format("{}", static_cast<int>(l.ord_type)));
    if (l.price > 0) {
        add(f, 44, fix_price(l.price));
    }
    add(f, 59, fmt::format("{}", static_cast<int>(l.tif)));
    if (exec_type == 'F') {
        add(f, 32, fmt::format("{}", r.last_qty));
        add(f, 31, fix_price(r.price));
    }
    add(f, 151, fmt::format("{}", l.leaves));
    add(f, 14, fmt::format("{}", l.cum));
    add(f, 6, fix_avg_px(l.notional, l.cum));
    if (exec_type == '8') {
        add(f, 103, fmt::format("{}", ord_rej_reason(r.reason)));
        add(f, 58, reject_text(r));
    }
    add(f, 60, fix_time(r.time_ns));
    return m;
}

/// An OrderCancelReject (35=9). FIX 4.4 defines no Symbol or Side on it; OrderID "NONE" when
/// the order is unknown (FIX 4.4 Vol. 4, OrderCancelReject).
FixMessage cancel_reject(const Record& r) {
    FixMessage m;
    m.msg_type = '9';
    m.account = r.account;
    Fields& f = m.fields;
    const bool unknown = r.reason == Reject::unknown_order;
    add(f, 37, unknown ? std::string("NONE") : fmt::format("{}", r.order_id));
    add(f, 11, fmt::format("{}", r.request_id));
    add(f, 41, fmt::format("{}", r.orig_request_id));
    add(f, 39, std::string(1, unknown ? '8' : live_status(r.cum)));
    add(f, 1, fmt::format("{}", r.account));
    add(f, 60, fix_time(r.time_ns));
    add(f, 434, r.type == RecordType::cancel_rejected ? "1" : "2");
    add(f, 102, fmt::format("{}", cxl_rej_reason(r.reason)));
    add(f, 58, reject_text(r));
    return m;
}

Leg order_leg(const Record& r) {
    Leg l;
    l.order_id = r.order_id;
    l.request_id = r.request_id;
    l.account = r.account;
    l.side = r.side;
    l.order_qty = r.order_qty;
    l.ord_type = r.ord_type;
    l.price = r.ord_type == OrdType::limit ? r.price : 0;
    l.tif = r.tif;
    l.leaves = r.leaves;
    l.cum = r.cum;
    l.notional = r.notional;
    return l;
}

}  // namespace

int ord_rej_reason(Reject why) noexcept {
    switch (why) {
        case Reject::unknown_instrument: return 1;  // Unknown symbol
        case Reject::bad_quantity: return 13;       // Incorrect quantity
        case Reject::unknown_order: return 6;       // Duplicate order (a reused order id)
        case Reject::none:
        case Reject::bad_price:
        case Reject::not_owner: break;
    }
    return 99;  // Other (4.4 has no invalid-price code), with Text(58)
}

int cxl_rej_reason(Reject why) noexcept {
    switch (why) {
        case Reject::unknown_order: return 1;  // Unknown order
        case Reject::not_owner: return 2;      // Broker / Exchange Option
        case Reject::none:
        case Reject::unknown_instrument:
        case Reject::bad_quantity:
        case Reject::bad_price: break;
    }
    return 99;  // Other, with Text(58)
}

std::string fix_time(std::uint64_t time_ns) {
    const std::uint64_t s = time_ns / 1'000'000'000;
    const std::uint64_t ms = time_ns / 1'000'000 % 1000;
    int y = 0;
    unsigned m = 0;
    unsigned d = 0;
    civil(static_cast<std::int64_t>(s / 86400), y, m, d);
    const std::uint64_t sod = s % 86400;
    return fmt::format("{:04}{:02}{:02}-{:02}:{:02}:{:02}.{:03}", y, m, d, sod / 3600,
                       sod / 60 % 60, sod % 60, ms);
}

std::string fix_price(std::int64_t ticks) {
    const std::uint64_t a = magnitude(ticks);
    return fmt::format("{}{}.{:02}", ticks < 0 ? "-" : "", a / 100, a % 100);
}

std::string fix_avg_px(std::int64_t notional, std::uint32_t cum) {
    if (cum == 0) {
        return "0";
    }
    // |notional| / cum ticks = q + rem / cum; in 1/10,000 units: q x 100 + rem x 100 / cum,
    // computed without the product (notional may be near the int64 limit).
    const std::uint64_t n = magnitude(notional);
    std::uint64_t ticks = n / cum;
    const std::uint64_t rem = n % cum * 100;  // n % cum < 2^32: no overflow
    std::uint64_t frac = rem / cum;           // 0..99
    if (2 * (rem % cum) >= cum) {             // half away from zero
        ++frac;
    }
    if (frac == 100) {
        frac = 0;
        ++ticks;
    }
    return fmt::format("{}{}.{:04}", notional < 0 ? "-" : "", ticks / 100,
                       ticks % 100 * 100 + frac);
}

std::size_t fix_messages(std::uint64_t sequence, const Record& r, std::vector<FixMessage>& out) {
    Leg l = order_leg(r);
    switch (r.type) {
        case RecordType::session_end: return 0;
        case RecordType::accepted: out.push_back(report(sequence, 1, l, '0', '0', r)); return 1;
        case RecordType::rejected:
            l.leaves = 0;
            l.cum = 0;
            l.notional = 0;
            out.push_back(report(sequence, 1, l, '8', '8', r));
            return 1;
        case RecordType::cancelled: out.push_back(report(sequence, 1, l, '4', '4', r)); return 1;
        case RecordType::replaced:
            // FIX 4.4: ExecType Replaced; OrdStatus the order's state after it (5 is retired).
            out.push_back(report(sequence, 1, l, '5', live_status(r.cum), r));
            return 1;
        case RecordType::expired: out.push_back(report(sequence, 1, l, 'C', 'C', r)); return 1;
        case RecordType::cancel_rejected:
        case RecordType::replace_rejected: out.push_back(cancel_reject(r)); return 1;
        case RecordType::trade: break;
    }
    l.price = 0;
    out.push_back(report(sequence, 1, l, 'F', fill_status(r.leaves), r));
    Leg m;
    m.order_id = r.maker_order_id;
    m.request_id = r.maker_request_id;
    m.account = r.maker_account;
    m.side = r.side == Side::buy ? Side::sell : Side::buy;
    m.order_qty = r.maker_leaves + r.maker_cum;
    m.ord_type = OrdType::limit;
    m.tif = Tif::day;
    m.leaves = r.maker_leaves;
    m.cum = r.maker_cum;
    m.notional = r.maker_notional;
    out.push_back(report(sequence, 2, m, 'F', fill_status(r.maker_leaves), r));
    return 2;
}

}  // namespace execlog
