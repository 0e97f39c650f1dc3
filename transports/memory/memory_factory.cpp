// SPDX-License-Identifier: Apache-2.0
// The "mem" entry of a TransportRegistry: `mem://NAME:DPORT`, an in-process network per NAME
// shared by every Context of the process (driven from one thread).
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <prizma/transport_registry.hpp>

#include "lib/runtime/parse.hpp"
#include "transports/memory/memory_transport.hpp"

namespace prizma::memory {
namespace {

std::shared_ptr<MemoryNetwork> network_named(const std::string& name) {
    static std::mutex mu;
    static std::map<std::string, std::weak_ptr<MemoryNetwork>> nets;
    const std::lock_guard<std::mutex> lock(mu);
    auto& w = nets[name];
    auto sp = w.lock();
    if (!sp) {
        sp = std::make_shared<MemoryNetwork>(MemoryNetwork::Config{1472, 16384, 64, true});
        w = sp;
    }
    return sp;
}

Result<TransportChannel, Error> make(const TransportRequest& req) {
    const std::string& rest = req.uri.address;
    const auto colon = rest.rfind(':');
    const std::string_view text = rest;
    const auto port = colon == std::string::npos
                          ? std::nullopt
                          : runtime::parse_uint(text.substr(colon + 1), 65535);
    if (colon == std::string::npos || colon == 0 || !port || *port == 0) {
        return Error(Errc::invalid_argument,
                     "expected mem://NAME:DPORT (DPORT 1-65535), got '" + req.uri.text + "'");
    }
    if (!req.uri.params.empty()) {
        return Error(
            Errc::invalid_argument,
            "unknown key '" + req.uri.params.front().key + "' in '" + req.uri.text
                + "' (mem has no keys of its own; key_file and flow* apply to every scheme, "
                  "loss, tx_loss and seed with memory::add_fault_injection)");
    }
    auto net = network_named(rest.substr(0, colon));
    auto t = net->attach();
    t->hold(std::move(net));
    TransportChannel ch;
    ch.transport = std::move(t);
    ch.local = IpAddress::v4(127, 0, 0, 1);
    ch.group = IpAddress::v4(239, 0, 0, 1);
    ch.port = static_cast<std::uint16_t>(*port);
    return ch;
}

}  // namespace

void register_transport(TransportRegistry& registry) {
    (void)registry.replace("mem", &make);
}

}  // namespace prizma::memory
