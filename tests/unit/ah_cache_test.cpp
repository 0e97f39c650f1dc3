// SPDX-License-Identifier: Apache-2.0
// The verbs transport's unicast AH cache on its own (transports/verbs/ah_cache.hpp): the
// five-state slot protocol between the owner thread and the control thread, with a fake
// Maker instead of ibv_create_ah. The last case runs both sides on two threads (also under
// ThreadSanitizer: scripts/test.sh runs the [ahcache] cases in its TSan stage).
#include "transports/verbs/ah_cache.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "tests/support/catch.hpp"

using prizma::Endpoint;
using prizma::verbs::AhCache;
using State = AhCache::State;
using Noted = AhCache::Noted;
namespace policy = prizma::verbs::policy;

namespace {

Endpoint peer(std::uint32_t n) {
    Endpoint e;
    e.family = 27;
    e.id = 0x100 + n;  // the QPN
    e.addr[0] = 0xfe;
    e.addr[1] = 0x80;
    e.addr[14] = static_cast<std::uint8_t>(n >> 8U);
    e.addr[15] = static_cast<std::uint8_t>(n);
    return e;
}

/// A handle per peer, made or refused on demand; counts what it made and what was let go.
struct FakeMaker final : AhCache::Maker {
    struct Handle {
        std::uint32_t qpn = 0;
    };
    std::array<Handle, 1024> handles{};
    bool succeed = true;
    int calls = 0;
    Endpoint last_peer{};
    policy::SourceRoute last_route{};
    std::shared_ptr<int> released = std::make_shared<int>(0);
    // Runs inside make(), as the owner thread could meanwhile (a race made deterministic).
    std::function<void()> during;

    int published_count = 0;
    int failed_count = 0;
    void published(bool) noexcept override { ++published_count; }
    void failed() noexcept override { ++failed_count; }

    AhCache::Made make(const Endpoint& p,
                       const policy::SourceRoute& route,
                       AhCache::PathMemo& memo) noexcept override {
        ++calls;
        last_peer = p;
        last_route = route;
        memo.known = true;  // kept by the slot until it is freed
        if (during) {
            during();
        }
        if (!succeed) {
            return {};
        }
        Handle& h = handles.at(p.id - 0x100);
        h.qpn = p.id;
        auto count = released;
        return {&h, std::shared_ptr<void>(&h, [count](void*) { ++*count; }), false};
    }
};

const AhCache::Clock::time_point t0{std::chrono::seconds(1000)};

}  // namespace

TEST_CASE("AH cache: a miss asks the control side, which makes the handle, then a hit",
          "[verbs][ahcache]") {
    AhCache cache;
    FakeMaker maker;
    AhCache::Note note;
    CHECK(cache.lookup(peer(1), note) == nullptr);  // never heard from: requested now
    CHECK(note.what == Noted::requested);
    CHECK(note.wake);
    const std::size_t slot = cache.find(peer(1));
    REQUIRE(slot < AhCache::kSlots);
    CHECK(cache.state(slot) == State::requested);
    // Until the control side has run: pending, and no second request (no wake).
    CHECK(cache.lookup(peer(1), note) == nullptr);
    CHECK(note.what == Noted::known);
    CHECK_FALSE(note.wake);
    CHECK(cache.ready_count() == 0);

    const AhCache::Serviced s = cache.service(t0, maker);
    CHECK(s.created == 1);
    CHECK(s.failed == 0);
    CHECK(s.wait_ms == -1);  // nothing to retry
    CHECK(maker.calls == 1);
    CHECK(maker.published_count == 1);  // told at once, for the counters
    CHECK(maker.last_peer == peer(1));
    CHECK(cache.state(slot) == State::ready);
    CHECK(cache.ready_count() == 1);
    CHECK(cache.lookup(peer(1), note) == &maker.handles[1]);
    CHECK(note.what == Noted::known);
    // Another peer (another QPN on the same GID) is another slot.
    Endpoint other = peer(1);
    other.id = peer(2).id;
    CHECK(cache.lookup(other, note) == nullptr);
    CHECK(note.what == Noted::requested);
    // A made handle is not made again.
    (void)cache.service(t0, maker);
    (void)cache.service(t0, maker);
    CHECK(maker.calls == 2);
}

