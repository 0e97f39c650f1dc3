// SPDX-License-Identifier: Apache-2.0
// The verbs transport's counters come from one list (transports/verbs/verbs_counters.hpp):
// the struct, the control thread's atomics, their copy and the names must agree with it.
#include "transports/verbs/verbs_counters.hpp"

#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/catch.hpp"

using prizma::NamedCounter;
using prizma::verbs::ControlCounters;
using prizma::verbs::kVerbsCounterFields;
using prizma::verbs::VerbsCounters;

TEST_CASE("verbs counters: every field named once, each name reading its own field",
          "[verbs][counters]") {
    VerbsCounters c;
    std::uint64_t v = 1000;
    for (const auto& f : kVerbsCounterFields) {
        c.*f.member = ++v;  // a distinct value in each field
    }
    std::vector<NamedCounter> out(std::size(kVerbsCounterFields) + 3);
    const std::size_t n = prizma::verbs::name_counters(c, out);
    REQUIRE(n == std::size(kVerbsCounterFields));
    std::set<std::string_view> names;
    std::set<std::uint64_t> values;
    for (std::size_t i = 0; i < n; ++i) {
        CHECK(names.insert(out[i].name).second);    // no name twice
        CHECK(values.insert(out[i].value).second);  // no field read twice
        CHECK(out[i].value == 1001 + i);            // the list's order
    }
    // Spot checks against the struct by hand, as prizma-stat and the VM tests read them.
    const auto named = [&](std::string_view name) {
        for (std::size_t i = 0; i < n; ++i) {
            if (out[i].name == name) {
                return out[i].value;
            }
        }
        return ~std::uint64_t{0};
    };
    CHECK(named("rx_datagrams") == c.rx_datagrams);
    CHECK(named("port_down") == c.port_down);
    CHECK(named("ah_cache_size") == c.ah_cache_size);
    CHECK(named("qp_rebuild_failures") == c.qp_rebuild_failures);
    CHECK(named("pinned_bytes") == c.pinned_bytes);
    CHECK(named("last_completion_error") == ~std::uint64_t{0});  // text, not a counter
    // Room for fewer: as many as fit, and the count of all.
    std::vector<NamedCounter> few(3);
    CHECK(prizma::verbs::name_counters(c, few) == n);
    CHECK(few[2].name == out[2].name);
    CHECK(few[2].value == out[2].value);
}

TEST_CASE("verbs counters: the control thread's atomics copy into exactly their fields",
          "[verbs][counters]") {
    ControlCounters ctl;
    std::uint64_t v = 0;
#define PRIZMA_TEST_SKIP(name)
#define PRIZMA_TEST_SET(name) ctl.name.store(++v);
    PRIZMA_VERBS_COUNTERS(PRIZMA_TEST_SKIP, PRIZMA_TEST_SET)
#undef PRIZMA_TEST_SET
#undef PRIZMA_TEST_SKIP
    std::size_t control_fields = 0;
    for (const auto& f : kVerbsCounterFields) {
        control_fields += f.control ? 1U : 0U;
    }
    CHECK(control_fields == v);  // one atomic per counter marked CTL
    CHECK(sizeof(ControlCounters) == control_fields * sizeof(std::atomic<std::uint64_t>));
    VerbsCounters c;
    for (const auto& f : kVerbsCounterFields) {
        c.*f.member = 777;  // the owner thread's values: untouched by the copy
    }
    ctl.copy_to(c);
    std::uint64_t expect = 0;
    for (const auto& f : kVerbsCounterFields) {
        if (f.control) {
            CHECK(c.*f.member == ++expect);
        } else {
            CHECK(c.*f.member == 777);
        }
    }
    // The ones the event thread writes are among them.
    CHECK(c.port_err != 777);
    CHECK(c.ah_created != 777);
    CHECK(c.rx_datagrams == 777);
}
