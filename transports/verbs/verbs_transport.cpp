// SPDX-License-Identifier: Apache-2.0
#include "transports/verbs/verbs_transport.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <system_error>
#include <thread>

#include "lib/posix/errors.hpp"
#include "lib/posix/unique_fd.hpp"
#include "lib/runtime/parse.hpp"
#include "lib/runtime/uri_keys.hpp"
#include "transports/verbs/device_policy.hpp"
#include "transports/verbs/device_share.hpp"
#include "transports/verbs/ib_sa.hpp"
#include "transports/verbs/port_refcount.hpp"
#include "transports/verbs/verbs_handles.hpp"
#include "transports/verbs/verbs_testing.hpp"

namespace prizma::verbs {
namespace {

// Fork safety (§1): on kernels without copy-on-fork for pinned pages (before 5.13) a fork()
// would corrupt registered memory unless libibverbs marks it MADV_DONTFORK. True when safe:
// IBV_FORK_UNNEEDED (the kernel copies pinned pages on fork, 5.13+) or ENABLED.
bool make_fork_safe() noexcept {
    if (ibv_is_fork_initialized() == IBV_FORK_DISABLED) {
        (void)ibv_fork_init();  // EINVAL once memory is registered: then it is too late anyway
    }
    return ibv_is_fork_initialized() != IBV_FORK_DISABLED;
}

struct DeviceListDeleter {
    void operator()(ibv_device** l) const noexcept { ibv_free_device_list(l); }
};
using DeviceList = std::unique_ptr<ibv_device*, DeviceListDeleter>;

struct FreeDeleter {
    void operator()(void* p) const noexcept { std::free(p); }  // NOLINT(*-no-malloc)
};

/// A socket holding the IP-level multicast membership behind a RoCE GID.
using posix::UniqueFd;

using Gid = std::array<std::uint8_t, 16>;

std::string gid_text(const Gid& g) {
    char buf[INET6_ADDRSTRLEN] = {};
    (void)::inet_ntop(AF_INET6, g.data(), buf, sizeof buf);
    return buf;
}

bool is_v4_mapped(const Gid& g) noexcept {
    static constexpr std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(g.data(), kPrefix, 12) == 0;
}

/// IP text (IPv4, IPv6 with or without brackets) -> GID bytes (IPv4 as ::ffff:a.b.c.d).
bool ip_to_gid(std::string_view text, Gid& out) noexcept {
    if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
        text = text.substr(1, text.size() - 2);
    }
    char buf[INET6_ADDRSTRLEN + 1] = {};
    if (text.empty() || text.size() >= sizeof buf) {
        return false;
    }
    std::memcpy(buf, text.data(), text.size());
    in_addr a4{};
    if (::inet_pton(AF_INET, buf, &a4) == 1) {
        out = Gid{};
        out[10] = 0xff;
        out[11] = 0xff;
        std::memcpy(&out[12], &a4, 4);
        return true;
    }
    return ::inet_pton(AF_INET6, buf, out.data()) == 1;
}

std::size_t mtu_bytes(ibv_mtu m) noexcept {
    switch (m) {
        case IBV_MTU_256: return 256;
        case IBV_MTU_512: return 512;
        case IBV_MTU_1024: return 1024;
        case IBV_MTU_2048: return 2048;
        case IBV_MTU_4096: return 4096;
    }
    return 256;
}

const char* port_state_text(ibv_port_state s) noexcept {
    return ibv_port_state_str(s);
}

bool parse_u64(std::string_view s, std::uint64_t max, std::uint64_t& out) noexcept {
    const auto v = runtime::parse_uint(s, max, /*hex_prefix=*/true);
    out = v.value_or(out);
    return v.has_value();
}

std::error_code err(std::errc e) noexcept {
    return std::make_error_code(e);
}

template <typename T = void>
Result<T, Error> fail(std::string msg, std::error_code code = Errc::invalid_argument) {
    return Error(code, std::move(msg));
}

template <typename T>
Result<T, Error> fail(std::string msg, std::errc code) {
    return Error(std::make_error_code(code), std::move(msg));
}

std::uint16_t ipv4_header_sum(const std::uint8_t* h) noexcept {
    std::uint32_t s = 0;
    for (int i = 0; i < 20; i += 2) {
        s += (std::uint32_t{h[i]} << 8U) | h[i + 1];
    }
    while ((s >> 16U) != 0) {
        s = (s & 0xffffU) + (s >> 16U);
    }
    return static_cast<std::uint16_t>(s);
}

constexpr std::size_t kSlotAlign = 64;
// Each receive slot: the GRH ends at a cache-line boundary, so the PGM packet is aligned.
constexpr std::size_t kRxGrhOffset = kSlotAlign - kGrhBytes;

}  // namespace

// ---------------------------------------------------------------------------------------
// URI and addressing helpers

bool group_to_gid(std::string_view group,
                  bool infiniband,
                  std::uint16_t pkey,
                  std::array<std::uint8_t, 16>& gid) noexcept {
    Gid g{};
    if (!ip_to_gid(group, g)) {
        return false;
    }
    if (infiniband && is_v4_mapped(g)) {
        g = policy::ib_mgid_v4(&g[12], pkey);  // prizma's signature, not IPoIB's (§4)
    }
    gid = g;
    return true;
}

bool gid_is_multicast(const std::array<std::uint8_t, 16>& gid) noexcept {
    if (gid[0] == 0xff) {
        return true;
    }
    return is_v4_mapped(gid) && (gid[12] & 0xf0U) == 0xe0U;
}

std::array<std::uint8_t, 16> source_gid_from_grh(const std::uint8_t* grh) noexcept {
    Gid g{};
    const std::uint8_t* ip4 = grh + 20;
    // RoCE v2 over IPv4: 20 unused (zero) bytes, then the IPv4 header. Told apart from an
    // IB/IPv6 GRH as libibverbs does: a first nibble other than 6 cannot start an IPv6 GRH;
    // only when it is 6 must the IPv4 header's checksum decide. (rxe's same-device loopback
    // hands over an IPv4 header whose checksum was never filled in.)
    const bool ip4_shape = (ip4[0] >> 4U) == 4;
    const bool v6_first = (grh[0] >> 4U) == 6;
    if (ip4_shape && (!v6_first || (ip4[0] == 0x45 && ipv4_header_sum(ip4) == 0xffff))) {
        g[10] = 0xff;
        g[11] = 0xff;
        std::memcpy(&g[12], ip4 + 12, 4);
        return g;
    }
    std::memcpy(g.data(), grh + 8, 16);  // IB GRH / RoCE v2 IPv6: SGID at offset 8
    return g;
}

namespace {

/// The query keys of a verbs:// URI (docs/URI.md): decimal or 0x hexadecimal, within bounds.
template <auto Field, std::uint64_t Min, std::uint64_t Max>
constexpr auto kUint = &runtime::set_uint<Field, Min, Max, /*Hex=*/true>;

constexpr runtime::UriKey<VerbsConfig> kKeys[] = {
    {"gid_index", "0-65535", kUint<&VerbsConfig::gid_index, 0, 65535>},
    {"qkey", "0-0x7fffffff; controlled Q_Keys need CAP_NET_RAW",
     kUint<&VerbsConfig::qkey, 0, 0x7fffffff>},
    {"qpn", "a unicast QP number, 2-0xfffffe", kUint<&VerbsConfig::dest_qpn, 2, 0xfffffe>},
    {"rx_depth", "8-65536", kUint<&VerbsConfig::rx_depth, 8, 1U << 16U>},
    {"tx_depth", "8-65536", kUint<&VerbsConfig::tx_depth, 8, 1U << 16U>},
    {"inline", "0-4096", kUint<&VerbsConfig::max_inline, 0, 4096>},
    {"mtu", "256-4096", kUint<&VerbsConfig::mtu, 256, 4096>},
    {"hop_limit", "1-255", kUint<&VerbsConfig::hop_limit, 1, 255>},
    {"tclass", "0-255", kUint<&VerbsConfig::traffic_class, 0, 255>},
    {"sl", "0-15", kUint<&VerbsConfig::sl, 0, 15>},
    {"pinned_max", "bytes, 65536-2^40", kUint<&VerbsConfig::pinned_max, 65536, 1ULL << 40U>},
    {"dlid", "an InfiniBand unicast LID, 1-0xfffe", kUint<&VerbsConfig::dlid, 1, 0xfffe>},
    {"comp_vector", "0-1023", kUint<&VerbsConfig::comp_vector, 0, 1023>},
    {"cq_moderation", "completions per CQ event, 0-65535",
     kUint<&VerbsConfig::cq_moderation, 0, 65535>},
};

}  // namespace

std::span<const runtime::UriKey<VerbsConfig>> uri_keys() noexcept {
    return kKeys;
}

Result<VerbsConfig, Error> parse_uri(std::string_view uri) {
    auto parts = ChannelUri::parse(uri);
    if (!parts) {
        return parts.error();
    }
    return config_from(*parts);
}

Result<VerbsConfig, Error> config_from(const ChannelUri& uri) {
    const std::string& u = uri.text;
    if (uri.scheme != "verbs") {
        return fail<VerbsConfig>("expected verbs://DEVICE[:PORT]/GROUP:DPORT, got '" + u + "'");
    }
    const std::string_view rest = uri.address;
    const auto slash = rest.find('/');
    if (slash == std::string_view::npos || slash == 0) {
        return fail<VerbsConfig>("expected verbs://DEVICE[:PORT]/GROUP:DPORT, got '" + u + "'");
    }
    std::string_view host = rest.substr(0, slash);
    std::string_view target = rest.substr(slash + 1);
    VerbsConfig cfg;
    // host: [GID-or-IPv6][:PORT] | IPv4[:PORT] | DEVICE[:PORT]
    std::string_view port_text;
    if (host.front() == '[') {
        const auto close = host.find(']');
        if (close == std::string_view::npos) {
            return fail<VerbsConfig>("unterminated '[' in '" + u + "'");
        }
        if (close + 1 < host.size()) {
            if (host[close + 1] != ':') {
                return fail<VerbsConfig>("expected ':PORT' after ']' in '" + u + "'");
            }
            port_text = host.substr(close + 2);
        }
        host = host.substr(0, close + 1);
    } else if (const auto c = host.rfind(':'); c != std::string_view::npos) {
        port_text = host.substr(c + 1);
        host = host.substr(0, c);
    }
    if (!port_text.empty() || host.empty()) {
        std::uint64_t p = 0;
        if (host.empty() || !parse_u64(port_text, 255, p) || p == 0) {
            return fail<VerbsConfig>("bad HCA port '" + std::string(port_text) + "' in '" + u
                                     + "' (1-255)");
        }
        cfg.port = static_cast<int>(p);
    }
    if (Gid g{}; ip_to_gid(host, g)) {
        cfg.local_addr = std::string(host);
    } else {
        cfg.device = std::string(host);
    }
    // target: GROUP:DPORT (IPv6 in brackets)
    std::string_view group;
    std::string_view dport_text;
    if (!target.empty() && target.front() == '[') {
        const auto close = target.find(']');
        if (close == std::string_view::npos || close + 1 >= target.size()
            || target[close + 1] != ':') {
            return fail<VerbsConfig>("expected [IPV6]:DPORT after '/' in '" + u + "'");
        }
        group = target.substr(1, close - 1);
        dport_text = target.substr(close + 2);
    } else {
        const auto c = target.rfind(':');
        if (c == std::string_view::npos) {
            return fail<VerbsConfig>("missing :DPORT after the group in '" + u + "'");
        }
        group = target.substr(0, c);
        dport_text = target.substr(c + 1);
    }
    std::uint64_t dp = 0;
    if (!parse_u64(dport_text, 65535, dp) || dp == 0) {
        return fail<VerbsConfig>("bad data-destination port '" + std::string(dport_text) + "' in '"
                                 + u + "' (1-65535)");
    }
    cfg.dport = static_cast<std::uint16_t>(dp);
    if (Gid g{}; !ip_to_gid(group, g)) {
        return fail<VerbsConfig>("bad group address '" + std::string(group) + "' in '" + u
                                            + "' (an IPv4/IPv6 multicast group or a peer's "
                                              "address/GID)");
    }
    cfg.group = std::string(group);
    if (auto r = runtime::apply_keys<VerbsConfig>(kKeys, cfg, uri, "verbs"); !r) {
        return r.error();
    }
    return cfg;
}

