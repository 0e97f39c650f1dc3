// SPDX-License-Identifier: Apache-2.0
// A transport counter of a channel by name (e.g. the fault injector's "fault_dropped").
#pragma once

#include <cstdint>
#include <string_view>

#include <prizma/prizma.hpp>

namespace prizma::test {

/// The named transport counter of `channel` (a Publisher or Subscriber); 0 when absent.
template <typename Channel>
std::uint64_t transport_counter(const Channel& channel, std::string_view name) {
    for (const auto& c : channel.transport_counters()) {
        if (c.name == name) {
            return c.value;
        }
    }
    return 0;
}

}  // namespace prizma::test
