// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace prizma {

/// Global Source Identifier (RFC 3208 §3.1): 48 bits, unique per source host/application.
struct Gsi {
    std::array<std::uint8_t, 6> bytes{};
    /// Compared as two integer loads: this runs for every received packet.
    friend bool operator==(const Gsi& a, const Gsi& b) noexcept {
        std::uint32_t a4 = 0;
        std::uint32_t b4 = 0;
        std::uint16_t a2 = 0;
        std::uint16_t b2 = 0;
        std::memcpy(&a4, a.bytes.data(), 4);
        std::memcpy(&b4, b.bytes.data(), 4);
        std::memcpy(&a2, a.bytes.data() + 4, 2);
        std::memcpy(&b2, b.bytes.data() + 4, 2);
        return a4 == b4 && a2 == b2;
    }
};

/// Transport Session Identifier = GSI + PGM source port (RFC 3208 §3.1). Identifies a source.
struct Tsi {
    Gsi gsi{};
    std::uint16_t sport = 0;
    friend bool operator==(const Tsi&, const Tsi&) = default;
};

/// A transport-level address, opaque to the protocol core. Each transport defines what the
/// bytes mean (UDP: IPv4/IPv6 + port; verbs: GID + QPN; memory: endpoint id).
struct Endpoint {
    std::uint16_t family = 0;  ///< transport-defined; 0 = none
    std::uint16_t port = 0;    ///< a port within the address (UDP), or 0
    std::uint32_t id = 0;      ///< a transport-defined identifier beside it (verbs: QP number)
    std::array<std::uint8_t, 16> addr{};
    friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

}  // namespace prizma
