// SPDX-License-Identifier: Apache-2.0
#include "transports/udp/udp_transport.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/sock_diag.h>  // SK_MEMINFO_DROPS
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "lib/posix/errors.hpp"
#include "lib/posix/unique_fd.hpp"
#include "lib/runtime/parse.hpp"
#include "lib/runtime/uri_keys.hpp"
#include "transports/udp/gro_policy.hpp"
#include "transports/udp/sock_diag.hpp"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace prizma::udp {
namespace {

constexpr std::uint16_t kFamily4 = 4;
constexpr std::uint16_t kFamily6 = 6;
constexpr std::size_t kGroBuffer = 65536;
constexpr std::size_t kMaxGsoSegments = 64;

using posix::errno_code;

using posix::UniqueFd;

struct Addr {
    sockaddr_storage ss{};
    socklen_t len = 0;
    [[nodiscard]] int family() const noexcept { return ss.ss_family; }
    [[nodiscard]] bool is_multicast() const noexcept {
        if (family() == AF_INET) {
            const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
            return IN_MULTICAST(ntohl(a->sin_addr.s_addr));
        }
        const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&ss);
        return IN6_IS_ADDR_MULTICAST(&a6->sin6_addr);
    }
    const sockaddr* sa() const noexcept { return reinterpret_cast<const sockaddr*>(&ss); }
};

/// Sockets of this network namespace bound to exactly `a` (address and port), from the
/// kernel's socket diagnostics (sock_diag.hpp); -1 when it cannot tell (no udp_diag in the
/// kernel): the check is then skipped, as it always was where the kernel cannot answer.
int sockets_bound_to(const Addr& a) {
    const bool v4 = a.family() == AF_INET;
    std::array<std::uint8_t, 16> want{};
    std::uint16_t port = 0;
    if (v4) {
        const auto* a4 = reinterpret_cast<const sockaddr_in*>(&a.ss);
        std::memcpy(want.data(), &a4->sin_addr, 4);
        port = ntohs(a4->sin_port);
    } else {
        const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&a.ss);
        std::memcpy(want.data(), &a6->sin6_addr, 16);
        port = ntohs(a6->sin6_port);
    }
    const auto found = udp_sockets_on_port(a.family(), port);
    if (!found) {
        return -1;
    }
    // More sockets than a dump lists are on the port: more than one, whoever they are.
    int count = found->not_listed > 0 ? 2 : 0;
    for (const UdpSocketInfo& s : found->sockets) {
        count += std::memcmp(s.local.data(), want.data(), v4 ? 4 : 16) == 0 ? 1 : 0;
    }
    return count;
}

bool make_addr(const std::string& host, std::uint16_t port, Addr& out) noexcept {
    out = Addr{};
    auto* a4 = reinterpret_cast<sockaddr_in*>(&out.ss);
    if (::inet_pton(AF_INET, host.c_str(), &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons(port);
        out.len = sizeof(sockaddr_in);
        return true;
    }
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&out.ss);
    if (::inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(port);
        out.len = sizeof(sockaddr_in6);
        return true;
    }
    return false;
}

Endpoint to_endpoint(const sockaddr_storage& ss) noexcept {
    Endpoint e;
    if (ss.ss_family == AF_INET) {
        const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
        e.family = kFamily4;
        e.port = ntohs(a->sin_port);
        std::memcpy(e.addr.data(), &a->sin_addr, 4);
    } else if (ss.ss_family == AF_INET6) {
        const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
        e.family = kFamily6;
        e.port = ntohs(a->sin6_port);
        std::memcpy(e.addr.data(), &a->sin6_addr, 16);
    }
    return e;
}

void set_port(Addr& a, std::uint16_t port) noexcept {
    if (a.ss.ss_family == AF_INET) {
        reinterpret_cast<sockaddr_in*>(&a.ss)->sin_port = htons(port);
    } else {
        reinterpret_cast<sockaddr_in6*>(&a.ss)->sin6_port = htons(port);
    }
}

bool from_endpoint(const Endpoint& e, Addr& out) noexcept {
    out = Addr{};
    if (e.family == kFamily4) {
        auto* a = reinterpret_cast<sockaddr_in*>(&out.ss);
        a->sin_family = AF_INET;
        a->sin_port = htons(e.port);
        std::memcpy(&a->sin_addr, e.addr.data(), 4);
        out.len = sizeof(sockaddr_in);
        return true;
    }
    if (e.family == kFamily6) {
        auto* a = reinterpret_cast<sockaddr_in6*>(&out.ss);
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(e.port);
        std::memcpy(&a->sin6_addr, e.addr.data(), 16);
        out.len = sizeof(sockaddr_in6);
        return true;
    }
    return false;
}

unsigned ifindex_of(const Addr& a) noexcept {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) {
        return 0;
    }
    unsigned idx = 0;
    unsigned loopback = 0;  // a loopback interface whose IPv4 subnet holds `a` (127/8)
    for (ifaddrs* i = list; i != nullptr && idx == 0; i = i->ifa_next) {
        if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != a.family()) {
            continue;
        }
        if (a.family() == AF_INET && (i->ifa_flags & IFF_LOOPBACK) != 0 && i->ifa_netmask != nullptr
            && loopback == 0) {
            const auto net = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
            const auto mask = reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr;
            if (((net ^ reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_addr.s_addr) & mask)
                == 0) {
                loopback = ::if_nametoindex(i->ifa_name);
            }
        }
        const bool same =
            a.family() == AF_INET
                ? std::memcmp(&reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr,
                              &reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_addr, 4)
                      == 0
                : std::memcmp(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr,
                              &reinterpret_cast<const sockaddr_in6*>(&a.ss)->sin6_addr, 16)
                      == 0;
        if (same) {
            idx = ::if_nametoindex(i->ifa_name);
        }
    }
    ::freeifaddrs(list);
    // Every address of a loopback subnet is local without being assigned (127.0.0.2 on lo):
    // a second publisher on one host takes one for its own unicast NAK address.
    return idx != 0 ? idx : loopback;
}

template <typename T>
bool set_opt(int fd, int level, int name, T value) noexcept {
    return ::setsockopt(fd, level, name, &value, sizeof value) == 0;
}

