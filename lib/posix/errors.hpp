// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cerrno>
#include <cstdlib>
#include <string>
#include <system_error>

#include <prizma/error.hpp>

namespace prizma::posix {

/// The text of an errno value (thread-safe, unlike strerror()).
inline std::string errno_text(int err = errno) {
    return std::system_category().message(err);
}

/// The errno value as a std::error_code of the system category.
inline std::error_code errno_code(int err = errno) noexcept {
    return {err, std::system_category()};
}

/// An environment variable, or nullptr. Read at set-up only; prizma never writes the
/// environment, so the getenv() race with setenv() in another thread is the caller's to avoid.
inline const char* env(const char* name) noexcept {
    return std::getenv(name);  // NOLINT(concurrency-mt-unsafe): see above
}

/// An Error for a failed system call: errno's code, `what` and errno's text.
inline Error os_error(const std::string& what, int err = errno) {
    return {errno_code(err), what + ": " + errno_text(err)};
}

}  // namespace prizma::posix
