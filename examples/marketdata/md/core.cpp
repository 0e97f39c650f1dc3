// SPDX-License-Identifier: Apache-2.0
#include "core.hpp"

#include <algorithm>
#include <charconv>

namespace md {

namespace {

constexpr std::array<std::string_view, kPeriodCount> kPeriodNames{"1m",  "5m",  "15m",
                                                                  "30m", "60m", "1d"};
constexpr std::array<int, kPeriodCount> kPeriodMinutes{1, 5, 15, 30, 60, kMinutesPerDay};

bool all_digits(std::string_view s) noexcept {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::uint32_t days_in_month(std::uint32_t year, std::uint32_t month) noexcept {
    constexpr std::array<std::uint32_t, 12> kDays{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return month == 2 && leap ? 29 : kDays.at(month - 1);
}

}  // namespace

std::optional<Code> parse_code(std::string_view text) noexcept {
    if (text.size() != 9 || text[6] != '.' || !all_digits(text.substr(0, 6))) {
        return std::nullopt;
    }
    std::uint32_t number = 0;
    (void)std::from_chars(text.data(), text.data() + 6, number);
    const std::string_view exchange = text.substr(7);
    if (exchange == "SH") {
        return make_code(number, 0);
    }
    if (exchange == "SZ") {
        return make_code(number, 1);
    }
    return std::nullopt;
}

void append_code(std::string& out, Code code) {
    std::array<char, 6> digits{};
    std::uint32_t n = code >> 2U;
    for (std::size_t i = digits.size(); i-- > 0;) {
        digits.at(i) = static_cast<char>('0' + n % 10);
        n /= 10;
    }
    out.append(digits.data(), digits.size());
    out += (code & 3U) == 0 ? ".SH" : ".SZ";
}

std::string code_text(Code code) {
    std::string s;
    append_code(s, code);
    return s;
}

std::string_view period_name(Period p) noexcept {
    return kPeriodNames.at(static_cast<std::size_t>(p));
}

std::optional<Period> parse_period(std::string_view text) noexcept {
    for (std::size_t i = 0; i < kPeriodCount; ++i) {
        if (kPeriodNames.at(i) == text) {
            return kPeriods.at(i);
        }
    }
    return std::nullopt;
}

int period_minutes(Period p) noexcept {
    return kPeriodMinutes.at(static_cast<std::size_t>(p));
}

int trading_minute(std::uint32_t time_ms) noexcept {
    constexpr std::uint32_t kMinute = 60'000;
    if (time_ms < kOpenAuctionMs) {
        return 0;
    }
    if (time_ms < kMorningOpenMs + kMinute) {
        return 1;
    }
    if (time_ms < kMorningCloseMs) {
        return static_cast<int>((time_ms - kMorningOpenMs) / kMinute) + 1;
    }
    if (time_ms < kAfternoonOpenMs) {
        return 120;
    }
    if (time_ms < kCloseMs - kMinute) {
        return 120 + static_cast<int>((time_ms - kAfternoonOpenMs) / kMinute) + 1;
    }
    if (time_ms < hm_ms(15, 30)) {
        return kMinutesPerDay;
    }
    return 0;
}

int minute_hhmm(int minute) noexcept {
    const int base = minute <= 120 ? 9 * 60 + 30 + minute : 13 * 60 + (minute - 120);
    return (base / 60) * 100 + base % 60;
}

int minute_of_hhmm(int hhmm) noexcept {
    const int h = hhmm / 100;
    const int m = hhmm % 100;
    if (m >= 60 || h >= 24) {
        return 0;
    }
    const int t = h * 60 + m;
    if (t >= 9 * 60 + 31 && t <= 11 * 60 + 30) {
        return t - (9 * 60 + 30);
    }
    if (t >= 13 * 60 + 1 && t <= 15 * 60) {
        return 120 + t - 13 * 60;
    }
    return 0;
}

std::uint64_t bar_label(std::uint32_t date, std::uint32_t time_ms, Period p) noexcept {
    const int minute = trading_minute(time_ms);
    if (minute == 0) {
        return 0;
    }
    const int n = period_minutes(p);
    const int last = ((minute - 1) / n + 1) * n;
    return std::uint64_t{date} * 10'000 + static_cast<std::uint64_t>(minute_hhmm(last));
}

MinuteSpan bar_minutes(std::uint64_t label, Period p) noexcept {
    const int minute = minute_of_hhmm(static_cast<int>(label % 10'000));
    const int n = period_minutes(p);
    if (minute == 0 || minute % n != 0) {
        return {};
    }
    return {minute - n + 1, minute};
}

bool valid_date(std::uint32_t yyyymmdd) noexcept {
    const std::uint32_t y = yyyymmdd / 10'000;
    const std::uint32_t m = yyyymmdd / 100 % 100;
    const std::uint32_t d = yyyymmdd % 100;
    return y >= 1990 && y <= 2099 && m >= 1 && m <= 12 && d >= 1 && d <= days_in_month(y, m);
}

std::optional<std::uint64_t> parse_time12(std::string_view text) noexcept {
    if (text.size() != 12 || !all_digits(text)) {
        return std::nullopt;
    }
    std::uint64_t v = 0;
    (void)std::from_chars(text.data(), text.data() + text.size(), v);
    const auto date = static_cast<std::uint32_t>(v / 10'000);
    const std::uint64_t hh = v / 100 % 100;
    const std::uint64_t mm = v % 100;
    if (!valid_date(date) || hh > 23 || mm > 59) {
        return std::nullopt;
    }
    return v;
}

int weekday(std::uint32_t yyyymmdd) noexcept {
    // Days since 1990-01-01 (a Monday), counted month by month.
    const std::uint32_t y = yyyymmdd / 10'000;
    const std::uint32_t m = yyyymmdd / 100 % 100;
    std::uint32_t days = yyyymmdd % 100 - 1;
    for (std::uint32_t yy = 1990; yy < y; ++yy) {
        days += days_in_month(yy, 2) == 29 ? 366U : 365U;
    }
    for (std::uint32_t mo = 1; mo < m; ++mo) {
        days += days_in_month(y, mo);
    }
    return static_cast<int>(days % 7);
}

std::uint32_t next_weekday(std::uint32_t yyyymmdd) noexcept {
    std::uint32_t d = yyyymmdd;
    do {
        std::uint32_t y = d / 10'000;
        std::uint32_t m = d / 100 % 100;
        std::uint32_t day = d % 100 + 1;
        if (day > days_in_month(y, m)) {
            day = 1;
            if (++m > 12) {
                m = 1;
                ++y;
            }
        }
        d = y * 10'000 + m * 100 + day;
    } while (weekday(d) >= 5);
    return d;
}

}  // namespace md
