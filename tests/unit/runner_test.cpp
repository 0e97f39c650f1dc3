// SPDX-License-Identifier: Apache-2.0
// AgentRunner + PublishQueue: four producer threads publish through the lock-free queue while a
// runner thread owns the Context; every message arrives once, FIFO per producer.
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <prizma/prizma.hpp>

#include "tests/support/catch.hpp"

TEST_CASE("publishing from 4 threads through a PublishQueue to a runner-owned Context",
          "[unit][runner]") {
    auto ctx = prizma::Context::create().value();
    auto sub = std::move(*ctx.add_subscriber("mem://runner-bus:7500"));
    auto pub = std::move(*ctx.add_publisher("mem://runner-bus:7500"));
    prizma::PublishQueue queue(1024, 64);
    constexpr int kThreads = 4;
    constexpr std::uint32_t kPerThread = 5000;
    std::vector<std::vector<std::uint32_t>> got(kThreads);  // written by the runner thread only
    std::atomic<std::uint32_t> total{0};
    std::uint64_t bad = 0;
    {
        prizma::AgentRunner runner(ctx, prizma::Backoff{}, [&] {
            int work = static_cast<int>(queue.drain(pub, 256));
            work += static_cast<int>(sub.poll(256, [&](const prizma::Message& m) {
                if (m.kind != prizma::MessageKind::data) {
                    return;
                }
                std::uint32_t v[2] = {0, 0};
                if (m.payload.size() != sizeof v) {
                    ++bad;
                    return;
                }
                std::memcpy(v, m.payload.data(), sizeof v);
                if (v[0] >= kThreads) {
                    ++bad;
                    return;
                }
                got[v[0]].push_back(v[1]);
                total.fetch_add(1, std::memory_order_release);
            }));
            return work;
        });
        std::vector<std::thread> producers;
        std::atomic<std::uint64_t> retries{0};
        for (std::uint32_t t = 0; t < kThreads; ++t) {
            producers.emplace_back([&, t] {
                for (std::uint32_t i = 0; i < kPerThread; ++i) {
                    const std::uint32_t v[2] = {t, i};
                    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(v),
                                                           sizeof v);
                    while (!queue.offer(bytes)) {
                        retries.fetch_add(1, std::memory_order_relaxed);
                        std::this_thread::yield();
                    }
                }
            });
        }
        for (auto& p : producers) {
            p.join();
        }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (total.load(std::memory_order_acquire) < kThreads * kPerThread
               && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        runner.stop();
        UNSCOPED_INFO("queue-full retries " << retries.load());
    }
    CHECK(bad == 0);
    CHECK(queue.dropped() == 0);
    for (std::uint32_t t = 0; t < kThreads; ++t) {
        INFO("producer " << t);
        REQUIRE(got[t].size() == kPerThread);
        for (std::uint32_t i = 0; i < kPerThread; ++i) {
            REQUIRE(got[t][i] == i);  // FIFO per producer, nothing lost or doubled
        }
    }
    CHECK(prizma::PublishQueue(4, 8).offer(std::vector<std::byte>(9)).error()
          == prizma::Errc::message_too_large);
}

TEST_CASE("Backoff spins, yields, then parks with a doubling period, work resets it",
          "[unit][runner]") {
    using us = std::chrono::microseconds;
    prizma::Backoff b(2, 2, us(50), us(200));
    for (int i = 0; i < 4; ++i) {
        CHECK(b.next_park() == us(0));  // 2 spins + 2 yields: no sleeping
        b.idle(0);
    }
    // Then it parks 50, 100, 200, 200 µs (doubling, capped); sleep_for sleeps at least that.
    const auto t1 = std::chrono::steady_clock::now();
    for (const auto want : {us(50), us(100), us(200), us(200)}) {
        CHECK(b.next_park() == want);
        b.idle(0);
    }
    CHECK(std::chrono::steady_clock::now() - t1 >= us(550));
    b.idle(1);  // work resets it: spinning again, from the shortest park
    CHECK(b.next_park() == us(0));
    for (int i = 0; i < 4; ++i) {
        b.idle(0);
    }
    CHECK(b.next_park() == us(50));
}