TEST_CASE("AH cache: requested -> failed, retried with doubling back-off, failed -> ready",
          "[verbs][ahcache]") {
    AhCache cache;
    FakeMaker maker;
    maker.succeed = false;
    const auto r = cache.note_source(peer(3), policy::SourceRoute{7, 1, 0}, true);
    CHECK(r.what == Noted::requested);
    const std::size_t slot = cache.find(peer(3));
    AhCache::Serviced s = cache.service(t0, maker);
    CHECK(s.failed == 1);
    CHECK(maker.failed_count == 1);
    CHECK(s.created == 0);
    CHECK(cache.state(slot) == State::failed);
    CHECK(s.wait_ms == 11);  // 10 ms (+1: never early)
    CHECK(maker.last_route.slid == 7);
    CHECK(maker.last_route.sl == 1);
    // Not due yet: not tried, and the wait shrinks.
    s = cache.service(t0 + std::chrono::milliseconds(4), maker);
    CHECK(maker.calls == 1);
    CHECK(s.wait_ms == 7);
    // Due: tried again, failed -> failed, the back-off doubled.
    s = cache.service(t0 + std::chrono::milliseconds(10), maker);
    CHECK(maker.calls == 2);
    CHECK(cache.state(slot) == State::failed);
    CHECK(s.wait_ms == 21);
    AhCache::Note note;
    CHECK(cache.lookup(peer(3), note) == nullptr);  // failed: still pending
    // Capped at 10 s between attempts however often it fails.
    auto now = t0 + std::chrono::milliseconds(10);
    for (int i = 0; i < 12; ++i) {
        now += std::chrono::seconds(11);
        s = cache.service(now, maker);
    }
    CHECK(s.wait_ms == 10000);
    // A retry that succeeds: failed -> ready.
    maker.succeed = true;
    s = cache.service(now + std::chrono::seconds(11), maker);
    CHECK(s.created == 1);
    CHECK(s.wait_ms == -1);
    CHECK(cache.state(slot) == State::ready);
    CHECK(cache.lookup(peer(3), note) == &maker.handles[3]);
}

TEST_CASE("AH cache: evicted by forget from requested, ready or failed, then freed",
          "[verbs][ahcache]") {
    AhCache cache;
    FakeMaker maker;
    AhCache::Note note;
    (void)cache.lookup(peer(1), note);  // requested
    (void)cache.lookup(peer(2), note);
    (void)cache.lookup(peer(3), note);
    const std::size_t s1 = cache.find(peer(1));
    const std::size_t s2 = cache.find(peer(2));
    const std::size_t s3 = cache.find(peer(3));
    // requested -> evict: the control side never makes it.
    CHECK(cache.forget(peer(1)));
    CHECK(cache.state(s1) == State::evict);
    CHECK(cache.find(peer(1)) == AhCache::kSlots);  // an evicted slot is nobody's
    CHECK_FALSE(cache.forget(peer(1)));             // nothing left to forget
    AhCache::Serviced s = cache.service(t0, maker);
    CHECK(s.freed == 1);
    CHECK(s.created == 2);
    CHECK(maker.calls == 2);
    CHECK(cache.state(s1) == State::free);
    // ready -> evict -> free: the handle is let go.
    CHECK(cache.forget(peer(2)));
    CHECK(cache.state(s2) == State::evict);
    CHECK(*maker.released == 0);  // not by the owner thread: by the control side, next
    s = cache.service(t0, maker);
    CHECK(s.freed == 1);
    CHECK(s.retired == 1);
    CHECK(*maker.released == 0);  // retired: the owner may still hold it
    CHECK(cache.state(s2) == State::free);
    cache.quiescent();
    s = cache.service(t0, maker);
    CHECK(s.released == 1);
    CHECK(*maker.released == 1);
    CHECK(cache.lookup(peer(2), note) == nullptr);  // requested afresh
    CHECK(note.what == Noted::requested);
    // failed -> evict -> free.
    maker.succeed = false;
    CHECK(cache.forget(peer(3)));
    (void)cache.service(t0, maker);
    (void)cache.lookup(peer(3), note);
    (void)cache.service(t0, maker);  // peer 2 and 3 fail now
    const std::size_t again = cache.find(peer(3));
    REQUIRE(again < AhCache::kSlots);
    REQUIRE(cache.state(again) == State::failed);
    CHECK(cache.forget(peer(3)));
    CHECK(cache.state(again) == State::evict);
    s = cache.service(t0, maker);
    CHECK(s.freed == 1);
    CHECK(cache.state(again) == State::free);
    CHECK(cache.state(s3) == State::free);
}

