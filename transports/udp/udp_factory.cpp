// SPDX-License-Identifier: Apache-2.0
// The "udp" entry of a TransportRegistry: the URI grammar is udp::config_from's.
#include <prizma/transport_registry.hpp>

#include "transports/udp/udp_transport.hpp"

namespace prizma::udp {

void register_transport(TransportRegistry& registry) {
    (void)registry.replace(
        "udp", [](const TransportRequest& req) -> Result<TransportChannel, Error> {
            auto cfg = config_from(req.uri);
            if (!cfg) {
                return cfg.error();
            }
            // A publisher hears repair requests on its own address (bound unicast socket) and
            // need not join; a subscriber joins and never binds the unicast address.
            const bool publisher = req.role == ChannelRole::publisher;
            cfg->bind_unicast = publisher;
            cfg->join = !publisher;
            cfg->frame_length = req.frame_length;
            auto t = UdpTransport::create(*cfg);
            if (!t) {
                return t.error();
            }
            TransportChannel ch;
            ch.group = IpAddress::parse(cfg->group);
            ch.local = cfg->iface.empty() ? ch.group : IpAddress::parse(cfg->iface);
            ch.port = cfg->dport;
            ch.openpgm_peers = true;
            ch.transport = std::move(*t);
            return ch;
        });
}

}  // namespace prizma::udp