/// A set-up failure: an OS error gets its text after the detail.
Error setup_error(std::string msg, std::error_code ec) {
    if (ec.category() == std::system_category()) {
        msg += ": " + ec.message();
    }
    return {ec, std::move(msg)};
}

bool set_iface(UdpConfig& cfg, std::string_view v) {
    Addr a;
    cfg.iface = std::string(v);
    return make_addr(cfg.iface, 0, a);
}

bool set_sources(UdpConfig& cfg, std::string_view v) {
    cfg.sources.clear();
    bool ok = true;
    std::string_view rest = v;
    while (ok && !rest.empty()) {
        const auto comma = rest.find(',');
        const std::string one(rest.substr(0, comma));
        Addr a;
        ok = make_addr(one, 0, a);
        cfg.sources.push_back(one);
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    }
    return ok && !cfg.sources.empty();
}

bool set_gro(UdpConfig& cfg, std::string_view v) {
    if (v == "auto") {
        cfg.gro = GroMode::adaptive;
        return true;
    }
    const auto on = runtime::parse_flag(v);
    if (on) {
        cfg.gro = *on ? GroMode::on : GroMode::off;
    }
    return on.has_value();
}

/// The query keys of a udp:// URI (docs/URI.md).
constexpr runtime::UriKey<UdpConfig> kKeys[] = {
    {"iface", "the interface's IP address", &set_iface},
    {"dport", "1-65535", &runtime::set_uint<&UdpConfig::dport, 1, 65535>},
    {"ttl", "0-255", &runtime::set_uint<&UdpConfig::ttl, 0, 255>},
    {"tos", "0-255", &runtime::set_uint<&UdpConfig::tos, 0, 255>},
    {"loop", "0 or 1", &runtime::set_flag<&UdpConfig::loop>},
    {"rcvbuf", "bytes, 0-2^30", &runtime::set_uint<&UdpConfig::rcvbuf, 0, 1U << 30U>},
    {"sndbuf", "bytes, 0-2^30", &runtime::set_uint<&UdpConfig::sndbuf, 0, 1U << 30U>},
    {"gso", "0 or 1", &runtime::set_flag<&UdpConfig::gso>},
    {"gro", "0, 1 or auto", &set_gro},
    {"sources", "comma-separated IP literals of the group's family", &set_sources},
    {"busy_poll", "microseconds, 0-1000000",
     &runtime::set_uint<&UdpConfig::busy_poll_us, 0, 1000000>},
};

}  // namespace

std::span<const runtime::UriKey<UdpConfig>> uri_keys() noexcept {
    return kKeys;
}

Result<UdpConfig, Error> parse_uri(std::string_view uri) {
    auto parts = ChannelUri::parse(uri);
    if (!parts) {
        return parts.error();
    }
    return config_from(*parts);
}

Result<UdpConfig, Error> config_from(const ChannelUri& uri) {
    auto fail = [&](std::string msg) -> Result<UdpConfig, Error> {
        return Error(Errc::invalid_argument, std::move(msg));
    };
    if (uri.scheme != "udp") {
        return fail("not a udp:// URI: '" + uri.text + "'");
    }
    const std::string_view rest = uri.address;
    UdpConfig cfg;
    std::string_view host;
    std::string_view port;
    if (rest.starts_with('[')) {
        const auto close = rest.find(']');
        if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
            return fail("expected [IPv6]:PORT in '" + uri.text + "'");
        }
        host = rest.substr(1, close - 1);
        port = rest.substr(close + 2);
    } else {
        const auto colon = rest.rfind(':');
        if (colon == std::string_view::npos) {
            return fail("missing :PORT in '" + uri.text + "'");
        }
        host = rest.substr(0, colon);
        port = rest.substr(colon + 1);
    }
    cfg.group = std::string(host);
    Addr probe;
    if (!make_addr(cfg.group, 0, probe)) {
        return fail("bad address '" + cfg.group + "' (expected an IPv4 or IPv6 literal)");
    }
    const auto port_value = runtime::parse_uint(port, 65535);
    if (!port_value || *port_value == 0) {
        return fail("bad port '" + std::string(port) + "' (1-65535)");
    }
    cfg.port = static_cast<std::uint16_t>(*port_value);
    if (auto r = runtime::apply_keys<UdpConfig>(kKeys, cfg, uri, "udp"); !r) {
        return r.error();
    }
    return cfg;
}

struct UdpTransport::Impl {
    // Set-up, in the order create() runs them.
    Result<void, Error> resolve(unsigned& ifindex);      // addresses, interface, datagram size
    Result<void, Error> open_sockets();                  // bound sockets and their buffers
    Result<void, Error> join(unsigned ifindex);          // group membership, multicast sends, tos
    Result<void, Error> join_sources(unsigned ifindex);  // sources=: source-specific joins
    void read_back(UdpCounters& c) const noexcept;       // buffer sizes the kernel granted
    bool setup_gro() noexcept;                           // UDP_GRO per GroMode; true if merging
    void size_rings(bool gro_on);                        // receive slots and send scratch
    // send_batch's pieces.
    std::size_t gather_run(std::span<const TxPacket> packets,
                           std::size_t& consumed,
                           std::size_t& niov,
                           mmsghdr& m,
                           bool gso) noexcept;
    int send_messages(std::size_t nmsg, bool lone_packet) noexcept;
    // poll_rx's pieces.
    static constexpr int kTruncated = -2;
    int read_datagrams(int fd, std::size_t slot, std::size_t n, UdpCounters& counters) noexcept;
    std::size_t segment_size(std::size_t i, std::size_t fi, bool single_read) noexcept;
    bool ready_sockets(std::array<int, 2>& fds) const noexcept;