TEST_CASE("AH cache: a fabric flush evicts requested, ready and failed slots, only those",
          "[verbs][ahcache]") {
    AhCache cache;
    FakeMaker maker;
    AhCache::Note note;
    (void)cache.lookup(peer(1), note);
    (void)cache.service(t0, maker);  // 1 ready
    maker.succeed = false;
    (void)cache.lookup(peer(2), note);
    (void)cache.service(t0, maker);     // 2 failed
    (void)cache.lookup(peer(3), note);  // 3 requested
    (void)cache.lookup(peer(4), note);
    CHECK(cache.forget(peer(4)));  // 4 evict already
    CHECK(cache.flush() == 3);
    for (std::size_t i = 0; i < 4; ++i) {
        CHECK(cache.state(i) == State::evict);
    }
    CHECK(cache.flush() == 0);  // nothing left to flush
    AhCache::Serviced s = cache.service(t0, maker);
    CHECK(s.freed == 4);
    CHECK(s.retired == 1);  // only peer 1 had a handle
    CHECK(cache.ready_count() == 0);
    cache.quiescent();
    s = cache.service(t0, maker);
    CHECK(*maker.released == 1);
}

TEST_CASE("AH cache: a source heard on another route is evicted on IB, kept on RoCE",
          "[verbs][ahcache]") {
    AhCache cache;
    FakeMaker maker;
    const policy::SourceRoute a{0x11, 0, 0};
    const policy::SourceRoute b{0x12, 0, 0};
    CHECK(cache.note_source(peer(1), a, true).what == Noted::requested);
    (void)cache.service(t0, maker);
    const std::size_t slot = cache.find(peer(1));
    auto r = cache.note_source(peer(1), a, true);
    CHECK(r.what == Noted::known);
    CHECK_FALSE(r.wake);
    r = cache.note_source(peer(1), b, false);  // RoCE: the GID routes, the LID means nothing
    CHECK(r.what == Noted::known);
    CHECK(cache.state(slot) == State::ready);
    r = cache.note_source(peer(1), b, true);  // IB: a new LID after an SM sweep
    CHECK(r.what == Noted::route_changed);
    CHECK(r.wake);
    CHECK(cache.state(slot) == State::evict);
    // The next datagram asks for a handle on the new route (in another slot: the old one is
    // the control side's until it freed it).
    r = cache.note_source(peer(1), b, true);
    CHECK(r.what == Noted::requested);
    (void)cache.service(t0, maker);
    CHECK(maker.last_route.slid == 0x12);
    CHECK(cache.state(slot) == State::free);
    AhCache::Note note;
    CHECK(cache.lookup(peer(1), note) == &maker.handles[1]);
}

TEST_CASE("AH cache: an eviction racing the creation wins, the new handle is let go",
          "[verbs][ahcache]") {
    AhCache cache;
    FakeMaker maker;
    AhCache::Note note;
    (void)cache.lookup(peer(5), note);
    const std::size_t slot = cache.find(peer(5));
    // The owner thread forgets the peer while the control side is making its handle.
    maker.during = [&] {
        CHECK(cache.forget(peer(5)));
    };
    AhCache::Serviced s = cache.service(t0, maker);
    CHECK(maker.calls == 1);
    CHECK(s.created == 0);  // not published: requested -> ready lost to -> evict
    CHECK(maker.published_count == 0);
    CHECK(s.freed == 1);  // and freed in the same round
    CHECK(*maker.released == 1);
    CHECK(cache.state(slot) == State::free);
    // Same for a failed creation: requested -> failed loses too, no retry is scheduled.
    maker.succeed = false;
    maker.during = [&] {
        CHECK(cache.forget(peer(6)));
    };
    (void)cache.lookup(peer(6), note);
    s = cache.service(t0, maker);
    CHECK(s.failed == 1);
    CHECK(s.freed == 1);
    CHECK(s.wait_ms == -1);
}