// ---------------------------------------------------------------------------------------
// The transport

/// What create()'s steps hand on to the later ones.
struct CreateState {
    bool by_addr = false;  // the device was named by a local address, not by name
    ibv_port_attr pa{};
    std::uint16_t pkey = 0xffff;
    Gid dest{};        // the group's (or unicast peer's) GID
    Gid plain_dest{};  // the group address as written, as a GID (IPv4-mapped for IPv4)
    bool multicast = false;
    bool v4 = false;
    ibv_gid_entry ge{};  // the local GID chosen
    policy::DeviceLimits limits;
    policy::MembershipPlan plan;
};

namespace {

constexpr std::size_t kAhSlots = 256;
static_assert(static_cast<int>(policy::QpState::sqe) == IBV_QPS_SQE
              && static_cast<int>(policy::QpState::err) == IBV_QPS_ERR
              && static_cast<int>(policy::QpState::rts) == IBV_QPS_RTS);
// A QP replaced this many times within kRebuildWindowNs is not replaced again: the device or
// the configuration is at fault, the transport becomes fatal (said by the event and counters).
constexpr std::size_t kMaxRebuilds = 4;
constexpr std::int64_t kRebuildWindowNs = 1'000'000'000;
// AhSlot::state. The owner thread moves free -> requested and anything -> evict; the control
// thread moves requested/failed -> ready/failed and evict -> free.
constexpr std::uint8_t kSlotFree = 0;
constexpr std::uint8_t kSlotRequested = 1;
constexpr std::uint8_t kSlotReady = 2;
constexpr std::uint8_t kSlotFailed = 3;
constexpr std::uint8_t kSlotEvict = 4;

/// One unicast destination's address handle (§7), shared with the control thread.
struct AhSlot {
    std::atomic<std::uint8_t> state{kSlotFree};
    // Written by the owner thread while free, read by the control thread after `requested`.
    Endpoint peer{};
    policy::SourceRoute route{};
    std::uint64_t last_use = 0;  // owner thread only
    // Control thread only, published by `ready`.
    ibv_ah* ah = nullptr;
    std::shared_ptr<ibv_ah> hold;  // the handle, maybe shared with other channels (§1.1)
    std::uint32_t failures = 0;
    std::chrono::steady_clock::time_point retry_at{};
    // IB: the SA's path to the peer, asked once per slot (a query blocks up to ~1 s), not
    // again on each retry of a failed AH creation.
    bool path_known = false;
    policy::PathFacts path{};
};

bool is_port_event(ibv_event_type t) noexcept {
    switch (t) {
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_PKEY_CHANGE:
        case IBV_EVENT_SM_CHANGE:
        case IBV_EVENT_CLIENT_REREGISTER:
        case IBV_EVENT_GID_CHANGE: return true;
        default: return false;
    }
}

ibv_ah_attr to_attr(const policy::AhFields& f) noexcept {
    ibv_ah_attr a{};
    a.is_global = f.is_global ? 1 : 0;
    std::memcpy(a.grh.dgid.raw, f.dgid.data(), 16);
    a.grh.flow_label = f.flow_label;
    a.grh.sgid_index = f.sgid_index;
    a.grh.hop_limit = f.hop_limit;
    a.grh.traffic_class = f.traffic_class;
    a.dlid = f.dlid;
    a.sl = f.sl;
    a.src_path_bits = f.src_path_bits;
    a.port_num = f.port_num;
    a.static_rate = f.static_rate;
    return a;
}

std::vector<policy::GidEntry> read_gid_table(ibv_context* ctx, std::uint8_t port, int len) {
    std::vector<policy::GidEntry> t(static_cast<std::size_t>(std::max(len, 0)));
    for (std::size_t i = 0; i < t.size(); ++i) {
        ibv_gid_entry e{};
        if (ibv_query_gid_ex(ctx, port, static_cast<std::uint32_t>(i), &e, 0) != 0) {
            continue;  // ENODATA: an empty entry
        }
        std::memcpy(t[i].gid.data(), e.gid.raw, 16);
        t[i].ifindex = e.ndev_ifindex;
        t[i].type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? policy::GidType::roce_v2
                    : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? policy::GidType::roce_v1
                                                         : policy::GidType::ib;
        t[i].valid = t[i].gid != Gid{};
    }
    return t;
}

std::uint64_t memlock_limit() noexcept {
    rlimit rl{};
    if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) {
        return std::numeric_limits<std::uint64_t>::max();
    }
    return rl.rlim_cur;
}

bool is_memory_errno(int e) noexcept {
    return e == ENOMEM || e == EAGAIN || e == EPERM;
}

/// Wakes the control thread (an eventfd write: one system call, nothing else).
void wake(int fd) noexcept {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
}

std::string hex_text(const Gid& g) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string s;
    for (const std::uint8_t b : g) {
        s += kHex[b >> 4U];
        s += kHex[b & 0xfU];
    }
    return s;
}

}  // namespace

struct VerbsTransport::Impl {
    // create()'s steps, in order.
    Result<void, Error> open_device(CreateState& st);  // by name/addr
    Result<void, Error> query_port(CreateState& st);   // limits, group
    Result<void, Error> choose_gid(CreateState& st);   // GID, MTU
    Result<void, Error> join_sa(CreateState& st);      // IB: SA membership (every role), MLID
    Result<void, Error> create_resources();            // PD, pool, MR, CQs, then create_qp()
    Result<void, Error> create_qp();                   // the UD QP, its states, the receive ring
    Result<void, Error> open_qp();                     // ibv_create_qp, inline stepped down
    Result<void, Error> join_group(const CreateState& st);  // IP join, attach, group AH
    Result<void, Error> start_control();                    // the control thread

    Impl() = default;
    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;
    Impl(Impl&&) = delete;
    Impl& operator=(Impl&&) = delete;
    // Declaration order = reverse teardown order (children below parents). The context and
    // the PD are the device's, shared with the process's other channels on it (§1.1).
    std::shared_ptr<DeviceShare> dev;
    std::uint64_t listen_id = 0;  // our listener of the device's async events
    ChannelPtr channel;
    std::unique_ptr<void, FreeDeleter> pool;  // rx slots then tx slots, page aligned
    MrPtr mr;
    CqPtr send_cq;
    CqPtr recv_cq;
    QpPtr qp;
    AhPtr group_ah;  // downstream destination (multicast group or unicast peer)
    std::atomic<ibv_ah*> live_group_ah{nullptr};  // what send_batch uses (the control thread
                                                  // swaps it after a new MLID)
    std::vector<AhPtr> retired_ahs;               // replaced group AHs: WRs may still use them
    std::array<AhSlot, kAhSlots> slots;           // upstream destinations (NAK/SPMR), by (GID, QPN)
    std::size_t slot_hw = 0;                      // slots below this index may be in use
    std::size_t last_slot = kAhSlots;             // the last slot found (one source: no scan)
    // Group membership: attached QP + IP-level join (RoCE) or SA membership (IB).
    bool attached = false;
    Gid mgid{};
    std::atomic<std::uint16_t> mlid{0};  // the control thread changes it after a re-join
    UniqueFd ip_join;
    std::unique_ptr<SaMembership> sa;
    std::unique_ptr<PortMembership> port_member;  // the host-wide count behind `sa` (§6.3)
    // The control thread: address handles, async events, SA re-joins (never the data path).
    std::thread ctl;
    UniqueFd ctl_wake;  // eventfd
    std::atomic<bool> ctl_stop{false};
    std::atomic<bool> fatal{false};
    // The QP failed (a send error, a flushed work request, a QP error event): the owner thread
    // brings it back (SQE -> RTS) or replaces it (ERR) before its next send or poll.
    std::atomic<bool> qp_broken{false};
    std::atomic<bool> rejoin_wanted{false};  // a fabric event asked the control thread
    std::atomic<ibv_qp*> live_qp{nullptr};   // `qp`, for the control thread's event check
    std::array<std::int64_t, kMaxRebuilds> rebuild_ns{};  // the last replacements' times
    std::size_t rebuilds = 0;
    ControlCounters ctl_counters;
    // take_events(): the counters behind each event kind as last reported (owner thread only).
    std::array<std::uint64_t, 8> events_seen{};
    policy::LocalPort local_port;

    VerbsConfig cfg;
    VerbsInfo info;
    mutable VerbsCounters counters;
    Gid local_gid{};
    std::uint16_t pkey = 0xffff;  // the port's first P_Key (IB PathRecord queries)
    std::uint32_t dest_qpn = kMulticastQpn;
    std::size_t mtu = 0;     // what we send (mtu=, the group's, the port's)
    std::size_t rx_mtu = 0;  // what a receive slot takes: the port's active MTU
    std::size_t max_inline = 0;
    std::size_t rx_stride = 0;
    std::size_t tx_stride = 0;
    std::byte* rx_base = nullptr;
    std::byte* tx_base = nullptr;

    // Send queue accounting: seq numbers of posted WRs; completion of a signalled WR
    // (wr_id = its seq) retires every WR up to it.
    std::uint64_t tx_posted = 0;
    std::uint64_t tx_done = 0;
    std::size_t signal_every = 1;
    std::vector<ibv_send_wr> swr;
    std::vector<ibv_sge> ssge;             // 2 per WR
    std::vector<std::uint32_t> wr_packet;  // WR index -> index of its packet in the chunk

