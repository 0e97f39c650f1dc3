// SPDX-License-Identifier: Apache-2.0
// Context::wait and Context::poll: after a sleep only the channels the Context's epoll reported
// are read, when their transport allows it (Transport::rx_follows_wakeup); every other channel
// is read on every poll, and nothing that arrives is left unread.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include <catch2/catch.hpp>

#include <prizma/prizma.hpp>

namespace {

/// A transport that never delivers: its wakeup fd is an eventfd the test signals
/// (level-triggered: readable until poll_rx drains it), and it counts its poll_rx calls.
class EventTransport final : public prizma::Transport {
public:
    explicit EventTransport(bool follows)
        : follows_(follows), efd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
    ~EventTransport() override { ::close(efd_); }
    EventTransport(const EventTransport&) = delete;
    EventTransport& operator=(const EventTransport&) = delete;
    EventTransport(EventTransport&&) = delete;
    EventTransport& operator=(EventTransport&&) = delete;

    [[nodiscard]] std::string_view name() const noexcept override { return "event"; }
    [[nodiscard]] prizma::TransportCaps caps() const noexcept override {
        return prizma::TransportCaps{1400, 64, 0, true};
    }
    [[nodiscard]] prizma::Result<std::size_t> send_batch(
        std::span<const prizma::TxPacket> packets) noexcept override {
        return packets.size();
    }
    [[nodiscard]] prizma::Result<std::size_t> poll_rx(
        std::span<prizma::RxPacket> out) noexcept override {
        (void)out;
        ++polls;
        std::uint64_t v = 0;
        if (::read(efd_, &v, sizeof v) == static_cast<ssize_t>(sizeof v)) {
            ++drained;  // what was signalled has been read
        }
        return std::size_t{0};
    }
    void release_rx(std::size_t count) noexcept override { (void)count; }
    [[nodiscard]] int wakeup_fd() const noexcept override { return efd_; }
    [[nodiscard]] prizma::Result<bool> arm_wakeup() noexcept override {
        armed_ = true;
        return true;
    }
    [[nodiscard]] bool rx_follows_wakeup() const noexcept override { return follows_ && armed_; }

    void signal() const {
        const std::uint64_t one = 1;
        REQUIRE(::write(efd_, &one, sizeof one) == static_cast<ssize_t>(sizeof one));
    }
    std::uint64_t polls = 0;
    std::uint64_t drained = 0;

private:
    bool follows_;
    bool armed_ = false;  // as UdpTransport: its sockets join the epoll at the first arm
    int efd_;
};

struct Channels {
    prizma::Context ctx = prizma::Context::create().value();
    EventTransport* a = nullptr;
    EventTransport* b = nullptr;
    EventTransport* c = nullptr;  // does not follow its wakeup: read on every poll
    std::optional<prizma::Subscriber> sa, sb, sc;

    Channels() {
        sa = add(a, true, "a");
        sb = add(b, true, "b");
        sc = add(c, false, "c");
    }
    prizma::Subscriber add(EventTransport*& t, bool follows, const char* name) {
        prizma::TransportChannel tc;
        auto owned = std::make_unique<EventTransport>(follows);
        t = owned.get();
        tc.transport = std::move(owned);
        return ctx.add_subscriber(std::move(tc), {}, name).value();
    }
    void reset() { a->polls = b->polls = c->polls = 0; }
};

}  // namespace

