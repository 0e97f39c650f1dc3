// SPDX-License-Identifier: Apache-2.0
// Context::wait and Context::poll: after a sleep only the channels the Context's epoll reported
// are read, when their transport allows it (Transport::rx_follows_wakeup); every other channel
// is read on every poll, and nothing that arrives is left unread.
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
