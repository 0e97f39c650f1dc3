// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <prizma/transport.hpp>

namespace prizma::protocol {

/// Where the sans-I/O protocol core puts the packets it wants sent. The spans of a TxPacket
/// are valid only during the emit() call: a sink that batches copies them.
class PacketSink {
public:
    PacketSink() = default;
    PacketSink(const PacketSink&) = default;
    PacketSink& operator=(const PacketSink&) = default;
    PacketSink(PacketSink&&) = default;
    PacketSink& operator=(PacketSink&&) = default;
    virtual ~PacketSink() = default;
    virtual void emit(const TxPacket& packet) noexcept = 0;
    /// The core will not send to `peer` again (its session expired).
    virtual void forget(const Endpoint& peer) noexcept { (void)peer; }
};

}  // namespace prizma::protocol
