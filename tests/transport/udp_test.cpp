// SPDX-License-Identifier: Apache-2.0
// Real UDP sockets on 127.0.0.1 (multicast pinned to lo with IP_MULTICAST_IF, never the
// default route). The binary exits 77 (ctest: skipped) when loopback multicast is unusable.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "lib/pgm/packet.hpp"
#include "tests/support/catch.hpp"
#include "tests/support/sim.hpp"
#include "transports/udp/udp_transport.hpp"

using namespace prizma;           // NOLINT(google-build-using-namespace): test file
using namespace prizma::testing;  // NOLINT(google-build-using-namespace): test file

namespace {

std::uint16_t g_port_base = 0;
std::uint16_t next_port() {
    static std::uint16_t n = 0;
    return static_cast<std::uint16_t>(g_port_base + 2 * n++);
}

/// The test group on port `port`, sent and joined on 127.0.0.1 (never the default route).
std::string group_uri(std::uint16_t port) {
    return "udp://239.255.77.1:" + std::to_string(port) + "?iface=127.0.0.1";
}

std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

/// Polls `t` into `buf` until something arrives, for at most about a second; returns how
/// many were handed out (0: nothing came). The caller releases them.
std::size_t wait_rx(Transport& t, std::span<RxPacket> buf) {
    for (int i = 0; i < 1000; ++i) {
        auto n = t.poll_rx(buf);
        REQUIRE(n.has_value());
        if (*n != 0) {
            return *n;
        }
        ::usleep(1000);
    }
    return 0;
}

/// Reads and releases until a poll finds nothing.
void drain_rx(Transport& t, std::span<RxPacket> buf) {
    for (;;) {
        auto k = t.poll_rx(buf);
        REQUIRE(k.has_value());
        if (*k == 0) {
            return;
        }
        t.release_rx(*k);
    }
}

/// Receives exactly the packets of `want` (byte ranges), in order, byte for byte.
template <typename Bodies>
void expect_rx(Transport& t, std::span<RxPacket> buf, const Bodies& want) {
    std::size_t seen = 0;
    while (seen < want.size()) {
        const std::size_t n = wait_rx(t, buf);
        REQUIRE(n != 0);
        for (std::size_t i = 0; i < n; ++i) {
            REQUIRE(seen + i < want.size());
            INFO("packet " << seen + i);
            CHECK(std::equal(buf[i].data.begin(), buf[i].data.end(), want[seen + i].begin(),
                             want[seen + i].end()));
        }
        seen += n;
        t.release_rx(n);
    }
}

/// An ODATA packet (header and payload; no checksum: these tests stop at the transport) whose
/// payload bytes are a pattern of its sqn.
std::vector<std::byte> odata_bytes(std::uint32_t sqn, std::size_t payload) {
    pgm::PacketSpec s;
    s.type = pgm::PacketType::odata;
    s.tsdu_length = static_cast<std::uint16_t>(payload);
    s.sqn = pgm::Sqn{sqn};
    std::vector<std::byte> b(pgm::encoded_size(s) + payload);
    REQUIRE(pgm::encode(b, s) == pgm::encoded_size(s));
    for (std::size_t j = pgm::encoded_size(s); j < b.size(); ++j) {
        b[j] = static_cast<std::byte>(sqn * 7 + j);
    }
    return b;
}

/// A plain UDP socket sending to 239.255.77.1:port out of 127.0.0.1: datagrams no transport
/// made (floods, oversize ones).
class GroupSender {
public:
    explicit GroupSender(std::uint16_t port) : fd_(::socket(AF_INET, SOCK_DGRAM, 0)) {
        REQUIRE(fd_ >= 0);
        in_addr lo{};
        lo.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof lo) == 0);
        to_.sin_family = AF_INET;
        to_.sin_port = htons(port);
        REQUIRE(::inet_pton(AF_INET, "239.255.77.1", &to_.sin_addr) == 1);
    }
    ~GroupSender() { ::close(fd_); }
    GroupSender(const GroupSender&) = delete;
    GroupSender& operator=(const GroupSender&) = delete;
    GroupSender(GroupSender&&) = delete;
    GroupSender& operator=(GroupSender&&) = delete;
    /// The bytes sent (-1: error).
    ssize_t send(std::span<const std::uint8_t> b) const {
        return ::sendto(fd_, b.data(), b.size(), 0, reinterpret_cast<const sockaddr*>(&to_),
                        sizeof to_);
    }

private:
    int fd_;
    sockaddr_in to_{};
};

/// ODATA packets with the given payload sizes (sqn 0, 1, ...), and the TxPackets that send
/// them downstream.
struct OdataBurst {
    std::vector<std::vector<std::byte>> bodies;
    std::vector<TxPacket> packets;
};
OdataBurst odata_burst(const std::vector<std::size_t>& payloads) {
    OdataBurst b;
    for (std::size_t i = 0; i < payloads.size(); ++i) {
        b.bodies.push_back(odata_bytes(static_cast<std::uint32_t>(i), payloads[i]));
    }
    for (const auto& body : b.bodies) {
        b.packets.push_back(TxPacket{body, {}, Route::downstream, {}});
    }
    return b;
}

std::unique_ptr<udp::UdpTransport> open(const std::string& uri, bool source) {
    auto cfg = udp::parse_uri(uri);
    INFO(cfg.error().message());
    REQUIRE(cfg.has_value());
    cfg->bind_unicast = source;
    cfg->frame_length = &pgm::wire_length;  // what the Context gives a udp:// channel
    auto t = udp::UdpTransport::create(*cfg);
    INFO(t.error().message());
    REQUIRE(t.has_value());
    return std::move(*t);
}

struct Node {
    std::unique_ptr<udp::UdpTransport> udp;
    std::unique_ptr<memory::LossyTransport> lossy;
    std::unique_ptr<pubsub::Session> session;
    std::vector<std::vector<std::byte>> got;
    std::uint64_t losses = 0;
};

