// SPDX-License-Identifier: Apache-2.0
// A log-linear latency histogram in the style of HdrHistogram: exact below 128, then 64
// linear sub-buckets per power of two, so every recorded value is reported within 1/64
// (1.6%) of itself. Fixed storage: record() never allocates, locks or throws.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace prizma::tools {

class Histogram {
public:
    static constexpr unsigned kSubBits = 7;  ///< 128 exact values, then 64/octave
    static constexpr std::uint64_t kHalf = 1U << (kSubBits - 1);  // 64
    static constexpr unsigned kMaxShift = 40;  ///< values up to ~2^47 (39 h in ns)
    static constexpr std::size_t kBuckets = (1U << kSubBits) + kMaxShift * kHalf;

    /// Index of the bucket holding v (values beyond the range land in the last bucket).
    static constexpr std::size_t index_of(std::uint64_t v) noexcept {
        const unsigned msb = 63U - static_cast<unsigned>(std::countl_zero(v | 1U));
        if (msb < kSubBits) {
            return v;  // std::size_t and std::uint64_t are one type here
        }
        const unsigned shift = msb - (kSubBits - 1);
        if (shift > kMaxShift) {
            return kBuckets - 1;
        }
        return (1U << kSubBits) + (shift - 1) * kHalf + ((v >> shift) - kHalf);
    }
    /// The highest value that maps to bucket i (what percentiles report, HdrHistogram's
    /// "highest equivalent value").
    static constexpr std::uint64_t upper_of(std::size_t i) noexcept {
        if (i < (1U << kSubBits)) {
            return i;
        }
        const std::size_t k = i - (1U << kSubBits);
        const unsigned shift = static_cast<unsigned>(k / kHalf) + 1;
        const std::uint64_t low = (kHalf + k % kHalf) << shift;
        return low + (std::uint64_t{1} << shift) - 1;
    }

    void record(std::uint64_t v) noexcept {
        ++counts_[index_of(v)];
        ++total_;
        min_ = std::min(min_, v);
        max_ = std::max(max_, v);
        sum_ += v;
    }
    void reset() noexcept { *this = Histogram{}; }

    [[nodiscard]] std::uint64_t count() const noexcept { return total_; }
    [[nodiscard]] std::uint64_t min() const noexcept { return total_ == 0 ? 0 : min_; }
    [[nodiscard]] std::uint64_t max() const noexcept { return max_; }
    [[nodiscard]] double mean() const noexcept {
        return total_ == 0 ? 0.0 : static_cast<double>(sum_) / static_cast<double>(total_);
    }
    /// The value at percentile p (0 < p ≤ 100): the smallest bucket bound with at least
    /// ceil(p% of count) values at or below it, never above the largest recorded value.
    [[nodiscard]] std::uint64_t percentile(double p) const noexcept {
        if (total_ == 0) {
            return 0;
        }
        auto want = static_cast<std::uint64_t>(p / 100.0 * static_cast<double>(total_) + 0.999999);
        want = std::clamp<std::uint64_t>(want, 1, total_);
        std::uint64_t seen = 0;
        for (std::size_t i = 0; i < kBuckets; ++i) {
            seen += counts_[i];
            if (seen >= want) {
                return std::clamp(upper_of(i), min_, max_);
            }
        }
        return max_;
    }

private:
    std::array<std::uint64_t, kBuckets> counts_{};
    std::uint64_t total_ = 0;
    std::uint64_t min_ = ~std::uint64_t{0};
    std::uint64_t max_ = 0;
    std::uint64_t sum_ = 0;
};

}  // namespace prizma::tools
