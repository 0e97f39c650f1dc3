// SPDX-License-Identifier: Apache-2.0
#include <prizma/version.hpp>

namespace prizma {

Version version() noexcept {
    return kHeaderVersion;  // the headers this library was built with
}

const char* version_string() noexcept {
    return PRIZMA_VERSION_STRING;
}

}  // namespace prizma
