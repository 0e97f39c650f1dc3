// SPDX-License-Identifier: Apache-2.0
#include <cerrno>
#include <string>
#include <system_error>

#include <prizma/result.hpp>

#include "tests/support/catch.hpp"

using prizma::Errc;
using prizma::Result;

TEST_CASE("Result holds a value or an error code", "[unit][result]") {
    Result<int> ok = 5;
    REQUIRE(ok.has_value());
    CHECK(*ok == 5);
    CHECK_FALSE(ok.error());
    Result<int> bad = Errc::back_pressured;
    REQUIRE_FALSE(bad);
    CHECK(bad.error() == Errc::back_pressured);
    CHECK(std::string(bad.error().category().name()) == "prizma");
    CHECK_THROWS_AS(bad.value(), std::system_error);
    Result<void> v;
    CHECK(v.has_value());
    Result<void> e = std::error_code(EAGAIN, std::system_category());
    CHECK_FALSE(e);
}

TEST_CASE("is_transient gathers back-pressure, rate limit, EAGAIN and ENOBUFS", "[unit][result]") {
    CHECK(prizma::is_transient(Errc::back_pressured));
    CHECK(prizma::is_transient(Errc::rate_limited));
    CHECK(prizma::is_transient(std::error_code(EAGAIN, std::system_category())));
    CHECK(prizma::is_transient(std::error_code(ENOBUFS, std::system_category())));
    CHECK_FALSE(prizma::is_transient(Errc::unrecoverable_loss));
    CHECK_FALSE(prizma::is_transient(std::error_code(EBADF, std::system_category())));
    CHECK(prizma::make_error_code(Errc::unrecoverable_loss).message() == "unrecoverable data loss");
}
