// SPDX-License-Identifier: Apache-2.0
// The fault-injecting registry decorator: memory::add_fault_injection() wraps the factory of
// every registered scheme, so a channel URI with loss= or tx_loss= gets a seeded
// LossyTransport around whatever transport its scheme makes. Installed by what wants it
// (register_builtin_transports(), tests, tools); the Context knows nothing of it.
#include "transports/memory/fault_injection.hpp"

#include <memory>
#include <string>
#include <utility>

#include <prizma/context.hpp>
#include <prizma/transport_registry.hpp>

namespace prizma::memory {
namespace {

bool set_loss(FaultKeys& f, std::string_view v, bool on_send) {
    const auto p = runtime::parse_probability(v);
    if (p) {
        f.config.drop = *p;
        f.config.on_send = on_send;
        f.config.type_mask = on_send ? 1U << 4U : 0xffffffffU;  // on send: ODATA only
        f.any = true;
    }
    return p.has_value();
}

constexpr runtime::UriKey<FaultKeys> kFaultKeys[] = {
    {"loss", "0 <= p < 1",
     [](FaultKeys& f, std::string_view v) {
         return set_loss(f, v, false);
     }},
    {"tx_loss", "0 <= p < 1",
     [](FaultKeys& f, std::string_view v) {
         return set_loss(f, v, true);
     }},
    {"seed", "0-2^64-1",
     [](FaultKeys& f, std::string_view v) {
         const auto x = runtime::parse_uint(v);
         f.config.seed = x.value_or(f.config.seed);
         return x.has_value();
     }},
};

/// Takes the fault keys out of the request's URI, has `inner` make the transport from the
/// rest, and wraps it when a fault was asked for.
Result<TransportChannel, Error> make_faulty(const TransportFactory& inner,
                                            const TransportRequest& req) {
    ChannelUri uri = req.uri;
    FaultKeys f;
    auto& ps = uri.params;
    for (auto it = ps.begin(); it != ps.end();) {
        auto taken = runtime::take_key<FaultKeys>(kFaultKeys, f, *it, uri.text);
        if (!taken) {
            return taken.error();
        }
        it = *taken ? ps.erase(it) : it + 1;
    }
    auto tc = inner(TransportRequest{uri, req.role, req.frame_length});
    if (tc && f.any && tc->transport) {
        tc->transport =
            std::make_unique<LossyTransport>(std::move(tc->transport), f.config, &Context::now_ns);
    }
    return tc;
}

}  // namespace

std::span<const runtime::UriKey<FaultKeys>> fault_uri_keys() noexcept {
    return kFaultKeys;
}

void add_fault_injection(TransportRegistry& registry) {
    for (const auto& scheme : registry.schemes()) {
        TransportFactory inner = *registry.find(scheme);
        (void)registry.replace(scheme, [inner = std::move(inner)](const TransportRequest& req) {
            return make_faulty(inner, req);
        });
    }
}

}  // namespace prizma::memory
