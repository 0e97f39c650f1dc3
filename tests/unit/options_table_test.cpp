// SPDX-License-Identifier: Apache-2.0
// The option table is the one source of the options' names, bounds, defaults and refusal texts:
// the refusals come from it, and docs/URI.md must say what it says.
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <prizma/context.hpp>
#include <prizma/options.hpp>

namespace {

std::vector<std::string> cells(const std::string& row) {
    std::vector<std::string> out;
    std::string cell;
    std::istringstream in(row.substr(1));
    while (std::getline(in, cell, '|')) {
        std::erase(cell, '`');
        const auto b = cell.find_first_not_of(' ');
        const auto e = cell.find_last_not_of(' ');
        out.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
    }
    return out;
}

// The rows of the "ChannelOptions" table in docs/URI.md, by field name.
std::map<std::string, std::vector<std::string>> documented_options() {
    std::ifstream in(std::string(PRIZMA_DOCS_DIR) + "/URI.md");
    REQUIRE(in);
    std::map<std::string, std::vector<std::string>> rows;
    std::string line;
    bool in_section = false;
    while (std::getline(in, line)) {
        if (line.starts_with("## ")) {
            in_section = line == "## `ChannelOptions`";
        } else if (in_section && line.starts_with("| `")) {
            auto c = cells(line);
            rows[c.at(0)] = c;
        }
    }
    return rows;
}

std::string refusal(bool publisher, const prizma::ChannelOptions& o) {
    auto ctx = prizma::Context::create();
    REQUIRE(ctx);
    auto r = publisher ? ctx->add_publisher("mem://t:7500", o).error()
                       : ctx->add_subscriber("mem://t:7500", o).error();
    return r.detail();
}

}  // namespace

TEST_CASE("docs/URI.md documents every option as the table says", "[options]") {
    const auto docs = documented_options();
    const prizma::ChannelOptions defaults;
    REQUIRE(prizma::channel_option_table().size() == docs.size());
    for (const auto& row : prizma::channel_option_table()) {
        INFO(row.name);
        const auto it = docs.find(std::string(row.name));
        REQUIRE(it != docs.end());
        const auto& c = it->second;
        REQUIRE(c.size() == 5);  // field | applies to | meaning | default | bounds
        CHECK(c[1] == row.applies_to);
        CHECK(c[3].starts_with(row.value(defaults)));
        CHECK(c[4] == row.bounds);
    }
}

TEST_CASE("refusals quote the table's bounds under the option's name", "[options]") {
    auto bounds = [](std::string_view name) {
        for (const auto& r : prizma::channel_option_table()) {
            if (r.name == name) {
                return r.bounds;
            }
        }
        FAIL("no option " << name);
        return std::string();
    };
    prizma::ChannelOptions o;
    o.window_sqns = 0;
    CHECK_THAT(refusal(true, o), Catch::Contains("window_sqns = 0: 1 to 16777216 packets"));
    CHECK_THAT(bounds("window_sqns"), Catch::Contains("publisher 1 to 16777216 packets"));
    o.window_sqns = (1U << 20U) + 1;
    CHECK_THAT(refusal(false, o), Catch::Contains("window_sqns = 1048577: 2 to 1048576 packets"));
    CHECK_THAT(bounds("window_sqns"), Catch::Contains("subscriber 2 to 1048576 packets"));
    o = {};
    o.max_sources = 4097;
    CHECK_THAT(refusal(false, o), Catch::EndsWith("max_sources = 4097: " + bounds("max_sources")));
    o.max_sources = 4096;
    o.preallocated_sources = 4097;
    CHECK_THAT(refusal(false, o),
               Catch::EndsWith("preallocated_sources = 4097: " + bounds("preallocated_sources")));
    o = {};
    o.retention = std::chrono::nanoseconds(-5);
    CHECK_THAT(refusal(true, o), Catch::EndsWith("retention = -5 ns: " + bounds("retention")));
    o = {};
    o.max_recover_sqns = 0;
    CHECK_THAT(refusal(false, o), Catch::Contains("max_recover_sqns = 0: 1 to window_sqns - 1"));
    CHECK_THAT(bounds("max_recover_sqns"), Catch::StartsWith("1 to window_sqns - 1"));
    // The edges themselves are taken.
    o = {};
    o.max_sources = 4096;
    auto ctx = prizma::Context::create();
    REQUIRE(ctx);
    CHECK(ctx->add_subscriber("mem://t:7500", o));
}

TEST_CASE("the table's values are the ChannelOptions defaults", "[options]") {
    const prizma::ChannelOptions d;
    std::map<std::string, std::string> v;
    for (const auto& r : prizma::channel_option_table()) {
        v[std::string(r.name)] = r.value(d);
    }
    CHECK(v.at("window_sqns") == std::to_string(d.window_sqns));
    CHECK(v.at("max_sources") == std::to_string(d.max_sources));
    CHECK(v.at("preset") == "lan");
    CHECK(v.at("timers") == "unset");
    CHECK(v.at("retention") == "0 ns");
    prizma::ChannelOptions changed;
    changed.window_sqns = 77;
    changed.passive = true;
    for (const auto& r : prizma::channel_option_table()) {
        if (r.name == "window_sqns") {
            CHECK(r.value(changed) == "77");
        }
        if (r.name == "passive") {
            CHECK(r.value(changed) == "true");
        }
    }
}
