// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <prizma/error.hpp>
#include <prizma/options.hpp>
#include <prizma/result.hpp>
#include <prizma/transport_registry.hpp>

namespace prizma::pubsub {

/// The URI keys every scheme takes, as the Context reads them before the transport's factory
/// sees the rest (docs/URI.md, "Keys common to every scheme"): overrides of ChannelOptions.
struct ChannelKeys {
    /// key_file=PATH: the channel's authentication keys, read from the file.
    std::optional<std::string> key_file;
    std::optional<AuthOptions> auth;
    /// flow=, flow_tag=, flow_group=, flow_timeout_ms=: override ChannelOptions::flow.
    std::optional<FlowControl> flow;
    std::optional<std::uint64_t> flow_tag;
    std::optional<std::uint32_t> flow_group;
    std::optional<std::uint64_t> flow_timeout_ms;
};

/// Takes the keys of the table out of `uri.params` (the rest is the transport's) and reads
/// the key file. Errors: a bad value (the detail names the key and its bounds), an unreadable
/// or unsafe key file.
Result<ChannelKeys, Error> take_channel_keys(ChannelUri& uri);

/// `given` with the URI's keys over it, the flow options checked; `name` is the channel's,
/// for the error detail. Error: both key_file= and ChannelOptions::auth give keys.
Result<ChannelOptions, Error> apply_channel_keys(const ChannelOptions& given,
                                                 const ChannelKeys& keys,
                                                 const std::string& name);

}  // namespace prizma::pubsub

namespace prizma::detail {

/// The names of the keys take_channel_keys() takes, in their table's order
/// (lib/pubsub/options.cpp). docs/URI.md is held to them by a unit test.
std::vector<std::string_view> channel_uri_key_names();

}  // namespace prizma::detail