TEST_CASE("AH cache: a full table gives up its least recently used peer", "[verbs][ahcache]") {
    AhCache cache;
    FakeMaker maker;
    AhCache::Note note;
    for (std::uint32_t i = 0; i < AhCache::kSlots; ++i) {
        REQUIRE(cache.note_source(peer(i), {}, false).what == Noted::requested);
    }
    (void)cache.service(t0, maker);
    CHECK(cache.ready_count() == AhCache::kSlots);
    // Every peer but #7 heard again: #7 is the least recently used.
    for (std::uint32_t i = 0; i < AhCache::kSlots; ++i) {
        if (i != 7) {
            CHECK(cache.lookup(peer(i), note) == &maker.handles[i]);
        }
    }
    const std::size_t lru = cache.find(peer(7));
    auto r = cache.note_source(peer(300), {}, false);
    CHECK(r.what == Noted::table_full);
    CHECK(r.wake);
    CHECK(cache.state(lru) == State::evict);
    CHECK(cache.find(peer(300)) == AhCache::kSlots);  // no slot yet
    (void)cache.service(t0, maker);
    CHECK(cache.state(lru) == State::free);
    // Heard again, it takes the freed slot.
    r = cache.note_source(peer(300), {}, false);
    CHECK(r.what == Noted::requested);
    CHECK(cache.find(peer(300)) == lru);
    // With every slot being evicted, nothing more to give up: no wake.
    CHECK(cache.flush() == AhCache::kSlots);
    r = cache.note_source(peer(400), {}, false);
    CHECK(r.what == Noted::table_full);
    CHECK_FALSE(r.wake);
}

TEST_CASE("AH cache: drop_handles lets every handle go (teardown before the PD)",
          "[verbs][ahcache]") {
    AhCache cache;
    FakeMaker maker;
    AhCache::Note note;
    for (std::uint32_t i = 0; i < 5; ++i) {
        (void)cache.lookup(peer(i), note);
    }
    (void)cache.service(t0, maker);
    CHECK(*maker.released == 0);
    cache.drop_handles();
    CHECK(*maker.released == 5);
}

