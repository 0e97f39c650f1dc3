// SPDX-License-Identifier: Apache-2.0
// The NAK timer wheel on its own, with a manual clock (lib/protocol/timer_wheel.hpp).
#include "lib/protocol/timer_wheel.hpp"

#include <algorithm>
#include <vector>

#include "tests/support/catch.hpp"

using prizma::protocol::TimerLink;
using prizma::protocol::VectorLinks;
using TimerWheel = prizma::protocol::TimerWheel<VectorLinks>;

namespace {
std::vector<std::uint32_t> due_at(TimerWheel& w, std::int64_t now) {
    std::vector<std::uint32_t> due;
    due.reserve(50'000);
    (void)w.collect_due(now, due);
    std::sort(due.begin(), due.end());
    return due;
}
}  // namespace

TEST_CASE("timer wheel: due exactly at the deadline, not before, cancel, re-arm", "[unit][wheel]") {
    std::vector<TimerLink> links(64);
    TimerWheel w;
    w.bind(VectorLinks{&links});
    w.reset(10);  // 1024 ns ticks
    w.arm(3, 5'000);
    w.arm(7, 5'000);
    w.arm(9, 20'000);
    CHECK(w.armed(3));
    CHECK(w.deadline(9) == 20'000);
    CHECK(due_at(w, 4'999).empty());
    CHECK(due_at(w, 5'000) == std::vector<std::uint32_t>{3, 7});
    // Still armed until the caller re-arms or cancels them: collected again.
    CHECK(due_at(w, 5'001) == std::vector<std::uint32_t>{3, 7});
    w.cancel(3);
    w.cancel(3);  // twice: nothing
    CHECK_FALSE(w.armed(3));
    w.arm(7, 30'000);  // re-armed: moves bucket
    CHECK(due_at(w, 20'000) == std::vector<std::uint32_t>{9});
    w.cancel(9);
    CHECK(w.next_armed() == (30'000 >> 10) << 10);  // the start of 7's tick
    CHECK(due_at(w, 30'000) == std::vector<std::uint32_t>{7});
}

TEST_CASE("timer wheel: a deadline in the past fires at the next run, whole turns",
          "[unit][wheel]") {
    std::vector<TimerLink> links(1024);
    TimerWheel w;
    w.bind(VectorLinks{&links});
    w.reset(10);
    (void)due_at(w, 1'000'000);  // the cursor is now at tick 976
    w.arm(1, 10);                // long past: lands in the current tick
    CHECK(due_at(w, 1'000'000) == std::vector<std::uint32_t>{1});
    w.cancel(1);
    // Deadlines more than a whole turn (512 ticks) apart share buckets; a run after a long
    // pause visits every bucket once and still finds only the due ones.
    const std::int64_t turn = std::int64_t{TimerWheel::kBuckets} << 10;
    w.arm(2, 1'100'000);
    w.arm(3, 1'100'000 + turn);  // same bucket, one turn later
    CHECK(due_at(w, 1'100'000 + turn / 2) == std::vector<std::uint32_t>{2});
    w.cancel(2);
    CHECK(due_at(w, 1'100'000 + turn) == std::vector<std::uint32_t>{3});
    w.cancel(3);
    CHECK(w.next_armed() == TimerWheel::kNever);
}

TEST_CASE("timer wheel: a run visits buckets, not entries, drain, reset", "[unit][wheel]") {
    std::vector<TimerLink> links(50'000);
    TimerWheel w;
    w.bind(VectorLinks{&links});
    w.reset(10);
    for (std::uint32_t i = 0; i < 50'000; ++i) {
        w.arm(i, 1'000'000 + i);  // tens of thousands missing at once
    }
    std::vector<std::uint32_t> due;
    due.reserve(links.size());
    // Before any is due, a run finds nothing and reports the earliest one in this tick.
    const std::int64_t later = w.collect_due(999'999, due);
    CHECK(due.empty());
    // 999'999 and 1'000'000 share tick 976: the first deadline is later in this very tick;
    // the next tick with a timer is 977.
    CHECK(later == 1'000'000);
    CHECK(w.next_armed() == std::int64_t{977} << 10);
    (void)w.collect_due(1'000'000 + 49'999, due);
    CHECK(due.size() == 50'000);
    std::size_t drained = 0;
    w.drain([&](std::uint32_t idx) {
        ++drained;
        if (idx % 2 == 0) {
            w.cancel(idx);  // f may cancel it itself
        }
    });
    CHECK(drained == 50'000);
    CHECK(w.next_armed() == TimerWheel::kNever);
    for (std::uint32_t i = 0; i < 10; ++i) {
        w.arm(i, 5);
    }
    std::fill(links.begin(), links.end(), TimerLink{});  // the caller clears the links
    w.reset(12);                                         // reused: nothing armed
    CHECK_FALSE(w.armed(0));
    CHECK(w.shift() == 12U);
    CHECK(due_at(w, 1'000'000'000).empty());
}
