// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include <prizma/options.hpp>

#include "lib/pgm/packet.hpp"

namespace prizma::pubsub {

/// Packet authentication of one channel (docs/PROTOCOL.md, "Authentication"): every packet a
/// Session sends gets prizma's auth option with a keyed MAC over the whole packet, and every
/// packet it receives must carry a valid one from a known key within the clock skew. The MAC
/// is SipHash-2-4 with a 128-bit key and a 128-bit tag (libsodium's
/// crypto_shorthash_siphashx24): a keyed PRF, chosen for speed on small packets.
class Authenticator {
public:
    static constexpr std::size_t kMaxKeys = 4;

    /// Keys (1 to kMaxKeys, distinct ids) and the skew; the first key signs, any verifies.
    static Result<Authenticator, Error> create(const AuthOptions& o);

    /// Writes `header` + `payload` into `out` with the auth option added, tagged and the PGM
    /// checksum made again; `out` needs their size + pgm::kAuthOverheadBytes. Returns the
    /// packet's length, 0 when its header has no room for options (not a packet we send).
    std::size_t sign(std::span<const std::byte> header,
                     std::span<const std::byte> payload,
                     std::span<std::byte> out,
                     std::uint64_t wall_ms) const noexcept;

    enum class Verdict : std::uint8_t { ok, missing, unknown_key, stale, bad_tag };
    /// Checks a parsed packet's auth option against its bytes (`p.raw`); `scratch` holds a
    /// copy of the packet while the tag is computed (at least p.raw.size() bytes).
    Verdict verify(const pgm::Packet& p,
                   std::span<std::byte> scratch,
                   std::uint64_t wall_ms) const noexcept;

    /// UTC now, ms since the Unix epoch (CLOCK_REALTIME_COARSE: a few ms of resolution, a
    /// vDSO read): what sign() and verify() are given.
    static std::uint64_t wall_now_ms() noexcept;

private:
    std::array<AuthKey, kMaxKeys> keys_{};
    std::size_t count_ = 0;
    std::int64_t skew_ms_ = 0;
};

}  // namespace prizma::pubsub
