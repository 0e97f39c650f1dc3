// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <prizma/error.hpp>
#include <prizma/result.hpp>
#include <prizma/transport_registry.hpp>

#include "lib/runtime/parse.hpp"

namespace prizma::runtime {

/// One query key of a channel URI: its name, what a value must be (the refusal of a bad
/// value says it), and the setter that checks a value and stores it (false: refused).
/// Every scheme's keys are one table of these (udp, verbs, the Context's keys common to
/// every scheme, and the fault-injection decorator's loss=, tx_loss=, seed= that
/// `memory::add_fault_injection` adds to every scheme of a registry): the refusal of an
/// unknown key lists exactly the table, and a unit test holds docs/URI.md to the tables
/// (tests/unit/uri_keys_test.cpp).
template <typename Config>
struct UriKey {
    std::string_view name;
    std::string_view expected;
    bool (*set)(Config&, std::string_view value);
};

namespace uri_keys_detail {
template <typename T>
struct MemberOf;
template <typename C, typename M>
struct MemberOf<M C::*> {
    using Class = C;
    using Type = M;
};
template <typename T>
struct Stored {
    using Type = T;
};
template <typename T>
struct Stored<std::optional<T>> {
    using Type = T;
};
template <auto Field>
using ClassOf = typename MemberOf<decltype(Field)>::Class;
template <auto Field>
using StoredOf = typename Stored<typename MemberOf<decltype(Field)>::Type>::Type;
}  // namespace uri_keys_detail

/// A setter for an unsigned integer in [Min, Max] (decimal; also 0x hexadecimal when Hex),
/// stored in the data member `Field` (a plain integer or a std::optional of one).
template <auto Field, std::uint64_t Min, std::uint64_t Max, bool Hex = false>
bool set_uint(uri_keys_detail::ClassOf<Field>& c, std::string_view v) {
    const auto x = parse_uint(v, Max, Hex);
    if (!x || *x < Min) {
        return false;
    }
    c.*Field = static_cast<uri_keys_detail::StoredOf<Field>>(*x);
    return true;
}

/// A flag: 0 / 1 or false / true; nullopt otherwise.
inline std::optional<bool> parse_flag(std::string_view v) noexcept {
    if (v == "1" || v == "true") {
        return true;
    }
    if (v == "0" || v == "false") {
        return false;
    }
    return std::nullopt;
}

/// A setter for a flag (parse_flag), stored in the bool member `Field`.
template <auto Field>
bool set_flag(uri_keys_detail::ClassOf<Field>& c, std::string_view v) {
    const auto on = parse_flag(v);
    if (on) {
        c.*Field = *on;
    }
    return on.has_value();
}

/// The table's key names, in its order.
template <typename Config>
std::vector<std::string_view> key_names(std::span<const UriKey<Config>> keys) {
    std::vector<std::string_view> out;
    out.reserve(keys.size());
    for (const auto& k : keys) {
        out.push_back(k.name);
    }
    return out;
}

/// Sets `p` through `keys`. True when set; false when the table has no such key (left for
/// someone else); a refused value is Errc::invalid_argument,
/// "bad KEY 'VALUE' in 'URI' (EXPECTED)".
template <typename Config>
Result<bool, Error> take_key(std::type_identity_t<std::span<const UriKey<Config>>> keys,
                             Config& cfg,
                             const UriParam& p,
                             std::string_view uri) {
    for (const auto& k : keys) {
        if (k.name != p.key) {
            continue;
        }
        if (!k.set(cfg, p.value)) {
            std::string msg = "bad " + p.key + " '" + p.value + "' in '";
            msg += uri;
            msg += "' (";
            msg += k.expected;
            msg += ")";
            return Error(Errc::invalid_argument, std::move(msg));
        }
        return true;
    }
    return false;
}

/// Every query key of `uri` through `keys`, in order. An unknown key is Errc::invalid_argument,
/// "unknown key 'K' in 'URI' (SCHEME keys: a, b, ...)", listing the whole table.
template <typename Config>
Result<void, Error> apply_keys(std::type_identity_t<std::span<const UriKey<Config>>> keys,
                               Config& cfg,
                               const ChannelUri& uri,
                               std::string_view scheme) {
    for (const auto& p : uri.params) {
        auto r = take_key<Config>(keys, cfg, p, uri.text);
        if (!r) {
            return r.error();
        }
        if (!*r) {
            std::string msg = "unknown key '" + p.key + "' in '" + uri.text + "' (";
            msg += scheme;
            msg += " keys:";
            for (const auto& k : keys) {
                msg += &k == keys.data() ? " " : ", ";
                msg += k.name;
            }
            msg += ")";
            return Error(Errc::invalid_argument, std::move(msg));
        }
    }
    return {};
}

}  // namespace prizma::runtime
