// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

// Big-endian loads and stores through memcpy: no casts of packed structs, no alignment or
// aliasing assumptions (docs/ARCHITECTURE.md, hot-path rules). C++20 has std::endian but
// not std::byteswap.
namespace prizma::pgm {

inline std::uint16_t bswap16(std::uint16_t v) noexcept {
    return __builtin_bswap16(v);
}
inline std::uint32_t bswap32(std::uint32_t v) noexcept {
    return __builtin_bswap32(v);
}
inline std::uint64_t bswap64(std::uint64_t v) noexcept {
    return __builtin_bswap64(v);
}

inline std::uint16_t load_be16(const std::byte* p) noexcept {
    std::uint16_t v = 0;
    std::memcpy(&v, p, sizeof v);
    if constexpr (std::endian::native == std::endian::little) {
        v = bswap16(v);
    }
    return v;
}
inline std::uint32_t load_be32(const std::byte* p) noexcept {
    std::uint32_t v = 0;
    std::memcpy(&v, p, sizeof v);
    if constexpr (std::endian::native == std::endian::little) {
        v = bswap32(v);
    }
    return v;
}
inline std::uint64_t load_be64(const std::byte* p) noexcept {
    std::uint64_t v = 0;
    std::memcpy(&v, p, sizeof v);
    if constexpr (std::endian::native == std::endian::little) {
        v = bswap64(v);
    }
    return v;
}
/// Little-endian, for formats that are (the stream record checksum's words).
inline std::uint64_t load_le64(const std::byte* p) noexcept {
    std::uint64_t v = 0;
    std::memcpy(&v, p, sizeof v);
    if constexpr (std::endian::native == std::endian::big) {
        v = bswap64(v);
    }
    return v;
}
inline void store_be16(std::byte* p, std::uint16_t v) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        v = bswap16(v);
    }
    std::memcpy(p, &v, sizeof v);
}
inline void store_be32(std::byte* p, std::uint32_t v) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        v = bswap32(v);
    }
    std::memcpy(p, &v, sizeof v);
}

inline void store_be64(std::byte* p, std::uint64_t v) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        v = bswap64(v);
    }
    std::memcpy(p, &v, sizeof v);
}

}  // namespace prizma::pgm
