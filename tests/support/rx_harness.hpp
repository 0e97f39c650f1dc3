// SPDX-License-Identifier: Apache-2.0
#pragma once
// One Receiver driven by hand (sans-I/O, manual clock) with forged, checksum-valid packets of
// one TSI: what tests/hostile and the boundary tests (tests/protocol/boundary_test.cpp) feed
// it, and what it sends, parsed back.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "lib/pgm/checksum.hpp"
#include "lib/protocol/receiver.hpp"
#include "tests/support/catch.hpp"
#include "tests/support/sim.hpp"

namespace prizma::testing {

using pgm::PacketType;
using protocol::Event;
using protocol::kMs;
using protocol::kSec;
using Kind = protocol::Event::Kind;
inline Endpoint host(std::uint8_t last, std::uint16_t port = 7500) {
    Endpoint e;
    e.family = 2;
    e.port = port;
    e.addr[0] = 10;
    e.addr[3] = last;
    return e;
}

inline const Endpoint kSource = host(1);
inline const Endpoint kSourceOtherSocket = host(1, 40000);  // OpenPGM: SPMs from another port
inline const Endpoint kAttacker = host(66);

// Builds checksum-valid packets of one TSI.
struct Forge {
    Tsi tsi{Gsi{{1, 2, 3, 4, 5, 6}}, 1000};
    std::uint16_t dport = 7500;
    pgm::Nla nla = pgm::Nla::ipv4(10, 0, 0, 1);
    pgm::Nla group = pgm::Nla::ipv4(239, 1, 1, 1);
    Sqn spm_sqn{};

    [[nodiscard]] pgm::PacketSpec base(PacketType t) const {
        pgm::PacketSpec s;
        s.type = t;
        s.sport = tsi.sport;
        s.dport = dport;
        s.gsi = tsi.gsi;
        return s;
    }
    static std::vector<std::byte> finish(const pgm::PacketSpec& spec,
                                         std::span<const std::byte> payload = {}) {
        std::vector<std::byte> b(pgm::encoded_size(spec));
        REQUIRE(pgm::encode(b, spec) == b.size());
        const std::size_t hlen = b.size();
        b.insert(b.end(), payload.begin(), payload.end());
        pgm::store_checksum(std::span<std::byte>(b.data(), hlen), pgm::csum_partial(payload));
        return b;
    }
    std::vector<std::byte> spm(Sqn trail, Sqn lead, bool fin = false, bool rst = false) {
        auto s = base(PacketType::spm);
        s.sqn = spm_sqn;
        ++spm_sqn;
        s.trail = trail;
        s.lead = lead;
        s.nla = nla;
        s.fin = fin;
        s.rst = rst;
        return finish(s);
    }
    [[nodiscard]] std::vector<std::byte> data(Sqn sqn,
                                              Sqn trail,
                                              std::span<const std::byte> payload,
                                              const pgm::FragmentInfo* frag = nullptr,
                                              PacketType t = PacketType::odata) const {
        auto s = base(t);
        s.sqn = sqn;
        s.trail = trail;
        s.tsdu_length = static_cast<std::uint16_t>(payload.size());
        s.fragment = frag;
        return finish(s, payload);
    }
    [[nodiscard]] std::vector<std::byte> ncf(Sqn sqn) const {
        auto s = base(PacketType::ncf);
        s.sqn = sqn;
        s.nla = nla;
        s.group = group;
        return finish(s);
    }
    // Another receiver's NAK (upstream: ports swapped).
    [[nodiscard]] std::vector<std::byte> nak(Sqn sqn) const {
        auto s = base(PacketType::nak);
        s.sport = dport;
        s.dport = tsi.sport;
        s.sqn = sqn;
        s.nla = nla;
        s.group = group;
        return finish(s);
    }
};

struct Sent {
    PacketType type;
    Route route;
    Endpoint to;
    pgm::Nla nla;
    std::vector<Sqn> sqns;
};

struct Net final : protocol::PacketSink {
    std::vector<Sent> sent;
    void emit(const TxPacket& p) noexcept override {
        std::vector<std::byte> b(p.header.begin(), p.header.end());
        b.insert(b.end(), p.payload.begin(), p.payload.end());
        pgm::Packet pkt;
        if (pgm::parse(b, pkt) != pgm::ParseStatus::ok) {
            return;
        }
        Sent s{pkt.type, p.route, p.to, pkt.nla, {}};
        for (std::size_t i = 0; i < pkt.requested_count(); ++i) {
            s.sqns.push_back(pkt.requested(i));
        }
        sent.push_back(std::move(s));
    }
    [[nodiscard]] std::size_t count(PacketType t) const {
        return static_cast<std::size_t>(
            std::count_if(sent.begin(), sent.end(), [&](const Sent& s) { return s.type == t; }));
    }
    /// NAKs sent that ask for `sqn` (as their own sqn or in OPT_NAK_LIST).
    [[nodiscard]] std::size_t naks_for(Sqn sqn) const {
        return static_cast<std::size_t>(std::count_if(sent.begin(), sent.end(), [&](const Sent& s) {
            return s.type == PacketType::nak
                   && std::find(s.sqns.begin(), s.sqns.end(), sqn) != s.sqns.end();
        }));
    }
};

struct Got {
    Kind kind;
    Tsi tsi;
    std::uint32_t sqn;
    std::uint32_t count;
    std::vector<std::byte> payload;
};

// One receiver driven by hand: packets in, timers at their deadlines, events collected.
struct Rx {
    std::unique_ptr<protocol::Receiver> r;
    Net net;
    std::int64_t now = kSec;
    std::vector<Got> got;

