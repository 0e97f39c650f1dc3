// SPDX-License-Identifier: Apache-2.0
#pragma once
// A deterministic simulated network for protocol scenarios: a MemoryNetwork, optional lossy
// decorators per node, Sessions driven by a manual clock. No sleeps, no sockets.

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "lib/protocol/config.hpp"
#include "lib/pubsub/session.hpp"
#include "transports/memory/lossy_transport.hpp"
#include "transports/memory/memory_transport.hpp"

namespace prizma::testing {

inline protocol::SourceConfig source_config(protocol::Preset preset = protocol::Preset::lan) {
    protocol::SourceConfig c;
    c.tsi.gsi = Gsi{{0x10, 0x20, 0x30, 0x40, 0x50, 0x60}};
    c.tsi.sport = 1000;
    c.dport = 7500;
    c.nla = pgm::Nla::ipv4(10, 0, 0, 1);
    c.group = pgm::Nla::ipv4(239, 1, 1, 1);
    c.max_tpdu = 1472;
    c.timers = protocol::preset(preset);
    return c;
}

inline protocol::ReceiverConfig receiver_config(std::uint64_t seed,
                                                protocol::Preset preset = protocol::Preset::lan) {
    protocol::ReceiverConfig c;
    c.group = pgm::Nla::ipv4(239, 1, 1, 1);
    c.max_tpdu = 1472;
    c.seed = seed;
    c.timers = protocol::preset(preset);
    return c;
}

/// Message i: 8-byte little-endian index, then a pattern derived from it.
inline std::vector<std::byte> make_message(std::uint64_t i, std::size_t size) {
    std::vector<std::byte> m(std::max<std::size_t>(size, 8));
    std::memcpy(m.data(), &i, 8);
    for (std::size_t k = 8; k < m.size(); ++k) {
        m[k] = static_cast<std::byte>((i * 31 + k) & 0xffU);
    }
    return m;
}

struct Received {
    protocol::Event::Kind kind;
    std::uint32_t sqn;
    std::uint32_t count;
    std::vector<std::byte> payload;
};

class Sim {
public:
    struct Node {
        std::unique_ptr<memory::MemoryTransport> mem;
        std::unique_ptr<memory::LossyTransport> lossy;
        std::unique_ptr<pubsub::Session> session;
        std::vector<Received> events;
        [[nodiscard]] protocol::Source& source() const { return *session->source(); }
        [[nodiscard]] protocol::Receiver& receiver() const { return *session->receiver(); }
        /// Data payloads delivered, in order.
        [[nodiscard]] std::vector<std::vector<std::byte>> data() const {
            std::vector<std::vector<std::byte>> d;
            for (const auto& e : events) {
                if (e.kind == protocol::Event::Kind::data) {
                    d.push_back(e.payload);
                }
            }
            return d;
        }
        [[nodiscard]] std::size_t count(protocol::Event::Kind k) const {
            std::size_t n = 0;
            for (const auto& e : events) {
                n += e.kind == k ? 1U : 0U;
            }
            return n;
        }
    };

    explicit Sim(memory::MemoryNetwork::Config net = {}) : net_(net) {}

    Node& add(const pubsub::SessionConfig& cfg,
              const memory::LossyTransport::Config* lossy = nullptr) {
        auto n = std::make_unique<Node>();
        n->mem = net_.attach();
        Transport* t = n->mem.get();
        if (lossy) {
            n->lossy =
                std::make_unique<memory::LossyTransport>(*n->mem, *lossy, [this] { return now; });
            t = n->lossy.get();
        }
        auto s = pubsub::Session::create(*t, cfg);
        REQUIRE(s.has_value());
        n->session = std::move(*s);
        if (n->session->source() != nullptr) {
            n->session->source()->open(now, *n->session);
            n->session->flush();
        }
        nodes_.push_back(std::move(n));
        return *nodes_.back();
    }
    Node& add_source(const protocol::SourceConfig& c) {
        pubsub::SessionConfig sc;
        sc.source = c;
        return add(sc);
    }
    Node& add_receiver(const protocol::ReceiverConfig& c) {
        pubsub::SessionConfig sc;
        sc.receiver = c;
        return add(sc);
    }
    Node& add_receiver(const protocol::ReceiverConfig& c,
                       const memory::LossyTransport::Config& lossy) {
        pubsub::SessionConfig sc;
        sc.receiver = c;
        return add(sc, &lossy);
    }

    /// Drives every node until nothing more happens at the current time, collecting events.
    void pump() {
        for (int round = 0; round < 1000; ++round) {
            int work = 0;
            for (auto& n : nodes_) {
                work += n->session->do_work(now);
                if (auto* r = n->session->receiver()) {
                    work += static_cast<int>(r->poll(SIZE_MAX, [&](const protocol::Event& e) {
                        n->events.push_back(
                            Received{e.kind, e.sqn.value, e.count,
                                     std::vector<std::byte>(e.payload.begin(), e.payload.end())});
                    }));
                }
            }
            if (work == 0) {
                return;
            }
        }
        FAIL("simulation did not settle");
    }
    /// Advances time in `step_ns` steps for `duration_ns`, pumping at each.
    void run_for(std::int64_t duration_ns, std::int64_t step_ns) {
        const std::int64_t end = now + duration_ns;
        while (now < end) {
            now = std::min(end, now + step_ns);
            pump();
        }
    }
    template <typename Pred>
    bool run_until(Pred pred, std::int64_t max_ns, std::int64_t step_ns) {
        const std::int64_t end = now + max_ns;
        pump();
        while (!pred()) {
            if (now >= end) {
                return false;
            }
            now = std::min(end, now + step_ns);
            pump();
        }
        return true;
    }

    std::int64_t now = 0;

private:
    memory::MemoryNetwork net_;
    std::vector<std::unique_ptr<Node>> nodes_;
};

}  // namespace prizma::testing
