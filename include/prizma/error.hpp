// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

namespace prizma {

/// Error conditions of prizma itself. OS failures stay `std::system_category()` codes. The
/// values are part of the ABI: never renumber, only append. Each maps to the `std::errc`
/// condition of the same meaning where one exists, so `ec == std::errc::invalid_argument`
/// holds for a prizma code and for an OS code alike.
enum class Errc {
    /// Publisher::offer/try_claim: transmit window full of data still inside its retention
    /// time (transient). Condition: none (prizma's own).
    back_pressured = 1,
    /// No receiver / no source known yet (reserved for flow control's group minimum: a
    /// publisher waiting for receivers). Condition: std::errc::not_connected.
    not_connected,
    /// The token bucket has not enough budget now (transient). Condition: none.
    rate_limited,
    /// The object was closed (Publisher after close()). Condition: none.
    closed,
    /// Data could not be repaired. Reported to subscribers as MessageKind::loss events, never
    /// as a returned error; kept for code that converts a loss event into an error.
    unrecoverable_loss,
    /// APDU larger than the maximum (fragment count or 65535 bytes).
    /// Condition: std::errc::message_size.
    message_too_large,
    /// A packet failed validation. Never returned: malformed packets are counted and
    /// dropped (ChannelCounters::malformed); kept for tools that classify packets.
    malformed_packet,
    /// Capability, scheme or build feature not supported. Condition: std::errc::not_supported.
    unsupported,
    /// A configuration value, URI or argument is out of range or malformed.
    /// Condition: std::errc::invalid_argument.
    invalid_argument,
};

}  // namespace prizma

template <>
struct std::is_error_code_enum<prizma::Errc> : std::true_type {};

namespace prizma {

/// The `"prizma"` error category.
const std::error_category& error_category() noexcept;

/// Makes an error code of the prizma category.
inline std::error_code make_error_code(Errc e) noexcept {
    return {static_cast<int>(e), error_category()};
}

/// True for conditions a caller should simply retry later: back-pressure, rate limiting,
/// EAGAIN/EWOULDBLOCK and ENOBUFS.
bool is_transient(std::error_code ec) noexcept;

/// What a set-up call (Context::create, add_publisher, a transport factory, ...) returns on
/// failure: the code, to branch on, and a detail for people that says what was wrong and what
/// exists ("unknown key 'tll' in 'udp://...' (keys: iface, ttl, ...)"). Hot-path calls return
/// a plain std::error_code instead (no allocation).
class Error {
public:
    Error() = default;
    // NOLINTNEXTLINE(google-explicit-constructor): any code is an Error without a detail
    Error(std::error_code code, std::string detail = {})
        : code_(code), detail_(std::move(detail)) {}
    // NOLINTNEXTLINE(google-explicit-constructor)
    Error(Errc e, std::string detail = {}) : Error(make_error_code(e), std::move(detail)) {}

    [[nodiscard]] std::error_code code() const noexcept { return code_; }
    /// What was wrong, for people; may be empty.
    [[nodiscard]] const std::string& detail() const noexcept { return detail_; }
    /// The detail, or the code's message when there is none.
    [[nodiscard]] std::string message() const {
        return detail_.empty() ? code_.message() : detail_;
    }
    explicit operator bool() const noexcept { return static_cast<bool>(code_); }
    // NOLINTNEXTLINE(google-explicit-constructor): usable wherever a code is expected
    operator std::error_code() const noexcept { return code_; }

    friend bool operator==(const Error& a, const std::error_code& b) noexcept {
        return a.code_ == b;
    }
    friend bool operator==(const Error& a, const std::error_condition& b) noexcept {
        return a.code_ == b;
    }
    friend bool operator==(const Error& a, Errc b) noexcept { return a.code_ == b; }

private:
    std::error_code code_;
    std::string detail_;
};

/// is_transient() of a prizma condition.
inline bool is_transient(Errc e) noexcept {
    return is_transient(make_error_code(e));
}

/// is_transient() of the Error's code.
inline bool is_transient(const Error& e) noexcept {
    return is_transient(e.code());
}

}  // namespace prizma
