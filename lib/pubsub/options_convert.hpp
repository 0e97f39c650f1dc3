// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <string_view>

#include <prizma/options.hpp>

#include "lib/protocol/config.hpp"

namespace prizma::pubsub {

/// The public timer types to and from the protocol core's (nanosecond integers).
protocol::Preset to_protocol(TimerPreset p) noexcept;
protocol::Timers to_protocol(const Timers& t) noexcept;
Timers from_protocol(const protocol::Timers& p) noexcept;
/// A channel's timers: ChannelOptions::timers, or its preset's.
protocol::Timers timers_of(const ChannelOptions& o) noexcept;
/// A refusal of the protocol core ("rxw_sqns: 2 to 1048576 packets") in the words of
/// ChannelOptions, with the value given ("window_sqns = 1: 2 to 1048576 packets").
std::string explain_refusal(std::string_view why, const ChannelOptions& o);

}  // namespace prizma::pubsub