    // Receive ring
    std::size_t rx_posted = 0;
    std::vector<ibv_wc> wc;       // polled completions
    std::size_t stash_begin = 0;  // completions polled by arm_wakeup, not yet handed out
    std::size_t stash_end = 0;
    std::vector<std::uint32_t> handed;  // slots handed out by the last poll_rx
    std::size_t handed_count = 0;
    std::vector<std::uint32_t> repost;  // slots waiting to be re-posted
    std::size_t repost_count = 0;
    std::vector<ibv_recv_wr> rwr;
    std::vector<ibv_sge> rsge;
    unsigned unacked_events = 0;
    std::uint64_t ah_clock = 0;

    ~Impl() {
        stop_control();
        // Explicit part of the teardown: leave the group before the QP goes, acknowledge CQ
        // events before the CQs go (ibv_destroy_cq waits for them otherwise).
        if (attached && qp) {
            (void)ibv_detach_mcast(qp.get(), reinterpret_cast<const ibv_gid*>(mgid.data()), mlid);
        }
        if (port_member) {
            // The SA record is the port's: only the host's last member leaves it.
            port_member->leave([this](bool last) {
                if (sa) {
                    sa->set_leave_on_close(last);
                }
                sa.reset();
            });
        }
        sa.reset();
        ip_join.reset();
        if (unacked_events != 0 && recv_cq) {
            ibv_ack_cq_events(recv_cq.get(), unacked_events);
        }
        for (auto& s : slots) {
            s.ah = nullptr;
            s.hold.reset();  // the AH goes when no other channel holds it
        }
        group_ah.reset();
        retired_ahs.clear();
        qp.reset();
        recv_cq.reset();
        send_cq.reset();
        mr.reset();
        pool.reset();
        channel.reset();
        dev.reset();  // the last channel on the device closes it
    }

    void post_receives(const std::uint32_t* slots_, std::size_t n) noexcept;
    // Owner thread: the unicast AH table.
    std::size_t find_slot(const Endpoint& peer) noexcept;
    void note_source(const Endpoint& peer, const policy::SourceRoute& route) noexcept;
    ibv_ah* unicast_ah(const Endpoint& peer) noexcept;
    void reap_send() noexcept;
    // Before a send of `n`: completions reaped, a failed QP recovered. False: fatal.
    bool send_ready(std::size_t n) noexcept {
        // Completions of signalled WRs (and any error: a send error stops the queue, every
        // later send would be flushed). An empty CQ costs a read of one entry, no system call.
        if (tx_posted - tx_done >= signal_every || tx_posted - tx_done + n > cfg.tx_depth) {
            reap_send();
        }
        return !fatal.load(std::memory_order_relaxed)
               && (!qp_broken.load(std::memory_order_acquire) || recover_qp());
    }
    // Owner thread, after qp_broken: -> false when the QP could not be brought back (then
    // `fatal` is set). Receive completions still stashed are handed out first.
    bool recover_qp() noexcept;
    bool rebuild_qp() noexcept;
    // The UD QP's creation attributes (CQs, depths, 2 send SGEs), asking for `inline_bytes`.
    [[nodiscard]] ibv_qp_init_attr qp_attr(std::size_t inline_bytes) const noexcept {
        ibv_qp_init_attr qa{};
        qa.send_cq = send_cq.get();
        qa.recv_cq = recv_cq.get();
        qa.qp_type = IBV_QPT_UD;
        qa.sq_sig_all = 0;
        qa.cap.max_send_wr = static_cast<std::uint32_t>(cfg.tx_depth);
        qa.cap.max_recv_wr = static_cast<std::uint32_t>(cfg.rx_depth);
        qa.cap.max_send_sge = 2;
        qa.cap.max_recv_sge = 1;
        qa.cap.max_inline_data = static_cast<std::uint32_t>(inline_bytes);
        return qa;
    }
    // INIT, RTR, RTS: nullptr, or the state the QP failed to reach.
    const char* bring_up(ibv_qp* q) const noexcept;
    void refresh_counters() const noexcept;
    // Control thread.
    void stop_control() noexcept;
    void control_loop() noexcept;
    int service_slots() noexcept;  // -> ms until the next retry, -1 = none
    // The device's event thread (DeviceShare): counts, flags a rejoin or a broken QP, flushes
    // the AH slots, wakes the control thread. Never blocks.
    void on_async(const ibv_async_event& ev) noexcept;
    void flush_ahs(bool ours) noexcept;
    bool rejoin_sa() noexcept;
};

void VerbsTransport::Impl::post_receives(const std::uint32_t* slots_, std::size_t n) noexcept {
    std::size_t i = 0;
    while (i < n) {
        const std::size_t chunk = std::min(n - i, rwr.size());
        for (std::size_t k = 0; k < chunk; ++k) {
            const std::uint32_t s = slots_[i + k];
            rsge[k].addr = reinterpret_cast<std::uintptr_t>(rx_base + s * rx_stride + kRxGrhOffset);
            rsge[k].length = static_cast<std::uint32_t>(kGrhBytes + rx_mtu);
            rsge[k].lkey = mr->lkey;
            rwr[k].wr_id = s;
            rwr[k].sg_list = &rsge[k];
            rwr[k].num_sge = 1;
            rwr[k].next = k + 1 < chunk ? &rwr[k + 1] : nullptr;
        }
        ibv_recv_wr* bad = nullptr;
        const int rc = ibv_post_recv(qp.get(), rwr.data(), &bad);
        ++counters.rx_reposts;
        const std::size_t posted = rc == 0 ? chunk : static_cast<std::size_t>(bad - rwr.data());
        rx_posted += posted;
        if (rc != 0) {
            ++counters.completion_errors;  // the QP is in error; those slots are lost
            return;
        }
        i += chunk;
    }
}

// ---------------------------------------------------------------------------------------
// Unicast address handles (§7). The owner thread finds and requests; the control thread
// creates (a system call that can block ~1 s on RoCE while the neighbour resolves), caches
// failures and retries them with back-off. No allocation, lock or system call on the data
// path except one eventfd write when a new peer is first seen.

std::size_t VerbsTransport::Impl::find_slot(const Endpoint& peer) noexcept {
    auto matches = [&](std::size_t i) {
        const std::uint8_t st = slots[i].state.load(std::memory_order_relaxed);
        return st != kSlotFree && st != kSlotEvict && slots[i].peer.id == peer.id
               && slots[i].peer.addr == peer.addr;
    };
    if (last_slot < slot_hw && matches(last_slot)) {
        return last_slot;
    }
    for (std::size_t i = 0; i < slot_hw; ++i) {
        if (matches(i)) {
            last_slot = i;
            return i;
        }
    }
    return kAhSlots;
}

void VerbsTransport::Impl::note_source(const Endpoint& peer,
                                       const policy::SourceRoute& route) noexcept {
    if (const std::size_t i = find_slot(peer); i != kAhSlots) {
        AhSlot& s = slots[i];
        s.last_use = ++ah_clock;
        if (policy::route_changed(s.route, route, local_port.infiniband)) {
            // The source moved (a new LID or SL after an SM sweep): its cached handle would
            // send NAKs nowhere. Dropped; the next datagram from it requests a fresh one.
            ++counters.ah_route_changes;
            s.state.store(kSlotEvict, std::memory_order_release);
            wake(ctl_wake.get());
        }
        return;
    }
    std::size_t lru = kAhSlots;
    for (std::size_t i = 0; i < kAhSlots; ++i) {
        AhSlot& s = slots[i];
        const std::uint8_t st = s.state.load(std::memory_order_acquire);
        if (st == kSlotFree) {
            s.peer = peer;
            s.route = route;
            s.last_use = ++ah_clock;
            s.state.store(kSlotRequested, std::memory_order_release);
            slot_hw = std::max(slot_hw, i + 1);
            last_slot = i;
            wake(ctl_wake.get());
            return;
        }
        if (st != kSlotEvict && (lru == kAhSlots || s.last_use < slots[lru].last_use)) {
            lru = i;
        }
    }
    // Full: give up the least recently used peer's slot; this one gets a slot when it is seen
    // again (after the control thread freed that one).
    ++counters.ah_table_full;
    if (lru != kAhSlots) {
        slots[lru].state.store(kSlotEvict, std::memory_order_release);
        wake(ctl_wake.get());
    }
}

ibv_ah* VerbsTransport::Impl::unicast_ah(const Endpoint& peer) noexcept {
    std::size_t i = find_slot(peer);
    if (i == kAhSlots) {
        // Never heard from (an SPMR target named by an SPM's path address): request it now;
        // this packet goes nowhere (PGM repeats NAKs and SPMRs).
        note_source(peer, policy::SourceRoute{});
        ++counters.ah_pending;
        return nullptr;
    }
    AhSlot& s = slots[i];
    s.last_use = ++ah_clock;
    if (s.state.load(std::memory_order_acquire) != kSlotReady) {
        ++counters.ah_pending;
        return nullptr;
    }
    return s.ah;
}

void VerbsTransport::Impl::reap_send() noexcept {
    ibv_wc w[16];
    for (;;) {
        const int n = ibv_poll_cq(send_cq.get(), 16, w);
        if (n <= 0) {
            return;
        }
        for (int i = 0; i < n; ++i) {
            if (w[i].status == IBV_WC_WR_FLUSH_ERR) {
                ++counters.wr_flushed;
                qp_broken.store(true, std::memory_order_relaxed);
            } else if (w[i].status != IBV_WC_SUCCESS) {
                // A UD send error moves the QP to SQE (or ERR): every later send would be
                // flushed. recover_qp() runs before the next one.
                ++counters.completion_errors;
                counters.last_completion_error = ibv_wc_status_str(w[i].status);
                qp_broken.store(true, std::memory_order_relaxed);
            }
            // Completions arrive in posting order; a signalled WR retires all before it.
            tx_done = std::max(tx_done, w[i].wr_id + 1);
        }
    }
}

bool VerbsTransport::Impl::recover_qp() noexcept {
    qp_broken.store(false, std::memory_order_relaxed);
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    if (ibv_query_qp(qp.get(), &a, IBV_QP_STATE, &ia) == 0) {
        switch (policy::qp_recovery(static_cast<policy::QpState>(a.qp_state))) {
            case policy::QpRecovery::none: return true;  // a late flush of before: recovered
            case policy::QpRecovery::to_rts: {
                // A send error (UD: SQE). The receive side never stopped; the send queue
                // restarts with the next post.
                ibv_qp_attr m{};
                m.qp_state = IBV_QPS_RTS;
                m.cur_qp_state = IBV_QPS_SQE;
                if (ibv_modify_qp(qp.get(), &m, IBV_QP_STATE | IBV_QP_CUR_STATE) == 0) {
                    ++counters.qp_recovered;
                    return true;
                }
                break;  // then a new QP
            }
            case policy::QpRecovery::rebuild: break;
        }
    }
    return rebuild_qp();
}

