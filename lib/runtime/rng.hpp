// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one pseudo-random generator of the library: xorshift64* (S. Vigna, "An experiment with
// exploring Marsaglia's xorshift generators, scrambled", 2016). Not for secrets (keys come from
// libsodium); for NAK back-offs, fault injection, and a Context's TSI port and receiver ids.
// Seeded, it gives the same draws on every run and machine, which tests and the fault
// injector's seed= rely on; from_entropy() seeds it from the OS.
#include <cstdint>
#include <limits>
#include <random>

namespace prizma::runtime {

class Rng {
public:
    using result_type = std::uint64_t;

    /// Seeded with `seed`; `salt` keeps two users of one seed on different sequences. A state
    /// of zero (xorshift's fixed point, which would draw zeros forever) is replaced.
    constexpr Rng(std::uint64_t seed, std::uint64_t salt) noexcept
        : state_(seed * 0x9E3779B97F4A7C15ULL + salt) {
        if (state_ == 0) {
            state_ = kMultiplier;
        }
    }

    /// Seeded with 64 bits from the OS (std::random_device, getrandom(2) on Linux).
    static Rng from_entropy() {
        std::random_device rd;
        const std::uint64_t hi = rd();
        return {(hi << 32U) ^ rd(), 1};
    }

    /// The next 64 random bits.
    constexpr std::uint64_t operator()() noexcept {
        state_ ^= state_ >> 12U;
        state_ ^= state_ << 25U;
        state_ ^= state_ >> 27U;
        return state_ * kMultiplier;
    }

    /// Uniform in [0, 1), on 53 bits.
    constexpr double uniform() noexcept {
        return static_cast<double>((*this)() >> 11U) * 0x1.0p-53;
    }

    static constexpr result_type min() noexcept { return 0; }
    static constexpr result_type max() noexcept { return std::numeric_limits<result_type>::max(); }

private:
    static constexpr std::uint64_t kMultiplier = 0x2545F4914F6CDD1DULL;
    std::uint64_t state_;
};

}  // namespace prizma::runtime
