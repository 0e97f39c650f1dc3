// SPDX-License-Identifier: Apache-2.0
// The verbs:// grammar (its keys in one runtime::UriKey table), GIDs from addresses, the
// source GID of a GRH, and describe(): everything about the transport that needs no device.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "lib/runtime/parse.hpp"
#include "lib/runtime/uri_keys.hpp"
#include "transports/verbs/device_policy.hpp"
#include "transports/verbs/verbs_impl.hpp"

namespace prizma::verbs {
namespace {

bool parse_u64(std::string_view s, std::uint64_t max, std::uint64_t& out) noexcept {
    const auto v = runtime::parse_uint(s, max, /*hex_prefix=*/true);
    out = v.value_or(out);
    return v.has_value();
}

std::uint16_t ipv4_header_sum(const std::uint8_t* h) noexcept {
    std::uint32_t s = 0;
    for (int i = 0; i < 20; i += 2) {
        s += (std::uint32_t{h[i]} << 8U) | h[i + 1];
    }
    while ((s >> 16U) != 0) {
        s = (s & 0xffffU) + (s >> 16U);
    }
    return static_cast<std::uint16_t>(s);
}

}  // namespace

std::string gid_text(const Gid& g) {
    char buf[INET6_ADDRSTRLEN] = {};
    (void)::inet_ntop(AF_INET6, g.data(), buf, sizeof buf);
    return buf;
}

bool is_v4_mapped(const Gid& g) noexcept {
    static constexpr std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(g.data(), kPrefix, 12) == 0;
}

/// IP text (IPv4, IPv6 with or without brackets) -> GID bytes (IPv4 as ::ffff:a.b.c.d).
bool ip_to_gid(std::string_view text, Gid& out) noexcept {
    if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
        text = text.substr(1, text.size() - 2);
    }
    char buf[INET6_ADDRSTRLEN + 1] = {};
    if (text.empty() || text.size() >= sizeof buf) {
        return false;
    }
    std::memcpy(buf, text.data(), text.size());
    in_addr a4{};
    if (::inet_pton(AF_INET, buf, &a4) == 1) {
        out = Gid{};
        out[10] = 0xff;
        out[11] = 0xff;
        std::memcpy(&out[12], &a4, 4);
        return true;
    }
    return ::inet_pton(AF_INET6, buf, out.data()) == 1;
}

// ---------------------------------------------------------------------------------------
// URI and addressing helpers

bool group_to_gid(std::string_view group,
                  bool infiniband,
                  std::uint16_t pkey,
                  std::array<std::uint8_t, 16>& gid) noexcept {
    Gid g{};
    if (!ip_to_gid(group, g)) {
        return false;
    }
    if (infiniband && is_v4_mapped(g)) {
        g = policy::ib_mgid_v4(&g[12], pkey);  // prizma's signature, not IPoIB's (§4)
    }
    gid = g;
    return true;
}

bool gid_is_multicast(const std::array<std::uint8_t, 16>& gid) noexcept {
    if (gid[0] == 0xff) {
        return true;
    }
    return is_v4_mapped(gid) && (gid[12] & 0xf0U) == 0xe0U;
}

std::array<std::uint8_t, 16> source_gid_from_grh(const std::uint8_t* grh) noexcept {
    Gid g{};
    const std::uint8_t* ip4 = grh + 20;
    // RoCE v2 over IPv4: 20 unused (zero) bytes, then the IPv4 header. Told apart from an
    // IB/IPv6 GRH as libibverbs does: a first nibble other than 6 cannot start an IPv6 GRH;
    // only when it is 6 must the IPv4 header's checksum decide. (rxe's same-device loopback
    // hands over an IPv4 header whose checksum was never filled in.)
    const bool ip4_shape = (ip4[0] >> 4U) == 4;
    const bool v6_first = (grh[0] >> 4U) == 6;
    if (ip4_shape && (!v6_first || (ip4[0] == 0x45 && ipv4_header_sum(ip4) == 0xffff))) {
        g[10] = 0xff;
        g[11] = 0xff;
        std::memcpy(&g[12], ip4 + 12, 4);
        return g;
    }
    std::memcpy(g.data(), grh + 8, 16);  // IB GRH / RoCE v2 IPv6: SGID at offset 8
    return g;
}

