// SPDX-License-Identifier: Apache-2.0
#pragma once
// Catch2 v2 (Debian 12) / v3 shim.
#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#else
#include <catch2/catch.hpp>
#endif

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