    UdpConfig cfg;
    int fam = AF_INET;
    Addr group;
    Addr iface;
    bool multicast = false;
    UniqueFd rx;           // group:port (joined), or a unicast group address of this host
    UniqueFd uc;           // iface:port, for unicast NAKs/SPMRs; also the send socket when present
    UniqueFd ep;           // epoll over those present, the wakeup fd
    bool watched = false;  // the sockets are in ep (from the first arm_wakeup() on)
    int tx = -1;
    std::size_t max_datagram = 0;
    // receive
    std::size_t rx_slot = 0;
    std::vector<std::byte> rx_buf;
    std::vector<mmsghdr> rx_msgs;
    std::vector<iovec> rx_iov;
    std::vector<sockaddr_storage> rx_from;
    std::vector<std::array<char, 64>> rx_ctl;
    std::vector<RxPacket> pending;  // segments received that did not fit the caller's span
    std::size_t pending_pos = 0;
    std::size_t lent = 0;         // handed out by the last poll_rx
    RxPacket* lent_to = nullptr;  // ...straight into the caller's span, or from pending
    // The sender address of the last datagram, raw and converted: consecutive datagrams
    // mostly come from one source, and a freshly built Endpoint copied into each segment
    // stalled on store forwarding.
    sockaddr_storage last_sa{};
    socklen_t last_sa_len = 0;
    Endpoint last_from{};
    bool poll_uc_first = false;
    std::array<bool, 2> quiet{};   // the last read of rx, uc found nothing
    std::array<GroPolicy, 2> gro;  // UDP_GRO of rx, uc: on now, was on, gro=auto's switching
    // send
    std::vector<mmsghdr> tx_msgs;
    std::vector<iovec> tx_iov;
    std::vector<Addr> tx_addr;
    std::vector<std::array<char, 64>> tx_ctl;

    /// Restores what recvmmsg overwrote in receive header i (lengths and flags).
    void reset_rx(std::size_t i) noexcept {
        mmsghdr& m = rx_msgs[i];
        m.msg_len = 0;
        m.msg_hdr.msg_namelen = sizeof(sockaddr_storage);
        m.msg_hdr.msg_controllen = rx_ctl[i].size();
        m.msg_hdr.msg_flags = 0;
    }
};

Result<void, Error> UdpTransport::Impl::resolve(unsigned& ifindex) {
    if (!make_addr(cfg.group, cfg.port, group)) {
        return setup_error("bad group address '" + cfg.group + "'", Errc::invalid_argument);
    }
    multicast = group.is_multicast();
    fam = group.family();
    if (cfg.iface.empty()) {
        if (multicast) {
            return setup_error(
                "multicast group " + cfg.group + " needs iface=ADDR (never the default route)",
                Errc::invalid_argument);
        }
    } else if (!make_addr(cfg.iface, cfg.port, iface) || iface.family() != fam) {
        return setup_error("bad iface '" + cfg.iface + "' for group " + cfg.group,
                           Errc::invalid_argument);
    }
    if (!cfg.iface.empty()) {
        ifindex = ifindex_of(iface);
        if (ifindex == 0) {
            return setup_error("no local interface has address " + cfg.iface,
                               Errc::invalid_argument);
        }
    }
    max_datagram = cfg.max_datagram != 0 ? cfg.max_datagram : (fam == AF_INET ? 1472U : 1452U);
    return {};
}