Node make_node(const std::string& uri, bool source, std::uint64_t seed, double loss = 0.0) {
    Node n;
    n.udp = open(uri, source);
    Transport* t = n.udp.get();
    if (loss > 0) {
        memory::LossyTransport::Config lc;
        lc.seed = seed;
        lc.drop = loss;
        n.lossy = std::make_unique<memory::LossyTransport>(*n.udp, lc);
        t = n.lossy.get();
    }
    pubsub::SessionConfig sc;
    if (source) {
        auto c = source_config();
        c.nla = pgm::Nla::ipv4(127, 0, 0, 1);
        c.group = pgm::Nla::ipv4(239, 255, 77, 1);
        c.tsi.sport = static_cast<std::uint16_t>(1000 + seed);
        c.txw_sqns = 1U << 16U;  // the whole run stays repairable
        sc.source = c;
    } else {
        auto c = receiver_config(seed);
        c.group = pgm::Nla::ipv4(239, 255, 77, 1);
        c.rxw_sqns = 1 << 14;
        sc.receiver = c;
    }
    auto s = pubsub::Session::create(*t, sc);
    REQUIRE(s.has_value());
    n.session = std::move(*s);
    return n;
}

void drive(std::vector<Node*> nodes, std::int64_t now) {
    for (auto* n : nodes) {
        (void)n->session->do_work(now);
        if (auto* r = n->session->receiver()) {
            (void)r->poll(1024, [&](const protocol::Event& e) {
                if (e.kind == protocol::Event::Kind::data) {
                    n->got.emplace_back(e.payload.begin(), e.payload.end());
                } else if (e.kind == protocol::Event::Kind::loss) {
                    ++n->losses;
                }
            });
        }
    }
}

}  // namespace

TEST_CASE("udp:// URIs are validated and errors name the value", "[udp][uri]") {
    auto ok = udp::parse_uri("udp://239.1.2.3:7600?iface=127.0.0.1&ttl=2&loop=0&gso=0");
    REQUIRE(ok.has_value());
    CHECK(ok->group == "239.1.2.3");
    CHECK(ok->port == 7600);
    CHECK(ok->ttl == 2);
    CHECK_FALSE(ok->loop);
    CHECK_FALSE(ok->gso);
    CHECK(ok->gro == udp::GroMode::adaptive);  // the default
    for (const auto& [v, mode] : {std::pair{"0", udp::GroMode::off},
                                  {"1", udp::GroMode::on},
                                  {"auto", udp::GroMode::adaptive}}) {
        auto g = udp::parse_uri(std::string("udp://239.1.2.3:7600?iface=127.0.0.1&gro=") + v);
        REQUIRE(g.has_value());
        CHECK(g->gro == mode);
    }
    auto host_only = udp::parse_uri("udp://239.1.2.3:7600?iface=127.0.0.1&ttl=0");
    REQUIRE(host_only.has_value());
    CHECK(host_only->ttl == 0);
    auto v6 = udp::parse_uri("udp://[ff15::1]:7600?iface=::1");
    REQUIRE(v6.has_value());
    CHECK(v6->group == "ff15::1");
    const std::vector<std::pair<std::string, std::string>> bad{
        {"tcp://1.2.3.4:5", "not a udp://"},         {"udp://239.1.2.3", "missing :PORT"},
        {"udp://239.1.2.300:7600", "239.1.2.300"},   {"udp://239.1.2.3:70000", "70000"},
        {"udp://239.1.2.3:7600?iface=eth0", "eth0"}, {"udp://239.1.2.3:7600?colour=red", "colour"},
        {"udp://239.1.2.3:7600?ttl=256", "256"},     {"udp://239.1.2.3:7600?gro=2", "'2'"},
    };
    for (const auto& [uri, needle] : bad) {
        auto r = udp::parse_uri(uri);
        INFO(uri << " -> " << r.error().message());
        CHECK_FALSE(r.has_value());
        CHECK(r.error() == prizma::Errc::invalid_argument);  // the same code as verbs:// and mem://
        CHECK(r.error().message().find(needle) != std::string::npos);
    }
    auto withx = udp::parse_uri("udp://239.1.2.3:7600?iface=127.0.0.1&dport=7501&tos=184");
    REQUIRE(withx.has_value());
    CHECK(withx->dport == 7501);
    CHECK(withx->tos == 184);
}

TEST_CASE("udp transport refuses multicast without an interface and unknown interfaces", "[udp]") {
    udp::UdpConfig c;
    c.group = "239.255.77.1";
    c.port = next_port();
    auto no_iface = udp::UdpTransport::create(c);
    REQUIRE_FALSE(no_iface.has_value());
    CHECK(no_iface.error().message().find("iface") != std::string::npos);
    c.iface = "192.0.2.77";  // TEST-NET-1: no local interface has it
    auto unknown = udp::UdpTransport::create(c);
    REQUIRE_FALSE(unknown.has_value());
    CHECK(unknown.error().message().find("192.0.2.77") != std::string::npos);
}

