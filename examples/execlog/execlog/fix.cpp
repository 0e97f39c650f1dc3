// SPDX-License-Identifier: Apache-2.0
#include "execlog/fix.hpp"

#include <charconv>
#include <limits>

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

std::string price_text(std::int64_t ticks) {
    const std::uint64_t a = magnitude(ticks);
    return fmt::format("{}{}.{:02}", ticks < 0 ? "-" : "", a / 100, a % 100);
}

// notional / cum in units (100 ticks) to 4 decimals, truncated: floor(|notional| x 100 / cum)
// / 10^4, computed without the product (notional may be near the int64 limit).
std::string avg_text(std::int64_t notional, std::uint32_t cum) {
    if (cum == 0) {
        return "0";
    }
    const std::uint64_t n = magnitude(notional);
    const std::uint64_t ticks = n / cum;
    const std::uint64_t hundredths = n % cum * 100 / cum;  // n % cum < 2^32: no overflow
    return fmt::format("{}{}.{:04}", notional < 0 ? "-" : "", ticks / 100,
                       ticks % 100 * 100 + hundredths);
}

char side_char(Side s) {
    return s == Side::buy ? '1' : '2';
}

struct Field {
    std::string_view tag;
    std::string_view value;
};

}  // namespace

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

/// One ExecutionReport's values.
struct FixRenderer::Leg {
    std::uint64_t sequence = 0;
    int leg = 1;
    char exec_type = '0';
    char ord_status = '0';
    const Record* r = nullptr;
    std::uint64_t order_id = 0;
    std::uint64_t request_id = 0;
    std::uint64_t orig_request_id = 0;
    std::uint32_t account = 0;
    Side side = Side::buy;
    std::uint32_t order_qty = 0;
    OrdType ord_type = OrdType::limit;
    std::int64_t price = 0;  // 0: no Price(44)
    Tif tif = Tif::day;
    std::uint32_t last_qty = 0;  // trade legs
    std::uint32_t leaves = 0;
    std::uint32_t cum = 0;
    std::int64_t notional = 0;
};

void FixRenderer::message(const Leg& l, std::string& out) {
    const char d = delim_;
    body_.clear();
    const auto f = [&](int tag, const auto& value) {
        fmt::format_to(std::back_inserter(body_), "{}={}{}", tag, value, d);
    };
    const std::string time = fix_time(l.r->time_ns);
    f(35, '8');
    f(49, "PRIZMA");
    f(56, fmt::format("A{}", l.account));
    f(34, msg_seq_++);
    f(52, time);
    f(37, l.order_id);
    f(11, l.request_id);
    if (l.orig_request_id != 0) {
        f(41, l.orig_request_id);
    }
    f(17, fmt::format("{}-{}", l.sequence, l.leg));
    f(150, l.exec_type);
    f(39, l.ord_status);
    f(1, l.account);
    f(55, fmt::format("S{}", l.r->instrument));
    f(54, side_char(l.side));
    f(38, l.order_qty);
    f(40, static_cast<int>(l.ord_type));
    if (l.price > 0) {
        f(44, price_text(l.price));
    }
    f(59, static_cast<int>(l.tif));
    if (l.exec_type == 'F') {
        f(32, l.last_qty);
        f(31, price_text(l.r->price));
    }
    f(151, l.leaves);
    f(14, l.cum);
    f(6, avg_text(l.notional, l.cum));
    if (l.exec_type == '8') {
        f(103, static_cast<int>(l.r->reason));
        f(58, to_string(l.r->reason));
    }
    f(60, time);
    const std::size_t start = out.size();
    fmt::format_to(std::back_inserter(out), "8=FIX.4.4{}9={}{}", d, body_.size(), d);
    out += body_;
    unsigned sum = 0;
    for (std::size_t i = start; i < out.size(); ++i) {
        sum += static_cast<unsigned char>(out[i]);
    }
    fmt::format_to(std::back_inserter(out), "10={:03}{}", sum % 256, d);
}

std::size_t FixRenderer::render(std::uint64_t sequence, const Record& r, std::string& out) {
    Leg l;
    l.sequence = sequence;
    l.r = &r;
    l.order_id = r.order_id;
    l.request_id = r.request_id;
    l.orig_request_id = r.orig_request_id;
    l.account = r.account;
    l.side = r.side;
    l.order_qty = r.order_qty;
    l.ord_type = r.ord_type;
    l.price = r.ord_type == OrdType::limit ? r.price : 0;
    l.tif = r.tif;
    l.leaves = r.leaves;
    l.cum = r.cum;
    l.notional = r.notional;
    switch (r.type) {
        case RecordType::accepted:
            l.exec_type = '0';
            l.ord_status = '0';
            break;
        case RecordType::rejected:
            l.exec_type = '8';
            l.ord_status = '8';
            l.leaves = 0;
            l.cum = 0;
            break;
        case RecordType::cancelled:
            l.exec_type = '4';
            l.ord_status = '4';
            break;
        case RecordType::replaced:
            l.exec_type = '5';
            l.ord_status = '5';
            break;
        case RecordType::expired:
            l.exec_type = 'C';
            l.ord_status = 'C';
            break;
        case RecordType::session_end: return 0;
        case RecordType::trade: {
            l.exec_type = 'F';
            l.ord_status = r.leaves == 0 ? '2' : '1';
            l.price = 0;
            l.last_qty = r.last_qty;
            message(l, out);
            Leg m = l;
            m.leg = 2;
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
            m.ord_status = r.maker_leaves == 0 ? '2' : '1';
            message(m, out);
            return 2;
        }
    }
    message(l, out);
    return 1;
}