// The QP in the error state (a fatal QP event, or rxe after any send error) is replaced:
// detached, destroyed, the CQs drained of what it left there, a new one made like it (same
// depths and inline grant), re-attached, every receive slot not held by the caller posted
// again. Its QPN is new: sources learn it from the next datagram (their NAK handles), and a
// receiver takes a source's new QPN from its next SPM. Owner thread; error path only.
bool VerbsTransport::Impl::rebuild_qp() noexcept {
    const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
    const std::size_t oldest = rebuilds % kMaxRebuilds;
    if (rebuilds >= kMaxRebuilds && now - rebuild_ns[oldest] < kRebuildWindowNs) {
        ++counters.qp_rebuild_failures;  // failing over and over: a device or config fault
        fatal.store(true, std::memory_order_relaxed);
        return false;
    }
    rebuild_ns[oldest] = now;
    ++rebuilds;
    const std::uint16_t group_lid = mlid.load();
    if (attached) {
        (void)ibv_detach_mcast(qp.get(), reinterpret_cast<const ibv_gid*>(mgid.data()), group_lid);
    }
    live_qp.store(nullptr, std::memory_order_release);
    qp.reset();  // waits until the control thread acknowledged the QP's async events
    for (ibv_cq* cq : {send_cq.get(), recv_cq.get()}) {
        ibv_wc w[16];
        while (ibv_poll_cq(cq, 16, w) > 0) {
        }
    }
    tx_done = tx_posted;
    rx_posted = 0;
    stash_begin = stash_end = 0;
    repost_count = 0;
    ibv_qp_init_attr qa = qp_attr(max_inline);  // the first QP's grant: no bisection again
    QpPtr fresh(ibv_create_qp(dev->pd(), &qa));
    const bool ok =
        fresh && bring_up(fresh.get()) == nullptr
        && (!attached
            || ibv_attach_mcast(fresh.get(), reinterpret_cast<const ibv_gid*>(mgid.data()),
                                group_lid)
                   == 0);
    if (!ok) {
        ++counters.qp_rebuild_failures;
        fatal.store(true, std::memory_order_relaxed);
        return false;
    }
    qp = std::move(fresh);
    info.qpn = qp->qp_num;
    live_qp.store(qp.get(), std::memory_order_release);
    // Every slot but those the caller holds (handed out, given back by release_rx).
    for (std::uint32_t s = 0; s < cfg.rx_depth; ++s) {
        if (std::find(handed.begin(), handed.begin() + static_cast<std::ptrdiff_t>(handed_count), s)
            == handed.begin() + static_cast<std::ptrdiff_t>(handed_count)) {
            repost[repost_count++] = s;
        }
    }
    post_receives(repost.data(), repost_count);
    repost_count = 0;
    ++counters.qp_rebuilt;
    return true;
}

void VerbsTransport::Impl::refresh_counters() const noexcept {
    ctl_counters.copy_to(counters);
    std::size_t used = 0;
    for (std::size_t i = 0; i < slot_hw; ++i) {
        used += slots[i].state.load(std::memory_order_relaxed) == kSlotReady ? 1U : 0U;
    }
    counters.ah_cache_size = used;
}

// ---------------------------------------------------------------------------------------
// The control thread