TEST_CASE("AH cache: owner and control side on two threads, every handle the right peer's",
          "[verbs][ahcache][threads]") {
    // The owner thread hears 300 peers (more than the table holds: LRU evictions), looks
    // them up, forgets some; the control thread services and flushes. A handle handed out
    // must be the one made for that peer, made from the peer and route the owner wrote.
    struct Maker final : AhCache::Maker {
        std::atomic<std::uint64_t> made{0};
        std::atomic<std::uint64_t> released{0};
        std::atomic<std::uint64_t> torn{0};  // peer and route of a request that do not agree
        AhCache::Made make(const Endpoint& p,
                           const policy::SourceRoute& route,
                           AhCache::PathMemo&) noexcept override {
            const std::uint32_t n = p.id - 0x100;
            // A lookup of a peer without a slot requests it with an empty route (slid 0).
            if (n >= 512 || (route.slid != n + 1 && route.slid != 0) || p.addr[15] != (n & 0xffU)) {
                torn.fetch_add(1, std::memory_order_relaxed);
                return {};
            }
            if ((p.id + made.load(std::memory_order_relaxed)) % 7 == 0) {
                return {};  // some fail, and are retried
            }
            // A handle of its own, freed when let go: a handle destroyed while the owner
            // still uses it is a heap-use-after-free (ASan) or a race (TSan).
            auto* h = new (std::nothrow) std::uint32_t(n);  // NOLINT(*-owning-memory)
            if (h == nullptr) {
                return {};
            }
            made.fetch_add(1, std::memory_order_relaxed);
            return {h,
                    std::shared_ptr<void>(h,
                                          [this](void* q) {
                                              *static_cast<std::uint32_t*>(q) = 0xdeadU;
                                              delete static_cast<std::uint32_t*>(q);  // NOLINT
                                              released.fetch_add(1, std::memory_order_relaxed);
                                          }),
                    false};
        }
    } maker;
    AhCache cache;
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> wakes{0};
    std::thread control([&] {
        auto now = t0;
        std::uint64_t round = 0;
        while (!stop.load(std::memory_order_acquire)) {
            now += std::chrono::milliseconds(50);  // every failure is due again
            (void)cache.service(now, maker);
            if (++round % 64 == 0) {
                (void)cache.flush();
            }
        }
    });
    std::uint64_t hits = 0;
    std::uint64_t wrong = 0;
    std::uint32_t x = 12345;
    // At least 100,000 operations and 2,000 hits (a slow control thread, as under TSan, makes
    // for fewer hits per operation), at most 30 s.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    // The owner works in batches of 16 operations, as send_batch does: the handles it looks
    // up are used (read) at the end of the batch, then it passes its quiescent point.
    std::array<std::pair<void*, std::uint32_t>, 16> held{};
    std::size_t nheld = 0;
    for (int i = 0; i < 100'000 || (hits < 2000 && std::chrono::steady_clock::now() < deadline);
         ++i) {
        if (i % 16 == 0) {
            for (std::size_t k = 0; k < nheld; ++k) {
                wrong += *static_cast<std::uint32_t*>(held[k].first) == held[k].second ? 0U : 1U;
            }
            nheld = 0;
            cache.quiescent();
        }
        x = x * 1103515245U + 12345U;
        const std::uint32_t n = (x >> 8U) % 300U;
        const Endpoint p = peer(n);
        AhCache::Note note;
        switch ((x >> 20U) % 8U) {
            case 0: (void)cache.forget(p); break;
            case 1:
            case 2:
                note = cache.note_source(
                    p, policy::SourceRoute{static_cast<std::uint16_t>(n + 1), 0, 0}, true);
                break;
            default:
                if (cache.find(p) == AhCache::kSlots) {
                    note = cache.note_source(
                        p, policy::SourceRoute{static_cast<std::uint16_t>(n + 1), 0, 0}, true);
                } else if (void* h = cache.lookup(p, note); h != nullptr) {
                    ++hits;
                    held[nheld++] = {h, n};
                }
        }
        wakes += note.wake ? 1U : 0U;
    }
    for (std::size_t k = 0; k < nheld; ++k) {
        wrong += *static_cast<std::uint32_t*>(held[k].first) == held[k].second ? 0U : 1U;
    }
    cache.quiescent();
    stop.store(true, std::memory_order_release);
    control.join();
    CHECK(maker.torn.load() == 0);
    CHECK(wrong == 0);
    CHECK(hits >= 2000);  // the test exercised the hit path, not just misses
    CHECK(wakes.load() > 0);
    // Everything forgotten and serviced: every handle made was let go exactly once.
    CHECK(cache.flush() <= AhCache::kSlots);
    (void)cache.service(t0 + std::chrono::hours(1), maker);
    for (std::size_t i = 0; i < AhCache::kSlots; ++i) {
        CHECK(cache.state(i) == State::free);
    }
    // The last ones wait on the owner's next quiescent point; none is lost.
    CHECK(maker.released.load() + cache.retired_count() == maker.made.load());
    cache.quiescent();
    (void)cache.service(t0 + std::chrono::hours(1), maker);
    CHECK(cache.retired_count() == 0);
    CHECK(maker.released.load() == maker.made.load());
}

TEST_CASE(
    "AH cache: a handle read before a flush is not destroyed until the owner's quiescent "
    "point",
    "[verbs][ahcache]") {
    AhCache cache;
    FakeMaker maker;
    AhCache::Note note;
    (void)cache.lookup(peer(1), note);
    (void)cache.service(t0, maker);
    // The owner passes a quiescent point, then reads the handle for a send it is building...
    cache.quiescent();
    void* const h = cache.lookup(peer(1), note);
    REQUIRE(h == &maker.handles[1]);
    // ...when a fabric event flushes the table (event thread) and the control thread frees
    // the slot.
    CHECK(cache.flush() == 1);
    AhCache::Serviced s = cache.service(t0, maker);
    CHECK(s.freed == 1);
    CHECK(s.retired == 1);
    CHECK(cache.state(0) == State::free);
    CHECK(cache.retired_count() == 1);
    CHECK(s.wait_ms == AhCache::kReclaimWaitMs);    // the control thread looks again
    CHECK(*maker.released == 0);                    // still alive: the owner may post with it
    CHECK(cache.lookup(peer(1), note) == nullptr);  // not handed out again, though
    s = cache.service(t0, maker);                   // the owner has not moved on: still kept
    CHECK(s.released == 0);
    CHECK(s.created == 1);  // the peer's fresh handle, asked for by that lookup
    CHECK(*maker.released == 0);
    // The owner's send is posted; its next batch begins: the handle may go.
    cache.quiescent();
    s = cache.service(t0, maker);
    CHECK(s.released == 1);
    CHECK(*maker.released == 1);
    CHECK(cache.retired_count() == 0);
    cache.quiescent();
    s = cache.service(t0, maker);  // nothing released twice
    CHECK(s.released == 0);
    CHECK(*maker.released == 1);
    // The peer's fresh handle (made after the flush) is not affected.
    CHECK(cache.lookup(peer(1), note) == &maker.handles[1]);
    CHECK(s.wait_ms == -1);
}