    explicit Rx(protocol::ReceiverConfig c = receiver_config(7)) {
        c.dport = 7500;
        auto made = protocol::Receiver::create(c);
        REQUIRE(made);
        r = std::move(*made);
    }
    void feed(const std::vector<std::byte>& b, const Endpoint& from) {
        pgm::Packet p;
        REQUIRE(pgm::parse(b, p) == pgm::ParseStatus::ok);
        r->on_packet(p, from, now, net);
        drain();
    }
    void drain() {
        (void)r->poll(SIZE_MAX, [&](const Event& e) {
            got.push_back(Got{e.kind, e.tsi, e.sqn.value, e.count,
                              std::vector<std::byte>(e.payload.begin(), e.payload.end())});
        });
    }
    // Runs the timers up to now + dt; returns how many timer runs that took.
    std::size_t run_for(std::int64_t dt) {
        const std::int64_t end = now + dt;
        std::size_t runs = 0;
        for (;;) {
            const std::int64_t d = r->next_deadline();
            if (d > end) {
                break;
            }
            now = std::max(now, d);
            r->on_timer(now, net);
            drain();
            REQUIRE(++runs < 1'000'000);
        }
        now = end;
        return runs;
    }
    // Runs the timers of the next deadline when it is at or before `end` (now moves to it);
    // false when none is.
    bool step(std::int64_t end) {
        const std::int64_t d = r->next_deadline();
        if (d > end) {
            return false;
        }
        now = std::max(now, d);
        r->on_timer(now, net);
        drain();
        return true;
    }
    [[nodiscard]] std::size_t count(Kind k) const {
        return static_cast<std::size_t>(
            std::count_if(got.begin(), got.end(), [&](const Got& g) { return g.kind == k; }));
    }
    [[nodiscard]] std::vector<std::uint64_t> data_indices() const {
        std::vector<std::uint64_t> v;
        for (const auto& g : got) {
            if (g.kind == Kind::data) {
                std::uint64_t i = 0;
                std::memcpy(&i, g.payload.data(), 8);
                v.push_back(i);
            }
        }
        return v;
    }
    [[nodiscard]] const protocol::ReceiverCounters& counters() const { return r->counters(); }
};

// A legitimate source: an SPM, then messages 0, 1, ... (payload = make_message).
struct Stream {
    Forge f;
    Sqn next{};
    void open(Rx& rx) { rx.feed(f.spm(Sqn{0}, Sqn{0} - 1), kSourceOtherSocket); }
    void send(Rx& rx, std::uint32_t n, std::uint32_t skip_at = UINT32_MAX) {
        for (std::uint32_t i = 0; i < n; ++i) {
            const auto m = make_message(next.value, 100);
            if (next.value != skip_at) {
                rx.feed(f.data(next, Sqn{0}, m), kSource);
            }
            ++next;
            rx.now += 10'000;
        }
    }
    void repair(Rx& rx, Sqn s) {
        rx.feed(f.data(s, Sqn{0}, make_message(s.value, 100), nullptr, PacketType::rdata),
                kSourceOtherSocket);
    }
};

inline void require_all_delivered(const Rx& rx, std::uint64_t n) {
    const auto d = rx.data_indices();
    REQUIRE(d.size() == n);
    for (std::uint64_t i = 0; i < n; ++i) {
        REQUIRE(d[i] == i);
    }
    CHECK(rx.count(Kind::loss) == 0);
}

}  // namespace prizma::testing
