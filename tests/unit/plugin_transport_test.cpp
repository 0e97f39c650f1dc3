// SPDX-License-Identifier: Apache-2.0
// A transport written here, in the test, plugged into a Context through the public API only:
// registered under a scheme of its own, and handed over ready-made. Also the registry and URI
// rules, one error code per mistake across every scheme, the counter table, removing channels
// from a running Context, and a Context driven from an outside epoll loop by its wakeup fd.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <prizma/prizma.hpp>

#include "tests/support/catch.hpp"

namespace {

/// A user's transport: an in-process bus of endpoints, each with an eventfd that is readable
/// while datagrams wait. Nothing of prizma's private code.
class TestBus;

class PipeTransport final : public prizma::Transport {
public:
    PipeTransport(std::shared_ptr<TestBus> bus, std::uint8_t id);
    ~PipeTransport() override;
    PipeTransport(const PipeTransport&) = delete;
    PipeTransport& operator=(const PipeTransport&) = delete;
    PipeTransport(PipeTransport&&) = delete;
    PipeTransport& operator=(PipeTransport&&) = delete;

    [[nodiscard]] std::string_view name() const noexcept override { return "pipe"; }
    [[nodiscard]] prizma::TransportCaps caps() const noexcept override {
        return prizma::TransportCaps{1400, 64, 0, false};
    }
    [[nodiscard]] prizma::Result<std::size_t> send_batch(
        std::span<const prizma::TxPacket> packets) noexcept override;
    [[nodiscard]] prizma::Result<std::size_t> poll_rx(
        std::span<prizma::RxPacket> out) noexcept override {
        lent_.clear();
        std::size_t n = 0;
        while (n < out.size() && !queue_.empty()) {
            lent_.push_back(std::move(queue_.front()));
            queue_.pop_front();
            out[n].data = lent_.back().bytes;
            out[n].from = endpoint_of(lent_.back().from);
            ++n;
        }
        ++polls_;
        return n;
    }
    void release_rx(std::size_t count) noexcept override { (void)count; }
    /// Events the test made up, handed to the application once.
    std::size_t take_events(std::span<prizma::TransportEvent> out) noexcept override {
        const std::size_t n = std::min(out.size(), events_.size());
        std::copy_n(events_.begin(), n, out.begin());
        events_.erase(events_.begin(), events_.begin() + static_cast<std::ptrdiff_t>(n));
        return n;
    }
    std::vector<prizma::TransportEvent> events_;
    [[nodiscard]] int wakeup_fd() const noexcept override { return efd_; }
    [[nodiscard]] prizma::Result<bool> arm_wakeup() noexcept override {
        std::uint64_t v = 0;
        (void)::read(efd_, &v, sizeof v);  // non-blocking: clears the count
        return queue_.empty();
    }
    std::size_t named_counters(std::span<prizma::NamedCounter> out) const noexcept override {
        if (out.empty()) {
            return 1;
        }
        out[0] = {"pipe_polls", polls_};
        return 1;
    }

    void push(std::uint8_t from, std::span<const std::byte> bytes) {
        queue_.push_back({std::vector<std::byte>(bytes.begin(), bytes.end()), from});
        const std::uint64_t one = 1;
        (void)::write(efd_, &one, sizeof one);
    }
    static prizma::Endpoint endpoint_of(std::uint8_t id) noexcept {
        prizma::Endpoint e;
        e.family = 0x7e57;
        e.addr[0] = id;
        return e;
    }

private:
    struct Datagram {
        std::vector<std::byte> bytes;
        std::uint8_t from = 0;
    };
    std::shared_ptr<TestBus> bus_;
    std::uint8_t id_;
    int efd_;
    std::deque<Datagram> queue_;
    std::vector<Datagram> lent_;
    std::uint64_t polls_ = 0;
};

class TestBus : public std::enable_shared_from_this<TestBus> {
public:
    std::unique_ptr<PipeTransport> attach() {
        auto t = std::make_unique<PipeTransport>(shared_from_this(), next_++);
        members_.push_back(t.get());
        return t;
    }
    void detach(PipeTransport* t) { std::erase(members_, t); }
    std::vector<PipeTransport*> members_;
    std::uint8_t next_ = 1;
};

PipeTransport::PipeTransport(std::shared_ptr<TestBus> bus, std::uint8_t id)
    : bus_(std::move(bus)), id_(id), efd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    lent_.reserve(64);
}