namespace {

/// The value of `tag` in the message [b, e), or empty.
std::string_view field(std::string_view msg, std::string_view tag, char d) {
    const std::string key = fmt::format("{}{}=", d, tag);
    const auto at = msg.find(key);
    if (at == std::string_view::npos) {
        return {};
    }
    const auto v = at + key.size();
    const auto end = msg.find(d, v);
    return msg.substr(v, end == std::string_view::npos ? std::string_view::npos : end - v);
}

template <typename T>
bool number(std::string_view s, T& v) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc{} && end == s.data() + s.size() && !s.empty();
}

/// The length of the whole valid message at the start of `s`, or 0 with `why` set. Every
/// length read from the file is checked against what is left of it before it is used.
std::size_t valid_message(std::string_view s, char d, std::string& why) {
    const std::string head = fmt::format("8=FIX.4.4{}9=", d);
    if (s.substr(0, head.size()) != head) {
        why = head.substr(0, s.size()) == s ? "a message cut short in its header"
                                            : "no message header (8=FIX.4.4, 9=)";
        return 0;
    }
    const auto len_end = s.find(d, head.size());
    if (len_end == std::string_view::npos) {
        why = "a message cut short in its BodyLength(9)";
        return 0;
    }
    const std::string_view len_text = s.substr(head.size(), len_end - head.size());
    std::uint64_t body = 0;
    if (!number(len_text, body)) {
        why = fmt::format("BodyLength(9) '{}' is not a number", len_text.substr(0, 24));
        return 0;
    }
    constexpr std::size_t kTrailer = 7;  // "10=NNN" and the delimiter
    const std::size_t body_at = len_end + 1;
    if (body > s.size() - body_at || s.size() - body_at - body < kTrailer) {
        why = fmt::format("BodyLength(9) {} runs past the end of the file ({} bytes left)", body,
                          s.size() - body_at);
        return 0;
    }
    const std::size_t sum_at = body_at + body;
    if (s.substr(sum_at, 3) != "10=" || s[sum_at + kTrailer - 1] != d) {
        why = fmt::format("no CheckSum(10) where BodyLength(9) {} ends", body);
        return 0;
    }
    unsigned sum = 0;
    for (std::size_t i = 0; i < sum_at; ++i) {
        sum += static_cast<unsigned char>(s[i]);
    }
    unsigned want = 0;
    if (!number(s.substr(sum_at + 3, 3), want) || want != sum % 256) {
        why = fmt::format("CheckSum(10) '{}' is not {:03}", s.substr(sum_at + 3, 3), sum % 256);
        return 0;
    }
    return sum_at + kTrailer;
}

}  // namespace

FixRecovery recover_fix(std::string_view content, char d) {
    FixRecovery r;
    std::size_t at = 0;
    std::uint64_t messages = 0;
    while (at < content.size()) {
        const std::size_t n = valid_message(content.substr(at), d, r.problem);
        if (n == 0) {
            r.problem_at = at;
            return r;
        }
        const std::string_view msg = content.substr(at, n);
        const std::string_view exec_id = field(msg, "17", d);
        const auto dash = exec_id.find('-');
        std::uint64_t seq = 0;
        int leg = 0;
        std::uint64_t msg_seq = 0;
        if (dash == std::string_view::npos || !number(exec_id.substr(0, dash), seq)
            || !number(exec_id.substr(dash + 1), leg) || !number(field(msg, "34", d), msg_seq)
            || seq == std::numeric_limits<std::uint64_t>::max()
            || msg_seq == std::numeric_limits<std::uint64_t>::max()) {
            r.problem = "a message without a valid ExecID(17) or MsgSeqNum(34)";
            r.problem_at = at;
            return r;
        }
        at += n;
        ++messages;
        const int legs = field(msg, "150", d) == "F" ? 2 : 1;
        if (leg == legs) {  // the record's last message: complete
            r.keep_bytes = at;
            r.next_sequence = seq + 1;
            r.next_msg_seq = msg_seq + 1;
            r.messages = messages;
        }
    }
    if (r.keep_bytes != content.size()) {
        r.problem = "the last record's messages are incomplete";
        r.problem_at = r.keep_bytes;
    }
    return r;
}

}  // namespace execlog
