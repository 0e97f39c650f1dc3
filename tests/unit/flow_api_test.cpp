// SPDX-License-Identifier: Apache-2.0
// Flow control through the public API on mem:// channels: a slow subscriber paces an unpaced
// publisher without loss, tagged groups and their minimum, leaving, URI keys and refusals.
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <prizma/prizma.hpp>

#include "tests/support/catch.hpp"

namespace {

std::vector<std::byte> message(std::uint64_t i) {
    std::vector<std::byte> m(100, std::byte{0x5a});
    std::memcpy(m.data(), &i, 8);
    return m;
}

/// Offers messages 0..n-1 as fast as the publisher takes them while `sub` consumes at most
/// `per_round` per poll round; returns the indexes delivered, in order.
struct Run {
    std::vector<std::uint64_t> got;
    std::uint64_t losses = 0;
    std::uint64_t refused = 0;  // offers refused (back-pressure)
};

Run pump(prizma::Context& ctx,
         prizma::Publisher& pub,
         prizma::Subscriber& sub,
         std::uint64_t n,
         std::size_t per_round) {
    Run r;
    std::uint64_t sent = 0;
    const std::int64_t deadline = prizma::Context::now_ns() + 60'000'000'000LL;
    while (r.got.size() < n && prizma::Context::now_ns() < deadline) {
        for (int k = 0; k < 64 && sent < n; ++k) {
            if (pub.offer(message(sent))) {
                ++sent;
            } else {
                ++r.refused;
                break;
            }
        }
        (void)ctx.poll();
        sub.poll(per_round, [&](const prizma::Message& m) {
            if (m.kind == prizma::MessageKind::data) {
                std::uint64_t i = 0;
                std::memcpy(&i, m.payload.data(), 8);
                r.got.push_back(i);
            } else if (m.kind == prizma::MessageKind::loss) {
                ++r.losses;
            }
        });
    }
    return r;
}

bool in_order(const std::vector<std::uint64_t>& v) {
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i] != i) {
            return false;
        }
    }
    return true;
}

}  // namespace

TEST_CASE("flow API: a slow min subscriber paces an unpaced publisher, nothing lost",
          "[unit][flow]") {
    prizma::ChannelOptions o;
    o.window_sqns = 256;
    o.flow.strategy = prizma::FlowControl::min;
    auto ctx = prizma::Context::create().value();
    auto sub = ctx.add_subscriber("mem://flow-a:7500", o);
    REQUIRE(sub.has_value());
    auto pub = ctx.add_publisher("mem://flow-a:7500", o);
    REQUIRE(pub.has_value());
    constexpr std::uint64_t kN = 20000;
    // 3 per round against up to 64 offered: without flow control the 256-packet windows
    // overflow within a few rounds.
    const Run r = pump(ctx, *pub, *sub, kN, 3);
    CHECK(r.got.size() == kN);
    CHECK(in_order(r.got));
    CHECK(r.losses == 0);
    const auto pc = pub->counters();
    CHECK(pc.flow_blocked > 0);
    CHECK(pc.flow_receivers == 1);
    CHECK(pc.status_received > 0);
    CHECK(sub->counters().status_sent > 0);
    CHECK(sub->counters().loss_events == 0);
    const auto rs = pub->flow_receivers();
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].counted);
    CHECK(rs[0].window == 256);
    CHECK(rs[0].tag == 0);
}

TEST_CASE("flow API: without flow control the same slow subscriber loses data", "[unit][flow]") {
    // The control for the test above: it must fail without the feature.
    prizma::ChannelOptions o;
    o.window_sqns = 256;
    auto ctx = prizma::Context::create().value();
    auto sub = ctx.add_subscriber("mem://flow-b:7500", o);
    auto pub = ctx.add_publisher("mem://flow-b:7500", o);
    REQUIRE((sub && pub));
    const Run r = pump(ctx, *pub, *sub, 20000, 3);
    CHECK(r.losses > 0);
    CHECK(pub->counters().status_received == 0);
    CHECK(sub->counters().status_sent == 0);
}

TEST_CASE("flow API: tagged with a group minimum gates offers until the group is there",
          "[unit][flow]") {
    auto ctx = prizma::Context::create().value();
    auto pub = ctx.add_publisher("mem://flow-c:7500?flow=tagged&flow_tag=5&flow_group=1");
    REQUIRE(pub.has_value());
    auto first = pub->offer(message(0));
    REQUIRE_FALSE(first.has_value());
    CHECK(first.error() == prizma::Errc::back_pressured);
    // An untagged status-sending subscriber does not open the gate ...
    auto other = ctx.add_subscriber("mem://flow-c:7500?flow=min");
    REQUIRE(other.has_value());
    for (int i = 0; i < 50; ++i) {
        (void)ctx.poll();
    }
    CHECK_FALSE(pub->offer(message(0)).has_value());
    // ... a tagged one does, once its first status arrives (it needs data to know the source:
    // the publisher's SPMs make it known).
    auto tagged = ctx.add_subscriber("mem://flow-c:7500?flow=tagged&flow_tag=5");
    REQUIRE(tagged.has_value());
    bool opened = false;
    const std::int64_t until = prizma::Context::now_ns() + 5'000'000'000LL;
    while (!opened && prizma::Context::now_ns() < until) {
        (void)ctx.poll();
        opened = pub->offer(message(0)).has_value();
    }
    CHECK(opened);
    CHECK(pub->counters().flow_receivers == 1);
    SECTION("the tagged subscriber leaving closes the gate again") {
        REQUIRE(ctx.remove(*tagged).has_value());
        for (int i = 0; i < 50; ++i) {
            (void)ctx.poll();
        }
        CHECK(pub->counters().flow_left == 1);
        CHECK_FALSE(pub->offer(message(1)).has_value());
    }
}

