// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

#include <prizma/sqn.hpp>
#include <prizma/types.hpp>

namespace prizma {

enum class MessageKind : std::uint8_t {
    data,    ///< one message (APDU) from a source, in order
    loss,    ///< unrecoverable: sequence numbers [sqn, sqn + count) of `tsi` will never arrive
    joined,  ///< a new source (TSI) was heard on the channel
    left,    ///< a source closed (OPT_FIN), reset (OPT_RST) or went silent (peer expiry)
};

/// What Subscriber::poll hands to its handler. `payload` is valid only during the handler call.
struct Message {
    MessageKind kind = MessageKind::data;
    Tsi tsi{};                ///< the source
    Sqn sqn{};                ///< data: first PGM sequence number of the APDU; loss: first lost
    std::uint32_t count = 0;  ///< loss: how many sequence numbers
    std::span<const std::byte> payload;
    /// data: when the message was received (its last packet, for a fragmented one), on the
    /// steady clock Context::now_ns() reads: the transport's receive timestamp when it gives
    /// one, else the time of the Context::poll() that read it. Default for other events.
    std::chrono::steady_clock::time_point received{};
};

}  // namespace prizma
