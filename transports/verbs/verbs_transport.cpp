// SPDX-License-Identifier: Apache-2.0
#include "transports/verbs/verbs_transport.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "lib/posix/errors.hpp"
#include "lib/posix/unique_fd.hpp"
#include "lib/runtime/parse.hpp"
#include "transports/verbs/ib_sa.hpp"

namespace prizma::verbs {
namespace {

// ---------------------------------------------------------------------------------------
// RAII for verbs objects: one deleter template; the member order of Resources encodes the
// teardown order libibverbs requires (children before parents).

template <auto DestroyFn>
struct VerbsDeleter {
    template <typename T>
    void operator()(T* object) const noexcept {
        [[maybe_unused]] const int rc = DestroyFn(object);
        assert(rc == 0 && "verbs object destroyed out of order (EBUSY) or twice");
    }
};
using ContextPtr = std::unique_ptr<ibv_context, VerbsDeleter<&ibv_close_device>>;
using ChannelPtr = std::unique_ptr<ibv_comp_channel, VerbsDeleter<&ibv_destroy_comp_channel>>;
using PdPtr = std::unique_ptr<ibv_pd, VerbsDeleter<&ibv_dealloc_pd>>;
using MrPtr = std::unique_ptr<ibv_mr, VerbsDeleter<&ibv_dereg_mr>>;
using CqPtr = std::unique_ptr<ibv_cq, VerbsDeleter<&ibv_destroy_cq>>;
using QpPtr = std::unique_ptr<ibv_qp, VerbsDeleter<&ibv_destroy_qp>>;
using AhPtr = std::unique_ptr<ibv_ah, VerbsDeleter<&ibv_destroy_ah>>;

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

constexpr std::size_t kAhCacheMax = 64;
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
        // IPoIB's IPv4 mapping (RFC 4391): ff12:401b:PKEY:0:0:0:<low 28 bits of the group>
        Gid ib{};
        ib[0] = 0xff;
        ib[1] = 0x12;
        ib[2] = 0x40;
        ib[3] = 0x1b;
        ib[4] = static_cast<std::uint8_t>(pkey >> 8U);
        ib[5] = static_cast<std::uint8_t>(pkey);
        ib[12] = static_cast<std::uint8_t>(g[12] & 0x0fU);
        ib[13] = g[13];
        ib[14] = g[14];
        ib[15] = g[15];
        g = ib;
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
    // RoCE v2 over IPv4: 20 unused bytes, then the IPv4 header (libibverbs tells them apart
    // the same way: version/IHL and a valid header checksum).
    if (ip4[0] == 0x45 && ipv4_header_sum(ip4) == 0xffff) {
        g[10] = 0xff;
        g[11] = 0xff;
        std::memcpy(&g[12], ip4 + 12, 4);
        return g;
    }
    std::memcpy(g.data(), grh + 8, 16);  // IB GRH / RoCE v2 IPv6: SGID at offset 8
    return g;
}

namespace {

/// The query keys of a verbs:// URI: name, bounds (decimal or 0x hex), what the error says,
/// and where the value goes.
struct KeySpec {
    std::string_view name;
    std::uint64_t min;
    std::uint64_t max;
    std::string_view range;
    void (*set)(VerbsConfig&, std::uint64_t) noexcept;
};

constexpr KeySpec kKeys[] = {
    {"gid_index", 0, 65535, "0-65535",
     [](VerbsConfig& c, std::uint64_t x) noexcept {
         c.gid_index = static_cast<int>(x);
     }},
    {"qkey", 0, 0x7fffffff, "0-0x7fffffff; controlled Q_Keys need CAP_NET_RAW",
     [](VerbsConfig& c, std::uint64_t x) noexcept {
         c.qkey = static_cast<std::uint32_t>(x);
     }},
    {"qpn", 2, 0xfffffe, "a unicast QP number, 2-0xfffffe",
     [](VerbsConfig& c, std::uint64_t x) noexcept {
         c.dest_qpn = static_cast<std::uint32_t>(x);
     }},
    {"rx_depth", 8, 1U << 16U, "8-65536",
     [](VerbsConfig& c, std::uint64_t x) noexcept {
         c.rx_depth = x;
     }},
    {"tx_depth", 8, 1U << 16U, "8-65536",
     [](VerbsConfig& c, std::uint64_t x) noexcept {
         c.tx_depth = x;
     }},
    {"inline", 0, 4096, "0-4096",
     [](VerbsConfig& c, std::uint64_t x) noexcept {
         c.max_inline = x;
     }},
    {"mtu", 256, 4096, "256-4096",
     [](VerbsConfig& c, std::uint64_t x) noexcept {
         c.mtu = x;
     }},
    {"hop_limit", 1, 255, "1-255",
     [](VerbsConfig& c, std::uint64_t x) noexcept {
         c.hop_limit = static_cast<std::uint8_t>(x);
     }},
    {"tclass", 0, 255, "0-255",
     [](VerbsConfig& c, std::uint64_t x) noexcept {
         c.traffic_class = static_cast<std::uint8_t>(x);
     }},
    {"sl", 0, 15, "0-15",
     [](VerbsConfig& c, std::uint64_t x) noexcept {
         c.sl = static_cast<std::uint8_t>(x);
     }},
};

const KeySpec* find_key(std::string_view name) noexcept {
    for (const auto& k : kKeys) {
        if (k.name == name) {
            return &k;
        }
    }
    return nullptr;
}

std::string key_names() {
    std::string out;
    for (const auto& k : kKeys) {
        out += out.empty() ? "" : ", ";
        out += k.name;
    }
    return out;
}

}  // namespace

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
    for (const auto& param : uri.params) {
        const KeySpec* spec = find_key(param.key);
        if (spec == nullptr) {
            return fail<VerbsConfig>("unknown key '" + param.key + "' in '" + u
                                     + "' (keys: " + key_names() + ")");
        }
        std::uint64_t x = 0;
        if (!parse_u64(param.value, spec->max, x) || x < spec->min) {
            std::string msg = "bad " + param.key;
            msg += " '" + param.value + "' in '" + u + "' (";
            msg += spec->range;
            msg += ")";
            return fail<VerbsConfig>(std::move(msg));
        }
        spec->set(cfg, x);
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
};

struct VerbsTransport::Impl {
    // create()'s steps, in order.
    Result<void, Error> open_device(CreateState& st);  // by name/addr
    Result<void, Error> query_port(CreateState& st);   // limits, group
    Result<void, Error> choose_gid(CreateState& st);   // GID, MTU
    Result<void, Error> create_resources();            // PD, pool, MR, CQs, then create_qp()
    Result<void, Error> create_qp();                   // the UD QP, its states, the receive ring
    Result<void, Error> join_group(const CreateState& st);  // + AH