int VerbsTransport::Impl::service_slots() noexcept {
    using Clock = std::chrono::steady_clock;
    const auto now = Clock::now();
    auto next = Clock::time_point::max();
    for (auto& s : slots) {
        std::uint8_t st = s.state.load(std::memory_order_acquire);
        const bool due = st == kSlotRequested || (st == kSlotFailed && now >= s.retry_at);
        if (due) {
            policy::AhFields f = policy::unicast_ah(local_port, s.peer.addr, s.route);
            if (local_port.infiniband && !s.path_known) {
                // The path's own SL, from the SA (blocks up to ~1 s: this thread's job).
                auto path = query_path(info.device, info.port, local_gid, s.peer.addr, pkey);
                if (path) {
                    s.path = {path->dlid, path->sl, path->rate};
                    s.path_known = true;
                } else {
                    ctl_counters.path_fallbacks.fetch_add(1, std::memory_order_relaxed);
                }
            }
            if (s.path_known) {
                policy::apply_path(f, s.path);
            }
            // Another channel of this process may have made it already (§1.1).
            std::shared_ptr<ibv_ah> ah = dev->find_ah(f);
            const bool shared = ah != nullptr;
            if (!shared) {
                ibv_ah_attr a = to_attr(f);
                if (ibv_ah* made = ibv_create_ah(dev->pd(), &a); made != nullptr) {
                    ah = dev->keep_ah(f, made);
                }
            }
            if (ah != nullptr) {
                s.ah = ah.get();
                s.hold = std::move(ah);
                s.failures = 0;
                if (s.state.compare_exchange_strong(st, kSlotReady, std::memory_order_acq_rel)) {
                    (shared ? ctl_counters.ah_shared : ctl_counters.ah_created)
                        .fetch_add(1, std::memory_order_relaxed);
                    continue;
                }
            } else {
                ctl_counters.ah_failed.fetch_add(1, std::memory_order_relaxed);
                ++s.failures;
                // 10 ms, doubling, at most 10 s between attempts
                const auto backoff =
                    std::chrono::milliseconds(10LL << std::min<std::uint32_t>(s.failures - 1, 10));
                s.retry_at = now + backoff;
                if (s.state.compare_exchange_strong(st, kSlotFailed, std::memory_order_acq_rel)) {
                    next = std::min(next, s.retry_at);
                    continue;
                }
            }
            // evicted meanwhile: st now holds kSlotEvict
        }
        if (st == kSlotFailed) {
            next = std::min(next, s.retry_at);
        }
        if (st == kSlotEvict) {
            s.ah = nullptr;
            s.hold.reset();
            s.failures = 0;
            s.path_known = false;
            s.state.store(kSlotFree, std::memory_order_release);
        }
    }
    if (next == Clock::time_point::max()) {
        return -1;
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    return static_cast<int>(std::clamp<long long>(ms + 1, 1, 10000));
}

// Every cached unicast handle dropped (control thread): after a fabric event the routes
// they hold may be stale. The owner thread requests fresh ones as sources are heard again.
void VerbsTransport::Impl::flush_ahs(bool ours) noexcept {
    if (!ours) {
        return;
    }
    for (std::size_t i = 0; i < kAhSlots; ++i) {
        std::uint8_t st = slots[i].state.load(std::memory_order_acquire);
        while (st == kSlotRequested || st == kSlotReady || st == kSlotFailed) {
            if (slots[i].state.compare_exchange_weak(st, kSlotEvict, std::memory_order_acq_rel)) {
                ctl_counters.ah_flushed.fetch_add(1, std::memory_order_relaxed);
                break;
            }
        }
    }
}

void VerbsTransport::Impl::on_async(const ibv_async_event& ev) noexcept {
    ControlCounters& c = ctl_counters;
    bool rejoin = false;
    {
        c.async_events.fetch_add(1, std::memory_order_relaxed);
        // element is a union: port_num only for port events (a QP or CQ event carries a
        // pointer there).
        const bool ours = is_port_event(ev.event_type) && ev.element.port_num == info.port;
        switch (ev.event_type) {
            case IBV_EVENT_PORT_ERR:
                if (ours) {
                    c.port_err.fetch_add(1, std::memory_order_relaxed);
                    c.port_down.store(1, std::memory_order_relaxed);
                }
                break;
            case IBV_EVENT_PORT_ACTIVE:
                if (ours) {
                    c.port_active.fetch_add(1, std::memory_order_relaxed);
                    c.port_down.store(0, std::memory_order_relaxed);
                    rejoin = rejoin || sa != nullptr;  // the SM may have dropped the port
                }
                break;
            case IBV_EVENT_LID_CHANGE:
                // The kernel's multicast client takes a LID change as a group error: the SM
                // may have moved the port, join again.
                c.lid_change.fetch_add(ours ? 1 : 0, std::memory_order_relaxed);
                rejoin = rejoin || (ours && sa != nullptr);
                break;
            case IBV_EVENT_SM_CHANGE:
                c.sm_change.fetch_add(ours ? 1 : 0, std::memory_order_relaxed);
                rejoin = rejoin || (ours && sa != nullptr);  // a new SM may not know us
                break;
            case IBV_EVENT_CLIENT_REREGISTER:
                c.client_reregister.fetch_add(ours ? 1 : 0, std::memory_order_relaxed);
                rejoin = rejoin || (ours && sa != nullptr);  // the SM lost its records
                break;
            case IBV_EVENT_GID_CHANGE:
                c.gid_change.fetch_add(ours ? 1 : 0, std::memory_order_relaxed);
                break;
            case IBV_EVENT_PKEY_CHANGE:
                c.pkey_change.fetch_add(ours ? 1 : 0, std::memory_order_relaxed);
                break;
            case IBV_EVENT_DEVICE_FATAL:
                c.device_fatal.fetch_add(1, std::memory_order_relaxed);
                fatal.store(true, std::memory_order_relaxed);
                break;
            case IBV_EVENT_QP_FATAL:
            case IBV_EVENT_QP_REQ_ERR:
            case IBV_EVENT_QP_ACCESS_ERR:
                // Our QP is in error: nothing it sends or receives completes any more. The
                // owner thread replaces it (its receives, flushed, wake that thread up).
                if (ev.element.qp == live_qp.load(std::memory_order_acquire)) {
                    c.qp_fatal.fetch_add(1, std::memory_order_relaxed);
                    qp_broken.store(true, std::memory_order_release);
                }
                break;
            case IBV_EVENT_CQ_ERR:
                // A CQ overran (a provider bug given our depths): loud, fatal, not retried;
                // counted with the device's fatal errors.
                if (ev.element.cq == send_cq.get() || ev.element.cq == recv_cq.get()) {
                    c.device_fatal.fetch_add(1, std::memory_order_relaxed);
                    fatal.store(true, std::memory_order_relaxed);
                }
                break;
            default: break;
        }
        if (refreshes_routes(ev.event_type)) {
            flush_ahs(ours);  // the same events that start the share's new generation
        }
    }
    if (rejoin) {
        rejoin_wanted.store(true, std::memory_order_release);
    }
    wake(ctl_wake.get());  // the control thread: a rejoin, a flush, a count to report
}

// Re-joins the SA; a new MLID is attached (then the old one detached) and gets a new group AH.
bool VerbsTransport::Impl::rejoin_sa() noexcept {
    if (!sa->rejoin()) {
        ctl_counters.rejoin_failures.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    ctl_counters.rejoins.fetch_add(1, std::memory_order_relaxed);
    const sa::McMemberRecord& r = sa->record();
    if (r.mlid == mlid) {
        return true;
    }
    ctl_counters.mlid_changes.fetch_add(1, std::memory_order_relaxed);
    // The QP's attachment stays: providers key it by MGID and QPN (mlx5, rxe), so attaching
    // the new MLID and detaching the old one could remove the only attachment. Only the AH,
    // which carries the MLID as its DLID, is replaced.
    const policy::GroupPath path{r.sl, r.flow_label, r.rate};
    ibv_ah_attr a = to_attr(policy::group_ah(local_port, mgid, r.mlid, &path, cfg.hop_limit));
    AhPtr fresh(ibv_create_ah(dev->pd(), &a));
    if (!fresh) {
        ctl_counters.ah_failed.fetch_add(1, std::memory_order_relaxed);
        return false;  // retried at the next event
    }
    mlid = r.mlid;
    live_group_ah.store(fresh.get(), std::memory_order_release);
    if (group_ah && retired_ahs.size() < retired_ahs.capacity()) {
        retired_ahs.push_back(std::move(group_ah));
    }  // else: the old one is destroyed; its WRs completed long ago (a capacity of 16 events)
    group_ah = std::move(fresh);
    return true;
}

void VerbsTransport::Impl::control_loop() noexcept {
    pollfd fds[1] = {{ctl_wake.get(), POLLIN, 0}};
    using Clock = std::chrono::steady_clock;
    std::mt19937 rng(static_cast<std::uint32_t>(Clock::now().time_since_epoch().count())
                     ^ static_cast<std::uint32_t>(::getpid()));
    const auto draw = [&rng] {
        return static_cast<std::uint32_t>(rng());
    };
    bool rejoin = false;
    unsigned attempt = 0;
    Clock::time_point rejoin_at{};
    int timeout = -1;
    while (!ctl_stop.load(std::memory_order_acquire)) {
        int wait_ms = timeout;
        if (rejoin) {
            const auto left =
                std::chrono::ceil<std::chrono::milliseconds>(rejoin_at - Clock::now());
            wait_ms = static_cast<int>(std::max<std::int64_t>(left.count(), 0));
            wait_ms = timeout < 0 ? wait_ms : std::min(wait_ms, timeout);
        }
        (void)::poll(fds, 1, wait_ms);
        std::uint64_t drained = 0;
        [[maybe_unused]] const ssize_t got = ::read(ctl_wake.get(), &drained, sizeof drained);
        if (rejoin_wanted.exchange(false, std::memory_order_acq_rel) && !rejoin) {
            // a fabric event: every host heard it, spread the joins
            rejoin = true;
            attempt = 0;
            rejoin_at =
                Clock::now() + std::chrono::milliseconds(policy::rejoin_delay_ms(0, draw()));
        }
        if (rejoin && sa && Clock::now() >= rejoin_at) {
            if (rejoin_sa()) {
                rejoin = false;
            } else {
                rejoin_at = Clock::now()
                            + std::chrono::milliseconds(policy::rejoin_delay_ms(++attempt, draw()));
            }
        }
        timeout = service_slots();
    }
}

void VerbsTransport::Impl::stop_control() noexcept {
    if (listen_id != 0) {
        dev->unlisten(listen_id);  // no event reaches this channel any more
        listen_id = 0;
    }
    if (ctl.joinable()) {
        ctl_stop.store(true, std::memory_order_release);
        wake(ctl_wake.get());
        ctl.join();
    }
}

Result<void, Error> VerbsTransport::Impl::start_control() {
    ctl_wake.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!ctl_wake.valid()) {
        return fail<void>("eventfd failed: " + posix::errno_text(), std::errc::io_error);
    }
    retired_ahs.reserve(16);
    try {
        ctl = std::thread([this] { control_loop(); });
    } catch (const std::system_error& e) {
        return fail<void>(std::string("cannot start the verbs control thread: ") + e.what(),
                          std::errc::resource_unavailable_try_again);
    }
    listen_id = dev->listen([this](const ibv_async_event& ev) { on_async(ev); });
    info.device_channels = dev->channels();
    return {};
}

VerbsTransport::VerbsTransport(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
VerbsTransport::~VerbsTransport() = default;

Result<void, Error> VerbsTransport::Impl::open_device(CreateState& st) {
    if (cfg.tx_depth < 8 || cfg.rx_depth < 8 || cfg.batch == 0) {
        return fail<void>("verbs: rx_depth and tx_depth must be >= 8");
    }
    info.fork_safe = make_fork_safe();
    int n_dev = 0;
    DeviceList list(ibv_get_device_list(&n_dev));
    if (!list || n_dev == 0) {
        return fail<void>(
            "no RDMA devices on this machine (libibverbs found none; for Soft-RoCE: "
            "`rdma link add rxe0 type rxe netdev eth0`)",
            std::errc::no_such_device);
    }
    std::string names;
    for (int i = 0; i < n_dev; ++i) {
        names += (i != 0 ? ", " : "") + std::string(ibv_get_device_name(list.get()[i]));
    }
    Gid want_local{};
    st.by_addr = cfg.device.empty();
    if (st.by_addr && !ip_to_gid(cfg.local_addr, want_local)) {
        return fail<void>("verbs: neither a device nor a local address given");
    }
    // Find the device (by name, or the port whose GID table holds the local address).
    bool found = false;
    ContextPtr probe;  // the chosen device's context, handed to the process's share of it
    for (int i = 0; i < n_dev && !found; ++i) {
        ibv_device* d = list.get()[i];
        if (!st.by_addr && cfg.device != ibv_get_device_name(d)) {
            continue;
        }
        ContextPtr ctx(ibv_open_device(d));
        if (!ctx) {
            if (!st.by_addr) {
                return fail<void>("cannot open RDMA device " + cfg.device + ": "
                                      + posix::errno_text() + " (is ib_uverbs loaded?)",
                                  std::errc::no_such_device);
            }
            continue;
        }
        ibv_device_attr da{};
        if (ibv_query_device(ctx.get(), &da) != 0) {
            continue;
        }
        if (!st.by_addr) {
            if (cfg.port < 1 || cfg.port > da.phys_port_cnt) {
                return fail<void>("RDMA device " + cfg.device + " has port(s) 1.."
                                      + std::to_string(da.phys_port_cnt) + ", not "
                                      + std::to_string(cfg.port),
                                  std::errc::no_such_device);
            }
            info.device = cfg.device;
            info.port = cfg.port;
            probe = std::move(ctx);
            found = true;
            break;
        }
        for (int p = 1; p <= da.phys_port_cnt && !found; ++p) {
            ibv_port_attr pa{};
            if (ibv_query_port(ctx.get(), static_cast<std::uint8_t>(p), &pa) != 0) {
                continue;
            }
            // The RoCE v2 entry holding the address, not its RoCE v1 twin (§4).
            const auto table =
                read_gid_table(ctx.get(), static_cast<std::uint8_t>(p), pa.gid_tbl_len);
            const int gi = policy::pick_gid(table, pa.link_layer != IBV_LINK_LAYER_ETHERNET,
                                            is_v4_mapped(want_local), &want_local);
            if (gi >= 0) {
                info.device = ibv_get_device_name(d);
                info.port = p;
                if (cfg.gid_index < 0) {
                    info.gid_index = gi;
                }
                found = true;
            }
        }
        if (found) {
            probe = std::move(ctx);
        }
    }
    if (!found) {
        if (st.by_addr) {
            return fail<void>(
                "no RDMA port has the address " + cfg.local_addr
                    + " in a RoCE v2 (or IB) entry of its GID table (devices: " + names + ")",
                std::errc::no_such_device);
        }
        return fail<void>("no RDMA device '" + cfg.device + "' (devices: " + names + ")",
                          std::errc::no_such_device);
    }
    // One context, PD and event thread per device per process (§1.1): an existing share is
    // used and `probe` closed.
    auto share = DeviceShare::adopt(std::move(probe));
    if (!share) {
        return share.error();
    }
    dev = std::move(*share);
    return {};
}

Result<void, Error> VerbsTransport::Impl::query_port(CreateState& st) {
    ibv_context* ctx = dev->context();
    const auto port = static_cast<std::uint8_t>(info.port);
    ibv_port_attr& pa = st.pa;
    if (ibv_query_port(ctx, port, &pa) != 0) {
        return fail<void>("ibv_query_port failed on " + info.device, std::errc::io_error);
    }
    ibv_device_attr da{};
    if (ibv_query_device(ctx, &da) != 0) {
        return fail<void>("ibv_query_device failed on " + info.device, std::errc::io_error);
    }
    auto u32 = [](int v) {
        return static_cast<std::uint32_t>(std::max(v, 0));
    };
    st.limits = {u32(da.max_qp_wr), u32(da.max_cqe), u32(da.max_mcast_grp),
                 u32(da.max_mcast_qp_attach), u32(da.max_total_mcast_qp_attach)};
    // Depths beyond the device's limits (irdma: max_qp_wr 4063) are lowered, not refused (§1).
    const policy::Depths d = policy::clamp_depths(cfg.rx_depth, cfg.tx_depth, st.limits);
    cfg.rx_depth = d.rx;
    cfg.tx_depth = d.tx;
    info.notes = d.note;
    if (pa.state != IBV_PORT_ACTIVE) {
        return fail<void>(info.device + " port " + std::to_string(info.port) + " is "
                              + port_state_text(pa.state) + ", not ACTIVE",
                          std::errc::network_down);
    }
    info.infiniband = pa.link_layer != IBV_LINK_LAYER_ETHERNET;
    info.lid = info.infiniband ? pa.lid : 0;
    st.pkey = 0xffff;
    (void)ibv_query_pkey(ctx, port, 0, &st.pkey);
    st.pkey = ntohs(st.pkey);
    pkey = st.pkey;
    if (!group_to_gid(cfg.group, info.infiniband, st.pkey, st.dest)) {
        return fail<void>("bad group address '" + cfg.group + "'");
    }
    st.multicast = gid_is_multicast(st.dest);
    info.multicast = st.multicast;
    (void)ip_to_gid(cfg.group, st.plain_dest);
    st.v4 = is_v4_mapped(st.plain_dest);
    st.plan = policy::plan_membership(info.infiniband, st.multicast, cfg.attach);
    if (st.plan.attach_qp && !policy::has_ud_multicast(st.limits)) {
        return fail<void>(policy::no_multicast_text(info.device), std::errc::not_supported);
    }
    if (!st.multicast && cfg.dest_qpn == 0 && !cfg.attach) {
        return fail<void>("unicast destination " + cfg.group
                                  + " needs the receiver's QP number: add ?qpn=N (prizma-recv "
                                    "prints it)");
    }
    return {};
}

Result<void, Error> VerbsTransport::Impl::choose_gid(CreateState& st) {
    ibv_context* ctx = dev->context();
    const auto port = static_cast<std::uint8_t>(info.port);
    const auto table = read_gid_table(ctx, port, st.pa.gid_tbl_len);
    // GID: the one asked for, the one holding the local address, or the RoCE v2 entry of the
    // group's family (IPv6: a global one first; IB: index 0) (§4).
    if (cfg.gid_index >= 0) {
        info.gid_index = cfg.gid_index;
    } else if (!st.by_addr) {
        const int pick = policy::pick_gid(table, info.infiniband, st.v4, nullptr);
        if (pick < 0) {
            return fail<void>("no RoCE v2 " + std::string(st.v4 ? "IPv4" : "IPv6") + " GID on "
                                  + info.device + " port " + std::to_string(info.port)
                                  + " (GIDs:" + policy::describe_gids(table)
                                  + "); RoCE v1 is not used (unroutable); give gid_index=",
                              std::errc::no_such_device);
        }
        info.gid_index = pick;
    }
    ibv_gid_entry& ge = st.ge;
    if (info.gid_index >= st.pa.gid_tbl_len
        || ibv_query_gid_ex(ctx, port, static_cast<std::uint32_t>(info.gid_index), &ge, 0) != 0) {
        return fail<void>("gid_index " + std::to_string(info.gid_index) + " is empty on "
                              + info.device + " port " + std::to_string(info.port)
                              + " (GIDs:" + policy::describe_gids(table) + ")",
                          std::errc::no_such_device);
    }
    std::memcpy(local_gid.data(), ge.gid.raw, 16);
    info.gid = gid_text(local_gid);
    if (!info.infiniband && is_v4_mapped(local_gid) != st.v4) {
        return fail<void>("GID " + info.gid + " (index " + std::to_string(info.gid_index)
                          + ") is not of the group's address family; GIDs:"
                          + policy::describe_gids(table));
    }
    if (!info.infiniband && ge.ndev_ifindex != 0) {
        char name[IF_NAMESIZE] = {};
        if (::if_indextoname(ge.ndev_ifindex, name) != nullptr) {
            info.netdev = name;
        }
    }
    // Receive slots take what the port can carry (a peer whose `mtu=` is larger than ours
    // must not be truncated); what we send is capped by `mtu=` (and the group's, below).
    rx_mtu = mtu_bytes(st.pa.active_mtu);
    info.rx_mtu = rx_mtu;
    mtu = policy::effective_mtu(rx_mtu, 0, false, cfg.mtu);
    info.mtu = mtu;
    local_port = {info.infiniband, static_cast<std::uint8_t>(info.port),
                  static_cast<std::uint8_t>(info.gid_index), cfg.traffic_class, cfg.sl};
    return {};
}

// InfiniBand multicast, every role: a publisher joins too (as a full member: the SM creates a
// group only then) to learn the MLID its sends go to. Under the host-wide count (§6.3).
Result<void, Error> VerbsTransport::Impl::join_sa(CreateState& st) {
    mgid = st.dest;
    if (!st.multicast && cfg.dest_qpn != 0 && info.infiniband && cfg.dlid == 0) {
        // One-to-one on InfiniBand without dlid=: ask the SA for the path (LID, SL, MTU).
        auto path = query_path(info.device, info.port, local_gid, st.dest, st.pkey);
        if (!path) {
            return fail<void>("unicast destination " + cfg.group + " on InfiniBand: "
                                  + path.error().message()
                                  + " (or give the receiver's LID: ?dlid=N, its `ibv_devinfo` "
                                    "port_lid)",
                              path.error().code());
        }
        cfg.dlid = path->dlid;
        local_port.sl = path->sl;
        mtu = policy::effective_mtu(mtu, path->mtu, true, 0);
        info.mtu = mtu;
    }
    if (!st.plan.sa_join) {
        return {};
    }
    sa::McMemberRecord want;
    want.mgid = st.dest;
    want.port_gid = local_gid;
    want.qkey = cfg.qkey;
    want.pkey = st.pkey;
    want.tclass = cfg.traffic_class;
    want.sl = cfg.sl;
    want.join_state = sa::JoinState::full_member;
    want.mtu = static_cast<std::uint8_t>((2U << 6U)
                                         | static_cast<unsigned>(st.pa.active_mtu));  // "exactly"
    // "exactly" the creator's link rate (a fixed 10 Gb/s capped faster fabrics); on a
    // mixed-rate fabric, create the group in the SM first (docs/RDMA-HARDWARE.md).
    const std::uint8_t rate = policy::ib_rate_code(st.pa.active_width, st.pa.active_speed);
    want.rate = static_cast<std::uint8_t>((2U << 6U) | (rate != 0 ? rate : 3U));
    want.scope = 2;  // link-local
    const std::string key = info.device + "-" + std::to_string(info.port) + "-" + hex_text(mgid);
    auto member =
        PortMembership::enter(PortMembership::default_dir(), key, [&](bool) -> Result<void, Error> {
            // Every member joins (idempotent at the SA, and it brings the MLID); only the
            // last one leaves.
            auto m = SaMembership::join(info.device, info.port, want);
            if (!m) {
                return m.error();
            }
            sa = std::move(*m);
            return {};
        });
    if (!member) {
        return member.error();
    }
    port_member = std::move(*member);
    const sa::McMemberRecord& r = sa->record();
    mlid = r.mlid;
    info.mlid = mlid;
    // The payload MTU is the group's when it is smaller than the port's (§3).
    mtu = policy::effective_mtu(mtu, r.mtu, true, 0);
    info.mtu = mtu;
    return {};
}

Result<void, Error> VerbsTransport::Impl::create_resources() {
    ibv_context* ctx = dev->context();
    // Pinned memory: stated, bounded by pinned_max (rx_depth lowered to fit) (§11).
    if (cfg.pinned_max != 0) {
        const std::size_t rx =
            policy::rx_depth_for_limit(cfg.rx_depth, cfg.tx_depth, {rx_mtu, mtu}, cfg.pinned_max);
        if (rx == 0) {
            return fail<void>(
                "pinned_max=" + std::to_string(cfg.pinned_max)
                + " is below what 8 receive slots and tx_depth " + std::to_string(cfg.tx_depth)
                + " need at MTU " + std::to_string(mtu) + " ("
                + std::to_string(policy::pinned_estimate(8, cfg.tx_depth, {rx_mtu, mtu}))
                + " bytes)");
        }
        if (rx != cfg.rx_depth) {
            info.notes += (info.notes.empty() ? "" : "; ") + std::string("rx_depth ")
                          + std::to_string(cfg.rx_depth) + " lowered to " + std::to_string(rx)
                          + " for pinned_max=" + std::to_string(cfg.pinned_max);
            cfg.rx_depth = rx;
        }
    }
    info.rx_depth = cfg.rx_depth;
    info.tx_depth = cfg.tx_depth;
    info.pinned_bytes = policy::pinned_estimate(cfg.rx_depth, cfg.tx_depth, {rx_mtu, mtu});
    counters.pinned_bytes = info.pinned_bytes;
    // Resources: comp channel, PD, one registered pool, CQs, the UD QP.
    channel.reset(ibv_create_comp_channel(ctx));
    if (!channel) {
        return fail<void>("ibv_create_comp_channel failed", std::errc::io_error);
    }
    const int fl = ::fcntl(channel->fd, F_GETFL);
    (void)::fcntl(channel->fd, F_SETFL, fl | O_NONBLOCK);
    rx_stride = policy::rx_stride(rx_mtu);
    tx_stride = policy::tx_stride(mtu);
    const std::size_t bytes = policy::pool_bytes(cfg.rx_depth, cfg.tx_depth, {rx_mtu, mtu});
    pool.reset(std::aligned_alloc(4096, bytes));  // NOLINT(*-no-malloc)
    if (!pool) {
        return fail<void>("cannot allocate the " + std::to_string(bytes) + "-byte pool",
                          std::errc::not_enough_memory);
    }
    std::memset(pool.get(), 0, bytes);
    rx_base = static_cast<std::byte*>(pool.get());
    tx_base = rx_base + cfg.rx_depth * rx_stride;
    // (ibv_reg_mr): the function, not verbs.h's macro of the same name, whose enum arithmetic
    // clang rejects under -Werror (-Wdeprecated-enum-enum-conversion).
    mr.reset((ibv_reg_mr)(dev->pd(), pool.get(), bytes, static_cast<int>(IBV_ACCESS_LOCAL_WRITE)));
    if (!mr) {
        const int e = errno;
        return fail<void>(
            "ibv_reg_mr of " + std::to_string(bytes) + " bytes on " + info.device
                + " failed: " + posix::errno_text(e)
                + (is_memory_errno(e)
                       ? "; " + policy::memlock_advice(info.pinned_bytes, memlock_limit())
                       : std::string()),
            std::errc::not_enough_memory);
    }
    // Completion vectors: spread channels over the device's (one per core on real NICs).
    static std::atomic<unsigned> next_vector{0};
    const int nvec = std::max(ctx->num_comp_vectors, 1);
    const int vec = cfg.comp_vector >= 0
                        ? cfg.comp_vector % nvec
                        : static_cast<int>(next_vector.fetch_add(1) % static_cast<unsigned>(nvec));
    info.comp_vector = vec;
    info.comp_vectors = nvec;
    send_cq.reset(ibv_create_cq(ctx, static_cast<int>(cfg.tx_depth), nullptr, nullptr, vec));
    recv_cq.reset(ibv_create_cq(ctx, static_cast<int>(cfg.rx_depth), nullptr, channel.get(), vec));
    if (!send_cq || !recv_cq) {
        const int e = errno;
        return fail<void>(
            "ibv_create_cq failed: " + posix::errno_text(e)
                + (is_memory_errno(e)
                       ? "; " + policy::memlock_advice(info.pinned_bytes, memlock_limit())
                       : std::string()),
            std::errc::io_error);
    }
    if (cfg.cq_moderation > 1) {
        // Blocking mode: one CQ event per cq_moderation completions or 50 us, whichever first.
        ibv_modify_cq_attr m{};
        m.attr_mask = IBV_CQ_ATTR_MODERATE;
        m.moderate.cq_count = cfg.cq_moderation;
        m.moderate.cq_period = 50;
        if (ibv_modify_cq(recv_cq.get(), &m) != 0) {
            info.notes += (info.notes.empty() ? "" : "; ")
                          + std::string("CQ moderation not supported by ") + info.device;
        } else {
            info.cq_moderated = true;
        }
    }
    return create_qp();
}

// ibv_create_qp with the inline request stepped down to the device's maximum (irdma: 101),
// not dropped to none (§1).
Result<void, Error> VerbsTransport::Impl::open_qp() {
    ibv_qp_init_attr qa = qp_attr(0);
    ibv_qp* made = nullptr;
    int last_errno = 0;
    const policy::InlineGrant g = policy::step_inline(cfg.max_inline, [&](std::size_t n) {
        ibv_qp_init_attr a = qa;
        a.cap.max_inline_data = static_cast<std::uint32_t>(n);
        ibv_qp* q = ibv_create_qp(dev->pd(), &a);
        if (q == nullptr) {
            last_errno = errno;
            return false;
        }
        if (made != nullptr) {
            (void)ibv_destroy_qp(made);
        }
        made = q;
        qa.cap = a.cap;  // the grant
        return true;
    });
    if (g.granted < 0 || made == nullptr) {
        return fail<void>(
            "ibv_create_qp (UD, " + std::to_string(cfg.tx_depth) + " send / "
                + std::to_string(cfg.rx_depth) + " recv) on " + info.device
                + " failed: " + posix::errno_text(last_errno)
                + (is_memory_errno(last_errno)
                       ? "; " + policy::memlock_advice(info.pinned_bytes, memlock_limit())
                       : std::string()),
            std::errc::io_error);
    }
    // The QP of the largest accepted request (bisection may have made a smaller one last).
    if (static_cast<std::size_t>(g.granted) != qa.cap.max_inline_data) {
        ibv_qp_init_attr a = qa;
        a.cap.max_inline_data = static_cast<std::uint32_t>(g.granted);
        if (ibv_qp* q = ibv_create_qp(dev->pd(), &a); q != nullptr) {
            (void)ibv_destroy_qp(made);
            made = q;
            qa.cap = a.cap;
        }
    }
    qp.reset(made);
    max_inline = qa.cap.max_inline_data;  // the grant
    if (max_inline < cfg.max_inline) {
        info.notes += (info.notes.empty() ? "" : "; ") + std::string("inline ")
                      + std::to_string(cfg.max_inline) + " lowered to " + std::to_string(max_inline)
                      + " (device maximum)";
    }
    info.max_inline = max_inline;
    info.qpn = made->qp_num;
    return {};
}

const char* VerbsTransport::Impl::bring_up(ibv_qp* q) const noexcept {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = static_cast<std::uint8_t>(info.port);
    a.qkey = cfg.qkey;
    if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) != 0) {
        return "INIT";
    }
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(q, &a, IBV_QP_STATE) != 0) {
        return "RTR";
    }
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) != 0) {
        return "RTS";
    }
    return nullptr;
}

