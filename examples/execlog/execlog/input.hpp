// SPDX-License-Identifier: Apache-2.0
// Where execlog-core's input comes from: a seeded order generator, or an order file
// (format in docs/EXECLOG.md). Both are deterministic: the same seed or file, the same inputs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "execlog/engine.hpp"

namespace execlog {

/// 2026-01-05 09:30:00 UTC: the generated session's first input time.
inline constexpr std::uint64_t kSessionStartNs = 1'767'605'400'000'000'000ULL;

struct GeneratorOptions {
    std::uint64_t seed = 1;
    std::uint64_t rate = 10000;  ///< inputs per second of input time (0: one per microsecond)
    std::uint64_t count = 100000;
    std::uint16_t instruments = 64;
    std::uint32_t accounts = 1000;
};

/// A seeded stream of orders: ~62% limit (day), 12% IOC, 8% market, 11% cancel, 6% replace,
/// ~1% invalid (rejected); prices random-walk around each instrument's mid.
class Generator {
public:
    explicit Generator(const GeneratorOptions& options);
    /// The next input; false after `count`.
    bool next(Input& in);
    [[nodiscard]] std::uint64_t produced() const noexcept { return produced_; }

private:
    std::uint64_t rand() noexcept;
    std::uint64_t below(std::uint64_t n) noexcept { return rand() % n; }
    void make_new(Input& in);
    GeneratorOptions opt_;
    std::uint64_t state_;
    std::uint64_t produced_ = 0;
    std::vector<std::int64_t> mid_;
    std::array<std::uint64_t, 4096> recent_{};  // recent new orders' ids, for cancel/replace
    std::vector<std::uint32_t> owner_;          // account of each recent_ slot
    std::vector<std::uint16_t> instr_;          // instrument of each recent_ slot
    std::uint64_t recent_count_ = 0;
};

/// An order file, read whole and checked up front. Throws std::runtime_error naming the
/// file and line of the first bad line.
std::vector<Input> read_order_file(const std::string& path);

/// An order file (already read) or the generator.
class InputSource {
public:
    explicit InputSource(const GeneratorOptions& g) : gen_(g) {}
    explicit InputSource(std::vector<Input> file)
        : gen_(GeneratorOptions{}), file_(std::move(file)), from_file_(true) {}
    bool next(Input& out) {
        if (!from_file_) {
            return gen_.next(out);
        }
        if (at_ >= file_.size()) {
            return false;
        }
        out = file_[at_++];
        return true;
    }

private:
    Generator gen_;
    std::vector<Input> file_;
    std::size_t at_ = 0;
    bool from_file_ = false;
};

}  // namespace execlog
