// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <system_error>
#include <type_traits>

namespace prizma {

/// Error conditions of prizma itself. OS failures stay `std::system_category()` codes.
enum class Errc {
    back_pressured = 1,  ///< transmit window full of data still inside its retention time
    not_connected,       ///< no receiver / no source known yet
    rate_limited,        ///< the token bucket has not enough budget now; retry later
    closed,              ///< the object was closed
    unrecoverable_loss,  ///< data could not be repaired (fell off the window, retries spent)
    message_too_large,   ///< APDU larger than the maximum (fragment count or 65535 bytes)
    malformed_packet,    ///< a packet failed validation (counted, never returned from poll)
    unsupported,         ///< capability or scheme not supported
    invalid_argument,    ///< a configuration value or argument is out of range
};

/// The `"prizma"` error category.
const std::error_category& error_category() noexcept;

/// Makes an error code of the prizma category.
inline std::error_code make_error_code(Errc e) noexcept {
    return {static_cast<int>(e), error_category()};
}

/// True for conditions a caller should simply retry later: back-pressure, rate limiting,
/// EAGAIN/EWOULDBLOCK and ENOBUFS.
bool is_transient(std::error_code ec) noexcept;

}  // namespace prizma

template <>
struct std::is_error_code_enum<prizma::Errc> : std::true_type {};