TEST_CASE("publish over UDP multicast on lo: two subscribers, one losing 5%, all delivered",
          "[udp][multicast]") {
    const std::uint16_t port = next_port();
    const std::string uri = group_uri(port);
    Node rx1 = make_node(uri, false, 11);
    Node rx2 = make_node(uri, false, 12, 0.05);
    Node pub = make_node(uri, true, 7);
    std::vector<Node*> all{&pub, &rx1, &rx2};
    const std::int64_t t0 = now_ns();
    pub.session->source()->open(t0, *pub.session);
    pub.session->flush();
    constexpr std::uint64_t kMessages = 20000;
    std::uint64_t sent = 0;
    const std::int64_t deadline = t0 + 20'000'000'000LL;
    while (now_ns() < deadline
           && (rx1.got.size() < kMessages || rx2.got.size() + rx2.losses < kMessages)) {
        const std::int64_t t = now_ns();
        for (int k = 0; k < 32 && sent < kMessages; ++k) {
            if (!pub.session->source()->send(make_message(sent, 100), t, *pub.session)) {
                break;
            }
            ++sent;
        }
        drive(all, t);
    }
    const auto& c2 = rx2.session->receiver()->counters();
    const auto& sc = pub.session->source()->counters();
    INFO("rx2 got " << rx2.got.size() << " repaired " << c2.repaired << " naks " << c2.nak_sent
                    << " ncf " << c2.ncf_received << " rdata " << c2.rdata_received << " spm "
                    << c2.spm_received << " missing-lost " << c2.lost_sqns << " outside "
                    << c2.outside_window << "; src naks " << sc.nak_received << " invalid "
                    << sc.nak_invalid << " rdata " << sc.rdata_sent << "; dropped "
                    << rx2.lossy->stats().dropped << " malformed "
                    << rx2.session->counters().malformed_total() << " sess-src malformed "
                    << pub.session->counters().malformed_total() << " unknown-up "
                    << pub.session->counters().unknown_upstream);
    REQUIRE(rx1.got.size() == kMessages);
    REQUIRE(rx2.got.size() == kMessages);
    for (std::uint64_t i = 0; i < kMessages; ++i) {
        REQUIRE(rx1.got[i] == make_message(i, 100));
        REQUIRE(rx2.got[i] == make_message(i, 100));
    }
    CHECK(rx2.losses == 0);
    CHECK(rx2.session->receiver()->counters().repaired > 100);
    CHECK(pub.session->source()->counters().nak_received > 0);  // unicast NAKs reached the source
    CHECK(pub.session->source()->counters().rdata_sent > 100);
    if (pub.udp->gso_enabled()) {
        CHECK(pub.udp->counters().tx_gso_sends > 0);  // same-size runs went out as GSO sends
    }
    UNSCOPED_INFO("gso " << pub.udp->gso_enabled() << " gro " << rx1.udp->gro_enabled());
}

TEST_CASE("garbage to the data port is counted and dropped; delivery goes on", "[udp][malformed]") {
    const std::uint16_t port = next_port();
    const std::string uri = group_uri(port);
    Node rx = make_node(uri, false, 21);
    Node pub = make_node(uri, true, 8);
    std::vector<Node*> all{&pub, &rx};
    pub.session->source()->open(now_ns(), *pub.session);
    pub.session->flush();
    const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::vector<std::uint8_t> junk(300);
    for (std::size_t i = 0; i < junk.size(); ++i) {
        junk[i] = static_cast<std::uint8_t>(i * 37);
    }
    for (int i = 0; i < 50; ++i) {
        (void)::sendto(fd, junk.data(), static_cast<std::size_t>(i + 1) * 5, 0,
                       reinterpret_cast<const sockaddr*>(&to), sizeof to);
    }
    ::close(fd);
    const std::int64_t deadline = now_ns() + 5'000'000'000LL;
    std::uint64_t sent = 0;
    while (now_ns() < deadline && rx.got.size() < 100) {
        const std::int64_t t = now_ns();
        if (sent < 100 && pub.session->source()->send(make_message(sent, 64), t, *pub.session)) {
            ++sent;
        }
        drive(all, t);
    }
    CHECK(rx.got.size() == 100);
    CHECK(pub.session->counters().malformed_total() >= 1);  // the source's unicast socket got them
}

TEST_CASE("a full socket buffer shows as rx_kernel_drops; named counters match the struct",
          "[udp][counters]") {
    const std::uint16_t port = next_port();
    // The count is read from the socket, so it holds however the datagrams were read (with
    // gro=0 a quiet socket's first read is a recvfrom(), which carries no control message).
    const std::string gro = GENERATE(as<std::string>{}, "", "&gro=0");
    INFO("extra URI keys: " << gro);
    // A small buffer (root may force it below rmem_default; others get the kernel's minimum).
    auto rx = open(group_uri(port) + "&rcvbuf=65536" + gro, false);
    const GroupSender sender(port);
    const std::vector<std::uint8_t> payload(1000, 0x5a);
    auto blast = [&](int n) {
        for (int i = 0; i < n; ++i) {
            (void)sender.send(payload);
        }
    };
    std::array<RxPacket, 64> got{};
    auto drain = [&] {
        std::uint64_t n = 0;
        for (int idle = 0; idle < 50;) {
            auto k = rx->poll_rx(got);
            REQUIRE(k.has_value());
            if (*k == 0) {
                ++idle;
                ::usleep(1000);
                continue;
            }
            n += *k;
            rx->release_rx(*k);
        }
        return n;
    };
    CHECK(rx->counters().rx_queued_bytes == 0);
    blast(2000);  // never read meanwhile: far more than 64 KiB
    // The full queue shows as rx_queued_bytes: every byte of it, plus the kernel's
    // per-datagram overhead, up to about the buffer's size.
    const std::uint64_t queued = rx->counters().rx_queued_bytes;
    CHECK(queued >= 1000);
    CHECK(queued <= 2 * static_cast<std::uint64_t>(rx->counters().rcvbuf_effective) + 65536);
    const std::uint64_t first = drain();
    CHECK(rx->counters().rx_queued_bytes == 0);
    blast(1);  // a datagram after the drops, read by recvfrom() with gro=0
    const std::uint64_t second = drain();
    CHECK(first > 0);
    CHECK(first < 2000);
    CHECK(second == 1);
    const auto& c = rx->counters();
    CHECK(c.rx_kernel_drops == 2000 - first);
    std::array<NamedCounter, 32> named{};
    const std::size_t n = rx->named_counters(named);
    REQUIRE(n <= named.size());
    auto value = [&](std::string_view name) {
        for (std::size_t i = 0; i < n; ++i) {
            if (named[i].name == name) {
                return named[i].value;
            }
        }
        FAIL("no counter " << name);
        return std::uint64_t{0};
    };
    CHECK(value("rx_kernel_drops") == c.rx_kernel_drops);
    CHECK(value("rx_datagrams") == c.rx_datagrams);
    CHECK(value("rx_queued_bytes") == c.rx_queued_bytes);
    CHECK(value("rcvbuf_bytes") == static_cast<std::uint64_t>(c.rcvbuf_effective));
    CHECK(c.rcvbuf_effective > 0);
}