// The UD QP through INIT, RTR, RTS; the work-request scratch; the receive ring filled.
Result<void, Error> VerbsTransport::Impl::create_qp() {
    if (auto r = open_qp(); !r) {
        return r;
    }
    if (const char* step = bring_up(qp.get()); step != nullptr) {
        return fail<void>(std::string("UD QP to ") + step + " failed: " + posix::errno_text(),
                          std::errc::io_error);
    }
    live_qp.store(qp.get(), std::memory_order_release);
    // Work-request scratch, sized once.
    const std::size_t b = std::min(cfg.batch, cfg.tx_depth / 2);
    swr.resize(b);
    ssge.resize(2 * b);
    wr_packet.resize(b);
    rwr.resize(std::min<std::size_t>(cfg.rx_depth, 64));
    rsge.resize(rwr.size());
    wc.resize(cfg.batch);
    handed.resize(cfg.batch);
    repost.resize(cfg.rx_depth);
    // Signal often enough that the send queue never overflows: at most tx_depth/4 unsignalled.
    signal_every = std::max<std::size_t>(1, cfg.tx_depth / 4);

    // Fill the receive ring.
    std::vector<std::uint32_t> all(cfg.rx_depth);
    for (std::size_t i = 0; i < all.size(); ++i) {
        all[i] = static_cast<std::uint32_t>(i);
    }
    post_receives(all.data(), all.size());
    if (rx_posted != cfg.rx_depth) {
        return fail<void>("posting " + std::to_string(cfg.rx_depth) + " receives failed",
                          std::errc::io_error);
    }

    return {};
}

