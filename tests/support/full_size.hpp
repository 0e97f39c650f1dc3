// SPDX-License-Identifier: Apache-2.0
// Test sizes: the CI size, or the full size when PRIZMA_FULL_SIZE=1 (the `long` ctest
// label sets it; docs/TESTING.md).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace prizma::test {

inline bool full_size() {
    const char* v = std::getenv("PRIZMA_FULL_SIZE");
    return v != nullptr && std::strcmp(v, "1") == 0;
}

/// `ci` normally, `full` under PRIZMA_FULL_SIZE=1.
inline std::uint64_t sized(std::uint64_t ci, std::uint64_t full) {
    return full_size() ? full : ci;
}

}  // namespace prizma::test