TEST_CASE("busy_poll=US sets SO_BUSY_POLL on the receive sockets and reports what was granted",
          "[udp][busy_poll]") {
    const std::string base = group_uri(next_port());
    auto off = open(base, false);
    CHECK(off->counters().busy_poll_us == 0);
    auto on = open(base + "&busy_poll=50", false);
    // Granted as asked when privileged or within net.core.busy_read; refused otherwise (0).
    const bool privileged = ::geteuid() == 0;
    if (privileged) {
        CHECK(on->counters().busy_poll_us == 50);
    } else {
        CHECK((on->counters().busy_poll_us == 0 || on->counters().busy_poll_us == 50));
    }
    // A busy-polling socket still delivers: one datagram to the group arrives.
    auto tx = open(base, true);
    std::array<std::byte, 32> b{};
    const TxPacket p{b, {}, Route::downstream, {}};
    REQUIRE(tx->send_batch(std::span<const TxPacket>(&p, 1)).has_value());
    std::array<RxPacket, 4> rx{};
    CHECK(wait_rx(*on, rx) == 1);
    CHECK(rx[0].data.size() == 32);
}

TEST_CASE(
    "the wakeup fd watches the sockets only once armed, and arming sees undelivered "
    "GRO segments",
    "[udp][wakeup]") {
    const std::string base = group_uri(next_port());
    auto rx = open(base + "&gro=1", false);
    auto tx = open(base, true);
    REQUIRE(rx->wakeup_fd() >= 0);
    auto readable = [&](int timeout_ms) {
        pollfd p{rx->wakeup_fd(), POLLIN, 0};
        return ::poll(&p, 1, timeout_ms) == 1;
    };
    // PGM packets: a quiet socket's first read (recvfrom) finds the segments of a GRO
    // datagram by the packets' own lengths.
    const OdataBurst burst = odata_burst(std::vector<std::size_t>(8, 76));
    auto send = [&](std::size_t n) {
        auto r = tx->send_batch(std::span<const TxPacket>(burst.packets.data(), n));
        REQUIRE(r.has_value());
        REQUIRE(*r == n);
    };
    // Never armed (a busy-polling owner): the sockets are not in the epoll set, so a
    // datagram does not make the fd readable (and costs the sender no epoll callback).
    send(1);
    CHECK_FALSE(readable(20));
    // Armed: level-triggered, so the datagram already queued wakes a wait at once.
    auto armed = rx->arm_wakeup();
    REQUIRE(armed.has_value());
    CHECK(*armed);
    CHECK(readable(1000));
    std::array<RxPacket, 2> two{};
    auto k = rx->poll_rx(two);
    REQUIRE(k.has_value());
    REQUIRE(*k == 1);
    rx->release_rx(*k);
    armed = rx->arm_wakeup();
    REQUIRE(armed.has_value());
    CHECK(*armed);
    CHECK_FALSE(readable(0));
    // One GSO send of 8 -> with GRO one datagram of 8 segments; 2 handed out, 6 held in
    // user space where epoll cannot see them: arming must say "do not sleep".
    send(8);
    REQUIRE(readable(1000));
    k = rx->poll_rx(two);
    REQUIRE(k.has_value());
    REQUIRE(*k == 2);
    rx->release_rx(*k);
    if (rx->gro_enabled() && tx->gso_enabled()) {
        CHECK_FALSE(readable(0));  // the kernel queue is empty...
        armed = rx->arm_wakeup();
        REQUIRE(armed.has_value());
        CHECK_FALSE(*armed);  // ...but 6 segments wait
    }
    std::size_t got = 2;
    while (got < 8) {
        const std::size_t n = wait_rx(*rx, two);
        if (n == 0) {
            break;
        }
        got += n;
        rx->release_rx(n);
    }
    CHECK(got == 8);
    armed = rx->arm_wakeup();
    REQUIRE(armed.has_value());
    CHECK(*armed);
}