namespace {

/// The query keys of a verbs:// URI (docs/URI.md): decimal or 0x hexadecimal, within bounds.
template <auto Field, std::uint64_t Min, std::uint64_t Max>
constexpr auto kUint = &runtime::set_uint<Field, Min, Max, /*Hex=*/true>;

constexpr runtime::UriKey<VerbsConfig> kKeys[] = {
    {"gid_index", "0-65535", kUint<&VerbsConfig::gid_index, 0, 65535>},
    {"qkey", "0-0x7fffffff; controlled Q_Keys need CAP_NET_RAW",
     kUint<&VerbsConfig::qkey, 0, 0x7fffffff>},
    {"qpn", "a unicast QP number, 2-0xfffffe", kUint<&VerbsConfig::dest_qpn, 2, 0xfffffe>},
    {"rx_depth", "8-65536", kUint<&VerbsConfig::rx_depth, 8, 1U << 16U>},
    {"tx_depth", "8-65536", kUint<&VerbsConfig::tx_depth, 8, 1U << 16U>},
    {"inline", "0-4096", kUint<&VerbsConfig::max_inline, 0, 4096>},
    {"mtu", "256-4096", kUint<&VerbsConfig::mtu, 256, 4096>},
    {"hop_limit", "1-255", kUint<&VerbsConfig::hop_limit, 1, 255>},
    {"tclass", "0-255", kUint<&VerbsConfig::traffic_class, 0, 255>},
    {"sl", "0-15", kUint<&VerbsConfig::sl, 0, 15>},
    {"pinned_max", "bytes, 65536-2^40", kUint<&VerbsConfig::pinned_max, 65536, 1ULL << 40U>},
    {"dlid", "an InfiniBand unicast LID, 1-0xfffe", kUint<&VerbsConfig::dlid, 1, 0xfffe>},
    {"comp_vector", "0-1023", kUint<&VerbsConfig::comp_vector, 0, 1023>},
    {"cq_moderation", "completions per CQ event, 0-65535",
     kUint<&VerbsConfig::cq_moderation, 0, 65535>},
};

}  // namespace

std::span<const runtime::UriKey<VerbsConfig>> uri_keys() noexcept {
    return kKeys;
}

Result<VerbsConfig, Error> parse_uri(std::string_view uri) {
    auto parts = ChannelUri::parse(uri);
    if (!parts) {
        return parts.error();
    }
    return config_from(*parts);
}

