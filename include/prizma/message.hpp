// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

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
    std::uint32_t sqn = 0;    ///< data: first PGM sequence number of the APDU; loss: first lost
    std::uint32_t count = 0;  ///< loss: how many sequence numbers
    std::span<const std::byte> payload;
};

}  // namespace prizma
