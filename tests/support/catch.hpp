// SPDX-License-Identifier: Apache-2.0
#pragma once
// Catch2 v2 (Debian 12) / v3 shim.
#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#else
#include <catch2/catch.hpp>
#endif

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <system_error>

namespace Catch {
template <>
struct StringMaker<std::error_code> {
    static std::string convert(const std::error_code& ec) {
        std::ostringstream os;
        os << ec.category().name() << ':' << ec.value() << ' ' << ec.message();
        return os.str();
    }
};
}  // namespace Catch

namespace prizma::testing {

/// Skips the current test case for `why`. Under ctest (which runs each case in its own process
/// and sets PRIZMA_TEST_SKIP_EXIT=1) the process exits 77, which ctest shows as "Skipped",
/// never as passed; run by hand, the case warns and returns (the caller returns right after).
inline void skip_test(const std::string& why) {
    if (const char* e = std::getenv("PRIZMA_TEST_SKIP_EXIT"); e != nullptr && *e == '1') {
        std::fprintf(stderr, "SKIPPED: %s\n", why.c_str());
        std::fflush(stderr);
        std::_Exit(77);
    }
    WARN("SKIPPED: " << why);
}

}  // namespace prizma::testing

/// Skips the current test case (see prizma::testing::skip_test) and returns from it.
#define PRIZMA_SKIP(why)                   \
    do {                                   \
        ::prizma::testing::skip_test(why); \
        return;                            \
    } while (false)