TEST_CASE("segments handed out but not released come back first, in order", "[udp][gro]") {
    const std::string base = group_uri(next_port());
    auto rx = open(base + "&gro=1", false);
    auto tx = open(base, true);
    if (!rx->gro_enabled() || !tx->gso_enabled()) {
        WARN("no UDP GSO/GRO on this kernel: nothing is held back to test");
        return;
    }
    std::array<std::array<std::byte, 100>, 8> bodies{};
    std::array<TxPacket, 8> burst{};
    for (std::size_t i = 0; i < burst.size(); ++i) {
        bodies[i][0] = static_cast<std::byte>(i);
        burst[i] = TxPacket{bodies[i], {}, Route::downstream, {}};
    }
    REQUIRE(tx->send_batch(burst).value() == 8);
    std::array<RxPacket, 4> four{};
    REQUIRE(wait_rx(*rx, four) >= 2);
    CHECK(four[0].data[0] == std::byte{0});
    CHECK(four[1].data[0] == std::byte{1});
    rx->release_rx(1);  // only the first was consumed
    std::vector<int> order{0};
    std::array<RxPacket, 16> more{};
    while (order.size() < 8) {
        const std::size_t n = wait_rx(*rx, more);
        if (n == 0) {
            break;
        }
        for (std::size_t j = 0; j < n; ++j) {
            order.push_back(std::to_integer<int>(more[j].data[0]));
        }
        rx->release_rx(n);
    }
    CHECK(order == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
}

int prizma_probe() {
    // Probe: a multicast datagram to ourselves on 127.0.0.1.
    g_port_base = static_cast<std::uint16_t>(20000 + (::getpid() % 2000) * 10);
    udp::UdpConfig c;
    c.group = "239.255.77.2";
    c.port = g_port_base + 1000;
    c.iface = "127.0.0.1";
    auto t = udp::UdpTransport::create(c);
    if (!t) {
        std::fprintf(stderr, "SKIP: UDP multicast on 127.0.0.1 unavailable: %s\n",
                     t.error().message().c_str());
        return 1;
    }
    std::array<std::byte, 16> b{};
    const TxPacket p{b, {}, Route::downstream, {}};
    (void)(*t)->send_batch(std::span<const TxPacket>(&p, 1));
    std::array<RxPacket, 4> rx{};
    bool heard = false;
    for (int i = 0; i < 1000 && !heard; ++i) {
        auto n = (*t)->poll_rx(rx);
        heard = n.has_value() && *n > 0;
        if (heard) {
            (*t)->release_rx(*n);
        }
        ::usleep(1000);
    }
    if (!heard) {
        std::fprintf(stderr, "SKIP: multicast loopback on 127.0.0.1 delivers nothing here\n");
        return 1;
    }
    return 0;
}

TEST_CASE(
    "gro=0: the first datagram after a quiet poll comes by recvfrom, address and bytes "
    "intact; a burst after it by recvmmsg",
    "[udp][latency]") {
    const std::uint16_t port = next_port();
    const std::string base = group_uri(port);
    auto rx = open(base + "&gro=0", false);
    auto tx = open(base, true);  // sends from 127.0.0.1:port (its unicast socket)
    REQUIRE_FALSE(rx->gro_enabled());
    std::array<std::array<std::byte, 100>, 8> bodies{};
    std::array<TxPacket, 8> burst{};
    for (std::size_t i = 0; i < burst.size(); ++i) {
        for (std::size_t j = 0; j < bodies[i].size(); ++j) {
            bodies[i][j] = static_cast<std::byte>(i * 31 + j);
        }
        burst[i] = TxPacket{bodies[i], {}, Route::downstream, {}};
    }
    std::array<RxPacket, 16> got{};
    auto k = rx->poll_rx(got);  // nothing yet: the socket is now quiet
    REQUIRE(k.has_value());
    REQUIRE(*k == 0);
    REQUIRE(tx->send_batch(std::span<const TxPacket>(burst.data(), 1)).value() == 1);
    std::size_t n = wait_rx(*rx, got);
    REQUIRE(n == 1);
    CHECK(rx->counters().rx_single_reads == 1);
    CHECK(std::equal(got[0].data.begin(), got[0].data.end(), bodies[0].begin(), bodies[0].end()));
    CHECK(got[0].from == tx->local_endpoint());  // 127.0.0.1:port, as recvmmsg gives it
    rx->release_rx(n);
    // Eight more at once (one GSO send, split by the kernel for a socket without UDP_GRO):
    // the socket is busy now, so they come in batches, all of them, in order.
    while (true) {  // let the socket go quiet again first
        k = rx->poll_rx(got);
        REQUIRE(k.has_value());
        if (*k == 0) {
            break;
        }
        rx->release_rx(*k);
    }
    const std::uint64_t singles = rx->counters().rx_single_reads;
    REQUIRE(tx->send_batch(burst).value() == burst.size());
    std::size_t seen = 0;
    while (seen < burst.size()) {
        n = wait_rx(*rx, got);
        REQUIRE(n != 0);
        for (std::size_t i = 0; i < n; ++i) {
            REQUIRE(seen + i < bodies.size());
            CHECK(std::equal(got[i].data.begin(), got[i].data.end(), bodies[seen + i].begin(),
                             bodies[seen + i].end()));
            CHECK(got[i].from == tx->local_endpoint());
        }
        seen += n;
        rx->release_rx(n);
    }
    CHECK(seen == burst.size());
    // One single read opened the burst; the rest needed far fewer calls than datagrams.
    CHECK(rx->counters().rx_single_reads == singles + 1);
    CHECK(rx->counters().rx_gro_segments == 0);
    CHECK(rx->counters().rx_datagrams == 1 + burst.size());

    // A sleep (arm_wakeup) after a read that found data, with no empty read in between (the
    // Context skips reads epoll says are empty): the datagram that wakes it is read alone.
    REQUIRE(tx->send_batch(std::span<const TxPacket>(burst.data(), 1)).value() == 1);
    n = wait_rx(*rx, got);
    REQUIRE(n == 1);
    rx->release_rx(n);
    const std::uint64_t singles2 = rx->counters().rx_single_reads;
    REQUIRE(rx->arm_wakeup().has_value());
    REQUIRE(tx->send_batch(std::span<const TxPacket>(burst.data(), 1)).value() == 1);
    n = wait_rx(*rx, got);
    REQUIRE(n == 1);
    rx->release_rx(n);
    CHECK(rx->counters().rx_single_reads == singles2 + 1);
}

TEST_CASE(
    "pieces that lie back to back in memory go out merged, and each packet arrives exact; "
    "a gap in memory ends the merge",
    "[udp][gso]") {
    const std::uint16_t port = next_port();
    const std::string base = group_uri(port);
    auto rx = open(base + "&gro=0", false);  // every datagram on its own, as the kernel cut it
    auto tx = open(base, true);
    // Eight 100-byte packets in one buffer, each as a 24-byte header piece and a 76-byte
    // payload piece (the payload starts where its header ends), with 7 spare bytes between
    // the fourth and fifth packets; the last packet is 60 bytes.
    constexpr std::size_t kSize = 100;
    std::vector<std::byte> mem(8 * kSize + 7);
    for (std::size_t j = 0; j < mem.size(); ++j) {
        mem[j] = static_cast<std::byte>(j * 7 + j / 256);
    }
    std::vector<TxPacket> burst;
    std::vector<std::span<const std::byte>> want;
    std::size_t off = 0;
    for (std::size_t i = 0; i < 8; ++i) {
        off += i == 4 ? 7 : 0;
        const std::size_t len = i == 7 ? 60 : kSize;
        const std::span<const std::byte> whole(mem.data() + off, len);
        burst.push_back(TxPacket{whole.first(24), whole.subspan(24), Route::downstream, {}});
        want.push_back(whole);
        off += len;
    }
    REQUIRE(tx->send_batch(burst).value() == burst.size());
    std::array<RxPacket, 16> got{};
    expect_rx(*rx, got, want);
    if (tx->gso_enabled()) {
        // One GSO send; its 16 pieces went to the kernel as 2 buffers, cut at the gap.
        CHECK(tx->counters().tx_gso_sends == 1);
        CHECK(tx->counters().tx_iovecs == 2);
    } else {
        CHECK(tx->counters().tx_iovecs == want.size());  // each header joined its payload
    }
}

TEST_CASE(
    "GRO on: a quiet socket's first read is recvfrom() too, and a merged GSO burst is "
    "split at the PGM packets' own lengths",
    "[udp][latency][gro]") {
    const std::string base = group_uri(next_port());
    auto rx = open(base + "&gro=1", false);
    auto tx = open(base, true);
    if (!rx->gro_enabled() || !tx->gso_enabled()) {
        WARN("no UDP GSO/GRO on this kernel: no merged datagrams to split");
        return;
    }
    std::array<RxPacket, 16> got{};
    auto quiet = [&] {
        drain_rx(*rx, got);
    };
    // Seven ODATA of 100 bytes and a shorter eighth: one GSO send, one merged datagram.
    const OdataBurst burst = odata_burst({76, 76, 76, 76, 76, 76, 76, 30});
    const std::vector<std::vector<std::byte>>& bodies = burst.bodies;
    quiet();
    REQUIRE(tx->send_batch(burst.packets).value() == bodies.size());
    const std::size_t n = wait_rx(*rx, got);
    CHECK(rx->counters().rx_single_reads == 1);
    CHECK(rx->counters().rx_datagrams == 1);  // one read, one (merged) datagram
    REQUIRE(n == bodies.size());
    for (std::size_t i = 0; i < n; ++i) {
        INFO("segment " << i);
        CHECK(
            std::equal(got[i].data.begin(), got[i].data.end(), bodies[i].begin(), bodies[i].end()));
        CHECK(got[i].from == tx->local_endpoint());
    }
    CHECK(rx->counters().rx_gro_segments == bodies.size() - 1);
    rx->release_rx(n);
    // Bytes that are no PGM packets, merged the same way, cannot be split: they come out
    // as the one datagram the kernel gave (for parse() to refuse), nothing lost or invented.
    std::array<std::array<std::byte, 100>, 4> junk{};
    std::array<TxPacket, 4> jb{};
    for (std::size_t i = 0; i < jb.size(); ++i) {
        junk[i].fill(std::byte{0xee});
        jb[i] = TxPacket{junk[i], {}, Route::downstream, {}};
    }
    quiet();
    REQUIRE(tx->send_batch(jb).value() == jb.size());
    REQUIRE(wait_rx(*rx, got) == 1);
    CHECK(got[0].data.size() == 400);
    rx->release_rx(1);
    CHECK(rx->counters().rx_single_reads == 2);
    // A valid packet merged with junk of its own size (or after more valid ones): split only
    // when every piece is a packet, so it comes up whole, never as a packet plus junk.
    const OdataBurst two = odata_burst({76, 76});
    for (const std::size_t good : {1U, 2U}) {
        INFO(good << " valid packets, then junk");
        std::vector<TxPacket> mix(two.packets.begin(),
                                  two.packets.begin() + static_cast<std::ptrdiff_t>(good));
        mix.push_back(jb[0]);
        const std::uint64_t segments = rx->counters().rx_gro_segments;
        quiet();
        REQUIRE(tx->send_batch(mix).value() == mix.size());
        REQUIRE(wait_rx(*rx, got) == 1);
        CHECK(got[0].data.size() == 100 * mix.size());
        CHECK(std::equal(two.bodies[0].begin(), two.bodies[0].end(), got[0].data.begin()));
        rx->release_rx(1);
        CHECK(rx->counters().rx_gro_segments == segments);
    }
}

TEST_CASE(
    "gro=auto: UDP_GRO starts off, a burst switches it on, a long run of lone datagrams "
    "switches it off, and every packet arrives exact across both switches",
    "[udp][gro]") {
    const std::string base = group_uri(next_port());
    auto rx = open(base, false);  // gro=auto is the default
    auto tx = open(base, true);
    if (!rx->gro_enabled() || !tx->gso_enabled()) {
        WARN("no UDP GSO/GRO on this kernel: nothing to switch");
        return;
    }
    std::array<RxPacket, 64> got{};
    auto quiet = [&] {
        drain_rx(*rx, got);
    };
    // Same-host delivery may be finished by the kernel's softirq thread after send returns:
    // waits until more than `bytes` are queued (true, or false after 5 s)...
    auto queued_over = [&](std::uint64_t bytes) {
        for (int i = 0; i < 5000; ++i) {
            if (rx->counters().rx_queued_bytes > bytes) {
                return true;
            }
            ::usleep(1000);
        }
        return false;
    };
    // ...or until something is queued and stays the same for 2 ms.
    auto settled = [&] {
        std::uint64_t last = 0;
        for (int i = 0, same = 0; i < 5000 && same < 2; ++i) {
            const std::uint64_t now = rx->counters().rx_queued_bytes;
            same = now != 0 && now == last ? same + 1 : 0;
            last = now;
            ::usleep(1000);
        }
        return last != 0;
    };
    auto expect = [&](const std::vector<std::vector<std::byte>>& want) {
        expect_rx(*rx, got, want);
    };
    CHECK(rx->counters().rx_gro_active == 0);
    // A GSO burst of 16 reaches a socket without GRO cut into 16 datagrams: a batch read
    // of at least kGroOnBatch of them switches GRO on.
    const OdataBurst b16 = odata_burst(std::vector<std::size_t>(16, 76));
    quiet();
    REQUIRE(tx->send_batch(b16.packets).value() == 16);
    REQUIRE(settled());  // all 16 queued: one batch read takes at least kGroOnBatch
    expect(b16.bodies);
    CHECK(rx->counters().rx_gro_segments == 0);  // none merged: GRO was off when they came
    CHECK(rx->counters().rx_gro_active == 1);
    CHECK(rx->counters().rx_gro_switches == 1);
    // Now a burst comes merged, and a merged read is no lone datagram.
    const OdataBurst b8 = odata_burst(std::vector<std::size_t>(8, 76));
    quiet();
    REQUIRE(tx->send_batch(b8.packets).value() == 8);
    expect(b8.bodies);
    CHECK(rx->counters().rx_gro_segments == 7);
    // One lone datagram short of the limit: still on.
    const OdataBurst one = odata_burst({40});
    std::uint64_t lone_bytes = 0;  // the most one queued lone datagram was seen to hold
    for (std::uint32_t i = 0; i + 1 < udp::UdpTransport::kGroOffReads; ++i) {
        REQUIRE(tx->send_batch(one.packets).value() == 1);
        REQUIRE(queued_over(0));
        lone_bytes = std::max(lone_bytes, rx->counters().rx_queued_bytes);
        expect(one.bodies);
        quiet();
    }
    CHECK(rx->counters().rx_gro_active == 1);
    // The last lone one, and behind it a burst merged while GRO was still on: the lone
    // datagram's read (recvfrom, one datagram) switches GRO off, so the merged one is read
    // without its segment size, and must still be cut at the packets' own lengths.
    REQUIRE(tx->send_batch(one.packets).value() == 1);
    REQUIRE(tx->send_batch(b8.packets).value() == 8);
    REQUIRE(queued_over(lone_bytes));  // both are queued before the first read
    std::vector<std::vector<std::byte>> all = one.bodies;
    all.insert(all.end(), b8.bodies.begin(), b8.bodies.end());
    expect(all);
    CHECK(rx->counters().rx_gro_active == 0);
    CHECK(rx->counters().rx_gro_switches == 2);
    CHECK(rx->counters().rx_gro_segments == 14);
    CHECK(rx->counters().rx_truncated == 0);
    // gro=1 never switches, however many lone datagrams come; gro=0 never has it.
    auto always = open(group_uri(next_port()) + "&gro=1", false);
    CHECK(always->counters().rx_gro_active == 1);
    auto never = open(group_uri(next_port()) + "&gro=0", false);
    CHECK_FALSE(never->gro_enabled());
    CHECK(never->counters().rx_gro_active == 0);
}

TEST_CASE(
    "gro=auto with a read batch under kGroOnBatch: a batch read that fills the batch is a "
    "burst, a one-datagram read never",
    "[udp][gro]") {
    const std::string base = group_uri(next_port());
    auto cfg = udp::parse_uri(base);
    REQUIRE(cfg.has_value());
    cfg->frame_length = &pgm::wire_length;
    // No read can bring kGroOnBatch datagrams; with a batch of 1 no read is a batch read.
    const std::size_t batch = GENERATE(std::size_t{4}, std::size_t{1});
    INFO("batch " << batch);
    cfg->batch = batch;
    static_assert(udp::UdpTransport::kGroOnBatch > 4);
    auto made = udp::UdpTransport::create(*cfg);
    INFO(made.error().message());
    REQUIRE(made.has_value());
    auto& rx = *made;
    auto tx = open(base, true);
    if (!rx->gro_enabled() || !tx->gso_enabled()) {
        WARN("no UDP GSO/GRO on this kernel: nothing to switch");
        return;
    }
    std::array<RxPacket, 4> got{};
    // Lone datagrams, each read by the one-datagram read after an empty poll: no burst.
    const OdataBurst one = odata_burst({40});
    for (int i = 0; i < 3; ++i) {
        drain_rx(*rx, got);
        REQUIRE(tx->send_batch(one.packets).value() == 1);
        REQUIRE(wait_rx(*rx, got) == 1);
        rx->release_rx(1);
    }
    CHECK(rx->counters().rx_gro_active == 0);
    // A GSO burst of 16 comes cut into 16 datagrams: after the first, a batch read fills all
    // four slots, and that switches GRO on. A one-slot reader never sees a burst.
    const OdataBurst b16 = odata_burst(std::vector<std::size_t>(16, 76));
    REQUIRE(tx->send_batch(b16.packets).value() == 16);
    expect_rx(*rx, got, b16.bodies);
    CHECK(rx->counters().rx_gro_active == (batch == 4 ? 1U : 0U));
    CHECK(rx->counters().rx_gro_switches == (batch == 4 ? 1U : 0U));
}

TEST_CASE("gro=1 keeps UDP_GRO on through any run of lone datagrams", "[udp][gro]") {
    const std::string base = group_uri(next_port());
    auto rx = open(base + "&gro=1", false);
    auto tx = open(base, true);
    if (!rx->gro_enabled()) {
        WARN("no UDP GRO on this kernel");
        return;
    }
    const OdataBurst one = odata_burst({40});
    std::array<RxPacket, 4> got{};
    for (std::uint32_t i = 0; i < 2 * udp::UdpTransport::kGroOffReads; ++i) {
        REQUIRE(tx->send_batch(one.packets).value() == 1);
        const std::size_t n = wait_rx(*rx, got);
        REQUIRE(n == 1);
        rx->release_rx(n);
    }
    CHECK(rx->counters().rx_gro_active == 1);
    CHECK(rx->counters().rx_gro_switches == 0);
}

TEST_CASE(
    "a datagram longer than a receive slot is counted as rx_truncated and dropped, on the "
    "batched and the single-read path",
    "[udp][malformed]") {
    const std::uint16_t port = next_port();
    auto rx = open(group_uri(port) + "&gro=0", false);
    const GroupSender sender(port);
    const std::vector<std::uint8_t> big(3000, 0xab);  // gro=0 slots hold 1472 + 64 bytes
    const std::vector<std::uint8_t> small(100, 0x5c);
    auto send = [&](const std::vector<std::uint8_t>& b) {
        REQUIRE(sender.send(b) == static_cast<ssize_t>(b.size()));
    };
    std::array<RxPacket, 8> got{};
    // Never read yet: the first poll is a batched recvmmsg, and finds both.
    send(big);
    send(small);
    std::size_t n = wait_rx(*rx, got);
    REQUIRE(n == 1);
    CHECK(got[0].data.size() == small.size());
    rx->release_rx(n);
    CHECK(rx->counters().rx_truncated == 1);
    auto k = rx->poll_rx(got);  // empty: the socket is quiet, the next read is recvfrom()
    REQUIRE(k.has_value());
    REQUIRE(*k == 0);
    send(big);
    send(small);
    n = wait_rx(*rx, got);
    REQUIRE(n == 1);
    CHECK(got[0].data.size() == small.size());
    rx->release_rx(n);
    CHECK(rx->counters().rx_truncated == 2);
    CHECK(rx->counters().rx_datagrams == 2);  // only what was handed up
}

TEST_CASE("a channel that does not join holds no group socket; its NLA still hears unicast",
          "[udp]") {
    auto open_fds = [] {
        std::size_t n = 0;
        for ([[maybe_unused]] const auto& e :
             std::filesystem::directory_iterator("/proc/self/fd")) {
            ++n;
        }
        return n;
    };
    auto cfg = udp::parse_uri(group_uri(next_port()));
    REQUIRE(cfg.has_value());
    cfg->bind_unicast = true;
    const std::size_t before = open_fds();
    {
        auto joined = udp::UdpTransport::create(*cfg);
        REQUIRE(joined.has_value());
        CHECK(open_fds() - before == 3);  // group socket, unicast socket, epoll
    }
    cfg->port = next_port();
    cfg->join = false;  // a publisher: its upstream poll reads one socket, not two
    auto pub = udp::UdpTransport::create(*cfg);
    INFO(pub.error().message());
    REQUIRE(pub.has_value());
    CHECK(open_fds() - before == 2);
    CHECK_FALSE((*pub)->gro_enabled());  // NAKs and SPMRs: MTU-sized receive slots
    // A NAK's way in: a datagram to 127.0.0.1:port.
    const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(cfg->port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const std::vector<std::uint8_t> b(1472, 0x11);  // a datagram as large as the MTU allows
    REQUIRE(::sendto(fd, b.data(), b.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to)
            == 1472);
    ::close(fd);
    std::array<RxPacket, 4> got{};
    const std::size_t n = wait_rx(**pub, got);
    REQUIRE(n == 1);
    CHECK(got[0].data.size() == 1472);
    (*pub)->release_rx(n);
}

TEST_CASE("ttl=0: multicast that never leaves the host still reaches same-host subscribers",
          "[udp]") {
    const std::uint16_t port = next_port();
    auto rx = open(group_uri(port), false);
    auto tx = open(group_uri(port) + "&ttl=0", true);
    const auto body = odata_bytes(7, 64);
    const TxPacket p{body, {}, Route::downstream, {}};
    REQUIRE(tx->send_batch(std::span<const TxPacket>(&p, 1)).value() == 1);
    std::array<RxPacket, 4> got{};
    const std::size_t n = wait_rx(*rx, got);
    REQUIRE(n == 1);
    CHECK(std::equal(got[0].data.begin(), got[0].data.end(), body.begin(), body.end()));
    rx->release_rx(n);
}

// Unicast NAKs go to the publisher's iface:port; the kernel gives each sender's datagrams to
// one socket of an SO_REUSEPORT group, so two publishers there would each miss some
// receivers' NAKs, silently. The second is refused with a message that says what to change.
TEST_CASE("udp: a second publisher on the same iface address and port is refused",
          "[udp][reuseport]") {
    const std::uint16_t port = next_port();
    auto first = open(group_uri(port), true);
    auto sub = open(group_uri(port), false);  // a subscriber of the channel is no publisher
    auto cfg = udp::parse_uri(group_uri(port));
    REQUIRE(cfg.has_value());
    cfg->bind_unicast = true;
    auto second = udp::UdpTransport::create(*cfg);
    REQUIRE_FALSE(second.has_value());
    CHECK(second.error().code() == std::errc::address_in_use);
    const std::string msg = second.error().message();
    INFO(msg);
    CHECK(msg.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
    CHECK(msg.find("own iface address") != std::string::npos);
    // Another group on the same port shares the unicast address too.
    auto other_group =
        udp::parse_uri("udp://239.192.77.9:" + std::to_string(port) + "?iface=127.0.0.1");
    REQUIRE(other_group.has_value());
    other_group->bind_unicast = true;
    other_group->join = false;
    CHECK_FALSE(udp::UdpTransport::create(*other_group).has_value());
    // What the message advises works without any set-up: any 127/8 address is lo's. The
    // second publisher's data reaches the channel's subscriber, and a datagram to each
    // publisher's own address:port reaches that publisher.
    auto second_addr =
        open("udp://239.255.77.1:" + std::to_string(port) + "?iface=127.0.0.2", true);
    const auto body = odata_bytes(3, 64);
    const TxPacket p{body, {}, Route::downstream, {}};
    REQUIRE(second_addr->send_batch(std::span<const TxPacket>(&p, 1)).value() == 1);
    std::array<RxPacket, 4> got{};
    std::size_t n = wait_rx(*sub, got);
    REQUIRE(n == 1);
    CHECK(std::equal(got[0].data.begin(), got[0].data.end(), body.begin(), body.end()));
    sub->release_rx(n);
    const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    REQUIRE(fd >= 0);
    for (const std::uint8_t last : {std::uint8_t{2}, std::uint8_t{1}}) {
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_port = htons(port);
        to.sin_addr.s_addr = htonl(0x7f000000U | last);
        const std::array<std::uint8_t, 8> b{last, 2, 3, 4, 5, 6, 7, 8};
        REQUIRE(
            ::sendto(fd, b.data(), b.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to)
            == 8);
        // (A publisher joined to the group also heard the multicast datagram above.)
        udp::UdpTransport& to_pub = last == 2 ? *second_addr : *first;
        bool heard = false;
        for (int tries = 0; tries < 3 && !heard; ++tries) {
            n = wait_rx(to_pub, got);
            for (std::size_t i = 0; i < n; ++i) {
                heard = heard
                        || (got[i].data.size() == 8
                            && static_cast<std::uint8_t>(got[i].data[0]) == last);
            }
            to_pub.release_rx(n);
        }
        CHECK(heard);
    }
    ::close(fd);
    // Once the first is gone its address is free again.
    first.reset();
    auto again = udp::UdpTransport::create(*cfg);
    INFO((again ? std::string() : again.error().message()));
    CHECK(again.has_value());
}