Result<void, Error> VerbsTransport::Impl::join_group(const CreateState& st) {
    if (st.plan.ip_join) {
        // RoCE: hold an IP-level membership on the netdev behind the GID. rxe delivers
        // nothing without it; real switches need the IGMP/MLD report it sends.
        const int fam = st.v4 ? AF_INET : AF_INET6;
        UniqueFd s(::socket(fam, SOCK_DGRAM | SOCK_CLOEXEC, 0));
        if (s.get() < 0) {
            return fail<void>("socket() for the IP multicast join failed", std::errc::io_error);
        }
        int rc = 0;
        if (st.v4) {
            ip_mreqn req{};
            std::memcpy(&req.imr_multiaddr, &st.plain_dest[12], 4);
            req.imr_ifindex = static_cast<int>(st.ge.ndev_ifindex);
            rc = ::setsockopt(s.get(), IPPROTO_IP, IP_ADD_MEMBERSHIP, &req, sizeof req);
        } else {
            ipv6_mreq req{};
            std::memcpy(&req.ipv6mr_multiaddr, st.plain_dest.data(), 16);
            req.ipv6mr_interface = st.ge.ndev_ifindex;
            rc = ::setsockopt(s.get(), IPPROTO_IPV6, IPV6_JOIN_GROUP, &req, sizeof req);
        }
        if (rc != 0) {
            return fail<void>("IP multicast join of " + cfg.group + " on "
                                  + (info.netdev.empty() ? "?" : info.netdev)
                                  + " failed: " + posix::errno_text(),
                              std::errc::io_error);
        }
        ip_join = std::move(s);
    }
    if (st.plan.attach_qp) {
        // The provider's code is the return value; a missing op (bnxt_re) sets no errno (§6).
        const int rc =
            ibv_attach_mcast(qp.get(), reinterpret_cast<const ibv_gid*>(st.dest.data()), mlid);
        if (rc != 0) {
            const bool unsupported = rc == EOPNOTSUPP || rc == ENOSYS;
            return fail<void>(policy::attach_error_text(info.device, gid_text(st.dest), rc),
                              unsupported ? std::errc::not_supported : std::errc::io_error);
        }
        attached = true;
    }
    if (st.multicast || cfg.dest_qpn != 0) {
        policy::GroupPath path;
        if (sa) {
            path = {sa->record().sl, sa->record().flow_label, sa->record().rate};
        }
        const policy::AhFields f =
            st.multicast
                ? policy::group_ah(local_port, st.dest, mlid, sa ? &path : nullptr, cfg.hop_limit)
                : policy::configured_unicast_ah(local_port, st.dest, cfg.dlid);
        ibv_ah_attr a = to_attr(f);
        group_ah.reset(ibv_create_ah(dev->pd(), &a));
        if (!group_ah) {
            return fail<void>(
                "ibv_create_ah for " + gid_text(st.dest) + " failed: " + posix::errno_text(),
                std::errc::host_unreachable);
        }
        live_group_ah.store(group_ah.get(), std::memory_order_release);
        dest_qpn = st.multicast ? kMulticastQpn : cfg.dest_qpn;
    }
    return {};
}

Result<std::unique_ptr<VerbsTransport>, Error> VerbsTransport::create(const VerbsConfig& cfg) {
    using R = std::unique_ptr<VerbsTransport>;
    auto im = std::make_unique<Impl>();
    im->cfg = cfg;
    CreateState st;
    for (auto step : {&Impl::open_device, &Impl::query_port, &Impl::choose_gid, &Impl::join_sa}) {
        if (auto r = ((*im).*step)(st); !r) {
            return r.error();
        }
    }
    if (auto r = im->create_resources(); !r) {
        return r.error();
    }
    if (auto r = im->join_group(st); !r) {
        return r.error();
    }
    if (auto r = im->start_control(); !r) {
        return r.error();
    }
    return R(new VerbsTransport(std::move(im)));
}

TransportCaps VerbsTransport::caps() const noexcept {
    TransportCaps c{impl_->mtu, impl_->swr.size(), kGrhBytes};
    c.max_rx_datagram = impl_->rx_mtu;
    return c;
}

int VerbsTransport::wakeup_fd() const noexcept {
    return impl_->channel->fd;
}

Result<bool> VerbsTransport::arm_wakeup() noexcept {
    Impl& m = *impl_;
    // Consume the events that woke us (each must be acknowledged), then re-arm. Completions
    // that arrived before the arm raise no event: poll once more and keep what we find.
    ibv_cq* cq = nullptr;
    void* cq_ctx = nullptr;
    while (ibv_get_cq_event(m.channel.get(), &cq, &cq_ctx) == 0) {
        ++m.unacked_events;
    }
    if (m.unacked_events >= 64) {
        ibv_ack_cq_events(m.recv_cq.get(), m.unacked_events);
        m.unacked_events = 0;
    }
    if (ibv_req_notify_cq(m.recv_cq.get(), 0) != 0) {
        return err(std::errc::io_error);
    }
    if (m.stash_end > m.stash_begin || m.qp_broken.load(std::memory_order_acquire)) {
        return false;  // poll now (a broken QP is recovered there)
    }
    const int n = ibv_poll_cq(m.recv_cq.get(), static_cast<int>(m.wc.size()), m.wc.data());
    if (n > 0) {
        m.stash_begin = 0;
        m.stash_end = static_cast<std::size_t>(n);
        return false;
    }
    return true;
}

void VerbsTransport::forget(const Endpoint& peer) noexcept {
    Impl& m = *impl_;
    if (const std::size_t i = m.find_slot(peer); i != kAhSlots) {
        m.slots[i].state.store(kSlotEvict, std::memory_order_release);
        wake(m.ctl_wake.get());
    }
}

std::string describe(const VerbsInfo& i, std::uint32_t qkey) {
    const auto hex = [](std::uint64_t v) {
        char b[24];
        (void)std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
        return std::string(b);
    };
    std::string d =
        "verbs " + i.device + " port " + std::to_string(i.port) + " gid["
        + std::to_string(i.gid_index) + "] " + i.gid
        + (i.infiniband ? " (InfiniBand, lid " + hex(i.lid) + ")"
                        : " (RoCE, netdev " + (i.netdev.empty() ? "?" : i.netdev) + ")");
    d += " qpn " + hex(i.qpn) + " mtu " + std::to_string(i.mtu);
    if (i.infiniband && i.multicast) {
        d += " mlid " + hex(i.mlid);
    }
    d += " qkey " + hex(qkey) + " rx_depth " + std::to_string(i.rx_depth) + " tx_depth "
         + std::to_string(i.tx_depth) + " inline " + std::to_string(i.max_inline) + " comp_vector "
         + std::to_string(i.comp_vector) + "/" + std::to_string(i.comp_vectors);
    if (i.device_channels > 1) {
        d += " device shared by " + std::to_string(i.device_channels) + " channels";
    }
    if (i.rx_mtu > i.mtu) {
        d += " receives up to " + std::to_string(i.rx_mtu);  // the port's MTU, over mtu=
    }
    if (!i.notes.empty()) {
        d += "; " + i.notes;
    }
    return d;
}

std::string VerbsTransport::description() const {
    return describe(impl_->info, impl_->cfg.qkey);
}