Result<void, Error> UdpTransport::Impl::open_sockets() {
    auto make_socket = [&](const Addr& bind_to) -> Result<UniqueFd> {
        UniqueFd fd(::socket(fam, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (fd.get() < 0) {
            return errno_code();
        }
        (void)set_opt(fd.get(), SOL_SOCKET, SO_REUSEADDR, 1);
        (void)set_opt(fd.get(), SOL_SOCKET, SO_REUSEPORT, 1);
        if (::bind(fd.get(), bind_to.sa(), bind_to.len) != 0) {
            return errno_code();
        }
        return fd;
    };
    // Downstream receive socket.
    // Bound to the group address itself: only that group's datagrams arrive, and same-host
    // unicast NAKs to ADDR:port can never be hashed to a receiver's socket.
    // A multicast channel that does not join (a publisher) has none: with IP_MULTICAST_ALL
    // off it could hear nothing there, so it would only cost a syscall per upstream poll
    // (and on IPv6, which has no such option here, a loopback copy of each of its own sends
    // whenever a same-host subscriber joined).
    if (!multicast || cfg.join) {
        auto made = make_socket(group);
        if (made) {
            rx = std::move(*made);
        } else if (multicast || made.error().value() != EADDRNOTAVAIL) {
            return setup_error("cannot bind UDP port " + std::to_string(cfg.port), made.error());
        }
    }
    // Unicast socket on the interface address: unicast NAKs to our NLA land here (a specific
    // address wins the kernel's lookup over same-host wildcard sockets, docs/PROTOCOL.md §8.5).
    if (cfg.bind_unicast && !cfg.iface.empty()
        && !(rx.get() >= 0 && !multicast && cfg.iface == cfg.group)) {
        auto made = make_socket(iface);
        if (!made) {
            return setup_error("cannot bind " + cfg.iface + ":" + std::to_string(cfg.port),
                               made.error());
        }
        uc = std::move(*made);
        // Unicast NAKs to iface:port reach one socket bound there (the kernel hashes each
        // sender to one of an SO_REUSEPORT group): a second publisher on the same address and
        // port would silently miss some receivers' NAKs, so it is refused (docs/URI.md).
        if (sockets_bound_to(iface) > 1) {
            return setup_error("another socket on this host is bound to " + cfg.iface + ":"
                                   + std::to_string(cfg.port)
                                   + " (a second publisher?): unicast NAKs would reach only "
                                     "one of them; give each publisher its own iface address "
                                     "(e.g. 127.0.0.2 on loopback) or port",
                               std::make_error_code(std::errc::address_in_use));
        }
    }
    tx = uc.get() >= 0 ? uc.get() : rx.get();
    if (tx < 0) {
        UniqueFd fd(::socket(fam, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (fd.get() < 0) {
            return setup_error("socket", errno_code());
        }
        uc = std::move(fd);
        tx = uc.get();
    }
    for (int fd : {rx.get(), uc.get()}) {
        if (fd < 0) {
            continue;
        }
        // The kernel caps SO_RCVBUF/SO_SNDBUF at net.core.{r,w}mem_max; a process with
        // CAP_NET_ADMIN may go beyond with the FORCE variants (tried first, as feed handlers
        // do). What was granted is read back below and reported.
        if (!set_opt(fd, SOL_SOCKET, SO_RCVBUFFORCE, cfg.rcvbuf)) {
            (void)set_opt(fd, SOL_SOCKET, SO_RCVBUF, cfg.rcvbuf);
        }
        if (!set_opt(fd, SOL_SOCKET, SO_SNDBUFFORCE, cfg.sndbuf)) {
            (void)set_opt(fd, SOL_SOCKET, SO_SNDBUF, cfg.sndbuf);
        }
        if (cfg.busy_poll_us > 0) {
            (void)set_opt(fd, SOL_SOCKET, SO_BUSY_POLL, cfg.busy_poll_us);
        }
    }
    return {};
}

Result<void, Error> UdpTransport::Impl::join(unsigned ifindex) {
    if (multicast) {
        if (fam == AF_INET) {
            ip_mreqn mreq{};
            mreq.imr_multiaddr = reinterpret_cast<const sockaddr_in*>(&group.ss)->sin_addr;
            mreq.imr_address = reinterpret_cast<const sockaddr_in*>(&iface.ss)->sin_addr;
            mreq.imr_ifindex = static_cast<int>(ifindex);
            if (cfg.join && cfg.sources.empty()
                && ::setsockopt(rx.get(), IPPROTO_IP, IP_ADD_MEMBERSHIP, &mreq, sizeof mreq) != 0) {
                return setup_error("cannot join " + cfg.group + " on " + cfg.iface, errno_code());
            }
            if (rx.get() >= 0) {
                (void)set_opt(rx.get(), IPPROTO_IP, IP_MULTICAST_ALL, 0);
            }
            ip_mreqn out{};
            out.imr_address = mreq.imr_address;
            out.imr_ifindex = static_cast<int>(ifindex);
            if (::setsockopt(tx, IPPROTO_IP, IP_MULTICAST_IF, &out, sizeof out) != 0) {
                return setup_error("IP_MULTICAST_IF " + cfg.iface, errno_code());
            }
            (void)set_opt(tx, IPPROTO_IP, IP_MULTICAST_TTL, cfg.ttl);
            (void)set_opt(tx, IPPROTO_IP, IP_MULTICAST_LOOP, cfg.loop ? 1 : 0);
        } else {
            ipv6_mreq mreq{};
            mreq.ipv6mr_multiaddr = reinterpret_cast<const sockaddr_in6*>(&group.ss)->sin6_addr;
            mreq.ipv6mr_interface = ifindex;
            if (cfg.join && cfg.sources.empty()
                && ::setsockopt(rx.get(), IPPROTO_IPV6, IPV6_ADD_MEMBERSHIP, &mreq, sizeof mreq)
                       != 0) {
                return setup_error("cannot join " + cfg.group + " on " + cfg.iface, errno_code());
            }
            (void)set_opt(tx, IPPROTO_IPV6, IPV6_MULTICAST_IF, ifindex);
            (void)set_opt(tx, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, cfg.ttl);
            (void)set_opt(tx, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, cfg.loop ? 1U : 0U);
        }
    }
    if (multicast && cfg.join && !cfg.sources.empty()) {
        if (auto r = join_sources(ifindex); !r) {
            return r;
        }
    }
    // DSCP/ECN byte of every datagram sent (IP_TOS / IPV6_TCLASS); 0 leaves the default.
    if (cfg.tos != 0) {
        const bool set = fam == AF_INET ? set_opt(tx, IPPROTO_IP, IP_TOS, cfg.tos)
                                        : set_opt(tx, IPPROTO_IPV6, IPV6_TCLASS, cfg.tos);
        if (!set) {
            return setup_error("cannot set tos=" + std::to_string(cfg.tos), errno_code());
        }
    }
    return {};
}

// sources=: one source-specific join per sender (MCAST_JOIN_SOURCE_GROUP, both families).
Result<void, Error> UdpTransport::Impl::join_sources(unsigned ifindex) {
    for (const auto& src : cfg.sources) {
        Addr a;
        if (!make_addr(src, 0, a) || a.family() != fam) {
            return setup_error("sources: " + src + " is not an address of the group's family",
                               Errc::invalid_argument);
        }
        group_source_req req{};
        req.gsr_interface = ifindex;
        std::memcpy(&req.gsr_group, &group.ss, sizeof req.gsr_group);
        std::memcpy(&req.gsr_source, &a.ss, sizeof req.gsr_source);
        const int level = fam == AF_INET ? IPPROTO_IP : IPPROTO_IPV6;
        if (::setsockopt(rx.get(), level, MCAST_JOIN_SOURCE_GROUP, &req, sizeof req) != 0) {
            return setup_error(
                "cannot join " + cfg.group + " for source " + src + " on " + cfg.iface,
                errno_code());
        }
    }
    return {};
}

void UdpTransport::Impl::read_back(UdpCounters& c) const noexcept {
    // Read back the buffer sizes: the kernel caps them at net.core.rmem_max silently.
    int eff = 0;
    socklen_t elen = sizeof eff;
    const int probe_fd = rx.get() >= 0 ? rx.get() : uc.get();
    if (::getsockopt(probe_fd, SOL_SOCKET, SO_RCVBUF, &eff, &elen) == 0) {
        c.rcvbuf_effective = eff / 2;  // Linux reports double the payload size
        c.rcvbuf_capped = eff / 2 < cfg.rcvbuf ? 1U : 0U;
    }
    elen = sizeof eff;
    if (::getsockopt(tx, SOL_SOCKET, SO_SNDBUF, &eff, &elen) == 0) {
        c.sndbuf_effective = eff / 2;
    }
    // SO_BUSY_POLL above net.core.busy_read needs CAP_NET_ADMIN: report what was granted.
    elen = sizeof eff;
    if (cfg.busy_poll_us > 0
        && ::getsockopt(probe_fd, SOL_SOCKET, SO_BUSY_POLL, &eff, &elen) == 0) {
        c.busy_poll_us = eff;
    }
}

bool UdpTransport::Impl::setup_gro() noexcept {
    // Only a channel with a data socket (a group or unicast address it receives on) merges:
    // a publisher's one socket hears NAKs and SPMRs, which need no 64 KiB receive slots
    // (4 MiB for a batch of 64).
    bool merging = cfg.gro != GroMode::off && rx.get() >= 0;
    if (merging && cfg.gro == GroMode::adaptive) {
        // gro=auto starts with it off, and asks rather than sets: setting UDP_GRO even once
        // turns on the kernel's UDP encapsulation hooks for the socket's life
        // (udp_tunnel_encap_enable). The first burst sets it (adapt_gro). A kernel that
        // cannot report the option is probed by setting it and clearing it again.
        int v = 0;
        socklen_t len = sizeof v;
        merging = ::getsockopt(rx.get(), SOL_UDP, UDP_GRO, &v, &len) == 0;
        if (!merging && set_opt(rx.get(), SOL_UDP, UDP_GRO, 1)) {
            merging = true;
            // Seen: a burst may have been merged meanwhile.
            gro[0].reset(!set_opt(rx.get(), SOL_UDP, UDP_GRO, 0), true);
        }
    } else if (merging) {
        std::array<bool, 2> on{};
        for (std::size_t i = 0; i < 2; ++i) {
            const int fd = i == 0 ? rx.get() : uc.get();
            if (fd >= 0) {
                on[i] = set_opt(fd, SOL_UDP, UDP_GRO, 1);
                merging = merging && on[i];
            }
        }
        // All or none: a socket left merging behind MTU-sized slots would truncate bursts.
        for (std::size_t i = 0; i < 2 && !merging; ++i) {
            const int fd = i == 0 ? rx.get() : uc.get();
            if (on[i]) {
                on[i] = !set_opt(fd, SOL_UDP, UDP_GRO, 0);
            }
        }
        gro[0].reset(on[0], on[0]);
        gro[1].reset(on[1], on[1]);
    }
    return merging;
}

void UdpTransport::Impl::size_rings(bool gro_on) {
    rx_slot = gro_on ? kGroBuffer : max_datagram + 64;
    const std::size_t n = std::max<std::size_t>(1, cfg.batch);
    rx_buf.resize(n * rx_slot);
    rx_msgs.resize(n);
    rx_iov.resize(n);
    rx_from.resize(n);
    rx_ctl.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        rx_iov[i] = iovec{rx_buf.data() + i * rx_slot, rx_slot};
        mmsghdr& m = rx_msgs[i];
        m = mmsghdr{};
        m.msg_hdr.msg_name = &rx_from[i];
        m.msg_hdr.msg_iov = &rx_iov[i];
        m.msg_hdr.msg_iovlen = 1;
        m.msg_hdr.msg_control = rx_ctl[i].data();
        reset_rx(i);
    }
    pending.reserve(n * (gro_on ? kMaxGsoSegments : 1));
    tx_msgs.resize(n);
    tx_iov.resize(2 * n);
    tx_addr.resize(n);
    tx_ctl.resize(n);
}

Result<std::unique_ptr<UdpTransport>, Error> UdpTransport::create(const UdpConfig& cfg) {
    auto impl = std::make_unique<Impl>();
    impl->cfg = cfg;
    unsigned ifindex = 0;
    if (auto r = impl->resolve(ifindex); !r) {
        return r.error();
    }
    if (auto r = impl->open_sockets(); !r) {
        return r.error();
    }
    if (auto r = impl->join(ifindex); !r) {
        return r.error();
    }
    std::unique_ptr<UdpTransport> t(new UdpTransport(std::move(impl)));
    Impl& im = *t->impl_;
    im.read_back(t->counters_);
    // Probe GSO/GRO: a kernel without them refuses the socket option.
    t->gso_ = cfg.gso && set_opt(im.tx, SOL_UDP, UDP_SEGMENT, 0);
    t->gro_ = im.setup_gro();
    im.size_rings(t->gro_);
    // Wakeup: one epoll fd over both sockets. The sockets join it only at the first
    // arm_wakeup(): a socket watched by an epoll set makes every datagram queued to it run
    // the epoll callbacks (a locked wait queue, twice when the Context's epoll nests this
    // one) in the *sender's* send path, ~0.3 us per hop that a busy-polling party never uses.
    im.ep.reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!cfg.iface.empty()) {
        t->local_ = to_endpoint(im.iface.ss);
    }
    return t;
}

UdpTransport::UdpTransport(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
UdpTransport::~UdpTransport() = default;

TransportCaps UdpTransport::caps() const noexcept {
    return TransportCaps{impl_->max_datagram, impl_->tx_msgs.size(), 0, true};
}

int UdpTransport::wakeup_fd() const noexcept {
    return impl_->ep.get();
}

Result<bool> UdpTransport::arm_wakeup() noexcept {
    Impl& im = *impl_;
    if (!im.watched && im.ep.get() >= 0) {
        for (int fd : {im.rx.get(), im.uc.get()}) {
            if (fd < 0) {
                continue;
            }
            epoll_event ev{};
            ev.events = EPOLLIN;  // level-triggered: a datagram already queued wakes at once
            ev.data.fd = fd;
            if (::epoll_ctl(im.ep.get(), EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST) {
                return errno_code();
            }
        }
        im.watched = true;
    }
    // Segments of a GRO datagram not yet handed out are invisible to epoll.
    return im.pending_pos == im.pending.size();
}

// Once armed, the sockets sit in ep level-triggered: ep is readable while either has a
// datagram. Only segments already read (pending) would be missed.
bool UdpTransport::rx_follows_wakeup() const noexcept {
    const Impl& im = *impl_;
    return im.watched && im.pending_pos == im.pending.size();
}

// Batches into sendmmsg; a run of downstream packets of one size (the last may be shorter)
// becomes a single GSO message (UDP_SEGMENT): one pass through the stack for up to 64.
// Gathers packets[consumed] into message m, and with GSO the downstream packets of the same
// size that follow it (a shorter one ends the run). Returns how many packets it took.
std::size_t UdpTransport::Impl::gather_run(std::span<const TxPacket> packets,
                                           std::size_t& consumed,
                                           std::size_t& niov,
                                           mmsghdr& m,
                                           bool gso) noexcept {
    const TxPacket& p = packets[consumed];
    const std::size_t size = p.header.size() + p.payload.size();
    std::size_t segs = 0;
    std::size_t total = 0;
    // Gather this packet and, with GSO, following downstream packets of the same size.
    while (consumed < packets.size() && niov + 2 <= tx_iov.size()) {
        const TxPacket& q = packets[consumed];
        const std::size_t qs = q.header.size() + q.payload.size();
        if (segs != 0) {
            const bool same_run = gso && q.route == Route::downstream
                                  && p.route == Route::downstream && qs <= size
                                  && segs < kMaxGsoSegments && total + qs <= 65000;
            if (!same_run) {
                break;
            }
        }
        // A piece that starts where the message's last one ends extends it: the
        // Session packs its batch back to back, so a GSO run is one iovec and the
        // kernel copies it in one pass instead of one short copy per packet.
        for (const auto piece : {q.header, q.payload}) {
            if (piece.empty()) {
                continue;
            }
            auto* base = const_cast<std::byte*>(piece.data());
            iovec* const end = tx_iov.data() + niov;
            iovec* last = end != m.msg_hdr.msg_iov ? end - 1 : nullptr;
            if (last != nullptr
                && static_cast<std::byte*>(last->iov_base) + last->iov_len == base) {
                last->iov_len += piece.size();
            } else {
                tx_iov[niov++] = iovec{base, piece.size()};
            }
        }
        ++segs;
        total += qs;
        ++consumed;
        if (qs < size) {
            break;  // a shorter one can only end a GSO run
        }
    }
    return segs;
}

// One system call for the first nmsg messages; how many went (-1: errno says why).
int UdpTransport::Impl::send_messages(std::size_t nmsg, bool lone_packet) noexcept {
    // One message (a lone packet, or one GSO run): sendmsg skips sendmmsg's per-call
    // vector handling, which is on the latency path of every echo; a lone packet in one
    // buffer (the Session's send batch copies each packet into one) goes by sendto(),
    // which also skips the msghdr and iovec copy-in.
    int rc = 0;
    if (nmsg == 1 && lone_packet && tx_msgs[0].msg_hdr.msg_iovlen == 1) {
        const msghdr& h = tx_msgs[0].msg_hdr;
        rc = ::sendto(tx, h.msg_iov[0].iov_base, h.msg_iov[0].iov_len, MSG_DONTWAIT,
                      static_cast<const sockaddr*>(h.msg_name), h.msg_namelen)
                     < 0
                 ? -1
                 : 1;
    } else if (nmsg == 1) {
        rc = ::sendmsg(tx, &tx_msgs[0].msg_hdr, MSG_DONTWAIT) < 0 ? -1 : 1;
    } else {
        rc = ::sendmmsg(tx, tx_msgs.data(), static_cast<unsigned>(nmsg), MSG_DONTWAIT);
    }
    return rc;
}

Result<std::size_t> UdpTransport::send_batch(std::span<const TxPacket> packets) noexcept {
    Impl& im = *impl_;
    std::size_t done = 0;
    while (done < packets.size()) {
        std::size_t nmsg = 0;
        std::size_t niov = 0;
        std::size_t consumed = done;
        // Only [0, nmsg) is written and read: not zeroed on every send (hot path).
        std::array<std::size_t, 64> per_msg;  // NOLINT(cppcoreguidelines-pro-type-member-init)
        const std::size_t max_msgs = std::min(im.tx_msgs.size(), per_msg.size());
        std::size_t skipped = 0;
        while (consumed < packets.size() && nmsg < max_msgs && niov + 2 <= im.tx_iov.size()) {
            const TxPacket& p = packets[consumed];
            Addr& dst = im.tx_addr[nmsg];
            if (p.route == Route::downstream) {
                dst = im.group;
            } else if (!from_endpoint(p.to, dst)) {
                ++consumed;  // no address: nothing can be done with it
                ++skipped;
                ++counters_.tx_errors;
                continue;
            } else {
                set_port(dst, im.cfg.port);  // the channel's port (UdpConfig::port)
            }
            mmsghdr& m = im.tx_msgs[nmsg];
            m = mmsghdr{};
            m.msg_hdr.msg_name = &dst.ss;
            m.msg_hdr.msg_namelen = dst.len;
            m.msg_hdr.msg_iov = &im.tx_iov[niov];
            const std::size_t size = p.header.size() + p.payload.size();
            const std::size_t segs = im.gather_run(packets, consumed, niov, m, gso_);
            m.msg_hdr.msg_iovlen =
                static_cast<std::size_t>(im.tx_iov.data() + niov - m.msg_hdr.msg_iov);
            if (segs > 1) {
                auto& ctl = im.tx_ctl[nmsg];
                m.msg_hdr.msg_control = ctl.data();
                m.msg_hdr.msg_controllen = CMSG_SPACE(sizeof(std::uint16_t));
                cmsghdr* c = CMSG_FIRSTHDR(&m.msg_hdr);
                c->cmsg_level = SOL_UDP;
                c->cmsg_type = UDP_SEGMENT;
                c->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));
                const auto gso_size = static_cast<std::uint16_t>(size);
                std::memcpy(CMSG_DATA(c), &gso_size, sizeof gso_size);
                ++counters_.tx_gso_sends;
            }
            per_msg[nmsg] = segs;
            ++nmsg;
        }
        if (nmsg == 0) {
            done = consumed;
            continue;
        }
        const int rc = im.send_messages(nmsg, per_msg[0] == 1);
        ++counters_.tx_syscalls;
        if (rc < 0) {
            if (errno == EAGAIN || errno == ENOBUFS) {
                return done;  // queue full: the rest later
            }
            if ((errno == EIO || errno == EINVAL) && gso_) {
                gso_ = false;  // no GSO on this path after all: resend without it
                continue;
            }
            ++counters_.tx_errors;
            return done != 0 ? Result<std::size_t>(done) : Result<std::size_t>(errno_code());
        }
        std::size_t sent_pkts = 0;
        for (int i = 0; i < rc; ++i) {
            sent_pkts += per_msg[static_cast<std::size_t>(i)];
            counters_.tx_iovecs += im.tx_msgs[static_cast<std::size_t>(i)].msg_hdr.msg_iovlen;
        }
        counters_.tx_datagrams += sent_pkts;
        if (static_cast<std::size_t>(rc) < nmsg) {
            return done + sent_pkts + skipped;
        }
        done = consumed;
    }
    return done;
}

// Reads up to n datagrams from socket fd into the receive slots from `slot` on: one with
// recvfrom(), more with recvmmsg(). Returns how many, -1 with errno set, or kTruncated when
// the one datagram read was longer than its slot (dropped and counted).
int UdpTransport::Impl::read_datagrams(int fd,
                                       std::size_t slot,
                                       std::size_t n,
                                       UdpCounters& counters) noexcept {
    int rc = 0;
    if (n == 1) {
        // One datagram: recvfrom() skips the msghdr and iovec copy-in that recvmsg and
        // recvmmsg pay on every call, empty or not (about a third of an empty poll). It
        // brings no UDP_GRO segment size: a merged datagram is split by the layer above's
        // framing instead (gro_segment_size).
        mmsghdr& m = rx_msgs[slot];
        std::byte* buf = rx_buf.data() + slot * rx_slot;
        socklen_t alen = sizeof(sockaddr_storage);
        const ssize_t got = ::recvfrom(fd, buf, rx_slot,
                                       MSG_DONTWAIT | MSG_TRUNC,  // the real length
                                       reinterpret_cast<sockaddr*>(&rx_from[slot]), &alen);
        if (got > static_cast<ssize_t>(rx_slot)) {
            ++counters.rx_truncated;  // its tail is gone: nothing to hand up
            return kTruncated;
        }
        rc = got < 0 ? -1 : 1;
        if (got >= 0) {
            ++counters.rx_single_reads;
            m.msg_len = static_cast<unsigned>(got);
            m.msg_hdr.msg_namelen = alen;
            m.msg_hdr.msg_controllen = 0;  // no control message below
        }
    } else {
        rc = ::recvmmsg(fd, &rx_msgs[slot], static_cast<unsigned>(n), MSG_DONTWAIT, nullptr);
    }
    return rc;
}

// The segment size of received datagram i: from its UDP_GRO control message, or, when it
// came without one but may be merged (GroPolicy::maybe_merged), from the layer above's
// framing; otherwise its whole length (one datagram).
std::size_t UdpTransport::Impl::segment_size(std::size_t i,
                                             std::size_t fi,
                                             bool single_read) noexcept {
    const mmsghdr& m = rx_msgs[i];
    std::size_t seg = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m.msg_hdr); c != nullptr;
         c = CMSG_NXTHDR(const_cast<msghdr*>(&m.msg_hdr), c)) {
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int gs = 0;
            std::memcpy(&gs, CMSG_DATA(c), sizeof gs);
            if (gs > 0) {
                seg = static_cast<std::size_t>(gs);
            }
        }
    }
    const std::byte* base = rx_buf.data() + i * rx_slot;
    if (seg == 0) {
        // No segment size: one datagram, or several merged ones when GRO is or was on
        // and the read could not say so: a recvfrom() read (n == 1) has no control
        // message, and after gro=auto switched GRO off, one merged before may still
        // be queued, or even on its way to the queue, however many empty reads later.
        // A merged datagram read by recvmmsg with GRO on always brings its size.
        const bool maybe_merged = gro[fi].maybe_merged(single_read);
        seg = maybe_merged ? gro_segment_size(cfg.frame_length, {base, m.msg_len}) : m.msg_len;
    }
    return seg;
}

