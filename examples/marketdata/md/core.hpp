// SPDX-License-Identifier: Apache-2.0
// Market-data vocabulary shared by md-feed, md-gateway and the tests: instrument codes, bar
// periods, exchange time and the bar-labelling convention (docs/MARKETDATA.md#conventions).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace md {

/// An instrument code such as "600000.SH" packed into 32 bits: number * 4 + exchange
/// (0 = SH, 1 = SZ). 0 is no code.
using Code = std::uint32_t;

/// "600000.SH" -> its Code; nothing for anything else (6 digits, '.', SH or SZ).
std::optional<Code> parse_code(std::string_view text) noexcept;
/// The text of a code: "600000.SH".
std::string code_text(Code code);
/// Appends the text of a code to `out`.
void append_code(std::string& out, Code code);
/// A code from its number and exchange (0 = SH, 1 = SZ).
constexpr Code make_code(std::uint32_t number, std::uint32_t exchange) noexcept {
    return (number << 2U) | (exchange & 3U);
}

enum class Period : std::uint8_t { m1, m5, m15, m30, m60, d1 };
inline constexpr std::size_t kPeriodCount = 6;
inline constexpr std::array<Period, kPeriodCount> kPeriods{Period::m1,  Period::m5,  Period::m15,
                                                           Period::m30, Period::m60, Period::d1};

/// "1m", "5m", "15m", "30m", "60m", "1d".
std::string_view period_name(Period p) noexcept;
std::optional<Period> parse_period(std::string_view text) noexcept;
/// Trading minutes per bar: 1, 5, 15, 30, 60, and 240 for the day.
int period_minutes(Period p) noexcept;

/// Exchange local time of day in milliseconds since midnight.
inline constexpr std::uint32_t hm_ms(std::uint32_t h, std::uint32_t m) noexcept {
    return (h * 60 + m) * 60'000;
}
inline constexpr std::uint32_t kOpenAuctionMs = hm_ms(9, 25);  // opening call auction match
inline constexpr std::uint32_t kMorningOpenMs = hm_ms(9, 30);
inline constexpr std::uint32_t kMorningCloseMs = hm_ms(11, 30);
inline constexpr std::uint32_t kAfternoonOpenMs = hm_ms(13, 0);
inline constexpr std::uint32_t kCloseAuctionMs = hm_ms(14, 57);  // closing call auction starts
inline constexpr std::uint32_t kCloseMs = hm_ms(15, 0);
inline constexpr int kMinutesPerDay = 240;

/// The trading minute (1..240) a trade at `time_ms` belongs to, or 0 when it is outside the
/// sessions. Minute i is labelled by its end: 1 = 09:31, 120 = 11:30, 121 = 13:01, 240 = 15:00.
/// The opening auction (09:25..09:30) joins minute 1, a print at or after 11:30 (before 13:00)
/// joins minute 120, and 14:59:00..15:30 (the closing auction's print at 15:00) joins 240.
int trading_minute(std::uint32_t time_ms) noexcept;
/// HHMM of the end of trading minute `minute` (1..240): 931 .. 1130, 1301 .. 1500.
int minute_hhmm(int minute) noexcept;
/// The trading minute (1..240) labelled HHMM, or 0 when no minute is.
int minute_of_hhmm(int hhmm) noexcept;

/// A bar's label: YYYYMMDDHHMM of its end (the reference's 202308180931 = 09:30..09:31).
/// Intraday bars of N minutes end on the N-th, 2N-th... trading minute of the day (60m:
/// 10:30, 11:30, 14:00, 15:00); the day bar is labelled YYYYMMDD1500. Returns 0 outside the
/// sessions.
std::uint64_t bar_label(std::uint32_t date, std::uint32_t time_ms, Period p) noexcept;
/// The trading minutes a bar covers, [first, last] (1..240), from its label; {0, 0} for a
/// label that is not a bar of that period.
struct MinuteSpan {
    int first = 0;
    int last = 0;
};
MinuteSpan bar_minutes(std::uint64_t label, Period p) noexcept;

/// A YYYYMMDDHHMM value: 12 digits with a real date (1990..2099) and time; nothing otherwise.
std::optional<std::uint64_t> parse_time12(std::string_view text) noexcept;
/// True for a real calendar date YYYYMMDD in 1990..2099.
bool valid_date(std::uint32_t yyyymmdd) noexcept;
/// The next Monday..Friday after `yyyymmdd`.
std::uint32_t next_weekday(std::uint32_t yyyymmdd) noexcept;
/// 0 = Monday .. 6 = Sunday.
int weekday(std::uint32_t yyyymmdd) noexcept;

/// Instant in exchange time, comparable across days: date * 10^8 + ms of day.
inline constexpr std::uint64_t exchange_instant(std::uint32_t date, std::uint32_t ms) noexcept {
    return std::uint64_t{date} * 100'000'000ULL + ms;
}

}  // namespace md
