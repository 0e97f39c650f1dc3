// SPDX-License-Identifier: Apache-2.0
// The hot path allocates nothing: global operator new is counted while a publisher and a
// receiver run in steady state (publish -> transport -> parse -> window -> deliver), with and
// without loss repair (NAK -> NCF -> RDATA).
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include <prizma/prizma.hpp>

#include "lib/stats/stats_file.hpp"
#include "tests/support/catch.hpp"
#include "tests/support/sim.hpp"

namespace {
std::atomic<std::uint64_t> g_allocations{0};
}  // namespace

// The replacements below pair operator new with std::free through malloc; GCC cannot see that
// every allocation in this binary comes from them.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
void* counted_alloc(std::size_t n) noexcept {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    return std::malloc(n == 0 ? 1 : n);  // NOLINT(cppcoreguidelines-no-malloc)
}
void* counted_alloc_or_throw(std::size_t n) {
    if (void* p = counted_alloc(n)) {
        return p;
    }
    throw std::bad_alloc();
}
}  // namespace

// Every replaceable allocation function, so that nothing allocated by the default one is
// released by ours (ASan checks the pairing).
void* operator new(std::size_t n) {
    return counted_alloc_or_throw(n);
}
void* operator new[](std::size_t n) {
    return counted_alloc_or_throw(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    return counted_alloc(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
    return counted_alloc(n);
}
void operator delete(void* p) noexcept {
    std::free(p);
}  // NOLINT
void operator delete[](void* p) noexcept {
    std::free(p);
}  // NOLINT
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}  // NOLINT
void operator delete[](void* p, std::size_t) noexcept {
    std::free(p);
}  // NOLINT
void operator delete(void* p, const std::nothrow_t&) noexcept {
    std::free(p);
}  // NOLINT
void operator delete[](void* p, const std::nothrow_t&) noexcept {
    std::free(p);
}  // NOLINT

using namespace prizma;           // NOLINT(google-build-using-namespace): test file
using namespace prizma::testing;  // NOLINT(google-build-using-namespace): test file

namespace {

void steady_state(double loss, bool auth = false, bool flow = false) {
    memory::LossyTransport::Config lc;
    lc.seed = 5;
    lc.drop = loss;
    Sim sim;
    pubsub::SessionConfig sc;
    sc.source = source_config();
    pubsub::SessionConfig rc;
    rc.receiver = receiver_config(1);
    if (auth) {  // every packet signed and verified (made before the counting starts)
        AuthOptions keys;
        keys.keys.push_back(AuthKey{1, {}});
        sc.auth = *pubsub::Authenticator::create(keys);
        rc.auth = sc.auth;
        sc.source->max_tpdu -= pgm::kAuthOverheadBytes;
    }
    if (flow) {  // status messages out of the receiver, into the source's table
        sc.source->flow.strategy = protocol::FlowStrategy::min;
        rc.receiver->send_status = true;
        rc.receiver->receiver_id = 7;
    }
    auto& rcv = sim.add(rc, &lc);  // first: it hears the source's opening SPMs
    auto& src = sim.add(sc);
    const auto msg = make_message(1, 100);
    auto* receiver = rcv.session->receiver();
    std::uint64_t delivered = 0;
    auto run = [&](int n) {
        for (int i = 0; i < n; ++i) {
            // With flow control a repair in progress holds the publisher back: time goes on.
            int tries = 0;
            while (!src.session->publish(msg, sim.now).has_value()) {
                REQUIRE((flow && ++tries < 100000));
                sim.now += 10'000;
                (void)src.session->do_work(sim.now);
                (void)rcv.session->do_work(sim.now);
                (void)receiver->poll(64, [&](const protocol::Event& e) {
                    delivered += e.kind == protocol::Event::Kind::data ? 1U : 0U;
                });
            }
            sim.now += 2000;
            for (int k = 0; k < 3; ++k) {
                (void)src.session->do_work(sim.now);
                (void)rcv.session->do_work(sim.now);
                (void)receiver->poll(64, [&](const protocol::Event& e) {
                    if (e.kind == protocol::Event::Kind::data) {
                        delivered += e.payload.size() == msg.size() ? 1U : 0U;
                    }
                });
            }
        }
    };
    run(2000);  // warm-up: the peer is created, rings are touched
    const std::uint64_t before_delivered = delivered;
    const std::uint64_t before = g_allocations.load();
    run(20000);
    for (int i = 0; i < 500; ++i) {  // drain outstanding repairs
        sim.now += 100'000;
        (void)src.session->do_work(sim.now);
        (void)rcv.session->do_work(sim.now);
        (void)receiver->poll(64, [&](const protocol::Event& e) {
            delivered += e.kind == protocol::Event::Kind::data ? 1U : 0U;
        });
    }
    const std::uint64_t allocs = g_allocations.load() - before;
    CHECK(allocs == 0);
    CHECK(delivered - before_delivered >= 20000);
    if (loss > 0) {
        CHECK(receiver->counters().repaired > 100);
    }
    if (flow) {
        CHECK(receiver->counters().status_sent > 10);
        CHECK(src.session->source()->flow().counters().status_received > 10);
    }
}

}  // namespace

TEST_CASE("steady-state publish -> deliver allocates nothing", "[protocol][alloc]") {
    const std::uint64_t before = g_allocations.load();
    auto* p = new int(3);  // the hook really counts
    delete p;
    REQUIRE(g_allocations.load() == before + 1);
    steady_state(0.0);
}

TEST_CASE("steady-state loss repair (NAK, NCF, RDATA) allocates nothing", "[protocol][alloc]") {
    steady_state(0.05);
}

TEST_CASE("flow control: status messages sent and taken allocate nothing",
          "[protocol][alloc][flow]") {
    steady_state(0.0, false, true);
    steady_state(0.05, false, true);
}

TEST_CASE("authenticated: signing and verifying every packet allocates nothing",
          "[protocol][alloc][auth]") {
    steady_state(0.0, true);
    steady_state(0.05, true);
}

TEST_CASE(
    "a source's first packets allocate nothing when its storage was made at create, "
    "one beyond preallocated_peers allocates",
    "[protocol][alloc]") {
    // Its storage is ~100 MB at the default window: made at its first packet, it was a pause
    // of tens of ms on the owner thread just as a new (e.g. failed-over) source started.
    for (const std::size_t prealloc : {std::size_t{1}, std::size_t{2}}) {
        INFO("preallocated_peers " << prealloc);
        Sim sim;
        auto c1 = source_config();
        auto c2 = source_config();
        c2.tsi.sport = static_cast<std::uint16_t>(c1.tsi.sport + 1);  // a second TSI
        auto rc = receiver_config(1);
        rc.preallocated_peers = prealloc;
        auto& rcv = sim.add_receiver(rc);
        auto* receiver = rcv.session->receiver();
        const auto msg = make_message(1, 100);
        std::uint64_t delivered = 0;
        // Opens a source, sends it 10 messages, and returns the allocations made while the
        // receiver took its first packets and delivered them.
        auto first_packets = [&](const protocol::SourceConfig& c) {
            auto& src = sim.add_source(c);
            std::uint64_t allocs = 0;
            for (int i = 0; i < 10; ++i) {
                REQUIRE(src.session->publish(msg, sim.now).has_value());
                sim.now += 2000;
                (void)src.session->do_work(sim.now);
                const std::uint64_t before = g_allocations.load();
                (void)rcv.session->do_work(sim.now);
                (void)receiver->poll(64, [&](const protocol::Event& e) {
                    delivered += e.kind == protocol::Event::Kind::data ? 1U : 0U;
                });
                allocs += g_allocations.load() - before;
            }
            return allocs;
        };
        CHECK(first_packets(c1) == 0);
        CHECK(delivered == 10);
        if (prealloc == 1) {
            CHECK(first_packets(c2) > 0);  // the hook sees a peer made at its first packet
        } else {
            CHECK(first_packets(c2) == 0);
        }
        CHECK(delivered == 20);
        CHECK(receiver->peer_count() == 2);
    }
}

TEST_CASE(
    "a source that expired leaves its storage to the next: whose first packets "
    "allocate nothing and arrive intact",
    "[protocol][alloc]") {
    Sim sim;
    auto c1 = source_config();
    auto c2 = source_config();
    c2.tsi.sport = static_cast<std::uint16_t>(c1.tsi.sport + 1);
    auto rc = receiver_config(1);
    rc.max_peers = 1;  // one peer slot: the second source can only have the first one's storage
    auto& rcv = sim.add_receiver(rc);
    auto* receiver = rcv.session->receiver();
    // Sizes differ between the two sources, so stale payload bytes would show. Compared in
    // the handler against messages made beforehand: the check itself allocates nothing.
    std::vector<std::vector<std::byte>> want;
    for (std::uint64_t i = 0; i < 50; ++i) {
        want.push_back(make_message(i, 300));
    }
    for (std::uint64_t i = 0; i < 50; ++i) {
        want.push_back(make_message(1000 + i, 100));
    }
    std::size_t got = 0;
    std::size_t wrong = 0;
    std::uint64_t left = 0;
    std::uint64_t losses = 0;
    auto drain = [&] {
        (void)rcv.session->do_work(sim.now);
        (void)receiver->poll(64, [&](const protocol::Event& e) {
            if (e.kind == protocol::Event::Kind::data) {
                const bool same = got < want.size()
                                  && std::equal(e.payload.begin(), e.payload.end(),
                                                want[got].begin(), want[got].end());
                wrong += same ? 0U : 1U;
                ++got;
            }
            left += e.kind == protocol::Event::Kind::left ? 1U : 0U;
            losses += e.kind == protocol::Event::Kind::loss ? 1U : 0U;
        });
    };
    auto& a = sim.add_source(c1);
    for (std::uint64_t i = 0; i < 50; ++i) {
        REQUIRE(a.session->publish(want[i], sim.now).has_value());
        sim.now += 2000;
        (void)a.session->do_work(sim.now);
        drain();
    }
    REQUIRE(got == 50);
    // A falls silent until it expires; its peer slot is freed.
    for (int k = 0; k < 40 && left == 0; ++k) {
        sim.now += rc.timers.peer_expiry_ns / 10;
        drain();
    }
    REQUIRE(left == 1);
    auto& b = sim.add_source(c2);
    std::uint64_t allocs = 0;
    for (std::uint64_t i = 50; i < 100; ++i) {
        REQUIRE(b.session->publish(want[i], sim.now).has_value());
        sim.now += 2000;
        (void)b.session->do_work(sim.now);
        const std::uint64_t before = g_allocations.load();
        drain();
        allocs += g_allocations.load() - before;
    }
    CHECK(allocs == 0);
    CHECK(got == 100);
    CHECK(wrong == 0);
    CHECK(losses == 0);
    CHECK(receiver->peer_count() == 1);
    CHECK(receiver->counters().peers_refused == 0);
}

namespace {
void api_steady_state(const std::string& keys) {
    auto ctx = Context::create();
    REQUIRE(ctx.has_value());
    auto sub = ctx->add_subscriber("mem://alloc:7500" + keys);
    auto pub = ctx->add_publisher("mem://alloc:7500" + keys);
    REQUIRE(sub.has_value());
    REQUIRE(pub.has_value());
    const auto msg = make_message(1, 100);
    std::uint64_t delivered = 0;
    auto on_message = [&](const Message& m) {
        delivered += m.kind == MessageKind::data ? 1U : 0U;
    };
    auto run_for = [&](std::int64_t ns) {
        const std::int64_t until = Context::now_ns() + ns;
        while (Context::now_ns() < until) {
            for (int i = 0; i < 8; ++i) {
                while (!pub->offer(msg)) {
                    (void)ctx->poll();
                }
            }
            (void)ctx->poll();
            (void)sub->poll(64, on_message);
        }
    };
    run_for(200'000'000);  // warm-up: peer created, windows touched, first stats writes
    const bool stats = !ctx->stats_file().empty();
    std::uint64_t updates_before = 0;
    if (stats) {
        auto s = stats::read(std::string(ctx->stats_file()));
        REQUIRE(s.has_value());
        updates_before = s->updates;
    }
    const std::uint64_t before_delivered = delivered;
    const std::uint64_t before = g_allocations.load();
    run_for(400'000'000);  // 0.4 s: about four stats-file updates
    const std::uint64_t allocs = g_allocations.load() - before;
    CHECK(allocs == 0);
    CHECK(delivered - before_delivered > 1000);
    if (stats) {
        auto s = stats::read(std::string(ctx->stats_file()));
        REQUIRE(s.has_value());
        CHECK(s->updates >= updates_before + 2);
        REQUIRE(s->channels.size() == 2);
    } else {
        WARN("no stats file here (PRIZMA_STATS=0 or no /dev/shm): its update was not checked");
    }
}
}  // namespace

TEST_CASE("public API steady state allocates nothing, stats-file updates included",
          "[protocol][alloc]") {
    api_steady_state("");
}

TEST_CASE("public API with flow control allocates nothing, receiver rows in stats included",
          "[protocol][alloc][flow]") {
    api_steady_state("?flow=min");
}