PipeTransport::~PipeTransport() {
    bus_->detach(this);
    (void)::close(efd_);
}

prizma::Result<std::size_t> PipeTransport::send_batch(
    std::span<const prizma::TxPacket> packets) noexcept {
    for (const auto& p : packets) {
        std::vector<std::byte> whole(p.header.begin(), p.header.end());
        whole.insert(whole.end(), p.payload.begin(), p.payload.end());
        for (auto* m : bus_->members_) {
            if (p.route == prizma::Route::downstream || p.to.addr[0] == m->id_) {
                m->push(id_, whole);
            }
        }
    }
    return packets.size();
}

// "m17": built with += (GCC 12 at -O3 warns, wrongly, about `"m" + std::to_string(i)`).
template <typename N>
std::string label(const char* prefix, N i) {
    std::string s(prefix);
    s += std::to_string(i);
    return s;
}

std::vector<std::byte> bytes_of(const std::string& s) {
    std::vector<std::byte> b(s.size());
    std::memcpy(b.data(), s.data(), s.size());
    return b;
}

/// Runs the Context until `sub` delivered `n` data messages (or 5 s passed).
std::vector<std::string> drain(prizma::Context& ctx, prizma::Subscriber& sub, std::size_t n) {
    std::vector<std::string> got;
    const std::int64_t deadline = prizma::Context::now_ns() + 5'000'000'000;
    while (got.size() < n && prizma::Context::now_ns() < deadline) {
        (void)ctx.poll();
        sub.poll(64, [&](const prizma::Message& m) {
            if (m.kind == prizma::MessageKind::data) {
                got.emplace_back(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
            }
        });
    }
    return got;
}

prizma::TransportRegistry pipe_registry(const std::shared_ptr<TestBus>& bus) {
    prizma::TransportRegistry reg;
    REQUIRE(reg.add("pipe",
                    [bus](const prizma::TransportRequest& req)
                        -> prizma::Result<prizma::TransportChannel, prizma::Error> {
                        for (const auto& p : req.uri.params) {
                            return prizma::Error(prizma::Errc::invalid_argument,
                                                 "pipe has no key '" + p.key + "'");
                        }
                        prizma::TransportChannel ch;
                        ch.transport = bus->attach();
                        ch.port = 7600;
                        return ch;
                    }));
    prizma::memory::add_fault_injection(reg);  // loss=, tx_loss=, seed= on "pipe" too
    return reg;
}

}  // namespace

TEST_CASE("plug-in: a transport defined in the test carries a channel by its own scheme",
          "[unit][plugin]") {
    auto bus = std::make_shared<TestBus>();
    auto ctx = prizma::Context::create(pipe_registry(bus));
    REQUIRE(ctx.has_value());
    CHECK(ctx->transports().schemes() == std::vector<std::string>{"pipe"});
    auto sub = ctx->add_subscriber("pipe://anything?loss=0.2&seed=7");  // the decorator's keys
    INFO(sub.error().message());
    REQUIRE(sub.has_value());
    auto pub = ctx->add_publisher("pipe://anything");
    REQUIRE(pub.has_value());
    for (int i = 0; i < 200; ++i) {
        REQUIRE(pub->offer(bytes_of(label("m", i))).has_value());
        (void)ctx->poll();
    }
    const auto got = drain(*ctx, *sub, 200);
    REQUIRE(got.size() == 200);
    for (std::size_t i = 0; i < got.size(); ++i) {
        CHECK(got[i] == label("m", i));  // in order, repaired through the plug-in
    }
    CHECK(sub->counters().repaired > 0);  // loss=0.2 on the user's transport: NAKs went over it
    // The transport's own counters reach the public API.
    const auto named = sub->transport_counters();
    REQUIRE_FALSE(named.empty());
    CHECK(named.front().name == "pipe_polls");
    CHECK(named.front().value > 0);
    // Only the registered schemes: the built-ins were not asked for.
    auto udp = ctx->add_subscriber("udp://239.1.1.1:7600?iface=127.0.0.1");
    CHECK(udp.error() == prizma::Errc::unsupported);
    CHECK_THAT(udp.error().message(), Catch::Contains("pipe://"));
    // The factory's own refusal comes back whole.
    auto bad = ctx->add_subscriber("pipe://x?colour=red");
    CHECK(bad.error() == prizma::Errc::invalid_argument);
    CHECK(bad.error().message() == "pipe has no key 'colour'");
}