TEST_CASE("wait then poll: only the channels epoll reported are read", "[unit][context]") {
    Channels ch;
    (void)ch.ctx.poll();  // before any wait (nothing armed): every channel is read
    CHECK(ch.a->polls == 1);
    CHECK(ch.b->polls == 1);
    CHECK(ch.c->polls == 1);
    ch.reset();

    ch.a->signal();
    ch.ctx.wait(std::chrono::seconds(5));  // returns at once: a is readable
    (void)ch.ctx.poll();
    CHECK(ch.a->polls == 1);
    CHECK(ch.a->drained == 1);
    CHECK(ch.b->polls == 0);  // epoll said nothing for b
    CHECK(ch.c->polls == 1);  // c's transport does not follow its wakeup fd

    // The next poll has no fresh wait: one look at the epoll, and nothing is readable.
    ch.reset();
    (void)ch.ctx.poll();
    CHECK(ch.a->polls == 0);
    CHECK(ch.b->polls == 0);
    CHECK(ch.c->polls == 1);

    // What arrives between polls is read by the next one, without a wait in between.
    ch.reset();
    ch.b->signal();
    (void)ch.ctx.poll();
    CHECK(ch.a->polls == 0);
    CHECK(ch.b->polls == 1);
    CHECK(ch.b->drained == 1);

    // Both readable: both read.
    ch.reset();
    ch.a->signal();
    ch.b->signal();
    ch.ctx.wait(std::chrono::seconds(5));
    (void)ch.ctx.poll();
    CHECK(ch.a->polls == 1);
    CHECK(ch.b->polls == 1);
}

TEST_CASE("wait that times out: the next poll reads nothing that follows its wakeup",
          "[unit][context]") {
    Channels ch;
    ch.ctx.wait(std::chrono::milliseconds(1));
    ch.reset();
    (void)ch.ctx.poll();
    CHECK(ch.a->polls == 0);
    CHECK(ch.b->polls == 0);
    CHECK(ch.c->polls == 1);
    // A signal after the timeout is still read by the poll after next.
    ch.a->signal();
    (void)ch.ctx.poll();
    CHECK(ch.a->polls == 1);
    CHECK(ch.a->drained == 1);
}

namespace {

bool fd_readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
}

std::int64_t ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now()
                                                                 - t)
        .count();
}

}  // namespace

TEST_CASE("wait's timer: it ends a wait, never late, and leaves no readable fd behind",
          "[unit][context]") {
    Channels ch;
    const int fd = ch.ctx.wakeup_fd();
    REQUIRE(fd >= 0);

    // A wait with nothing readable ends at its timeout (the timer), and the fd is quiet after.
    auto t0 = std::chrono::steady_clock::now();
    ch.ctx.wait(std::chrono::milliseconds(20));
    CHECK(ms_since(t0) >= 19);
    CHECK_FALSE(fd_readable(fd));

    // A wait that a datagram ends leaves its timer armed; a later, shorter wait must not sleep
    // to the earlier expiry (the timer moves earlier) ...
    ch.a->signal();
    ch.ctx.wait(std::chrono::seconds(30));
    (void)ch.ctx.poll();
    REQUIRE(ch.a->drained == 1);
    t0 = std::chrono::steady_clock::now();
    ch.ctx.wait(std::chrono::milliseconds(5));
    CHECK(ms_since(t0) < 10'000);  // not the 30 s of the first wait

    // ... and a longer one keeps the earlier expiry: it ends there, early, not late.
    ch.a->signal();
    ch.ctx.wait(std::chrono::milliseconds(30));  // ends at once; its timer stays at +30 ms
    (void)ch.ctx.poll();
    t0 = std::chrono::steady_clock::now();
    ch.ctx.wait(std::chrono::seconds(30));
    CHECK(ms_since(t0) < 10'000);

    // In someone else's loop: a timer a wait() left armed fires while nobody waits; the fd
    // wakes that loop once, and the next poll() quiets it (no busy loop on a readable fd).
    ch.a->signal();
    ch.ctx.wait(std::chrono::milliseconds(15));  // ends at once: a is readable
    (void)ch.ctx.poll();
    pollfd p{fd, POLLIN, 0};
    CHECK(::poll(&p, 1, 5'000) == 1);  // the timer, ~15 ms later
    (void)ch.ctx.poll();
    CHECK_FALSE(fd_readable(fd));
}
