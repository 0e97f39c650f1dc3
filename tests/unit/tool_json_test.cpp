// SPDX-License-Identifier: Apache-2.0
// The tools' JSON text (prizma-stat --json, prizma-ping --json): what json_text() writes
// parses back to the same fields, strings escaped and bad UTF-8 replaced.
#include <string>

#include "examples/tools/tool_util.hpp"
#include "tests/support/catch.hpp"

using prizma::tools::Json;
using prizma::tools::json_text;

TEST_CASE("json_text: one line that parses back with quotes, controls and UTF-8 kept",
          "[unit][json]") {
    const std::string hostile = "udp://q\"b\\s\x01t\n\x1b[2J\xc3\xa9\xe2\x82\xac";
    const Json doc = {{"uri", hostile}, {"count", 18446744073709551615ULL}, {"none", nullptr}};
    const std::string text = json_text(doc);
    CHECK(text.find('\n') == std::string::npos);
    CHECK(text.find('\x01') == std::string::npos);
    CHECK(text.find('\x1b') == std::string::npos);
    CHECK(text.find("\\u0001") != std::string::npos);
    CHECK(text.find("\\\"") != std::string::npos);
    CHECK(text.find("\xc3\xa9") != std::string::npos);  // non-ASCII as UTF-8, not \u escapes
    const Json back = Json::parse(text);
    CHECK(back.at("uri") == hostile);
    CHECK(back.at("count") == 18446744073709551615ULL);
    CHECK(back.at("none").is_null());
    // The fields keep the order they were set in (scripts and people read them so).
    CHECK(text.rfind(R"({"uri":)", 0) == 0);
}

TEST_CASE("json_text: bytes that are not UTF-8 become U+FFFD, the rest is kept", "[unit][json]") {
    // A cut character (\xc3 alone), a stray continuation byte, an overlong '/' and a surrogate.
    const Json doc = {{"s", std::string("a\xc3"
                                        "b\x80"
                                        "c\xc0\xaf"
                                        "d\xed\xa0\x80"
                                        "e\xff")}};
    const Json back = Json::parse(json_text(doc));
    const std::string s = back.at("s");
    CHECK(s.find('a') == 0);
    CHECK(s.find("\xef\xbf\xbd") != std::string::npos);
    for (const char c : std::string("bcde")) {
        CHECK(s.find(c) != std::string::npos);
    }
    // Every byte of the result is well-formed UTF-8: parsing it strictly again succeeds.
    CHECK_NOTHROW(Json::parse(Json(s).dump()));
}
