// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include <prizma/sqn.hpp>
#include <prizma/types.hpp>

namespace prizma {

/// PGM packet types (RFC 3208 §8), as they appear on the wire.
enum class PacketKind : std::uint8_t {
    spm = 0x00,
    poll = 0x01,
    polr = 0x02,
    odata = 0x04,
    rdata = 0x05,
    nak = 0x08,
    nnak = 0x09,
    ncf = 0x0a,
    spmr = 0x0c,
    ack = 0x0d,
};

/// What inspect_packet() finds in one datagram: for tools that handle raw PGM packets
/// (capture, replay, monitoring) and for transport authors.
struct PacketSummary {
    bool valid = false;  ///< a well-formed PGM packet, checksum verified; the rest only then
    PacketKind kind = PacketKind::spm;
    bool upstream = false;    ///< NAK, NNAK, SPMR: towards the source
    Tsi source{};             ///< the source the packet concerns
    std::uint16_t dport = 0;  ///< the data-destination port (downstream packets)
    Sqn sqn{};  ///< SPM: its sequence number; ODATA/RDATA: the data sqn; NAK/NCF: the first asked
    std::size_t length = 0;  ///< bytes of the packet
};

/// Validates and summarises one PGM packet (the whole datagram). Never reads out of bounds.
PacketSummary inspect_packet(std::span<const std::byte> datagram) noexcept;

/// Where the first PGM packet in `bytes` ends (0 = not a whole packet): a FrameLength, for a
/// transport that may receive several packets merged into one datagram.
std::size_t packet_length(std::span<const std::byte> bytes) noexcept;

}  // namespace prizma
