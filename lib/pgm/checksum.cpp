// SPDX-License-Identifier: Apache-2.0
#include "lib/pgm/checksum.hpp"

#include <bit>
#include <cstring>

#include "lib/pgm/bytes.hpp"

namespace prizma::pgm {
namespace {

std::uint16_t fold64(std::uint64_t s) noexcept {
    s = (s & 0xffffffffU) + (s >> 32U);
    s = (s & 0xffffffffU) + (s >> 32U);
    s = (s & 0xffffU) + (s >> 16U);
    s = (s & 0xffffU) + (s >> 16U);
    s = (s & 0xffffU) + (s >> 16U);
    return static_cast<std::uint16_t>(s);
}

// The odd last byte is the high byte of a big-endian word padded with zero.
std::uint32_t odd_byte(const std::byte* p) noexcept {
    const std::uint32_t last = std::to_integer<std::uint8_t>(*p);
    return std::endian::native == std::endian::little ? last : last << 8U;
}

// Native-order ones'-complement sum: 32-bit words zero-extended into 64-bit accumulators
// (a plain loop the compiler vectorises); 2^32 words would be needed to overflow.
std::uint64_t sum_native(const std::byte* p, std::size_t n) noexcept {
    if (n < 256) {
        // Small packets: 16-bit words into a 32-bit sum (cannot overflow below 128 Ki words);
        // cheaper to set up than the 32-bit-word loop below.
        std::uint32_t t = 0;
        const std::size_t half = n / 2;
        for (std::size_t i = 0; i < half; ++i) {
            std::uint16_t w = 0;
            std::memcpy(&w, p + 2 * i, sizeof w);
            t += w;
        }
        if ((n & 1U) != 0) {
            t += odd_byte(p + n - 1);
        }
        return t;
    }
    std::uint64_t s = 0;
    const std::size_t words = n / 4;
    for (std::size_t i = 0; i < words; ++i) {
        std::uint32_t w = 0;
        std::memcpy(&w, p + 4 * i, sizeof w);
        s += w;
    }
    p += 4 * words;
    n -= 4 * words;
    if (n >= 2) {
        std::uint16_t w = 0;
        std::memcpy(&w, p, sizeof w);
        s += w;
        p += 2;
        n -= 2;
    }
    if (n == 1) {
        s += odd_byte(p);
    }
    return s;
}

}  // namespace

std::uint16_t csum_partial(std::span<const std::byte> data, std::uint16_t initial) noexcept {
    std::uint16_t native = fold64(sum_native(data.data(), data.size()));
    if constexpr (std::endian::native == std::endian::little) {
        native = bswap16(native);  // RFC 1071 §2(B): byte order independence
    }
    return csum_add(initial, native);
}

bool csum_verify(std::span<const std::byte> packet) noexcept {
    return csum_partial(packet) == 0xffff;
}

std::uint16_t csum_update16(std::uint16_t hc,
                            std::uint16_t old_word,
                            std::uint16_t new_word) noexcept {
    // HC' = ~(~HC + ~m + m')
    std::uint32_t s = static_cast<std::uint16_t>(~hc);
    s += static_cast<std::uint16_t>(~old_word);
    s += new_word;
    s = (s & 0xffffU) + (s >> 16U);
    s = (s & 0xffffU) + (s >> 16U);
    return static_cast<std::uint16_t>(~s);
}

std::uint16_t csum_reference(std::span<const std::byte> data) noexcept {
    std::uint32_t s = 0;
    std::size_t i = 0;
    for (; i + 1 < data.size(); i += 2) {
        s += load_be16(data.data() + i);
    }
    if (i < data.size()) {
        s += static_cast<std::uint32_t>(std::to_integer<std::uint8_t>(data[i])) << 8U;
    }
    while ((s >> 16U) != 0) {
        s = (s & 0xffffU) + (s >> 16U);
    }
    return static_cast<std::uint16_t>(s);
}

}  // namespace prizma::pgm
