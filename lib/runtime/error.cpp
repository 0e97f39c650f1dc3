// SPDX-License-Identifier: Apache-2.0
#include <cerrno>
#include <string>

#include <prizma/error.hpp>

namespace prizma {
namespace {

class Category final : public std::error_category {
public:
    [[nodiscard]] const char* name() const noexcept override { return "prizma"; }
    [[nodiscard]] std::string message(int ev) const override {
        switch (static_cast<Errc>(ev)) {
            case Errc::back_pressured: return "back pressured: transmit window full";
            case Errc::not_connected: return "not connected";
            case Errc::rate_limited: return "rate limited";
            case Errc::closed: return "closed";
            case Errc::unrecoverable_loss: return "unrecoverable data loss";
            case Errc::message_too_large: return "message too large";
            case Errc::malformed_packet: return "malformed packet";
            case Errc::unsupported: return "unsupported";
            case Errc::invalid_argument: return "invalid argument";
        }
        return "unknown prizma error " + std::to_string(ev);
    }
    /// The std::errc condition of the same meaning, so that callers can test either way.
    [[nodiscard]] std::error_condition default_error_condition(int ev) const noexcept override {
        switch (static_cast<Errc>(ev)) {
            case Errc::not_connected: return std::errc::not_connected;
            case Errc::message_too_large: return std::errc::message_size;
            case Errc::unsupported: return std::errc::not_supported;
            case Errc::invalid_argument: return std::errc::invalid_argument;
            default: return {ev, *this};
        }
    }
};

}  // namespace

const std::error_category& error_category() noexcept {
    static const Category category;
    return category;
}

bool is_transient(std::error_code ec) noexcept {
    if (ec.category() == error_category()) {
        return ec.value() == static_cast<int>(Errc::back_pressured)
               || ec.value() == static_cast<int>(Errc::rate_limited);
    }
    if (ec.category() == std::system_category() || ec.category() == std::generic_category()) {
        return ec.value() == EAGAIN || ec.value() == EWOULDBLOCK || ec.value() == ENOBUFS;
    }
    return false;
}

}  // namespace prizma