// With two sockets that an epoll set watches: which have datagrams (the others become -1 in
// fds); false when neither has.
bool UdpTransport::Impl::ready_sockets(std::array<int, 2>& fds) const noexcept {
    // Two watched sockets: one epoll_wait(0) (~0.2 us) says which has datagrams, so
    // an empty poll costs one cheap syscall instead of two recvmmsg (~0.3-1 us each).
    // Unwatched (never armed, the busy-poll case) both are read. Only a channel that
    // both joins and binds its unicast address has two; the Context's have one each
    // (a publisher does not join, a subscriber does not bind).
    std::array<epoll_event, 2> ev{};
    const int ready = ::epoll_wait(ep.get(), ev.data(), 2, 0);
    if (ready <= 0) {
        return false;  // nothing, or EINTR: the next poll retries
    }
    bool in[2] = {false, false};
    for (int i = 0; i < ready; ++i) {
        const int fd = ev[static_cast<std::size_t>(i)].data.fd;
        in[0] = in[0] || fd == fds[0];
        in[1] = in[1] || fd == fds[1];
    }
    fds[0] = in[0] ? fds[0] : -1;
    fds[1] = in[1] ? fds[1] : -1;
    return true;
}

Result<std::size_t> UdpTransport::poll_rx(std::span<RxPacket> out) noexcept {
    Impl& im = *impl_;
    im.lent = 0;
    im.lent_to = nullptr;
    if (im.pending_pos < im.pending.size()) {
        // Segments of the last batch that did not fit: handed out before anything is read
        // (they live in rx_buf, which the next recvmmsg overwrites).
        const std::size_t k = std::min(out.size(), im.pending.size() - im.pending_pos);
        std::copy_n(im.pending.begin() + static_cast<std::ptrdiff_t>(im.pending_pos), k,
                    out.begin());
        im.lent = k;
        return k;
    }
    im.pending.clear();
    im.pending_pos = 0;
    std::size_t k = 0;  // segments written straight into `out`
    std::array<int, 2> fds = {im.poll_uc_first ? im.uc.get() : im.rx.get(),
                              im.poll_uc_first ? im.rx.get() : im.uc.get()};
    im.poll_uc_first = !im.poll_uc_first;
    if (fds[0] >= 0 && fds[1] >= 0 && im.watched && !im.ready_sockets(fds)) {
        return std::size_t{0};
    }
    std::size_t slot = 0;
    for (int fd : fds) {
        if (fd < 0 || slot == im.rx_msgs.size()) {
            continue;
        }
        // The headers were built once; received entries are restored below, so an empty
        // poll (the busy-poll common case) costs only the syscall.
        // After an empty poll ask for one datagram: the first to arrive after a quiet
        // spell (the latency case) comes back without the kernel trying the empty queue
        // again for the next one; a burst gets the full batch from the next poll on.
        const std::size_t fi = fd == im.rx.get() ? 0 : 1;
        const std::size_t n = im.quiet[fi] ? 1 : im.rx_msgs.size() - slot;
        const int rc = im.read_datagrams(fd, slot, n, counters_);
        if (rc == Impl::kTruncated) {
            im.quiet[fi] = false;
            continue;
        }
        if (rc < 0) {
            if (errno == EAGAIN) {  // == EWOULDBLOCK on Linux
                im.quiet[fi] = true;
                continue;
            }
            if (k != 0 || !im.pending.empty()) {
                break;  // hand out what the other socket gave; the error comes back next
            }
            return errno_code();
        }
        im.quiet[fi] = false;
        bool merged = false;
        for (std::size_t i = slot; i < slot + static_cast<std::size_t>(rc); ++i) {
            const mmsghdr& m = im.rx_msgs[i];
            if ((m.msg_hdr.msg_flags & MSG_TRUNC) != 0) {
                ++counters_.rx_truncated;  // longer than the slot: its tail is gone
                im.reset_rx(i);
                continue;
            }
            const std::size_t seg = im.segment_size(i, fi, n == 1);
            const std::byte* base = im.rx_buf.data() + i * im.rx_slot;
            merged = merged || seg < m.msg_len;
            const socklen_t salen = m.msg_hdr.msg_namelen;
            if (salen != im.last_sa_len || std::memcmp(&im.last_sa, &im.rx_from[i], salen) != 0) {
                std::memcpy(&im.last_sa, &im.rx_from[i], salen);
                im.last_sa_len = salen;
                im.last_from = to_endpoint(im.rx_from[i]);
            }
            ++counters_.rx_datagrams;
            for (std::size_t off = 0; off < m.msg_len; off += seg) {
                const std::size_t len = std::min<std::size_t>(seg, m.msg_len - off);
                RxPacket& r = k < out.size() ? out[k++] : im.pending.emplace_back();
                r.data = std::span<const std::byte>(base + off, len);
                r.from = im.last_from;
                r.rx_time_ns = 0;
                if (off != 0) {
                    ++counters_.rx_gro_segments;
                }
            }
            im.reset_rx(i);
        }
        if (im.cfg.gro == GroMode::adaptive && gro_) {
            adapt_gro(fd, im.gro[fi], n >= 2, static_cast<std::size_t>(rc), merged);
        }
        slot += static_cast<std::size_t>(rc);
    }
    im.lent = k;
    im.lent_to = out.data();
    return k;
}