TEST_CASE("plug-in: a ready-made transport handed to the Context, next to the built-ins",
          "[unit][plugin]") {
    auto bus = std::make_shared<TestBus>();
    auto ctx = prizma::Context::create().value();  // built-ins; the pipe needs no scheme
    prizma::TransportChannel a;
    a.transport = bus->attach();
    auto* pipe = static_cast<PipeTransport*>(a.transport.get());
    pipe->events_ = {{prizma::TransportEvent::Kind::link_down, 1},
                     {prizma::TransportEvent::Kind::group_rejoined, 2}};
    auto sub = ctx.add_subscriber(std::move(a), {}, "pipe-sub");
    REQUIRE(sub.has_value());
    prizma::TransportChannel b;
    b.transport = bus->attach();
    auto pub = ctx.add_publisher(std::move(b), {}, "pipe-pub");
    REQUIRE(pub.has_value());
    REQUIRE(pub->offer(bytes_of("hello")).has_value());
    CHECK(drain(ctx, *sub, 1) == std::vector<std::string>{"hello"});
    // The transport's link and fabric events reach the application, each once.
    const auto ev = sub->transport_events();
    REQUIRE(ev.size() == 2);
    CHECK(ev[0].kind == prizma::TransportEvent::Kind::link_down);
    CHECK(ev[1].kind == prizma::TransportEvent::Kind::group_rejoined);
    CHECK(ev[1].count == 2);
    CHECK(prizma::to_string(ev[1].kind) == "group_rejoined");
    CHECK(sub->transport_events().empty());
    CHECK(pub->transport_events().empty());
    // No transport: refused with the name given.
    auto none = ctx.add_publisher(prizma::TransportChannel{}, {}, "empty");
    CHECK(none.error() == prizma::Errc::invalid_argument);
    CHECK_THAT(none.error().message(), Catch::Contains("empty"));
}

TEST_CASE("registry and URI rules", "[unit][plugin]") {
    prizma::TransportRegistry reg;
    auto f = [](const prizma::TransportRequest&)
        -> prizma::Result<prizma::TransportChannel, prizma::Error> {
        return prizma::Error(prizma::Errc::unsupported, "never");
    };
    CHECK(reg.add("x1", f).has_value());
    CHECK(reg.add("x1", f).error() == prizma::Errc::invalid_argument);  // taken
    CHECK(reg.replace("x1", f).has_value());
    CHECK(reg.add("", f).error() == prizma::Errc::invalid_argument);
    CHECK(reg.add("Bad_Scheme", f).error() == prizma::Errc::invalid_argument);
    CHECK(reg.add("y", prizma::TransportFactory{}).error() == prizma::Errc::invalid_argument);
    CHECK(reg.schemes() == std::vector<std::string>{"x1"});
    prizma::register_builtin_transports(reg);
    CHECK(reg.find("udp") != nullptr);
    CHECK(reg.find("mem") != nullptr);
    CHECK(reg.find("verbs") != nullptr);  // refuses with Errc::unsupported when not built

    auto u = prizma::ChannelUri::parse("udp://[ff15::1]:7600?iface=::1&ttl=2");
    REQUIRE(u.has_value());
    CHECK(u->scheme == "udp");
    CHECK(u->address == "[ff15::1]:7600");
    REQUIRE(u->params.size() == 2);
    CHECK(*u->find("ttl") == "2");
    CHECK(u->find("loop") == nullptr);
    CHECK(prizma::ChannelUri::parse("udp:/x").error() == prizma::Errc::invalid_argument);
    CHECK(prizma::ChannelUri::parse("udp://x?ttl=1&ttl=2").error()
          == prizma::Errc::invalid_argument);
    CHECK(prizma::ChannelUri::parse("udp://x?ttl").error() == prizma::Errc::invalid_argument);
    CHECK(prizma::IpAddress::parse("10.1.2.3") == prizma::IpAddress::v4(10, 1, 2, 3));
    CHECK(prizma::IpAddress::parse("ff15::1").version == 6);
    CHECK(prizma::IpAddress::parse("eth0").version == 0);
}

