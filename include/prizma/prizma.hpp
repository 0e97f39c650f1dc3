// SPDX-License-Identifier: Apache-2.0
#pragma once

// Umbrella header: the whole public API.
#include <prizma/agent_runner.hpp>
#include <prizma/context.hpp>
#include <prizma/counters.hpp>
#include <prizma/error.hpp>
#include <prizma/idle_strategy.hpp>
#include <prizma/message.hpp>
#include <prizma/options.hpp>
#include <prizma/packet.hpp>
#include <prizma/publish_queue.hpp>
#include <prizma/recorder.hpp>
#include <prizma/replay.hpp>
#include <prizma/result.hpp>
#include <prizma/stats.hpp>
#include <prizma/stream.hpp>
#include <prizma/transport.hpp>
#include <prizma/transport_registry.hpp>
#include <prizma/types.hpp>
#include <prizma/version.hpp>
