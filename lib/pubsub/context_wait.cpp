// SPDX-License-Identifier: Apache-2.0
// Context: the duty cycle and the waits (epoll over the channels' transports).
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>

#include <prizma/context.hpp>

#include "lib/pubsub/context_impl.hpp"

namespace prizma {

void Context::Impl::note_ready(const epoll_event* ev, int n) noexcept {
    ready_fresh = n >= 0 && n < kWaitEvents;  // a full array may have left some out
    for (auto& ch : channels) {
        const Transport& t = ch->session->transport();
        bool ready = !ready_fresh;
        const int fd = t.wakeup_fd();
        for (int i = 0; i < n && !ready; ++i) {
            ready = ev[i].data.fd == fd;
        }
        ch->rx_idle = !ready && t.rx_follows_wakeup();
    }
}

bool Context::Impl::arm_timer(std::int64_t until, std::int64_t now) noexcept {
    if (!timer.valid()) {
        return false;
    }
    // Armed, not yet fired and due no later: keep it (the wait may end early, at that expiry).
    // A duty cycle moves its next deadline at every message (a heartbeat 1 ms after the last
    // send), and re-arming a kernel timer at every sleep cost ~6 us per wake-up on a KVM guest
    // (bench/rtt_modes.sh, blocking: docs/PERFORMANCE.md); this way it moves about once per
    // expiry.
    if (timer_at > now && timer_at <= until) {
        return true;
    }
    itimerspec its{};
    its.it_value.tv_sec = until / 1'000'000'000;
    its.it_value.tv_nsec = until % 1'000'000'000;
    if (::timerfd_settime(timer.get(), TFD_TIMER_ABSTIME, &its, nullptr) != 0) {
        timer_at = 0;
        return false;
    }
    timer_at = until;  // a fired, unread expiry is cleared by the settime too
    return true;
}

void Context::Impl::clear_timer() noexcept {
    // The count is not needed; EAGAIN (not expired after all) leaves nothing to clear.
    std::uint64_t expiries = 0;
    [[maybe_unused]] const ssize_t got = ::read(timer.get(), &expiries, sizeof expiries);
    timer_at = 0;
}

void Context::Impl::look_ready() noexcept {
    std::size_t skippable = 0;
    for (const auto& ch : channels) {
        skippable += ch->session->transport().rx_follows_wakeup() ? 1U : 0U;
    }
    if (skippable < 2 || !epoll.valid()) {
        return;
    }
    std::array<epoll_event, kWaitEvents> ev{};
    note_ready(ev.data(), ::epoll_wait(epoll.get(), ev.data(), kWaitEvents, 0));
}

int Context::poll() noexcept {
    impl_->owner.check("Context::poll");
    const std::int64_t now = now_ns();
    int work = 0;
    // After a sleep, only the channels epoll reported are read (the others' receive would
    // come back empty): Context::wait's events for the first poll, one epoll_wait(0) after.
    if (!impl_->ready_fresh) {
        impl_->look_ready();
    }
    for (auto& ch : impl_->channels) {
        work += ch->session->do_work(now, !(impl_->ready_fresh && ch->rx_idle));
    }
    impl_->ready_fresh = false;
    if (impl_->timer_at != 0 && now >= impl_->timer_at) {
        impl_->clear_timer();  // wakeup_fd() in someone else's loop must not stay readable
    }
    if (now >= impl_->stats_next_ns && impl_->stats.enabled()) {
        impl_->write_stats();
        impl_->stats_next_ns = now + 100'000'000;  // 10 updates a second
    }
    return work;
}

std::int64_t Context::next_deadline_ns() const noexcept {
    std::int64_t d = INT64_MAX;
    for (const auto& ch : impl_->channels) {
        d = std::min(d, ch->session->next_deadline());
    }
    return d;
}

std::chrono::steady_clock::time_point Context::next_deadline() const noexcept {
    const std::int64_t d = next_deadline_ns();
    if (d == INT64_MAX) {
        return std::chrono::steady_clock::time_point::max();
    }
    return std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::nanoseconds(d)));
}

int Context::wakeup_fd() const noexcept {
    return impl_->epoll.get();
}

bool Context::prepare_wait() noexcept {
    impl_->owner.check("Context::prepare_wait");
    if (impl_->busy_only != 0 || !impl_->epoll.valid()) {
        return false;
    }
    // Arm every transport; one with datagrams already waiting means no sleep at all.
    for (const auto& ch : impl_->channels) {
        auto armed = ch->session->transport().arm_wakeup();
        if (armed && !*armed) {
            return false;
        }
    }
    return true;
}

void Context::wait(std::chrono::nanoseconds max_wait) noexcept {
    impl_->owner.check("Context::wait");
    const std::int64_t now = now_ns();
    std::int64_t until = now + max_wait.count();
    until = std::min(until, next_deadline_ns());
    if (until <= now || !prepare_wait()) {
        return;
    }
    const std::int64_t left = std::min<std::int64_t>(until - now, 60'000'000'000);
    std::array<epoll_event, Impl::kWaitEvents> ev{};
    if (impl_->arm_timer(now + left, now)) {
        const int n = ::epoll_wait(impl_->epoll.get(), ev.data(), Impl::kWaitEvents, -1);
        for (std::size_t i = 0; n > 0 && i < static_cast<std::size_t>(n); ++i) {
            if (ev[i].data.fd == impl_->timer.get()) {
                impl_->clear_timer();
            }
        }
        impl_->note_ready(ev.data(), n);
        return;
    }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
    // Nanosecond timeout (Linux 5.11+): an rdma-preset timer is not overslept by up to 1 ms.
    timespec ts{};
    ts.tv_sec = left / 1'000'000'000;
    ts.tv_nsec = left % 1'000'000'000;
    const int n = ::epoll_pwait2(impl_->epoll.get(), ev.data(), Impl::kWaitEvents, &ts, nullptr);
    if (n >= 0 || errno != ENOSYS) {
        impl_->note_ready(ev.data(), n);
        return;
    }
#endif
    const auto ms = static_cast<int>((left + 999'999) / 1'000'000);
    impl_->note_ready(ev.data(),
                      ::epoll_wait(impl_->epoll.get(), ev.data(), Impl::kWaitEvents, ms));
}

}  // namespace prizma