TEST_CASE("one mistake, one code: unknown keys and bad values on every scheme",
          "[unit][plugin][errors]") {
    auto ctx = prizma::Context::create().value();
    const char* unknown_key[] = {
        "udp://239.1.1.1:7600?iface=127.0.0.1&colour=red",
        "mem://bus:7500?colour=red",
        "verbs://rxe0:1/239.1.1.1:7500?colour=red",
    };
    for (const char* uri : unknown_key) {
        auto r = ctx.add_subscriber(uri);
        INFO(uri << " -> " << r.error().message());
        REQUIRE_FALSE(r.has_value());
#if PRIZMA_HAVE_VERBS
        CHECK(r.error() == prizma::Errc::invalid_argument);
        CHECK_THAT(r.error().message(), Catch::Contains("colour"));
#else
        if (std::string_view(uri).starts_with("verbs")) {
            CHECK(r.error() == prizma::Errc::unsupported);
            continue;
        }
        CHECK(r.error() == prizma::Errc::invalid_argument);
#endif
        // ...and the std::errc condition of the same meaning.
        CHECK(r.error() == std::errc::invalid_argument);
    }
    const char* bad_value[] = {
        "udp://239.1.1.1:7600?iface=127.0.0.1&ttl=999", "mem://bus:0",
        "verbs://rxe0:1/239.1.1.1:7500?rx_depth=1",     "mem://bus:7500?loss=1.5",
        "udp://239.1.1.1:7600?iface=127.0.0.1&seed=x",
    };
    for (const char* uri : bad_value) {
        auto r = ctx.add_publisher(uri);
        INFO(uri << " -> " << r.error().message());
        REQUIRE_FALSE(r.has_value());
        if (!PRIZMA_HAVE_VERBS && std::string_view(uri).starts_with("verbs")) {
            continue;
        }
        CHECK(r.error() == prizma::Errc::invalid_argument);
    }
    // Codes of the prizma category compare with their std::errc conditions.
    CHECK(std::error_code(prizma::Errc::message_too_large) == std::errc::message_size);
    CHECK(std::error_code(prizma::Errc::not_connected) == std::errc::not_connected);
    CHECK(std::error_code(prizma::Errc::back_pressured) != std::errc::invalid_argument);
    // Enumerator values are ABI: they never move.
    CHECK(static_cast<int>(prizma::Errc::back_pressured) == 1);
    CHECK(static_cast<int>(prizma::Errc::not_connected) == 2);
    CHECK(static_cast<int>(prizma::Errc::invalid_argument) == 9);
}

