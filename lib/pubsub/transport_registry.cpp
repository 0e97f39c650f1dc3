// SPDX-License-Identifier: Apache-2.0
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <string>

#include <prizma/transport_registry.hpp>

namespace prizma {

Result<ChannelUri, Error> ChannelUri::parse(std::string_view uri) {
    ChannelUri u;
    u.text = std::string(uri);
    const auto sep = uri.find("://");
    if (sep == std::string_view::npos || sep == 0) {
        return Error(Errc::invalid_argument,
                     "expected SCHEME://ADDRESS[?KEY=VALUE&...], got '" + u.text + "'");
    }
    u.scheme = std::string(uri.substr(0, sep));
    for (const char c : u.scheme) {
        const bool ok =
            (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
        if (!ok) {
            return Error(Errc::invalid_argument,
                         "bad scheme '" + u.scheme + "' in '" + u.text
                             + "' (lower-case letters, digits, '+', '-', '.')");
        }
    }
    std::string_view rest = uri.substr(sep + 3);
    std::string_view query;
    if (const auto q = rest.find('?'); q != std::string_view::npos) {
        query = rest.substr(q + 1);
        rest = rest.substr(0, q);
    }
    u.address = std::string(rest);
    while (!query.empty()) {
        const auto amp = query.find('&');
        const std::string_view kv = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
        const auto eq = kv.find('=');
        if (eq == std::string_view::npos || eq == 0) {
            return Error(Errc::invalid_argument, "query item '" + std::string(kv) + "' in '"
                                                     + u.text + "' is not KEY=VALUE");
        }
        UriParam p{std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1))};
        if (u.find(p.key) != nullptr) {
            return Error(Errc::invalid_argument,
                         "key '" + p.key + "' given twice in '" + u.text + "'");
        }
        u.params.push_back(std::move(p));
    }
    return u;
}

const std::string* ChannelUri::find(std::string_view key) const noexcept {
    for (const auto& p : params) {
        if (p.key == key) {
            return &p.value;
        }
    }
    return nullptr;
}

IpAddress IpAddress::parse(std::string_view text) noexcept {
    IpAddress ip;
    char buf[INET6_ADDRSTRLEN + 1] = {};
    if (text.size() >= sizeof buf) {
        return ip;
    }
    std::memcpy(buf, text.data(), text.size());
    if (::inet_pton(AF_INET, buf, ip.bytes.data()) == 1) {
        ip.version = 4;
    } else if (::inet_pton(AF_INET6, buf, ip.bytes.data()) == 1) {
        ip.version = 6;
    } else {
        ip.bytes = {};
    }
    return ip;
}

namespace {
Result<void, Error> check_entry(std::string_view scheme, const TransportFactory& factory) {
    const bool ok_chars = std::all_of(scheme.begin(), scheme.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
    });
    if (scheme.empty() || !ok_chars) {
        return Error(Errc::invalid_argument, "bad transport scheme '" + std::string(scheme)
                                                 + "' (lower-case letters, digits, '+', '-', '.')");
    }
    if (!factory) {
        return Error(Errc::invalid_argument,
                     "empty factory for transport scheme '" + std::string(scheme) + "'");
    }
    return {};
}
}  // namespace

Result<void, Error> TransportRegistry::add(std::string_view scheme, TransportFactory factory) {
    if (auto ok = check_entry(scheme, factory); !ok) {
        return ok;
    }
    if (find(scheme) != nullptr) {
        return Error(Errc::invalid_argument, "transport scheme '" + std::string(scheme)
                                                 + "' is registered already (replace() "
                                                   "overrides it)");
    }
    entries_.emplace_back(std::string(scheme), std::move(factory));
    return {};
}

Result<void, Error> TransportRegistry::replace(std::string_view scheme, TransportFactory factory) {
    if (auto ok = check_entry(scheme, factory); !ok) {
        return ok;
    }
    for (auto& [s, f] : entries_) {
        if (s == scheme) {
            f = std::move(factory);
            return {};
        }
    }
    entries_.emplace_back(std::string(scheme), std::move(factory));
    return {};
}

const TransportFactory* TransportRegistry::find(std::string_view scheme) const noexcept {
    for (const auto& [s, f] : entries_) {
        if (s == scheme) {
            return &f;
        }
    }
    return nullptr;
}

std::vector<std::string> TransportRegistry::schemes() const {
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const auto& e : entries_) {
        out.push_back(e.first);
    }
    return out;
}

std::string_view to_string(TransportEvent::Kind kind) noexcept {
    switch (kind) {
        case TransportEvent::Kind::link_down: return "link_down";
        case TransportEvent::Kind::link_up: return "link_up";
        case TransportEvent::Kind::address_changed: return "address_changed";
        case TransportEvent::Kind::fabric_changed: return "fabric_changed";
        case TransportEvent::Kind::group_rejoined: return "group_rejoined";
        case TransportEvent::Kind::rejoin_failed: return "rejoin_failed";
        case TransportEvent::Kind::fatal: return "fatal";
        case TransportEvent::Kind::qp_recovered: return "qp_recovered";
    }
    return "?";
}

}  // namespace prizma