// gro=auto, after a read of `datagrams` from socket `fd` (a batch read if `batch`): the
// policy decides (GroPolicy), this applies it with one setsockopt().
void UdpTransport::adapt_gro(
    int fd, GroPolicy& policy, bool batch, std::size_t datagrams, bool merged) noexcept {
    const auto action = policy.after_read(batch, datagrams, merged, impl_->rx_msgs.size());
    if (action == GroPolicy::Action::none) {
        return;
    }
    const bool ok = set_opt(fd, SOL_UDP, UDP_GRO, action == GroPolicy::Action::switch_on ? 1 : 0);
    policy.switched(action, ok);
    counters_.rx_gro_switches += ok ? 1U : 0U;
}

// The kernel's drop count is read when asked for, not carried on every receive (SO_RXQ_OVFL
// would put a control message on each datagram: a put_cmsg copy-out per read, and the
// single-datagram recvfrom() path has nowhere to receive it).
UdpCounters UdpTransport::counters() const noexcept {
    UdpCounters c = counters_;
    c.rx_gro_active = static_cast<std::uint64_t>(impl_->gro[0].on())
                      + static_cast<std::uint64_t>(impl_->gro[1].on());
    c.rx_kernel_drops = 0;
    c.rx_queued_bytes = 0;
    for (int fd : {impl_->rx.get(), impl_->uc.get()}) {
        std::array<std::uint32_t, SK_MEMINFO_VARS> mem{};
        socklen_t len = sizeof mem;
        if (fd >= 0 && ::getsockopt(fd, SOL_SOCKET, SO_MEMINFO, mem.data(), &len) == 0
            && len >= (SK_MEMINFO_DROPS + 1) * sizeof(std::uint32_t)) {
            c.rx_kernel_drops += mem[SK_MEMINFO_DROPS];
            c.rx_queued_bytes += mem[SK_MEMINFO_RMEM_ALLOC];
        }
    }
    return c;
}

