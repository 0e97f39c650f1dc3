// SPDX-License-Identifier: Apache-2.0
// The udp:// grammar (docs/URI.md): address and port, and the query keys over a uri_keys table.
#include <arpa/inet.h>

#include <string>
#include <string_view>

#include "lib/runtime/parse.hpp"
#include "lib/runtime/uri_keys.hpp"
#include "transports/udp/udp_impl.hpp"
#include "transports/udp/udp_transport.hpp"

namespace prizma::udp {

bool make_addr(const std::string& host, std::uint16_t port, Addr& out) noexcept {
    out = Addr{};
    auto* a4 = reinterpret_cast<sockaddr_in*>(&out.ss);
    if (::inet_pton(AF_INET, host.c_str(), &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons(port);
        out.len = sizeof(sockaddr_in);
        return true;
    }
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&out.ss);
    if (::inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(port);
        out.len = sizeof(sockaddr_in6);
        return true;
    }
    return false;
}

namespace {

bool set_iface(UdpConfig& cfg, std::string_view v) {
    Addr a;
    cfg.iface = std::string(v);
    return make_addr(cfg.iface, 0, a);
}

bool set_sources(UdpConfig& cfg, std::string_view v) {
    cfg.sources.clear();
    bool ok = true;
    std::string_view rest = v;
    while (ok && !rest.empty()) {
        const auto comma = rest.find(',');
        const std::string one(rest.substr(0, comma));
        Addr a;
        ok = make_addr(one, 0, a);
        cfg.sources.push_back(one);
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    }
    return ok && !cfg.sources.empty();
}

bool set_gro(UdpConfig& cfg, std::string_view v) {
    if (v == "auto") {
        cfg.gro = GroMode::adaptive;
        return true;
    }
    const auto on = runtime::parse_flag(v);
    if (on) {
        cfg.gro = *on ? GroMode::on : GroMode::off;
    }
    return on.has_value();
}

/// The query keys of a udp:// URI (docs/URI.md).
constexpr runtime::UriKey<UdpConfig> kKeys[] = {
    {"iface", "the interface's IP address", &set_iface},
    {"dport", "1-65535", &runtime::set_uint<&UdpConfig::dport, 1, 65535>},
    {"ttl", "0-255", &runtime::set_uint<&UdpConfig::ttl, 0, 255>},
    {"tos", "0-255", &runtime::set_uint<&UdpConfig::tos, 0, 255>},
    {"loop", "0 or 1", &runtime::set_flag<&UdpConfig::loop>},
    {"rcvbuf", "bytes, 0-2^30", &runtime::set_uint<&UdpConfig::rcvbuf, 0, 1U << 30U>},
    {"sndbuf", "bytes, 0-2^30", &runtime::set_uint<&UdpConfig::sndbuf, 0, 1U << 30U>},
    {"gso", "0 or 1", &runtime::set_flag<&UdpConfig::gso>},
    {"gro", "0, 1 or auto", &set_gro},
    {"sources", "comma-separated IP literals of the group's family", &set_sources},
    {"busy_poll", "microseconds, 0-1000000",
     &runtime::set_uint<&UdpConfig::busy_poll_us, 0, 1000000>},
};

}  // namespace

std::span<const runtime::UriKey<UdpConfig>> uri_keys() noexcept {
    return kKeys;
}

Result<UdpConfig, Error> parse_uri(std::string_view uri) {
    auto parts = ChannelUri::parse(uri);
    if (!parts) {
        return parts.error();
    }
    return config_from(*parts);
}

Result<UdpConfig, Error> config_from(const ChannelUri& uri) {
    auto fail = [&](std::string msg) -> Result<UdpConfig, Error> {
        return Error(Errc::invalid_argument, std::move(msg));
    };
    if (uri.scheme != "udp") {
        return fail("not a udp:// URI: '" + uri.text + "'");
    }
    const std::string_view rest = uri.address;
    UdpConfig cfg;
    std::string_view host;
    std::string_view port;
    if (rest.starts_with('[')) {
        const auto close = rest.find(']');
        if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
            return fail("expected [IPv6]:PORT in '" + uri.text + "'");
        }
        host = rest.substr(1, close - 1);
        port = rest.substr(close + 2);
    } else {
        const auto colon = rest.rfind(':');
        if (colon == std::string_view::npos) {
            return fail("missing :PORT in '" + uri.text + "'");
        }
        host = rest.substr(0, colon);
        port = rest.substr(colon + 1);
    }
    cfg.group = std::string(host);
    Addr probe;
    if (!make_addr(cfg.group, 0, probe)) {
        return fail("bad address '" + cfg.group + "' (expected an IPv4 or IPv6 literal)");
    }
    const auto port_value = runtime::parse_uint(port, 65535);
    if (!port_value || *port_value == 0) {
        return fail("bad port '" + std::string(port) + "' (1-65535)");
    }
    cfg.port = static_cast<std::uint16_t>(*port_value);
    if (auto r = runtime::apply_keys<UdpConfig>(kKeys, cfg, uri, "udp"); !r) {
        return r.error();
    }
    return cfg;
}

}  // namespace prizma::udp
