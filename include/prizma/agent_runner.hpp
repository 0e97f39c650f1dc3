// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <stop_token>
#include <thread>
#include <utility>

#include <prizma/context.hpp>
#include <prizma/idle_strategy.hpp>

namespace prizma {

/// Runs a Context on its own thread: `duty()` (your subscriber polling, returning the work it
/// did) after every Context::poll(), then `idle.idle(work)`. That thread becomes the Context's
/// owner thread: while the runner lives, touch the Context, its Publishers and Subscribers only
/// from `duty`. Publish from other threads through a PublishQueue. The destructor stops and
/// joins the thread. An exception escaping `duty` terminates the program (std::thread rules):
/// catch inside it.
template <typename Idle, typename Duty>
class AgentRunner {
public:
    AgentRunner(Context& ctx, Idle idle, Duty duty)
        : thread_(
            [&ctx, idle = std::move(idle), duty = std::move(duty)](std::stop_token st) mutable {
                ctx.adopt_owner_thread();
                while (!st.stop_requested()) {
                    const int work = ctx.poll() + duty();
                    idle.idle(work);
                }
                ctx.release_owner_thread();  // joined: the Context is the caller's again
            }) {}
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

private:
    std::jthread thread_;
};

}  // namespace prizma
