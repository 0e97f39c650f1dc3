// SPDX-License-Identifier: Apache-2.0
// A temporary directory a test owns: made fresh, removed with its contents.
#pragma once

#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <string>
#include <system_error>

#include "tests/support/catch.hpp"

namespace prizma::test {

/// A fresh directory under the temp dir (`prefix` + random suffix), removed with its contents.
struct TempDir {
    std::string path;
    explicit TempDir(const char* prefix = "prizma-test") {
        std::string t =
            (std::filesystem::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
        REQUIRE(::mkdtemp(t.data()) != nullptr);
        path = t;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
};

}  // namespace prizma::test