Result<VerbsConfig, Error> config_from(const ChannelUri& uri) {
    const std::string& u = uri.text;
    if (uri.scheme != "verbs") {
        return fail<VerbsConfig>("expected verbs://DEVICE[:PORT]/GROUP:DPORT, got '" + u + "'");
    }
    const std::string_view rest = uri.address;
    const auto slash = rest.find('/');
    if (slash == std::string_view::npos || slash == 0) {
        return fail<VerbsConfig>("expected verbs://DEVICE[:PORT]/GROUP:DPORT, got '" + u + "'");
    }
    std::string_view host = rest.substr(0, slash);
    std::string_view target = rest.substr(slash + 1);
    VerbsConfig cfg;
    // host: [GID-or-IPv6][:PORT] | IPv4[:PORT] | DEVICE[:PORT]
    std::string_view port_text;
    if (host.front() == '[') {
        const auto close = host.find(']');
        if (close == std::string_view::npos) {
            return fail<VerbsConfig>("unterminated '[' in '" + u + "'");
        }
        if (close + 1 < host.size()) {
            if (host[close + 1] != ':') {
                return fail<VerbsConfig>("expected ':PORT' after ']' in '" + u + "'");
            }
            port_text = host.substr(close + 2);
        }
        host = host.substr(0, close + 1);
    } else if (const auto c = host.rfind(':'); c != std::string_view::npos) {
        port_text = host.substr(c + 1);
        host = host.substr(0, c);
    }
    if (!port_text.empty() || host.empty()) {
        std::uint64_t p = 0;
        if (host.empty() || !parse_u64(port_text, 255, p) || p == 0) {
            return fail<VerbsConfig>("bad HCA port '" + std::string(port_text) + "' in '" + u
                                     + "' (1-255)");
        }
        cfg.port = static_cast<int>(p);
    }
    if (Gid g{}; ip_to_gid(host, g)) {
        cfg.local_addr = std::string(host);
    } else {
        cfg.device = std::string(host);
    }
    // target: GROUP:DPORT (IPv6 in brackets)
    std::string_view group;
    std::string_view dport_text;
    if (!target.empty() && target.front() == '[') {
        const auto close = target.find(']');
        if (close == std::string_view::npos || close + 1 >= target.size()
            || target[close + 1] != ':') {
            return fail<VerbsConfig>("expected [IPV6]:DPORT after '/' in '" + u + "'");
        }
        group = target.substr(1, close - 1);
        dport_text = target.substr(close + 2);
    } else {
        const auto c = target.rfind(':');
        if (c == std::string_view::npos) {
            return fail<VerbsConfig>("missing :DPORT after the group in '" + u + "'");
        }
        group = target.substr(0, c);
        dport_text = target.substr(c + 1);
    }
    std::uint64_t dp = 0;
    if (!parse_u64(dport_text, 65535, dp) || dp == 0) {
        return fail<VerbsConfig>("bad data-destination port '" + std::string(dport_text) + "' in '"
                                 + u + "' (1-65535)");
    }
    cfg.dport = static_cast<std::uint16_t>(dp);
    if (Gid g{}; !ip_to_gid(group, g)) {
        return fail<VerbsConfig>("bad group address '" + std::string(group) + "' in '" + u
                                            + "' (an IPv4/IPv6 multicast group or a peer's "
                                              "address/GID)");
    }
    cfg.group = std::string(group);
    if (auto r = runtime::apply_keys<VerbsConfig>(kKeys, cfg, uri, "verbs"); !r) {
        return r.error();
    }
    return cfg;
}

std::string describe(const VerbsInfo& i, std::uint32_t qkey) {
    const auto hex = [](std::uint64_t v) {
        char b[24];
        (void)std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
        return std::string(b);
    };
    std::string d =
        "verbs " + i.device + " port " + std::to_string(i.port) + " gid["
        + std::to_string(i.gid_index) + "] " + i.gid
        + (i.infiniband ? " (InfiniBand, lid " + hex(i.lid) + ")"
                        : " (RoCE, netdev " + (i.netdev.empty() ? "?" : i.netdev) + ")");
    d += " qpn " + hex(i.qpn) + " mtu " + std::to_string(i.mtu);
    if (i.infiniband && i.multicast) {
        d += " mlid " + hex(i.mlid);
    }
    d += " qkey " + hex(qkey) + " rx_depth " + std::to_string(i.rx_depth) + " tx_depth "
         + std::to_string(i.tx_depth) + " inline " + std::to_string(i.max_inline) + " comp_vector "
         + std::to_string(i.comp_vector) + "/" + std::to_string(i.comp_vectors);
    if (i.device_channels > 1) {
        d += " device shared by " + std::to_string(i.device_channels) + " channels";
    }
    if (i.rx_mtu > i.mtu) {
        d += " receives up to " + std::to_string(i.rx_mtu);  // the port's MTU, over mtu=
    }
    if (!i.notes.empty()) {
        d += "; " + i.notes;
    }
    return d;
}

}  // namespace prizma::verbs
