// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <concepts>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include <prizma/error.hpp>

namespace prizma {

namespace detail {
[[noreturn]] inline void throw_error(const std::error_code& ec) {
    throw std::system_error(ec);
}
[[noreturn]] inline void throw_error(const Error& e) {
    throw std::system_error(e.code(), e.detail());
}
/// G makes an E (an Errc, a std::error_code for Error, an Error for std::error_code) and is
/// neither E nor a T.
template <typename G, typename X>
concept Other = !std::is_same_v<std::remove_cvref_t<G>, X>;
template <typename G, typename E>
concept MakesError = std::is_constructible_v<E, G> || std::is_convertible_v<G, E>;
template <typename G, typename T, typename E>
concept ErrorFor = Other<G, E> && Other<G, T> && !std::is_convertible_v<G, T> && MakesError<G, E>;

}  // namespace detail

/// Holds either a `T` or an error `E`; the interface follows C++23 `std::expected<T, E>`.
/// Hot-path calls use the default `E = std::error_code` (no allocation); set-up calls use
/// `Result<T, Error>`, whose error also carries a detail for people. Always this type (never
/// a conditional alias), so that code compiled with different `-std` flags agrees on it.
template <typename T, typename E = std::error_code>
class [[nodiscard]] Result {
public:
    using value_type = T;
    using error_type = E;

    // NOLINTNEXTLINE(google-explicit-constructor): implicit by design, like std::expected
    Result(T value) noexcept(std::is_nothrow_move_constructible_v<T>)
        : state_(std::in_place_index<0>, std::move(value)) {}
    // NOLINTNEXTLINE(google-explicit-constructor)
    Result(E error) noexcept(std::is_nothrow_move_constructible_v<E>)
        : state_(std::in_place_index<1>, std::move(error)) {}
    /// Anything an E is made from: an Errc, a std::error_code for Result<T, Error>, an Error
    /// for Result<T, std::error_code> (the detail is dropped).
    template <detail::ErrorFor<T, E> G>
    // Implicit like std::expected's; ErrorFor keeps it from ever taking a Result (no E is made
    // from one), so it hides no copy or move constructor.
    // NOLINTNEXTLINE(google-explicit-constructor, bugprone-forwarding-reference-overload)
    Result(G&& error) : state_(std::in_place_index<1>, E(std::forward<G>(error))) {}

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
    /// The error; a default (success) E when a value is held.
    [[nodiscard]] E error() const noexcept(std::is_nothrow_copy_constructible_v<E>) {
        const auto* e = std::get_if<1>(&state_);
        return e != nullptr ? *e : E{};
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
            detail::throw_error(*std::get_if<1>(&state_));
        }
    }
    std::variant<T, E> state_;
};

/// Success or an error.
template <typename E>
class [[nodiscard]] Result<void, E> {
public:
    using value_type = void;
    using error_type = E;

    Result() noexcept = default;
    // NOLINTNEXTLINE(google-explicit-constructor)
    Result(E error) noexcept(std::is_nothrow_move_constructible_v<E>) : error_(std::move(error)) {}
    template <detail::ErrorFor<void, E> G>
    // As above: never takes a Result.
    // NOLINTNEXTLINE(google-explicit-constructor, bugprone-forwarding-reference-overload)
    Result(G&& error) : error_(E(std::forward<G>(error))) {}
    [[nodiscard]] bool has_value() const noexcept { return !static_cast<bool>(error_); }
    explicit operator bool() const noexcept { return has_value(); }
    void value() const {
        if (!has_value()) {
            detail::throw_error(error_);
        }
    }
    [[nodiscard]] const E& error() const noexcept { return error_; }

private:
    E error_{};
};

}  // namespace prizma