std::string VerbsTransport::local_address_text() const {
    return gid_text(impl_->local_gid) + " qpn=" + std::to_string(impl_->info.qpn);
}

Endpoint VerbsTransport::local_endpoint() const noexcept {
    Endpoint e;
    e.family = kFamilyVerbs;
    e.id = impl_->info.qpn;
    e.addr = impl_->local_gid;
    return e;
}

std::size_t VerbsTransport::take_events(std::span<TransportEvent> out) noexcept {
    const ControlCounters& c = impl_->ctl_counters;
    const auto get = [](const std::atomic<std::uint64_t>& a) {
        return a.load(std::memory_order_relaxed);
    };
    using K = TransportEvent::Kind;
    const VerbsCounters& o = impl_->counters;  // the owner thread's own
    const std::array<std::uint64_t, 8> now = {
        get(c.port_err),
        get(c.port_active),
        get(c.lid_change) + get(c.gid_change) + get(c.pkey_change),
        get(c.sm_change) + get(c.client_reregister),
        get(c.rejoins),
        get(c.rejoin_failures),
        get(c.device_fatal) + o.qp_rebuild_failures,
        o.qp_recovered + o.qp_rebuilt};
    constexpr std::array<K, 8> kinds = {K::link_down,      K::link_up,        K::address_changed,
                                        K::fabric_changed, K::group_rejoined, K::rejoin_failed,
                                        K::fatal,          K::qp_recovered};
    std::size_t n = 0;
    for (std::size_t i = 0; i < now.size() && n < out.size(); ++i) {
        if (now[i] != impl_->events_seen[i]) {
            out[n++] = TransportEvent{kinds[i], now[i] - impl_->events_seen[i]};
            impl_->events_seen[i] = now[i];
        }
    }
    return n;
}

std::size_t VerbsTransport::named_counters(std::span<NamedCounter> out) const noexcept {
    impl_->refresh_counters();
    return name_counters(impl_->counters, out);
}

const VerbsCounters& VerbsTransport::counters() const noexcept {
    impl_->refresh_counters();
    return impl_->counters;
}

const VerbsInfo& VerbsTransport::info() const noexcept {
    return impl_->info;
}

IpAddress VerbsTransport::local_ip() const noexcept {
    IpAddress a;
    if (is_v4_mapped(impl_->local_gid)) {
        a.version = 4;
        std::memcpy(a.bytes.data(), &impl_->local_gid[12], 4);
    } else {
        a.version = 6;
        a.bytes = impl_->local_gid;
    }
    return a;
}

Result<std::size_t> VerbsTransport::send_batch(std::span<const TxPacket> packets) noexcept {
    Impl& m = *impl_;
    const std::size_t depth = m.cfg.tx_depth;
    if (!m.send_ready(packets.size())) {
        return err(std::errc::io_error);  // the device or the QP failed for good
    }
    std::size_t room = depth - (m.tx_posted - m.tx_done);
    ibv_ah* const group = m.live_group_ah.load(std::memory_order_acquire);
    if (room == 0) {
        ++m.counters.tx_sq_full;
        return std::size_t{0};
    }
    std::size_t accepted = 0;
    while (accepted < packets.size() && room > 0) {
        const std::size_t chunk = std::min({packets.size() - accepted, room, m.swr.size()});
        std::size_t nwr = 0;
        std::size_t consumed = 0;
        for (; consumed < chunk; ++consumed) {
            const TxPacket& p = packets[accepted + consumed];
            const std::size_t len = p.header.size() + p.payload.size();
            ibv_ah* ah = group;
            std::uint32_t qpn = m.dest_qpn;
            if (p.route == Route::unicast) {
                ah = m.unicast_ah(p.to);
                qpn = p.to.id;
            }
            if (len > m.mtu) {
                ++m.counters.tx_oversize;
                continue;
            }
            if (ah == nullptr) {
                ++m.counters.tx_no_route;
                continue;
            }
            const std::uint64_t seq = m.tx_posted + nwr;
            m.wr_packet[nwr] = static_cast<std::uint32_t>(consumed);
            ibv_send_wr& wr = m.swr[nwr];
            ibv_sge* sge = &m.ssge[2 * nwr];
            wr = ibv_send_wr{};
            wr.wr_id = seq;
            wr.opcode = IBV_WR_SEND;
            wr.sg_list = sge;
            wr.wr.ud.ah = ah;
            wr.wr.ud.remote_qpn = qpn;
            wr.wr.ud.remote_qkey = m.cfg.qkey;
            if (len <= m.max_inline) {
                // Inline: the driver copies the bytes into the WQE; no lkey, no pool copy.
                wr.send_flags = IBV_SEND_INLINE;
                sge[0] = {reinterpret_cast<std::uintptr_t>(p.header.data()),
                          static_cast<std::uint32_t>(p.header.size()), 0};
                wr.num_sge = 1;
                if (!p.payload.empty()) {
                    sge[1] = {reinterpret_cast<std::uintptr_t>(p.payload.data()),
                              static_cast<std::uint32_t>(p.payload.size()), 0};
                    wr.num_sge = 2;
                }
                ++m.counters.tx_inline;
            } else {
                std::byte* slot = m.tx_base + (seq % depth) * m.tx_stride;
                std::memcpy(slot, p.header.data(), p.header.size());
                if (!p.payload.empty()) {
                    std::memcpy(slot + p.header.size(), p.payload.data(), p.payload.size());
                }
                sge[0] = {reinterpret_cast<std::uintptr_t>(slot), static_cast<std::uint32_t>(len),
                          m.mr->lkey};
                wr.num_sge = 1;
            }
            if ((seq + 1) % m.signal_every == 0) {
                wr.send_flags |= IBV_SEND_SIGNALED;
            }
            ++nwr;
        }
        if (nwr != 0) {
            for (std::size_t i = 0; i + 1 < nwr; ++i) {
                m.swr[i].next = &m.swr[i + 1];
            }
            m.swr[nwr - 1].next = nullptr;
            ibv_send_wr* bad = nullptr;
            const int rc = ibv_post_send(m.qp.get(), m.swr.data(), &bad);
            ++m.counters.tx_posts;
            const std::size_t posted = rc == 0 ? nwr : static_cast<std::size_t>(bad - m.swr.data());
            m.tx_posted += posted;
            m.counters.tx_datagrams += posted;
            room -= posted;
            if (rc != 0) {
                // ENOMEM = send queue full (should not happen given the accounting).
                ++m.counters.tx_sq_full;
                // Packets before the failed WR (sent or dropped as oversize/no route) count
                // as taken; the rest are offered again later.
                return accepted + m.wr_packet[posted];
            }
        }
        accepted += consumed;
    }
    return accepted;
}

Result<std::size_t> VerbsTransport::poll_rx(std::span<RxPacket> out) noexcept {
    Impl& m = *impl_;
    if (m.fatal.load(std::memory_order_relaxed)) {
        return err(std::errc::io_error);  // IBV_EVENT_DEVICE_FATAL: nothing works any more
    }
    if (m.stash_end == m.stash_begin && m.qp_broken.load(std::memory_order_acquire)
        && !m.recover_qp()) {
        return err(std::errc::io_error);
    }
    if (m.stash_end == m.stash_begin) {
        const int want = static_cast<int>(std::min(out.size(), m.wc.size()));
        const int n = ibv_poll_cq(m.recv_cq.get(), want, m.wc.data());
        if (n < 0) {
            return err(std::errc::io_error);
        }
        m.stash_begin = 0;
        m.stash_end = static_cast<std::size_t>(n);
    }
    std::size_t k = 0;
    const std::size_t lim = std::min(out.size(), m.handed.size());
    while (m.stash_begin < m.stash_end && k < lim) {
        const ibv_wc& w = m.wc[m.stash_begin++];
        --m.rx_posted;
        const auto slot = static_cast<std::uint32_t>(w.wr_id);
        if (w.status == IBV_WC_WR_FLUSH_ERR) {
            // The QP is in the error state: not re-posted (it would be flushed at once);
            // recover_qp() replaces the QP and posts every slot again.
            ++m.counters.wr_flushed;
            m.qp_broken.store(true, std::memory_order_relaxed);
            continue;
        }
        if (w.status != IBV_WC_SUCCESS || w.byte_len < kGrhBytes) {
            if (w.status == IBV_WC_LOC_LEN_ERR) {
                ++m.counters.rx_truncated;  // longer than the port's MTU: cannot happen
            }
            if (w.status != IBV_WC_SUCCESS) {
                ++m.counters.completion_errors;
                m.counters.last_completion_error = ibv_wc_status_str(w.status);
            }
            m.repost[m.repost_count++] = slot;
            continue;
        }
        const std::byte* grh = m.rx_base + slot * m.rx_stride + kRxGrhOffset;
        RxPacket& r = out[k];
        r.data = std::span<const std::byte>(grh + kGrhBytes, w.byte_len - kGrhBytes);
        r.from.family = kFamilyVerbs;
        r.from.port = 0;
        r.from.id = w.src_qp;
        if ((w.wc_flags & IBV_WC_GRH) != 0) {
            r.from.addr = source_gid_from_grh(reinterpret_cast<const std::uint8_t*>(grh));
        } else {
            r.from.addr = {};
        }
        // The way back (IB: the LID, SL and path bits ibv_init_ah_from_wc would use), for the
        // AH the control thread makes when a source is first seen (§7).
        if (m.cfg.attach) {  // subscribers NAK sources; publishers send nothing unicast
            m.note_source(r.from, policy::SourceRoute{w.slid, w.sl, w.dlid_path_bits});
        }
        r.rx_time_ns = 0;
        m.handed[k++] = slot;
        ++m.counters.rx_datagrams;
    }
    m.handed_count = k;
    // Low water: after taking these completions, (almost) no receive is left posted. The
    // device drops what arrives now (UD has no RNR retry): PGM will have to repair it.
    if (k != 0 && m.rx_posted < std::max<std::size_t>(1, m.cfg.rx_depth / 8)) {
        ++m.counters.rx_ring_low;
    }
    if (k == 0 && m.repost_count != 0) {
        m.post_receives(m.repost.data(), m.repost_count);
        m.repost_count = 0;
    }
    return k;
}

void VerbsTransport::release_rx(std::size_t count) noexcept {
    Impl& m = *impl_;
    count = std::min(count, m.handed_count);
    for (std::size_t i = 0; i < count; ++i) {
        m.repost[m.repost_count++] = m.handed[i];
    }
    m.handed_count = 0;
    // One chained post (one doorbell) for the whole batch.
    if (m.repost_count != 0) {
        m.post_receives(m.repost.data(), m.repost_count);
        m.repost_count = 0;
    }
}

int VerbsTransportTesting::force_qp_error(VerbsTransport& t) noexcept {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    return ibv_modify_qp(t.impl_->qp.get(), &a, IBV_QP_STATE);
}

}  // namespace prizma::verbs