    Impl() = default;
    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;
    Impl(Impl&&) = delete;
    Impl& operator=(Impl&&) = delete;
    // Declaration order = reverse teardown order (children below parents).
    ContextPtr context;
    ChannelPtr channel;
    PdPtr pd;
    std::unique_ptr<void, FreeDeleter> pool;  // rx slots then tx slots, page aligned
    MrPtr mr;
    CqPtr send_cq;
    CqPtr recv_cq;
    QpPtr qp;
    AhPtr group_ah;  // downstream destination (multicast group or unicast peer)
    struct CachedAh {
        Endpoint peer;
        AhPtr ah;
        std::uint64_t last_use = 0;
    };
    std::vector<CachedAh> ahs;  // upstream destinations (NAK/SPMR), by (GID, QPN)
    // Group membership: attached QP + IP-level join (RoCE) or SA membership (IB).
    bool attached = false;
    Gid mgid{};
    std::uint16_t mlid = 0;
    UniqueFd ip_join;
    std::unique_ptr<SaMembership> sa;

    VerbsConfig cfg;
    VerbsInfo info;
    VerbsCounters counters;
    Gid local_gid{};
    std::uint32_t dest_qpn = kMulticastQpn;
    std::size_t mtu = 0;
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
    std::uint64_t polls = 0;

    ~Impl() {
        // Explicit part of the teardown: leave the group before the QP goes, acknowledge CQ
        // events before the CQs go (ibv_destroy_cq waits for them otherwise).
        if (attached && qp) {
            (void)ibv_detach_mcast(qp.get(), reinterpret_cast<const ibv_gid*>(mgid.data()), mlid);
        }
        sa.reset();
        ip_join.reset();
        if (unacked_events != 0 && recv_cq) {
            ibv_ack_cq_events(recv_cq.get(), unacked_events);
        }
        ahs.clear();
        group_ah.reset();
        qp.reset();
        recv_cq.reset();
        send_cq.reset();
        mr.reset();
        pool.reset();
        pd.reset();
        channel.reset();
        context.reset();
    }