TEST_CASE("Context::counters() is the field-by-field sum of its channels' counters",
          "[unit][plugin][counters]") {
    auto ctx = prizma::Context::create().value();
    auto s1 = ctx.add_subscriber("mem://sum:7500?loss=0.1&seed=5").value();
    auto s2 = ctx.add_subscriber("mem://sum:7500").value();
    auto p1 = ctx.add_publisher("mem://sum:7500").value();
    auto p2 = ctx.add_publisher("mem://sum:7500").value();
    for (int i = 0; i < 300; ++i) {
        (void)p1.offer(bytes_of(label("a", i)));
        (void)p2.offer(bytes_of(label("b", i)));
        (void)ctx.poll();
    }
    (void)drain(ctx, s1, 600);
    (void)drain(ctx, s2, 600);
    const prizma::ChannelCounters total = ctx.counters();
    const prizma::ChannelCounters parts[] = {s1.counters(), s2.counters(), p1.counters(),
                                             p2.counters()};
    std::size_t nonzero = 0;
    for (const auto& f : prizma::kChannelCounterFields) {
        std::uint64_t sum = 0;
        for (const auto& c : parts) {
            sum += c.*f.member;
        }
        INFO(f.name);
        CHECK(total.*f.member == sum);
        nonzero += sum != 0 ? 1U : 0U;
    }
    CHECK(nonzero >= 15);  // a real run: most counters moved
    CHECK(total.window_full == s1.counters().window_full + s2.counters().window_full);
}

TEST_CASE("channels removed from a running Context: gone, others unaffected", "[unit][plugin]") {
    auto ctx = prizma::Context::create().value();
    auto keep = ctx.add_subscriber("mem://rm:7500").value();
    auto drop = ctx.add_subscriber("mem://rm:7500").value();
    auto pub = ctx.add_publisher("mem://rm:7500").value();
    REQUIRE(pub.offer(bytes_of("one")).has_value());
    CHECK(drain(ctx, keep, 1) == std::vector<std::string>{"one"});
    REQUIRE(ctx.remove(drop).has_value());
    CHECK_FALSE(drop.valid());
    CHECK(drop.poll(8, [](const prizma::Message&) {}) == 0);  // a reset handle is inert
    CHECK(drop.counters().sources == 0);
    CHECK(ctx.remove(drop).error() == prizma::Errc::invalid_argument);  // already gone
    REQUIRE(pub.offer(bytes_of("two")).has_value());
    CHECK(drain(ctx, keep, 1) == std::vector<std::string>{"two"});
    CHECK(ctx.counters().sources == 1);  // only `keep` is left to know the source
    // A removed publisher says goodbye: its FIN reaches the subscriber as `left`.
    REQUIRE(ctx.remove(pub).has_value());
    CHECK_FALSE(pub.valid());
    CHECK(pub.offer(bytes_of("late")).error() == prizma::Errc::closed);
    bool left = false;
    const std::int64_t deadline = prizma::Context::now_ns() + 2'000'000'000;
    while (!left && prizma::Context::now_ns() < deadline) {
        (void)ctx.poll();
        keep.poll(8,
                  [&](const prizma::Message& m) { left |= m.kind == prizma::MessageKind::left; });
    }
    CHECK(left);
    // The Context is movable: handles stay valid.
    prizma::Context moved = std::move(ctx);
    auto pub2 = moved.add_publisher("mem://rm:7500").value();
    REQUIRE(pub2.offer(bytes_of("three")).has_value());
    CHECK(drain(moved, keep, 1) == std::vector<std::string>{"three"});
}