TEST_CASE("a Context touched from a thread that does not own it aborts, naming the call",
          "[unit][runner][owner]") {
    if (!prizma::Context::owner_checks_enabled()) {
        PRIZMA_SKIP("built without PRIZMA_OWNER_CHECKS: nothing to check");
    }
    // The owner-thread rule, checked: after the runner hands the Context back, the test thread
    // owns it again; a stranger thread calling poll() must abort in a child process.
    auto ctx = prizma::Context::create().value();
    REQUIRE(ctx.add_subscriber("mem://owner-bus:7500").has_value());
    {
        prizma::AgentRunner runner(ctx, prizma::Backoff{}, [] { return 0; });
    }
    CHECK(ctx.poll() >= 0);  // handed back: no abort
    int err[2] = {-1, -1};
    REQUIRE(::pipe(err) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        (void)::dup2(err[1], 2);
        std::thread stranger([&] { (void)ctx.poll(); });
        stranger.join();
        ::_exit(0);  // reached only if the check did not fire
    }
    ::close(err[1]);
    std::string text;
    char buf[512];
    for (ssize_t n; (n = ::read(err[0], buf, sizeof buf)) > 0;) {
        text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(err[0]);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status));
    CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT));
    CHECK(text.find("Context::poll called from a thread that does not own its Context")
          != std::string::npos);
}

namespace {
// A user's idle strategy: counts idle cycles.
struct CountingIdle {
    std::atomic<int>* idles;
    void idle(int work) noexcept {
        if (work == 0) {
            idles->fetch_add(1, std::memory_order_relaxed);
        }
    }
};
struct ThrowingIdle {
    void idle(int work) {  // not noexcept: not an IdleStrategy
        (void)work;
    }
};
}  // namespace

static_assert(prizma::IdleStrategy<CountingIdle>);
static_assert(!prizma::IdleStrategy<ThrowingIdle>);
static_assert(!prizma::IdleStrategy<int>);

TEST_CASE("AgentRunner pins its thread, names it, takes a strategy of the user's own",
          "[unit][runner]") {
    auto ctx = prizma::Context::create().value();
    std::atomic<int> idles{0};
    std::atomic<int> cpu{-1};
    std::array<char, 16> name{};
    std::atomic<bool> seen{false};
    {
        prizma::RunnerOptions opts;
        opts.cpu = 0;
        opts.name = "md-runner-with-a-long-name";  // cut to 15 characters
        prizma::AgentRunner runner(
            ctx, CountingIdle{&idles},
            [&] {
                if (!seen.load()) {
                    cpu.store(::sched_getcpu());
                    (void)::pthread_getname_np(::pthread_self(), name.data(), name.size());
                    seen.store(true);
                }
                return 0;
            },
            opts);
        CHECK_FALSE(runner.cpu_error());
        CHECK_FALSE(runner.name_error());
        while (!seen.load() || idles.load() < 10) {
            std::this_thread::yield();
        }
    }
    CHECK(cpu.load() == 0);
    CHECK(std::string(name.data()) == "md-runner-with-");
    CHECK(idles.load() >= 10);
    prizma::RunnerOptions bad;
    bad.cpu = 100000;  // no such CPU: the runner runs unpinned and says so
    prizma::AgentRunner unpinned(
        ctx, prizma::BusySpin{}, [] { return 0; }, bad);
    CHECK(unpinned.cpu_error() == std::errc::invalid_argument);
}

namespace {

/// The timer slack (ns) of an AgentRunner's thread, read on that thread.
long runner_slack(prizma::Context& ctx, const prizma::RunnerOptions& opts) {
    std::atomic<long> slack{-1};
    prizma::AgentRunner runner(
        ctx, prizma::BusySpin{},
        [&] {
            if (slack.load() < 0) {
                slack.store(::prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0));
            }
            return 0;
        },
        opts);
    CHECK_FALSE(runner.timer_slack_error());
    while (slack.load() < 0) {
        std::this_thread::yield();
    }
    return slack.load();
}

}  // namespace

TEST_CASE("AgentRunner sets its thread's timer slack: 1 us unless told", "[unit][runner]") {
    auto ctx = prizma::Context::create().value();
    const long inherited = ::prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    REQUIRE(inherited > 0);
    CHECK(runner_slack(ctx, {}) == 1000);
    prizma::RunnerOptions opts;
    opts.timer_slack = std::chrono::microseconds(20);
    CHECK(runner_slack(ctx, opts) == 20000);
    opts.timer_slack = std::chrono::nanoseconds(0);  // at least 1 ns (0 would mean "default")
    CHECK(runner_slack(ctx, opts) == 1);
    opts.timer_slack.reset();  // kept as inherited from the creating thread
    CHECK(runner_slack(ctx, opts) == inherited);
}