TEST_CASE("flow API: a removed subscriber stops holding the publisher back", "[unit][flow]") {
    prizma::ChannelOptions o;
    o.window_sqns = 128;
    o.flow.strategy = prizma::FlowControl::min;
    auto ctx = prizma::Context::create().value();
    auto sub = ctx.add_subscriber("mem://flow-d:7500", o);
    auto pub = ctx.add_publisher("mem://flow-d:7500", o);
    REQUIRE((sub && pub));
    // The subscriber never consumes: the publisher stops at its window.
    std::uint64_t sent = 0;
    for (int i = 0; i < 5000; ++i) {
        if (pub->offer(message(sent))) {
            ++sent;
        }
        (void)ctx.poll();
    }
    CHECK(sent <= 128 + 16);  // + what went out before its first status
    CHECK(pub->counters().flow_blocked > 0);
    REQUIRE(ctx.remove(*sub).has_value());
    for (int i = 0; i < 100; ++i) {
        (void)ctx.poll();
    }
    CHECK(pub->counters().flow_left == 1);
    CHECK(pub->counters().flow_receivers == 0);
    std::uint64_t more = 0;
    for (int i = 0; i < 1000; ++i) {
        if (pub->offer(message(sent + more))) {
            ++more;
        }
        (void)ctx.poll();
    }
    CHECK(more == 1000);
}

// A flow member that never asks for repairs (the ExecLog archiver's flow gates: the data
// subscription beside them asks, and the repairs are multicast): passive, with flow keys it
// still sends status, and sends no NAK however much it loses.
TEST_CASE("flow API: a passive subscriber with flow keys sends status and never a NAK",
          "[unit][flow]") {
    prizma::ChannelOptions o;
    o.window_sqns = 128;
    o.flow.strategy = prizma::FlowControl::min;
    o.preset = prizma::TimerPreset::rdma;  // a gap it waits out is lost within milliseconds
    prizma::ChannelOptions so = o;
    so.passive = true;
    auto ctx = prizma::Context::create().value();
    auto sub = ctx.add_subscriber("mem://flow-p:7500?loss=0.1&seed=5", so);
    auto pub = ctx.add_publisher("mem://flow-p:7500", o);
    REQUIRE((sub && pub));
    std::uint64_t sent = 0;
    prizma::Message m;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (sent < 2000 && std::chrono::steady_clock::now() < until) {
        if (pub->offer(message(sent))) {
            ++sent;
        }
        (void)ctx.poll();
        while (sub->next(m)) {
        }
    }
    CHECK(sent == 2000);
    CHECK(pub->counters().status_received > 0);
    CHECK(pub->counters().flow_receivers == 1);
    CHECK(sub->counters().status_sent > 0);
    CHECK(sub->counters().loss_events > 0);  // it lost packets...
    CHECK(sub->counters().naks_sent == 0);   // ...and asked for none
    CHECK(pub->counters().naks_received == 0);
}

TEST_CASE("flow API: bad flow keys and options are refused with what they must be",
          "[unit][flow]") {
    auto ctx = prizma::Context::create().value();
    const auto refusal = [&](const std::string& uri, const prizma::ChannelOptions& o = {}) {
        auto p = ctx.add_publisher(uri, o);
        REQUIRE_FALSE(p.has_value());
        CHECK(p.error() == std::errc::invalid_argument);
        return p.error().message();
    };
    CHECK_THAT(refusal("mem://flow-e:7500?flow=fastest"), Catch::Contains("max, min or tagged"));
    CHECK_THAT(refusal("mem://flow-e:7500?flow=tagged"), Catch::Contains("needs a tag"));
    CHECK_THAT(refusal("mem://flow-e:7500?flow_tag=0"), Catch::Contains("1-2^64-1"));
    CHECK_THAT(refusal("mem://flow-e:7500?flow_group=5000"), Catch::Contains("0-4096"));
    CHECK_THAT(refusal("mem://flow-e:7500?flow_timeout_ms=0"), Catch::Contains("1-3600000"));
    prizma::ChannelOptions o;
    o.flow.strategy = prizma::FlowControl::min;
    o.flow.max_receivers = 0;
    CHECK_THAT(refusal("mem://flow-e:7500", o), Catch::Contains("flow.max_receivers: 1 to 4096"));
    o.flow.max_receivers = 8;
    o.flow.min_group = 9;
    CHECK_THAT(refusal("mem://flow-e:7500", o), Catch::Contains("flow.min_group"));
    o.flow.min_group = 0;
    o.flow.status_interval = o.flow.timeout;
    CHECK_THAT(refusal("mem://flow-e:7500", o), Catch::Contains("flow.status_interval"));
    CHECK(prizma::parse_flow_control("tagged") == prizma::FlowControl::tagged);
    CHECK(prizma::to_string(prizma::FlowControl::min) == "min");
}
