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

// a + b with the carry out added back in (ones'-complement addition of 64-bit words).
std::uint64_t add_carry(std::uint64_t a, std::uint64_t b) noexcept {
    const std::uint64_t s = a + b;
    return s + static_cast<std::uint64_t>(s < b);
}

// Native-order ones'-complement sum of 64-bit words (RFC 1071 §2: the sum in wider words
// folds down to the same 16-bit sum). Two chains of add-with-carry, 16 bytes a round: a
// 100-byte payload is seven rounds where 16-bit words took fifty additions.
std::uint64_t sum_native(const std::byte* p, std::size_t n) noexcept {
    std::uint64_t a = 0;
    std::uint64_t b = 0;
    std::uint64_t ca = 0;  // carries out of a and b, added back at the end
    std::uint64_t cb = 0;
    for (; n >= 16; p += 16, n -= 16) {
        std::uint64_t w0 = 0;
        std::uint64_t w1 = 0;
        std::memcpy(&w0, p, sizeof w0);
        std::memcpy(&w1, p + 8, sizeof w1);
        a += w0;
        ca += static_cast<std::uint64_t>(a < w0);
        b += w1;
        cb += static_cast<std::uint64_t>(b < w1);
    }
    std::uint64_t t = 0;  // the last 8 of 0-15 remaining bytes
    if (n >= 8) {
        std::memcpy(&t, p, sizeof t);
        p += 8;
        n -= 8;
    }
    std::uint64_t r = 0;  // the last 0-7 bytes: below 2^34, no carries
    if (n >= 4) {         // 32 bits at an even offset: two 16-bit words, one of them times 2^16
        std::uint32_t w = 0;
        std::memcpy(&w, p, sizeof w);
        r += w;
        p += 4;
        n -= 4;
    }
    if (n >= 2) {
        std::uint16_t w = 0;
        std::memcpy(&w, p, sizeof w);
        r += w;
        p += 2;
        n -= 2;
    }
    if (n == 1) {
        r += odd_byte(p);
    }
    t = add_carry(t, r);
    return add_carry(add_carry(add_carry(a, b), t), ca + cb);
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
