// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string_view>
#include <vector>

namespace prizma::detail {

/// The URI keys the Context takes out of every channel URI before the transport's factory
/// sees the rest (key_file, flow*, loss, tx_loss, seed), in their table's order
/// (lib/pubsub/context.cpp). docs/URI.md is held to them by a unit test.
std::vector<std::string_view> channel_uri_key_names();

}  // namespace prizma::detail
