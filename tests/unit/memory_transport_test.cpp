// SPDX-License-Identifier: Apache-2.0
#include "transports/memory/memory_transport.hpp"

#include <array>
#include <cstring>
#include <vector>

#include "lib/pgm/bytes.hpp"
#include "tests/support/catch.hpp"
#include "transports/memory/lossy_transport.hpp"

using namespace prizma;  // NOLINT(google-build-using-namespace): test file
using memory::LossyTransport;
using memory::MemoryNetwork;

namespace {
std::array<std::byte, 24> fake_packet(std::uint8_t type, std::uint32_t sqn) {
    std::array<std::byte, 24> b{};
    b[4] = static_cast<std::byte>(type);
    pgm::store_be32(b.data() + 16, sqn);
    return b;
}
std::vector<std::uint32_t> drain(Transport& t) {
    std::array<RxPacket, 64> rx{};
    std::vector<std::uint32_t> sqns;
    auto n = t.poll_rx(rx);
    REQUIRE(n.has_value());
    for (std::size_t i = 0; i < *n; ++i) {
        sqns.push_back(pgm::load_be32(rx[i].data.data() + 16));
    }
    t.release_rx(*n);
    return sqns;
}
}  // namespace

TEST_CASE("memory network: multicast reaches all, unicast one, full rings drop", "[unit][memory]") {
    MemoryNetwork net(MemoryNetwork::Config{64, 4, 16});
    auto a = net.attach();
    auto b = net.attach();
    auto c = net.attach();
    auto p1 = fake_packet(4, 1);
    const TxPacket down{p1, {}, Route::downstream, {}};
    REQUIRE(*a->send_batch(std::span<const TxPacket>(&down, 1)) == 1);
    CHECK(drain(*a) == std::vector<std::uint32_t>{1});  // multicast loops back
    CHECK(drain(*b) == std::vector<std::uint32_t>{1});
    auto p2 = fake_packet(8, 2);
    const TxPacket uni{p2, {}, Route::unicast, c->address()};
    REQUIRE(*a->send_batch(std::span<const TxPacket>(&uni, 1)) == 1);
    CHECK(drain(*b).empty());
    CHECK(drain(*c) == std::vector<std::uint32_t>{1, 2});
    for (int i = 0; i < 6; ++i) {
        (void)a->send_batch(std::span<const TxPacket>(&down, 1));
    }
    CHECK(b->pending() == 4);
    CHECK(net.overflow_drops() >= 2);
}

TEST_CASE("lossy decorator: seeded drop, duplicate, reorder and sqn rules", "[unit][memory]") {
    MemoryNetwork net;
    auto tx = net.attach();
    auto rx = net.attach();
    std::int64_t now = 0;
    LossyTransport::Config cfg;
    cfg.seed = 42;
    cfg.drop_rules = {{4, 3, 1}};
    LossyTransport lossy(*rx, cfg, [&] { return now; });
    for (std::uint32_t s = 0; s < 6; ++s) {
        auto p = fake_packet(4, s);
        const TxPacket t{p, {}, Route::downstream, {}};
        (void)tx->send_batch(std::span<const TxPacket>(&t, 1));
    }
    CHECK(drain(lossy) == std::vector<std::uint32_t>{0, 1, 2, 4, 5});  // sqn 3 dropped once

    lossy.config().drop = 0.3;
    lossy.config().duplicate = 0.2;
    lossy.config().reorder = 0.2;
    lossy.config().reorder_ns = 10;
    std::vector<std::uint32_t> got;
    for (std::uint32_t s = 0; s < 1000; ++s) {
        auto p = fake_packet(4, s);
        const TxPacket t{p, {}, Route::downstream, {}};
        (void)tx->send_batch(std::span<const TxPacket>(&t, 1));
        for (auto v : drain(lossy)) {
            got.push_back(v);
        }
        ++now;
    }
    now += 100;
    for (auto v : drain(lossy)) {
        got.push_back(v);
    }
    const auto& st = lossy.stats();
    CHECK(st.dropped > 250);
    CHECK(st.dropped < 450);
    CHECK(st.duplicated > 50);
    CHECK(st.reordered > 50);
    CHECK(got.size() == 1000 - (st.dropped - 1) + st.duplicated);
    bool out_of_order = false;
    for (std::size_t i = 1; i < got.size(); ++i) {
        out_of_order |= got[i] < got[i - 1];
    }
    CHECK(out_of_order);
}

TEST_CASE("memory network: a packet of exactly max_datagram arrives, one byte more is dropped",
          "[unit][memory]") {
    MemoryNetwork net(MemoryNetwork::Config{64, 4, 16});
    auto a = net.attach();
    auto b = net.attach();
    auto head = fake_packet(4, 9);  // 24 bytes
    std::array<std::byte, 40> fits{};
    std::array<std::byte, 41> over{};
    const TxPacket exact{head, fits, Route::downstream, {}};
    REQUIRE(*a->send_batch(std::span<const TxPacket>(&exact, 1)) == 1);
    CHECK(drain(*b) == std::vector<std::uint32_t>{9});
    const TxPacket too_long{head, over, Route::downstream, {}};
    REQUIRE(*a->send_batch(std::span<const TxPacket>(&too_long, 1)) == 1);
    CHECK(drain(*b).empty());
}
