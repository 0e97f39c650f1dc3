// SPDX-License-Identifier: Apache-2.0
// Request targets into checked queries, and bars into JSON text (written by hand: integer
// prices in 0.01 printed with two decimals).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bars.hpp"
#include "core.hpp"

namespace md {

/// A request target split into its path and decoded query parameters.
struct Target {
    std::string path;
    std::vector<std::pair<std::string, std::string>> params;
    /// The value of `key` (the first), if present.
    [[nodiscard]] const std::string* get(std::string_view key) const noexcept;
};

/// Splits and percent-decodes a target; the error text in `error` when it is malformed
/// (a bad %-escape, a parameter given twice, a control character, over 4096 bytes).
std::optional<Target> parse_target(std::string_view target, std::string& error);

/// GET /getStockData?code=&period=&start=&end= (the reference API; start/end inclusive).
struct BarQuery {
    Code code = 0;
    Period period = Period::m1;
    std::uint64_t start = 0;
    std::uint64_t end = 0;
};
/// `compat`: as the reference service (--compat reference): unknown parameters ignored, and
/// start after end accepted (an empty answer).
std::optional<BarQuery> parse_bar_query(const Target& t, std::string& error, bool compat = false);

/// GET /v2/bars?codes=A,B&period=&last=N | &start=&end=
struct V2Query {
    std::vector<Code> codes;  // 1..kMaxV2Codes, distinct
    Period period = Period::m1;
    std::uint64_t start = 0;
    std::uint64_t end = 0;
    std::size_t last = 0;  // 0: by range
};
inline constexpr std::size_t kMaxV2Codes = 100;
std::optional<V2Query> parse_v2_query(const Target& t, std::size_t max_bars, std::string& error);

/// /ws and /sse: ?code=&period=
struct PushQuery {
    Code code = 0;
    Period period = Period::m1;
};
std::optional<PushQuery> parse_push_query(const Target& t, std::string& error);

/// Appends 1234 as "12.34" (and -5 as "-0.05").
void append_price(std::string& out, std::int64_t hundredths);
/// Appends a bar object: {"code":"300525.SZ","time":202308180931,"open":31.57,...,
/// "turnover":7890024.00}, with ,"gap":true when the bar may miss ticks.
void append_bar(std::string& out, Code code, const Bar& b);
/// Appends a JSON array of bars.
void append_bars(std::string& out, Code code, std::span<const Bar> bars);

}  // namespace md
