// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

// RFC 1071 Internet checksum as PGM uses it (RFC 3208 §8: ones'-complement sum over the whole
// PGM packet, no pseudo-header). Sums are kept as 16-bit folded values with network-order
// meaning, so a partial sum of a payload can be cached and added to a new header later
// (RDATA reuses the ODATA payload sum: no re-sum of the payload).
namespace prizma::pgm {

/// Ones'-complement sum of `data`, added to `initial`; the result is folded to 16 bits.
/// `data` is taken as starting at an even offset of the packet.
std::uint16_t csum_partial(std::span<const std::byte> data, std::uint16_t initial = 0) noexcept;

/// Ones'-complement addition of two folded sums. `b_offset_odd` is true when the block that
/// `b` sums started at an odd byte offset within the packet (RFC 1071 §2(B): byte swap).
/// Inline: it runs twice per ODATA sent.
inline std::uint16_t csum_add(std::uint16_t a,
                              std::uint16_t b,
                              bool b_offset_odd = false) noexcept {
    if (b_offset_odd) {
        b = static_cast<std::uint16_t>((b << 8U) | (b >> 8U));
    }
    std::uint32_t s = static_cast<std::uint32_t>(a) + b;
    s = (s & 0xffffU) + (s >> 16U);
    return static_cast<std::uint16_t>(s);
}

/// The value to transmit for a packet whose sum (checksum field zero) is `sum`. A result of
/// 0 is sent as 0xffff, because 0 on the wire means "no checksum" (OpenPGM pgm_csum_fold).
inline std::uint16_t csum_finish(std::uint16_t sum) noexcept {
    const auto c = static_cast<std::uint16_t>(~sum);
    return c == 0 ? std::uint16_t{0xffff} : c;
}

/// True when a packet whose checksum field is in place sums to 0xffff (valid).
bool csum_verify(std::span<const std::byte> packet) noexcept;

/// RFC 1624 eqn. 3 incremental update: the checksum `hc` after a 16-bit field changed from
/// `old_word` to `new_word`, without re-summing the rest.
std::uint16_t csum_update16(std::uint16_t hc,
                            std::uint16_t old_word,
                            std::uint16_t new_word) noexcept;

/// Straightforward 16-bit-at-a-time reference implementation (tests and benchmarks compare).
std::uint16_t csum_reference(std::span<const std::byte> data) noexcept;

}  // namespace prizma::pgm
