// SPDX-License-Identifier: Apache-2.0
#include "query.hpp"

#include <algorithm>
#include <array>
#include <charconv>

namespace md {

namespace {

constexpr std::size_t kMaxTarget = 4096;

int hex_value(char c) noexcept {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

// Percent-decoding of our own, not Boost.URL's: Boost.URL came in Boost 1.81, and Debian 12
// ships 1.74 (libboost-dev, what scripts/setup-debian.sh installs). libboost1.81-dev is in
// Debian 12 too, but it Conflicts with libboost1.74-dev (no two Boost versions' headers side
// by side), so it would remove libboost-dev; Boost.URL is moreover a compiled library there
// (libboost-url1.81-dev, libboost-url1.81.0). Nothing else here needs the 1.74 headers
// (libquickfix-dev does not depend on Boost; heaptrack uses only 1.74 runtime libraries,
// which stay), so the switch is possible, but it means another Boost for every user's build
// for 20 lines: docs/MARKETDATA.md, "Internals". Malformed escapes are refused
// (test/unit_test.cpp, "percent-decoding").
bool decode_into(std::string_view in, std::string& out) {
    out.clear();
    for (std::size_t i = 0; i < in.size(); ++i) {
        const char c = in[i];
        if (c == '%') {
            if (i + 2 >= in.size()) {
                return false;
            }
            const int hi = hex_value(in[i + 1]);
            const int lo = hex_value(in[i + 2]);
            if (hi < 0 || lo < 0) {
                return false;
            }
            out += static_cast<char>(hi * 16 + lo);
            i += 2;
        } else {
            out += c == '+' ? ' ' : c;
        }
    }
    return std::none_of(out.begin(), out.end(),
                        [](char ch) { return static_cast<unsigned char>(ch) < 0x20; });
}

bool allowed_keys(const Target& t,
                  std::initializer_list<std::string_view> keys,
                  std::string& error) {
    for (const auto& kv : t.params) {
        if (std::find(keys.begin(), keys.end(), kv.first) == keys.end()) {
            error = "unknown parameter '" + kv.first + "'";
            return false;
        }
    }
    return true;
}

const std::string* required(const Target& t, std::string_view key, std::string& error) {
    const std::string* v = t.get(key);
    if (v == nullptr || v->empty()) {
        error = "missing parameter '" + std::string(key) + "'";
    }
    return v == nullptr || v->empty() ? nullptr : v;
}

bool read_code(const std::string& v, Code& out, std::string& error) {
    const auto c = parse_code(v);
    if (!c) {
        error = "bad code '" + v.substr(0, 32) + "': six digits, '.', SH or SZ (600000.SH)";
        return false;
    }
    out = *c;
    return true;
}

bool read_period(const Target& t, Period& out, std::string& error) {
    const std::string* v = required(t, "period", error);
    if (v == nullptr) {
        return false;
    }
    const auto p = parse_period(*v);
    if (!p) {
        error = "bad period '" + v->substr(0, 32) + "': one of 1m, 5m, 15m, 30m, 60m, 1d";
        return false;
    }
    out = *p;
    return true;
}

bool read_range(const Target& t,
                std::uint64_t& start,
                std::uint64_t& end,
                std::string& error,
                bool reversed_ok = false) {
    for (const auto& [key, dst] : {std::pair{"start", &start}, std::pair{"end", &end}}) {
        const std::string* v = required(t, key, error);
        if (v == nullptr) {
            return false;
        }
        const auto time = parse_time12(*v);
        if (!time) {
            error = std::string("bad ") + key + " '" + v->substr(0, 32)
                    + "': YYYYMMDDHHMM, a real date and time";
            return false;
        }
        *dst = *time;
    }
    if (start > end && !reversed_ok) {
        error = "start " + std::to_string(start) + " is after end " + std::to_string(end);
        return false;
    }
    return true;
}

}  // namespace

const std::string* Target::get(std::string_view key) const noexcept {
    for (const auto& kv : params) {
        if (kv.first == key) {
            return &kv.second;
        }
    }
    return nullptr;
}

std::optional<Target> parse_target(std::string_view target, std::string& error) {
    if (target.size() > kMaxTarget) {
        error = "request target over 4096 bytes";
        return std::nullopt;
    }
    Target t;
    const std::size_t q = target.find('?');
    if (!decode_into(target.substr(0, q), t.path)) {
        error = "malformed path";
        return std::nullopt;
    }
    if (q == std::string_view::npos) {
        return t;
    }
    std::string_view rest = target.substr(q + 1);
    while (!rest.empty()) {
        const std::size_t amp = rest.find('&');
        const std::string_view part = rest.substr(0, amp);
        rest = amp == std::string_view::npos ? std::string_view{} : rest.substr(amp + 1);
        if (part.empty()) {
            continue;
        }
        const std::size_t eq = part.find('=');
        std::string key;
        std::string value;
        if (!decode_into(part.substr(0, eq), key)
            || (eq != std::string_view::npos && !decode_into(part.substr(eq + 1), value))) {
            error = "malformed query string: bad %-escape or control character";
            return std::nullopt;
        }
        if (t.get(key) != nullptr) {
            error = "parameter '" + key.substr(0, 32) + "' given twice";
            return std::nullopt;
        }
        t.params.emplace_back(std::move(key), std::move(value));
    }
    return t;
}

std::optional<BarQuery> parse_bar_query(const Target& t, std::string& error, bool compat) {
    BarQuery q;
    if (!compat && !allowed_keys(t, {"code", "period", "start", "end"}, error)) {
        return std::nullopt;
    }
    const std::string* code = required(t, "code", error);
    if (code == nullptr || !read_code(*code, q.code, error) || !read_period(t, q.period, error)
        || !read_range(t, q.start, q.end, error, compat)) {
        return std::nullopt;
    }
    return q;
}

std::optional<V2Query> parse_v2_query(const Target& t, std::size_t max_bars, std::string& error) {
    V2Query q;
    if (!allowed_keys(t, {"codes", "period", "start", "end", "last"}, error)) {
        return std::nullopt;
    }
    const std::string* codes = required(t, "codes", error);
    if (codes == nullptr || !read_period(t, q.period, error)) {
        return std::nullopt;
    }
    std::string_view rest = *codes;
    while (!rest.empty() || q.codes.empty()) {
        const std::size_t comma = rest.find(',');
        const std::string one(rest.substr(0, comma));
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
        Code c = 0;
        if (!read_code(one, c, error)) {
            return std::nullopt;
        }
        if (std::find(q.codes.begin(), q.codes.end(), c) != q.codes.end()) {
            error = "code " + one + " listed twice";
            return std::nullopt;
        }
        if (q.codes.size() == kMaxV2Codes) {
            error = "more than 100 codes";
            return std::nullopt;
        }
        q.codes.push_back(c);
    }
    const std::string* last = t.get("last");
    if (last != nullptr) {
        if (t.get("start") != nullptr || t.get("end") != nullptr) {
            error = "give either last or start and end, not both";
            return std::nullopt;
        }
        std::size_t n = 0;
        const auto [end, ec] = std::from_chars(last->data(), last->data() + last->size(), n);
        if (ec != std::errc{} || end != last->data() + last->size() || n == 0 || n > max_bars) {
            error = "bad last '" + last->substr(0, 32) + "': a whole number in [1, "
                    + std::to_string(max_bars) + "]";
            return std::nullopt;
        }
        q.last = n;
        return q;
    }
    if (!read_range(t, q.start, q.end, error)) {
        return std::nullopt;
    }
    return q;
}

std::optional<PushQuery> parse_push_query(const Target& t, std::string& error) {
    PushQuery q;
    if (!allowed_keys(t, {"code", "period"}, error)) {
        return std::nullopt;
    }
    const std::string* code = required(t, "code", error);
    if (code == nullptr || !read_code(*code, q.code, error) || !read_period(t, q.period, error)) {
        return std::nullopt;
    }
    return q;
}

void append_price(std::string& out, std::int64_t hundredths) {
    std::uint64_t v = 0;
    if (hundredths < 0) {
        out += '-';
        v = static_cast<std::uint64_t>(-(hundredths + 1)) + 1;
    } else {
        v = static_cast<std::uint64_t>(hundredths);
    }
    std::array<char, 24> buf{};
    const auto [p, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v / 100);
    out.append(buf.data(), p);
    const auto cents = static_cast<char>(v % 100);
    out += '.';
    out += static_cast<char>('0' + cents / 10);
    out += static_cast<char>('0' + cents % 10);
}

namespace {

void append_int(std::string& out, std::uint64_t v) {
    std::array<char, 24> buf{};
    const auto [p, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v);
    out.append(buf.data(), p);
}

}  // namespace

void append_bar(std::string& out, Code code, const Bar& b) {
    out += R"({"code":")";
    append_code(out, code);
    out += R"(","time":)";
    append_int(out, b.time);
    out += R"(,"open":)";
    append_price(out, b.open);
    out += R"(,"high":)";
    append_price(out, b.high);
    out += R"(,"low":)";
    append_price(out, b.low);
    out += R"(,"close":)";
    append_price(out, b.close);
    out += R"(,"volume":)";
    append_int(out, static_cast<std::uint64_t>(b.volume));
    out += R"(,"turnover":)";
    append_price(out, b.turnover);
    if ((b.flags & kBarGap) != 0) {
        out += R"(,"gap":true)";
    }
    out += '}';
}

void append_bars(std::string& out, Code code, std::span<const Bar> bars) {
    out += '[';
    for (std::size_t i = 0; i < bars.size(); ++i) {
        if (i > 0) {
            out += ',';
        }
        append_bar(out, code, bars[i]);
    }
    out += ']';
}

}  // namespace md
