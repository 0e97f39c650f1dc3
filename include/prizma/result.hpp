// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include <prizma/error.hpp>

namespace prizma {

/// Holds either a `T` or a `std::error_code`; the interface follows C++23
/// `std::expected<T, std::error_code>`. Always this type (never a conditional alias), so that
/// code compiled with different `-std` flags agrees on it.
template <typename T>
class [[nodiscard]] Result {
public:
    // NOLINTNEXTLINE(google-explicit-constructor): implicit by design, like std::expected
    Result(T value) noexcept(std::is_nothrow_move_constructible_v<T>)
        : state_(std::in_place_index<0>, std::move(value)) {}
    // NOLINTNEXTLINE(google-explicit-constructor)
    Result(std::error_code ec) noexcept : state_(std::in_place_index<1>, ec) {}
    // NOLINTNEXTLINE(google-explicit-constructor)
    Result(Errc e) noexcept : state_(std::in_place_index<1>, make_error_code(e)) {}

    [[nodiscard]] bool has_value() const noexcept { return state_.index() == 0; }
    explicit operator bool() const noexcept { return has_value(); }

    /// Throws `std::system_error` when empty: a programming-error fallback only.
    [[nodiscard]] T& value() & {
        check();
        return *ptr();
    }
    [[nodiscard]] const T& value() const& {
        check();
        return *ptr();
    }
    [[nodiscard]] T&& value() && {
        check();
        return std::move(*ptr());
    }
    /// Precondition: has_value().
    [[nodiscard]] T& operator*() & noexcept { return *ptr(); }
    [[nodiscard]] const T& operator*() const& noexcept { return *ptr(); }
    [[nodiscard]] T&& operator*() && noexcept { return std::move(*ptr()); }
    [[nodiscard]] T* operator->() noexcept { return ptr(); }
    [[nodiscard]] const T* operator->() const noexcept { return ptr(); }
    /// The error; a default (success) code when a value is held.
    [[nodiscard]] std::error_code error() const noexcept {
        const auto* ec = std::get_if<1>(&state_);
        return ec != nullptr ? *ec : std::error_code{};
    }

private:
    // Precondition of the unchecked accessors, as for std::expected: a value is held.
    T* ptr() noexcept {
        T* p = std::get_if<0>(&state_);
        if (p == nullptr) {
            __builtin_unreachable();
        }
        return p;
    }
    const T* ptr() const noexcept {
        const T* p = std::get_if<0>(&state_);
        if (p == nullptr) {
            __builtin_unreachable();
        }
        return p;
    }
    void check() const {
        if (!has_value()) {
            throw std::system_error(*std::get_if<1>(&state_));
        }
    }
    std::variant<T, std::error_code> state_;
};

/// Success or an error code.
template <>
class [[nodiscard]] Result<void> {
public:
    Result() noexcept = default;
    // NOLINTNEXTLINE(google-explicit-constructor)
    Result(std::error_code ec) noexcept : ec_(ec) {}
    // NOLINTNEXTLINE(google-explicit-constructor)
    Result(Errc e) noexcept : ec_(make_error_code(e)) {}
    [[nodiscard]] bool has_value() const noexcept { return !ec_; }
    explicit operator bool() const noexcept { return has_value(); }
    void value() const {
        if (ec_) {
            throw std::system_error(ec_);
        }
    }
    [[nodiscard]] std::error_code error() const noexcept { return ec_; }

private:
    std::error_code ec_{};
};

}  // namespace prizma
