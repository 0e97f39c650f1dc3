// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <prizma/error.hpp>
#include <prizma/result.hpp>
#include <prizma/transport.hpp>

namespace prizma {

/// One `key=value` item of a channel URI's query.
struct UriParam {
    std::string key;
    std::string value;
};

/// A channel URI split into its parts, `SCHEME://ADDRESS?KEY=VALUE&...`. Every scheme is read
/// by this one parser; what ADDRESS and the keys mean is the transport's grammar.
struct ChannelUri {
    std::string text;     ///< the whole URI, for error messages
    std::string scheme;   ///< e.g. "udp"
    std::string address;  ///< between "://" and "?"
    std::vector<UriParam> params;

    /// Errors: Errc::invalid_argument (no "://", an empty scheme, a query item without '=',
    /// a key given twice).
    static Result<ChannelUri, Error> parse(std::string_view uri);
    /// The value of `key`, or nullptr.
    [[nodiscard]] const std::string* find(std::string_view key) const noexcept;
};

/// An IP address (what a PGM source announces as its NLA, and a multicast group).
struct IpAddress {
    std::uint8_t version = 0;  ///< 4 or 6; 0 = none
    std::array<std::uint8_t, 16> bytes{};
    /// Parses a dotted IPv4 or an IPv6 literal; version 0 when it is neither.
    static IpAddress parse(std::string_view text) noexcept;
    static IpAddress v4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) noexcept {
        IpAddress ip;
        ip.version = 4;
        ip.bytes = {a, b, c, d};
        return ip;
    }
    friend bool operator==(const IpAddress&, const IpAddress&) = default;
};

/// Which end of a channel a transport is made for: a publisher sends to the group and hears
/// unicast repair requests; a subscriber joins the group.
enum class ChannelRole : std::uint8_t { publisher, subscriber };

/// What a factory is asked to make. `uri.params` holds only the keys the Context did not
/// take itself (key_file and the flow keys, which every scheme takes) nor a decorator before
/// it (memory::add_fault_injection() takes loss, tx_loss and seed): a factory refuses any key
/// it does not know, naming it.
struct TransportRequest {
    const ChannelUri& uri;
    ChannelRole role = ChannelRole::subscriber;
    /// The protocol's framing, for transports that may receive merged datagrams.
    FrameLength frame_length = nullptr;
};

/// What a factory makes: the transport and the channel's addressing.
struct TransportChannel {
    std::unique_ptr<Transport> transport;
    /// This host's address on the channel (announced to receivers, who send repair requests
    /// to it) and the group; both optional for transports without IP addressing.
    IpAddress local;
    IpAddress group;
    /// The channel's data-destination port named by the URI (0 = the default, 7500): two
    /// channels on one transport address with different ports do not hear each other.
    std::uint16_t port = 0;
    /// Other RFC 3208 implementations (OpenPGM, over UDP) may be on the channel: a closing
    /// publisher then serves repairs long enough for their usual NAK timers by default
    /// (ChannelOptions::close_quiet).
    bool openpgm_peers = false;
};

/// Makes a transport for one channel. Errors carry a detail naming the bad value.
using TransportFactory = std::function<Result<TransportChannel, Error>(const TransportRequest&)>;

/// Scheme → factory. Built-in transports are added by an explicit call, the same one a
/// user's transport uses (nothing registers itself from a static initialiser, which a static
/// library would drop):
/// @code
///   prizma::TransportRegistry reg;
///   prizma::register_builtin_transports(reg);        // udp, verbs (when built), mem
///   reg.add("shm", [](const prizma::TransportRequest& r) { return make_shm(r); });
///   auto ctx = prizma::Context::create(std::move(reg)).value();
/// @endcode
class TransportRegistry {
public:
    /// Errors: Errc::invalid_argument for an empty or malformed scheme or an empty factory,
    /// and when the scheme is taken (replace() overrides one on purpose).
    Result<void, Error> add(std::string_view scheme, TransportFactory factory);
    /// Adds or replaces.
    Result<void, Error> replace(std::string_view scheme, TransportFactory factory);
    /// The factory for `scheme`, or nullptr.
    [[nodiscard]] const TransportFactory* find(std::string_view scheme) const noexcept;
    /// The registered schemes, in the order added.
    [[nodiscard]] std::vector<std::string> schemes() const;

private:
    std::vector<std::pair<std::string, TransportFactory>> entries_;
};

/// Adds every transport this build of prizma has: "udp", "mem", and "verbs" when it was built
/// with libibverbs (otherwise a "verbs" entry that refuses with Errc::unsupported and says
/// why), then memory::add_fault_injection() over them. Defined in the prizma::prizma library.
void register_builtin_transports(TransportRegistry& registry);

namespace udp {
/// Adds "udp" (PGM over UDP, OpenPGM's encapsulation). Library prizma::udp.
void register_transport(TransportRegistry& registry);
}  // namespace udp
namespace memory {
/// Adds "mem" (an in-process network: tests, examples). Library prizma::memory.
void register_transport(TransportRegistry& registry);
/// Wraps the factory of every scheme registered so far in the fault injector: a channel URI
/// with `loss=P` or `tx_loss=P` (and `seed=N`) gets a seeded fault-injecting decorator around
/// the transport its scheme makes, whose counters gain fault_dropped, fault_duplicated and
/// fault_reordered (docs/URI.md, "Fault injection"). For tests and tools: call it once, after
/// the schemes it should cover. Library prizma::memory.
void add_fault_injection(TransportRegistry& registry);
}  // namespace memory
namespace verbs {
/// Adds "verbs" (RDMA UD over libibverbs). Library prizma::verbs.
void register_transport(TransportRegistry& registry);
}  // namespace verbs

}  // namespace prizma