    void post_receives(const std::uint32_t* slots, std::size_t n) noexcept;
    ibv_ah* ah_for(const Endpoint& peer) noexcept;
    void reap_send() noexcept;
    void service_async() noexcept;
};

void VerbsTransport::Impl::post_receives(const std::uint32_t* slots, std::size_t n) noexcept {
    std::size_t i = 0;
    while (i < n) {
        const std::size_t chunk = std::min(n - i, rwr.size());
        for (std::size_t k = 0; k < chunk; ++k) {
            const std::uint32_t s = slots[i + k];
            rsge[k].addr = reinterpret_cast<std::uintptr_t>(rx_base + s * rx_stride + kRxGrhOffset);
            rsge[k].length = static_cast<std::uint32_t>(kGrhBytes + mtu);
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

ibv_ah* VerbsTransport::Impl::ah_for(const Endpoint& peer) noexcept {
    ++ah_clock;
    for (auto& e : ahs) {
        if (e.peer.addr == peer.addr && e.peer.id == peer.id) {
            e.last_use = ah_clock;
            return e.ah.get();
        }
    }
    // A new upstream peer: create its address handle (once; a syscall on RoCE, which resolves
    // the neighbour). Not on the data path: NAKs and SPMRs only.
    ibv_ah_attr a{};
    a.is_global = 1;
    std::memcpy(a.grh.dgid.raw, peer.addr.data(), 16);
    a.grh.sgid_index = static_cast<std::uint8_t>(info.gid_index);
    a.grh.hop_limit = 64;
    a.grh.traffic_class = cfg.traffic_class;
    a.sl = cfg.sl;
    a.port_num = static_cast<std::uint8_t>(info.port);
    ibv_ah* ah = ibv_create_ah(pd.get(), &a);
    if (ah == nullptr) {
        return nullptr;
    }
    ++counters.ah_created;
    if (ahs.size() >= kAhCacheMax) {
        auto lru = std::min_element(ahs.begin(), ahs.end(), [](const auto& x, const auto& y) {
            return x.last_use < y.last_use;
        });
        ahs.erase(lru);
    }
    ahs.push_back(CachedAh{peer, AhPtr(ah), ah_clock});
    counters.ah_cache_size = ahs.size();
    return ah;
}

void VerbsTransport::Impl::reap_send() noexcept {
    ibv_wc w[16];
    for (;;) {
        const int n = ibv_poll_cq(send_cq.get(), 16, w);
        if (n <= 0) {
            return;
        }
        for (int i = 0; i < n; ++i) {
            if (w[i].status != IBV_WC_SUCCESS) {
                ++counters.completion_errors;
                counters.last_completion_error = ibv_wc_status_str(w[i].status);
            }
            // Completions arrive in posting order; a signalled WR retires all before it.
            tx_done = std::max(tx_done, w[i].wr_id + 1);
        }
    }
}

void VerbsTransport::Impl::service_async() noexcept {
    ibv_async_event ev{};
    while (ibv_get_async_event(context.get(), &ev) == 0) {
        ++counters.async_events;
        const bool rereg = ev.event_type == IBV_EVENT_CLIENT_REREGISTER;
        ibv_ack_async_event(&ev);
        if (rereg && sa) {
            if (sa->rejoin()) {  // a failure is retried at the next re-register event
                ++counters.rejoins;
            }
        }
    }
}

VerbsTransport::VerbsTransport(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
VerbsTransport::~VerbsTransport() = default;

Result<void, Error> VerbsTransport::Impl::open_device(CreateState& st) {
    if (cfg.tx_depth < 8 || cfg.rx_depth < 8 || cfg.batch == 0) {
        return fail<void>("verbs: rx_depth and tx_depth must be >= 8");
    }
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
            context = std::move(ctx);
            found = true;
            break;
        }
        for (int p = 1; p <= da.phys_port_cnt && !found; ++p) {
            ibv_port_attr pa{};
            if (ibv_query_port(ctx.get(), static_cast<std::uint8_t>(p), &pa) != 0) {
                continue;
            }
            for (int gi = 0; gi < pa.gid_tbl_len; ++gi) {
                ibv_gid g{};
                if (ibv_query_gid(ctx.get(), static_cast<std::uint8_t>(p), gi, &g) != 0) {
                    continue;
                }
                if (std::memcmp(g.raw, want_local.data(), 16) == 0) {
                    info.device = ibv_get_device_name(d);
                    info.port = p;
                    if (cfg.gid_index < 0) {
                        info.gid_index = gi;
                    }
                    found = true;
                    break;
                }
            }
        }
        if (found) {
            context = std::move(ctx);
        }
    }
    if (!found) {
        if (st.by_addr) {
            return fail<void>("no RDMA port has the address " + cfg.local_addr + " in its GID "
                                      "table (devices: " + names + ")",
                           std::errc::no_such_device);
        }
        return fail<void>("no RDMA device '" + cfg.device + "' (devices: " + names + ")",
                          std::errc::no_such_device);
    }
    return {};
}

Result<void, Error> VerbsTransport::Impl::query_port(CreateState& st) {
    ibv_context* ctx = context.get();
    const auto port = static_cast<std::uint8_t>(info.port);
    ibv_port_attr& pa = st.pa;
    if (ibv_query_port(ctx, port, &pa) != 0) {
        return fail<void>("ibv_query_port failed on " + info.device, std::errc::io_error);
    }
    {
        ibv_device_attr da{};
        if (ibv_query_device(ctx, &da) == 0) {
            const auto max_wr = static_cast<std::size_t>(std::max(da.max_qp_wr, 0));
            const auto max_cqe = static_cast<std::size_t>(std::max(da.max_cqe, 0));
            if (cfg.rx_depth > max_wr || cfg.tx_depth > max_wr || cfg.rx_depth > max_cqe
                || cfg.tx_depth > max_cqe) {
                return fail<void>("verbs: rx_depth " + std::to_string(cfg.rx_depth) + " / tx_depth "
                                      + std::to_string(cfg.tx_depth) + " exceed what " + info.device
                                      + " allows (max_qp_wr " + std::to_string(max_wr)
                                      + ", max_cqe " + std::to_string(max_cqe) + ")",
                                  std::errc::invalid_argument);
            }
        }
    }
    if (pa.state != IBV_PORT_ACTIVE) {
        return fail<void>(info.device + " port " + std::to_string(info.port) + " is "
                              + port_state_text(pa.state) + ", not ACTIVE",
                          std::errc::network_down);
    }
    info.infiniband = pa.link_layer != IBV_LINK_LAYER_ETHERNET;
    st.pkey = 0xffff;
    (void)ibv_query_pkey(ctx, port, 0, &st.pkey);
    st.pkey = ntohs(st.pkey);
    if (!group_to_gid(cfg.group, info.infiniband, st.pkey, st.dest)) {
        return fail<void>("bad group address '" + cfg.group + "'");
    }
    st.multicast = gid_is_multicast(st.dest);
    info.multicast = st.multicast;
    (void)ip_to_gid(cfg.group, st.plain_dest);
    st.v4 = is_v4_mapped(st.plain_dest);
    if (!st.multicast && cfg.dest_qpn == 0 && !cfg.attach) {
        return fail<void>("unicast destination " + cfg.group
                                  + " needs the receiver's QP number: add ?qpn=N (prizma-recv "
                                    "prints it)");
    }
    return {};
}

Result<void, Error> VerbsTransport::Impl::choose_gid(CreateState& st) {
    ibv_context* ctx = context.get();
    const auto port = static_cast<std::uint8_t>(info.port);
    // GID: the one asked for, or the RoCE v2 entry of the group's family (IB: index 0).
    std::string gids;
    auto describe_gids = [&] {
        for (int gi = 0; gi < st.pa.gid_tbl_len && gids.size() < 400; ++gi) {
            ibv_gid_entry e{};
            if (ibv_query_gid_ex(ctx, port, static_cast<std::uint32_t>(gi), &e, 0) == 0) {
                Gid g{};
                std::memcpy(g.data(), e.gid.raw, 16);
                gids += " [" + std::to_string(gi) + "] " + gid_text(g)
                        + (e.gid_type == IBV_GID_TYPE_ROCE_V2 ? " (RoCE v2)" : "");
            }
        }
        return gids.empty() ? std::string(" none") : gids;
    };
    if (cfg.gid_index >= 0) {
        info.gid_index = cfg.gid_index;
    } else if (!st.by_addr) {
        int pick = -1;
        for (int gi = 0; gi < st.pa.gid_tbl_len && pick < 0; ++gi) {
            ibv_gid_entry e{};
            if (ibv_query_gid_ex(ctx, port, static_cast<std::uint32_t>(gi), &e, 0) != 0) {
                continue;
            }
            Gid g{};
            std::memcpy(g.data(), e.gid.raw, 16);
            // IB: index 0; RoCE: the first v2 entry of the group's family.
            const bool fits =
                info.infiniband || (e.gid_type == IBV_GID_TYPE_ROCE_V2 && is_v4_mapped(g) == st.v4);
            if (fits) {
                pick = gi;
            }
        }
        if (pick < 0) {
            return fail<void>("no RoCE v2 " + std::string(st.v4 ? "IPv4" : "IPv6") + " GID on "
                                  + info.device + " port " + std::to_string(info.port)
                                  + " (GIDs:" + describe_gids() + "); give gid_index=",
                              std::errc::no_such_device);
        }
        info.gid_index = pick;
    }
    ibv_gid_entry& ge = st.ge;
    if (info.gid_index >= st.pa.gid_tbl_len
        || ibv_query_gid_ex(ctx, port, static_cast<std::uint32_t>(info.gid_index), &ge, 0) != 0) {
        return fail<void>("gid_index " + std::to_string(info.gid_index) + " is empty on "
                              + info.device + " port " + std::to_string(info.port)
                              + " (GIDs:" + describe_gids() + ")",
                          std::errc::no_such_device);
    }
    std::memcpy(local_gid.data(), ge.gid.raw, 16);
    info.gid = gid_text(local_gid);
    if (!info.infiniband && is_v4_mapped(local_gid) != st.v4) {
        return fail<void>("GID " + info.gid + " (index " + std::to_string(info.gid_index)
                          + ") is not of the group's " + "address family; GIDs:" + describe_gids());
    }
    if (!info.infiniband && ge.ndev_ifindex != 0) {
        char name[IF_NAMESIZE] = {};
        if (::if_indextoname(ge.ndev_ifindex, name) != nullptr) {
            info.netdev = name;
        }
    }
    mtu = mtu_bytes(st.pa.active_mtu);
    if (cfg.mtu != 0) {
        mtu = std::min(mtu, cfg.mtu);
    }
    info.mtu = mtu;

    return {};
}

Result<void, Error> VerbsTransport::Impl::create_resources() {
    ibv_context* ctx = context.get();
    // Resources: comp channel, PD, one registered pool, CQs, the UD QP.
    channel.reset(ibv_create_comp_channel(ctx));
    if (!channel) {
        return fail<void>("ibv_create_comp_channel failed", std::errc::io_error);
    }
    const int fl = ::fcntl(channel->fd, F_GETFL);
    (void)::fcntl(channel->fd, F_SETFL, fl | O_NONBLOCK);
    const int afl = ::fcntl(ctx->async_fd, F_GETFL);
    (void)::fcntl(ctx->async_fd, F_SETFL, afl | O_NONBLOCK);
    pd.reset(ibv_alloc_pd(ctx));
    if (!pd) {
        return fail<void>("ibv_alloc_pd failed", std::errc::io_error);
    }
    rx_stride = (kRxGrhOffset + kGrhBytes + mtu + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
    tx_stride = (mtu + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
    const std::size_t page = 4096;
    std::size_t bytes = cfg.rx_depth * rx_stride + cfg.tx_depth * tx_stride;
    bytes = (bytes + page - 1) / page * page;
    pool.reset(std::aligned_alloc(page, bytes));  // NOLINT(*-no-malloc)
    if (!pool) {
        return fail<void>("cannot allocate the " + std::to_string(bytes) + "-byte pool",
                          std::errc::not_enough_memory);
    }
    std::memset(pool.get(), 0, bytes);
    rx_base = static_cast<std::byte*>(pool.get());
    tx_base = rx_base + cfg.rx_depth * rx_stride;
    // (ibv_reg_mr): the function, not verbs.h's macro of the same name, whose enum arithmetic
    // clang rejects under -Werror (-Wdeprecated-enum-enum-conversion).
    mr.reset((ibv_reg_mr)(pd.get(), pool.get(), bytes, static_cast<int>(IBV_ACCESS_LOCAL_WRITE)));
    if (!mr) {
        return fail<void>("ibv_reg_mr of " + std::to_string(bytes)
                              + " bytes failed: " + posix::errno_text() + " (RLIMIT_MEMLOCK?)",
                          std::errc::not_enough_memory);
    }
    send_cq.reset(ibv_create_cq(ctx, static_cast<int>(cfg.tx_depth), nullptr, nullptr, 0));
    recv_cq.reset(ibv_create_cq(ctx, static_cast<int>(cfg.rx_depth), nullptr, channel.get(), 0));
    if (!send_cq || !recv_cq) {
        return fail<void>("ibv_create_cq failed: " + posix::errno_text(), std::errc::io_error);
    }
    return create_qp();
}

// The UD QP (inline data stepped down to none if the device grants none) through INIT, RTR,
// RTS; the work-request scratch; the receive ring filled.
Result<void, Error> VerbsTransport::Impl::create_qp() {
    const auto port = static_cast<std::uint8_t>(info.port);
    ibv_qp_init_attr qa{};
    qa.send_cq = send_cq.get();
    qa.recv_cq = recv_cq.get();
    qa.qp_type = IBV_QPT_UD;
    qa.sq_sig_all = 0;
    qa.cap.max_send_wr = static_cast<std::uint32_t>(cfg.tx_depth);
    qa.cap.max_recv_wr = static_cast<std::uint32_t>(cfg.rx_depth);
    qa.cap.max_send_sge = 2;
    qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = static_cast<std::uint32_t>(cfg.max_inline);
    ibv_qp* made = ibv_create_qp(pd.get(), &qa);
    if (made == nullptr && cfg.max_inline != 0) {
        qa.cap.max_inline_data = 0;  // the device grants no inline: copy into the pool instead
        made = ibv_create_qp(pd.get(), &qa);
    }
    if (made == nullptr) {
        return fail<void>("ibv_create_qp (UD, " + std::to_string(cfg.tx_depth) + " send / "
                              + std::to_string(cfg.rx_depth)
                              + " recv) failed: " + posix::errno_text(),
                          std::errc::io_error);
    }
    qp.reset(made);
    max_inline = qa.cap.max_inline_data;  // the grant
    info.max_inline = max_inline;
    info.qpn = made->qp_num;
    {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = port;
        a.qkey = cfg.qkey;
        if (ibv_modify_qp(made, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)
            != 0) {
            return fail<void>("UD QP to INIT failed: " + posix::errno_text(), std::errc::io_error);
        }
        a = ibv_qp_attr{};
        a.qp_state = IBV_QPS_RTR;
        if (ibv_modify_qp(made, &a, IBV_QP_STATE) != 0) {
            return fail<void>("UD QP to RTR failed: " + posix::errno_text(), std::errc::io_error);
        }
        a = ibv_qp_attr{};
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = 0;
        if (ibv_modify_qp(made, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) != 0) {
            return fail<void>("UD QP to RTS failed: " + posix::errno_text(), std::errc::io_error);
        }
    }
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
    ahs.reserve(kAhCacheMax);
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
    const auto port = static_cast<std::uint8_t>(info.port);
    // Group membership (subscribers) and the downstream address handle.
    mgid = st.dest;
    if (st.multicast && cfg.attach) {
        if (info.infiniband) {
            sa::McMemberRecord want;
            want.mgid = st.dest;
            want.port_gid = local_gid;
            want.qkey = cfg.qkey;
            want.pkey = st.pkey;
            want.tclass = cfg.traffic_class;
            want.sl = cfg.sl;
            want.join_state = sa::JoinState::full_member;
            want.mtu = static_cast<std::uint8_t>(
                (2U << 6U) | static_cast<unsigned>(st.pa.active_mtu));  // "exactly"
            want.rate = static_cast<std::uint8_t>((2U << 6U) | 3U);     // 10 Gb/s
            want.scope = 2;                                             // link-local
            auto m = SaMembership::join(info.device, info.port, want);
            if (!m) {
                return m.error();
            }
            mlid = (*m)->record().mlid;
            sa = std::move(*m);
        } else {
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
        if (ibv_attach_mcast(qp.get(), reinterpret_cast<const ibv_gid*>(st.dest.data()), mlid)
            != 0) {
            return fail<void>(
                "ibv_attach_mcast " + gid_text(st.dest) + " failed: " + posix::errno_text(),
                std::errc::io_error);
        }
        attached = true;
    }
    if (st.multicast || cfg.dest_qpn != 0) {
        ibv_ah_attr a{};
        a.is_global = 1;
        std::memcpy(a.grh.dgid.raw, st.dest.data(), 16);
        a.grh.sgid_index = static_cast<std::uint8_t>(info.gid_index);
        a.grh.hop_limit = st.multicast ? cfg.hop_limit : 64;
        a.grh.traffic_class = cfg.traffic_class;
        a.dlid = mlid;
        a.sl = cfg.sl;
        a.port_num = port;
        if (sa) {
            a.grh.flow_label = sa->record().flow_label;
            a.sl = sa->record().sl;
        }
        group_ah.reset(ibv_create_ah(pd.get(), &a));
        if (!group_ah) {
            return fail<void>(
                "ibv_create_ah for " + gid_text(st.dest) + " failed: " + posix::errno_text(),
                std::errc::host_unreachable);
        }
        dest_qpn = st.multicast ? kMulticastQpn : cfg.dest_qpn;
    }
    return {};
}

Result<std::unique_ptr<VerbsTransport>, Error> VerbsTransport::create(const VerbsConfig& cfg) {
    using R = std::unique_ptr<VerbsTransport>;
    auto im = std::make_unique<Impl>();
    im->cfg = cfg;
    CreateState st;
    for (auto step : {&Impl::open_device, &Impl::query_port, &Impl::choose_gid}) {
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
    return R(new VerbsTransport(std::move(im)));
}

TransportCaps VerbsTransport::caps() const noexcept {
    return {impl_->mtu, impl_->swr.size(), kGrhBytes};
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
    if (m.stash_end > m.stash_begin) {
        return false;
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
    auto& v = impl_->ahs;
    v.erase(std::remove_if(
                v.begin(), v.end(),
                [&](const auto& e) { return e.peer.addr == peer.addr && e.peer.id == peer.id; }),
            v.end());
    impl_->counters.ah_cache_size = v.size();
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

std::size_t VerbsTransport::named_counters(std::span<NamedCounter> out) const noexcept {
    const VerbsCounters& c = impl_->counters;
    const NamedCounter all[] = {
        {"rx_datagrams", c.rx_datagrams}, {"rx_ring_low", c.rx_ring_low},
        {"rx_reposts", c.rx_reposts},     {"tx_datagrams", c.tx_datagrams},
        {"tx_inline", c.tx_inline},       {"tx_posts", c.tx_posts},
        {"tx_sq_full", c.tx_sq_full},     {"tx_oversize", c.tx_oversize},
        {"tx_no_route", c.tx_no_route},   {"completion_errors", c.completion_errors},
        {"ah_created", c.ah_created},     {"ah_cache_size", c.ah_cache_size},
        {"async_events", c.async_events}, {"rejoins", c.rejoins},
    };
    const std::size_t n = std::min(out.size(), std::size(all));
    std::copy_n(std::begin(all), n, out.begin());
    return std::size(all);
}

const VerbsCounters& VerbsTransport::counters() const noexcept {
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
    if (m.tx_posted - m.tx_done + packets.size() > depth) {
        m.reap_send();
    }
    std::size_t room = depth - (m.tx_posted - m.tx_done);
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
            ibv_ah* ah = m.group_ah.get();
            std::uint32_t qpn = m.dest_qpn;
            if (p.route == Route::unicast) {
                ah = m.ah_for(p.to);
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
    if ((++m.polls & 1023U) == 0) {
        m.service_async();
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
        if (w.status != IBV_WC_SUCCESS || w.byte_len < kGrhBytes) {
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

}  // namespace prizma::verbs
