// SPDX-License-Identifier: Apache-2.0
// Source-specific multicast (sources=): the kernel delivers a subscriber only its listed
// senders' datagrams, an allow-list by address in front of the protocol.
#include <unistd.h>

#include <string>

#include <prizma/context.hpp>

#include "tests/support/catch.hpp"
#include "transports/udp/udp_transport.hpp"

TEST_CASE("udp sources=: only the listed senders reach a subscriber", "[udp][ssm]") {
    const std::string group = "239.192.84." + std::to_string(10 + ::getpid() % 200);
    const std::string port = std::to_string(21000 + ::getpid() % 20000);
    const std::string base = "udp://" + group + ":" + port + "?iface=127.0.0.1";
    auto ctx = prizma::Context::create();
    REQUIRE(ctx);
    auto allowed = ctx->add_subscriber(base + "&sources=127.0.0.1");
    REQUIRE(allowed);
    auto other = ctx->add_subscriber(base + "&sources=127.0.0.9,127.0.0.10");
    REQUIRE(other);
    auto pub = ctx->add_publisher(base);
    REQUIRE(pub);
    std::size_t got_allowed = 0;
    std::size_t got_other = 0;
    for (int i = 0; i < 300 && got_allowed < 50; ++i) {
        if (i < 50) {
            const std::array<std::byte, 16> m{};
            REQUIRE(pub->offer(m));
        }
        (void)ctx->poll();
        (void)allowed->poll(64, [&](const prizma::Message& m) {
            got_allowed += m.kind == prizma::MessageKind::data ? 1U : 0U;
        });
        (void)other->poll(64, [&](const prizma::Message&) { ++got_other; });
        ::usleep(1000);
    }
    CHECK(got_allowed == 50);
    CHECK(got_other == 0);  // not even a joined event: no packet of the source arrived
    CHECK(other->counters().packets_received == 0);
}

TEST_CASE("udp sources=: bad values are refused by name", "[udp][ssm][uri]") {
    auto bad = prizma::udp::parse_uri("udp://239.1.1.1:7000?iface=127.0.0.1&sources=nohost");
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.error().detail(), Catch::Contains("sources"));
    CHECK_FALSE(prizma::udp::parse_uri("udp://239.1.1.1:7000?iface=127.0.0.1&sources="));
    auto two =
        prizma::udp::parse_uri("udp://239.1.1.1:7000?iface=127.0.0.1&sources=10.0.0.1,10.0.0.2");
    REQUIRE(two);
    CHECK(two->sources.size() == 2);
    auto ctx = prizma::Context::create();
    REQUIRE(ctx);
    auto v6 = ctx->add_subscriber("udp://239.1.1.1:7000?iface=127.0.0.1&sources=::1");
    REQUIRE_FALSE(v6);
    CHECK_THAT(v6.error().detail(), Catch::Contains("family"));
}
