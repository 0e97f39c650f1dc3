// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <span>

#include "lib/runtime/uri_keys.hpp"
#include "transports/memory/lossy_transport.hpp"

namespace prizma::memory {

/// What the fault-injection keys of a channel URI ask for (docs/URI.md, "Fault injection").
struct FaultKeys {
    LossyTransport::Config config;
    bool any = false;  ///< loss= or tx_loss= was given: the transport is wrapped
};

/// The keys memory::add_fault_injection() takes out of every channel URI: loss = drop on
/// receive (every packet type), tx_loss = drop our own ODATA on send (every receiver misses
/// it), seed = the fault generator's seed. docs/URI.md is held to them by a unit test.
std::span<const runtime::UriKey<FaultKeys>> fault_uri_keys() noexcept;

}  // namespace prizma::memory