TEST_CASE("a Context inside an outside epoll loop: wakeup_fd + prepare_wait + next_deadline",
          "[unit][plugin]") {
    auto bus = std::make_shared<TestBus>();
    auto ctx = prizma::Context::create(pipe_registry(bus)).value();
    auto sub = ctx.add_subscriber("pipe://a").value();
    // The publisher lives in another Context (another component of the process).
    auto other = prizma::Context::create(pipe_registry(bus)).value();
    auto pub = other.add_publisher("pipe://a").value();
    const int loop = ::epoll_create1(EPOLL_CLOEXEC);
    REQUIRE(loop >= 0);
    REQUIRE(ctx.wakeup_fd() >= 0);
    epoll_event ev{};
    ev.events = EPOLLIN;
    REQUIRE(::epoll_ctl(loop, EPOLL_CTL_ADD, ctx.wakeup_fd(), &ev) == 0);
    // Drain the SPM the publisher sent when it was added, until the Context may sleep.
    for (int i = 0; i < 100 && !ctx.prepare_wait(); ++i) {
        (void)ctx.poll();
        sub.poll(8, [](const prizma::Message&) {});
    }
    REQUIRE(ctx.prepare_wait());
    CHECK(::epoll_wait(loop, &ev, 1, 0) == 0);  // nothing pending: the loop would sleep
    REQUIRE(pub.offer(bytes_of("wake")).has_value());
    pub.flush();
    CHECK(::epoll_wait(loop, &ev, 1, 1000) == 1);  // the datagram woke the outside loop
    CHECK_FALSE(ctx.prepare_wait());               // and the Context says: do not sleep
    CHECK(ctx.next_deadline() > std::chrono::steady_clock::time_point{});
    CHECK(drain(ctx, sub, 1) == std::vector<std::string>{"wake"});
    (void)::close(loop);
    // mem:// can only be busy-polled: a Context with such a channel never says "sleep".
    auto busy = prizma::Context::create().value();
    auto m = busy.add_subscriber("mem://busy:7500").value();
    (void)m;
    CHECK_FALSE(busy.prepare_wait());
}

TEST_CASE("version: headers and library agree", "[unit][plugin]") {
    const prizma::Version v = prizma::version();
    CHECK(v.major == prizma::kHeaderVersion.major);
    CHECK(v.minor == prizma::kHeaderVersion.minor);
    CHECK(v.patch == prizma::kHeaderVersion.patch);
    CHECK(std::string(prizma::version_string()) == PRIZMA_VERSION_STRING);
    CHECK(std::string(prizma::version_string())
          == std::to_string(v.major) + "." + std::to_string(v.minor) + "."
                 + std::to_string(v.patch));
}

TEST_CASE("inspect_packet and packet_length read raw PGM packets off a transport",
          "[unit][plugin]") {
    auto bus = std::make_shared<TestBus>();
    auto sniffer = bus->attach();  // a raw endpoint of the user's transport, no Context
    auto ctx = prizma::Context::create(pipe_registry(bus)).value();
    auto pub = ctx.add_publisher("pipe://x").value();  // sends an SPM at once
    REQUIRE(pub.offer(bytes_of("payload")).has_value());
    pub.flush();
    std::array<prizma::RxPacket, 8> rx{};
    auto n = sniffer->poll_rx(rx);
    REQUIRE(n.has_value());
    REQUIRE(*n >= 2);
    bool saw_spm = false;
    bool saw_odata = false;
    for (std::size_t i = 0; i < *n; ++i) {
        const auto d = rx[i].data;
        const prizma::PacketSummary s = prizma::inspect_packet(d);
        REQUIRE(s.valid);
        CHECK(s.source == pub.tsi());
        CHECK(s.dport == 7600);
        CHECK_FALSE(s.upstream);
        CHECK(s.length == d.size());
        CHECK(prizma::packet_length(d) == d.size());
        saw_spm |= s.kind == prizma::PacketKind::spm;
        if (s.kind == prizma::PacketKind::odata) {
            saw_odata = true;
            CHECK(s.sqn == prizma::Sqn{0});
            // Two packets back to back: packet_length finds where the first ends.
            std::vector<std::byte> two(d.begin(), d.end());
            two.insert(two.end(), d.begin(), d.end());
            CHECK(prizma::packet_length(two) == d.size());
            // One flipped byte fails the checksum: not a valid packet.
            std::vector<std::byte> bad(d.begin(), d.end());
            bad.back() ^= std::byte{0x01};
            CHECK_FALSE(prizma::inspect_packet(bad).valid);
            CHECK_FALSE(prizma::inspect_packet(std::span(bad).first(10)).valid);
        }
    }
    sniffer->release_rx(*n);
    CHECK(saw_spm);
    CHECK(saw_odata);
}
