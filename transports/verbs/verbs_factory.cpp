// SPDX-License-Identifier: Apache-2.0
// The "verbs" entry of a TransportRegistry: the URI grammar is verbs::config_from's.
#include <prizma/transport_registry.hpp>

#include "transports/verbs/verbs_transport.hpp"

namespace prizma::verbs {

void register_transport(TransportRegistry& registry) {
    (void)registry.replace(
        "verbs", [](const TransportRequest& req) -> Result<TransportChannel, Error> {
            auto cfg = config_from(req.uri);
            if (!cfg) {
                return cfg.error();
            }
            cfg->attach = req.role == ChannelRole::subscriber;  // publishers send, never attach
            auto t = VerbsTransport::create(*cfg);
            if (!t) {
                return t.error();
            }
            TransportChannel ch;
            ch.local = (*t)->local_ip();
            ch.group = IpAddress::parse(cfg->group);
            ch.port = cfg->dport;
            ch.transport = std::move(*t);
            return ch;
        });
}

}  // namespace prizma::verbs