TEST_CASE("AH cache: teardown lets every retired handle go, each once", "[verbs][ahcache]") {
    AhCache cache;
    FakeMaker maker;
    AhCache::Note note;
    for (std::uint32_t i = 0; i < 6; ++i) {
        (void)cache.lookup(peer(i), note);
    }
    (void)cache.service(t0, maker);
    CHECK(cache.forget(peer(0)));
    CHECK(cache.forget(peer(1)));
    (void)cache.service(t0, maker);  // 0 and 1 retired
    CHECK(cache.flush() == 4);
    (void)cache.service(t0, maker);  // 2 to 5 retired (the owner never passed a point)
    CHECK(cache.retired_count() == 6);
    CHECK(*maker.released == 0);
    // The owner thread stopped (never to pass a quiescent point again): teardown.
    cache.drop_handles();
    CHECK(cache.retired_count() == 0);
    CHECK(*maker.released == 6);
    cache.drop_handles();  // nothing twice
    (void)cache.service(t0, maker);
    CHECK(*maker.released == 6);
}

TEST_CASE("AH cache: a full retire list keeps evicted handles alive, never destroys them",
          "[verbs][ahcache]") {
    AhCache cache;
    FakeMaker maker;
    AhCache::Note note;
    // Two tables' worth of peers, each table flushed while the owner never moves on.
    for (std::uint32_t i = 0; i < AhCache::kSlots; ++i) {
        (void)cache.lookup(peer(i), note);
    }
    (void)cache.service(t0, maker);
    CHECK(cache.flush() == AhCache::kSlots);
    AhCache::Serviced s = cache.service(t0, maker);
    CHECK(s.retired == AhCache::kRetired);
    CHECK(s.deferred == 0);
    CHECK(cache.retired_count() == AhCache::kRetired);
    for (std::uint32_t i = 0; i < AhCache::kSlots; ++i) {
        (void)cache.lookup(peer(AhCache::kSlots + i), note);
    }
    (void)cache.service(t0, maker);
    CHECK(cache.ready_count() == AhCache::kSlots);
    CHECK(cache.flush() == AhCache::kSlots);
    s = cache.service(t0, maker);
    // The list is full: nothing more retired, nothing destroyed; the slots keep their handles.
    CHECK(s.retired == 0);
    CHECK(s.deferred == AhCache::kSlots);
    CHECK(s.freed == 0);
    CHECK(s.wait_ms == AhCache::kReclaimWaitMs);
    CHECK(cache.retired_count() == AhCache::kRetired);
    CHECK(*maker.released == 0);
    for (std::size_t i = 0; i < AhCache::kSlots; ++i) {
        CHECK(cache.state(i) == State::evict);
    }
    // The owner moves on: the first ones go, the kept ones are retired in their place.
    cache.quiescent();
    s = cache.service(t0, maker);
    CHECK(s.released == AhCache::kRetired);
    CHECK(s.retired == AhCache::kSlots);
    CHECK(s.freed == AhCache::kSlots);
    CHECK(*maker.released == static_cast<int>(AhCache::kRetired));
    cache.quiescent();
    s = cache.service(t0, maker);
    CHECK(*maker.released == static_cast<int>(2 * AhCache::kSlots));
    CHECK(cache.retired_count() == 0);
    CHECK(s.wait_ms == -1);
}
