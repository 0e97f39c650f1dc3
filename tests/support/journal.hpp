// SPDX-License-Identifier: Apache-2.0
// Helpers of the recorder, replay and late-join tests: a temporary directory, and an append
// that retries while the recorder's hand-off buffer is full.
#pragma once

#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <thread>

#include <prizma/prizma.hpp>

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

/// Recorder::append, retried while it reports back-pressure (any other error fails the test).
inline void append(Recorder& rec, const StreamEvent& e, std::span<const std::byte> record = {}) {
    for (;;) {
        const auto r = rec.append(e, record);
        if (r) {
            return;
        }
        REQUIRE(r.error() == Errc::back_pressured);
        std::this_thread::yield();
    }
}

}  // namespace prizma::test
