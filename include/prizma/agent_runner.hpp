// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <optional>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>

#include <prizma/context.hpp>
#include <prizma/idle_strategy.hpp>

namespace prizma {

/// What AgentRunner calls on its thread after each Context::poll(): returns the work it did.
template <typename D>
concept DutyCycle = requires(D& duty) {
    { duty() } -> std::convertible_to<int>;
};

/// Where and under which name an AgentRunner's thread runs.
struct RunnerOptions {
    /// Pin the thread to this CPU (sched_setaffinity); nullopt leaves it to the scheduler.
    std::optional<int> cpu;
    /// The thread's name as `top -H`, `ps -L` and debuggers show it (at most 15 characters;
    /// longer names are cut).
    std::string name = "prizma-agent";
    /// The thread's timer slack (prctl PR_SET_TIMERSLACK): how late the kernel may wake it
    /// from a timed sleep (Context::wait, a sleeping IdleStrategy) to merge wake-ups. Linux's
    /// default is 50 us, which a blocking component pays on every timed wake-up; 1 us by
    /// default here. nullopt keeps what the thread inherits; values under 1 ns count as 1 ns.
    std::optional<std::chrono::nanoseconds> timer_slack = std::chrono::microseconds(1);
};

/// Runs a Context on its own thread: `duty()` (your subscriber polling, returning the work it
/// did) after every Context::poll(), then `idle.idle(work)`. That thread becomes the Context's
/// owner thread: while the runner lives, touch the Context, its Publishers and Subscribers only
/// from `duty`. Publish from other threads through a PublishQueue. The destructor stops and
/// joins the thread. An exception escaping `duty` terminates the program (std::thread rules):
/// catch inside it.
template <IdleStrategy Idle, DutyCycle Duty>
class AgentRunner {
public:
    AgentRunner(Context& ctx, Idle idle, Duty duty, RunnerOptions options = {})
        : thread_([this,
                   &ctx,
                   idle = std::move(idle),
                   duty = std::move(duty),
                   slack = options.timer_slack](const std::stop_token& st) mutable {
              // The slack is the calling thread's own: set here, reported to the constructor.
              int slack_errno = 0;
              if (slack) {
                  const auto ns =
                      static_cast<unsigned long>(std::max<std::int64_t>(1, slack->count()));
                  slack_errno = ::prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0) == 0 ? 0 : errno;
              }
              slack_errno_.store(slack_errno);
              slack_set_.store(true);
              slack_set_.notify_one();
              ready_.wait(false);  // name and CPU are set before the first duty cycle
              ctx.adopt_owner_thread();
              while (!st.stop_requested()) {
                  const int work = ctx.poll() + duty();
                  idle.idle(work);
              }
              ctx.release_owner_thread();  // joined: the Context is the caller's again
          }) {
        // Applied from here to the new thread (which waits for it): the errors are the
        // constructor's to report.
        const pthread_t handle = thread_.native_handle();
        const std::string name = options.name.substr(0, 15);
        if (!name.empty()) {
            name_error_ =
                std::error_code(::pthread_setname_np(handle, name.c_str()), std::system_category());
        }
        if (options.cpu) {
            cpu_set_t set;
            CPU_ZERO(&set);
            if (*options.cpu < 0 || *options.cpu >= CPU_SETSIZE) {
                cpu_error_ = std::make_error_code(std::errc::invalid_argument);
            } else {
                CPU_SET(static_cast<std::size_t>(*options.cpu), &set);
                cpu_error_ = std::error_code(::pthread_setaffinity_np(handle, sizeof set, &set),
                                             std::system_category());
            }
        }
        slack_set_.wait(false);
        slack_error_ = std::error_code(slack_errno_.load(), std::system_category());
        ready_.store(true);
        ready_.notify_one();
    }
    AgentRunner(const AgentRunner&) = delete;
    AgentRunner& operator=(const AgentRunner&) = delete;
    AgentRunner(AgentRunner&&) = delete;
    AgentRunner& operator=(AgentRunner&&) = delete;
    ~AgentRunner() = default;  // jthread: request_stop + join
    void stop() {
        thread_.request_stop();
        if (thread_.joinable()) {
            thread_.join();
        }
    }
    /// Why RunnerOptions::cpu could not be applied (EINVAL: no such CPU); empty when it was,
    /// or when none was asked for. The thread runs either way.
    [[nodiscard]] std::error_code cpu_error() const noexcept { return cpu_error_; }
    /// Why the thread name could not be set; empty when it was.
    [[nodiscard]] std::error_code name_error() const noexcept { return name_error_; }
    /// Why RunnerOptions::timer_slack could not be set; empty when it was (or none was asked).
    [[nodiscard]] std::error_code timer_slack_error() const noexcept { return slack_error_; }

private:
    std::atomic<bool> ready_{false};  // before thread_: set up before the thread starts
    std::atomic<bool> slack_set_{false};
    std::atomic<int> slack_errno_{0};
    std::error_code slack_error_;
    std::error_code cpu_error_;
    std::error_code name_error_;
    std::jthread thread_;  // last: joined first, before the members it uses go
};

}  // namespace prizma
