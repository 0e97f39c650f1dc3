// SPDX-License-Identifier: Apache-2.0
// VerbsTransport::create() and its steps, in order: the device (by name or local address),
// the port and its limits, the GID and MTU, the IB SA join, the resources (pool, MR, CQs),
// the UD QP and its receive ring, the group (IP join, attach, AH); and the teardown.
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>

#include "lib/posix/errors.hpp"
#include "transports/verbs/verbs_impl.hpp"

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

static_assert(static_cast<int>(policy::QpState::sqe) == IBV_QPS_SQE
              && static_cast<int>(policy::QpState::err) == IBV_QPS_ERR
              && static_cast<int>(policy::QpState::rts) == IBV_QPS_RTS);
// A QP replaced this many times within kRebuildWindowNs is not replaced again: the device or

VerbsTransport::Impl::~Impl() {
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
    if (rx.unacked_events != 0 && recv_cq) {
        ibv_ack_cq_events(recv_cq.get(), rx.unacked_events);
    }
    ahs.drop_handles();  // each AH goes when no other channel holds it
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

ibv_qp_init_attr VerbsTransport::Impl::qp_attr(std::size_t inline_bytes) const noexcept {
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
        const std::size_t fits =
            policy::rx_depth_for_limit(cfg.rx_depth, cfg.tx_depth, {rx_mtu, mtu}, cfg.pinned_max);
        if (fits == 0) {
            return fail<void>(
                "pinned_max=" + std::to_string(cfg.pinned_max)
                + " is below what 8 receive slots and tx_depth " + std::to_string(cfg.tx_depth)
                + " need at MTU " + std::to_string(mtu) + " ("
                + std::to_string(policy::pinned_estimate(8, cfg.tx_depth, {rx_mtu, mtu}))
                + " bytes)");
        }
        if (fits != cfg.rx_depth) {
            info.notes += (info.notes.empty() ? "" : "; ") + std::string("rx_depth ")
                          + std::to_string(cfg.rx_depth) + " lowered to " + std::to_string(fits)
                          + " for pinned_max=" + std::to_string(cfg.pinned_max);
            cfg.rx_depth = fits;
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
    rx.stride = policy::rx_stride(rx_mtu);
    tx.stride = policy::tx_stride(mtu);
    const std::size_t bytes = policy::pool_bytes(cfg.rx_depth, cfg.tx_depth, {rx_mtu, mtu});
    pool.reset(std::aligned_alloc(4096, bytes));  // NOLINT(*-no-malloc)
    if (!pool) {
        return fail<void>("cannot allocate the " + std::to_string(bytes) + "-byte pool",
                          std::errc::not_enough_memory);
    }
    std::memset(pool.get(), 0, bytes);
    rx.base = static_cast<std::byte*>(pool.get());
    tx.base = rx.base + cfg.rx_depth * rx.stride;
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
    tx.wr.resize(b);
    tx.sge.resize(2 * b);
    tx.wr_packet.resize(b);
    rx.wr.resize(std::min<std::size_t>(cfg.rx_depth, 64));
    rx.sge.resize(rx.wr.size());
    rx.wc.resize(cfg.batch);
    rx.handed.resize(cfg.batch);
    rx.repost.resize(cfg.rx_depth);
    // Signal often enough that the send queue never overflows: at most tx_depth/4 unsignalled.
    tx.signal_every = std::max<std::size_t>(1, cfg.tx_depth / 4);

    // Fill the receive ring.
    std::vector<std::uint32_t> all(cfg.rx_depth);
    for (std::size_t i = 0; i < all.size(); ++i) {
        all[i] = static_cast<std::uint32_t>(i);
    }
    post_receives(all.data(), all.size());
    if (rx.posted != cfg.rx_depth) {
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

}  // namespace prizma::verbs
