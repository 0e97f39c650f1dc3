// SPDX-License-Identifier: Apache-2.0
#include <prizma/packet.hpp>

#include "lib/pgm/packet.hpp"

namespace prizma {

PacketSummary inspect_packet(std::span<const std::byte> datagram) noexcept {
    PacketSummary s;
    pgm::Packet p;
    if (pgm::parse(datagram, p) != pgm::ParseStatus::ok) {
        return s;
    }
    s.valid = true;
    s.kind = p.type;
    s.upstream = p.is_upstream();
    s.source = p.source_tsi();
    s.dport = p.dport;
    s.sqn = p.sqn;
    s.length = datagram.size();
    return s;
}

std::size_t packet_length(std::span<const std::byte> bytes) noexcept {
    return pgm::wire_length(bytes);
}

}  // namespace prizma