std::string UdpTransport::description() const {
    const Impl& im = *impl_;
    const UdpCounters c = counters();
    std::string d = "udp iface " + (im.cfg.iface.empty() ? std::string("-") : im.cfg.iface);
    d += " ttl " + std::to_string(im.cfg.ttl);
    if (c.rcvbuf_effective > 0) {
        d += " rcvbuf " + std::to_string(c.rcvbuf_effective);
        if (c.rcvbuf_capped != 0) {
            d += " (asked " + std::to_string(im.cfg.rcvbuf) + ": capped by net.core.rmem_max)";
        }
    }
    d += gso_ ? " gso on" : " gso off";
    d += gro_ ? " gro on" : " gro off";
    return d;
}

std::size_t UdpTransport::named_counters(std::span<NamedCounter> out) const noexcept {
    const UdpCounters c = counters();
    const NamedCounter all[] = {
        {"rx_datagrams", c.rx_datagrams},
        {"rx_gro_segments", c.rx_gro_segments},
        {"rx_gro_switches", c.rx_gro_switches},
        {"rx_gro_active", c.rx_gro_active},
        {"rx_kernel_drops", c.rx_kernel_drops},
        {"rx_queued_bytes", c.rx_queued_bytes},
        {"rx_single_reads", c.rx_single_reads},
        {"rx_truncated", c.rx_truncated},
        {"tx_datagrams", c.tx_datagrams},
        {"tx_syscalls", c.tx_syscalls},
        {"tx_gso_sends", c.tx_gso_sends},
        {"tx_iovecs", c.tx_iovecs},
        {"tx_errors", c.tx_errors},
        {"rcvbuf_bytes", static_cast<std::uint64_t>(c.rcvbuf_effective)},
        {"rcvbuf_capped", c.rcvbuf_capped},
        {"sndbuf_bytes", static_cast<std::uint64_t>(c.sndbuf_effective)},
        {"busy_poll_us", static_cast<std::uint64_t>(c.busy_poll_us)},
    };
    const std::size_t n = std::min(out.size(), std::size(all));
    std::copy_n(std::begin(all), n, out.begin());
    return std::size(all);
}

void UdpTransport::release_rx(std::size_t count) noexcept {
    Impl& im = *impl_;
    count = std::min(count, im.lent);
    if (im.lent_to == nullptr) {
        im.pending_pos += count;  // they came from pending
    } else if (count < im.lent) {
        // Handed out straight but not all taken: the rest goes back in front of pending
        // (within its reserved capacity: no allocation), to be handed out again first.
        im.pending.insert(im.pending.begin(), im.lent_to + count, im.lent_to + im.lent);
    }
    im.lent = 0;
    im.lent_to = nullptr;
}

}  // namespace prizma::udp
