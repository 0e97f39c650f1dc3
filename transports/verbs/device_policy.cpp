// SPDX-License-Identifier: Apache-2.0
#include "transports/verbs/device_policy.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "lib/posix/errors.hpp"

namespace prizma::verbs::policy {
namespace {

constexpr std::size_t kSlotAlign = 64;
constexpr std::size_t kGrh = 40;
constexpr std::size_t kRxGrhOffset = kSlotAlign - kGrh;
constexpr std::size_t kPage = 4096;
constexpr std::size_t kQueueEntryBytes = 64;  // a WQE or CQE, roughly, as the kernel pins it

std::size_t round_up(std::size_t v, std::size_t a) noexcept {
    return (v + a - 1) / a * a;
}

std::string mib_text(std::uint64_t bytes) {
    const std::uint64_t tenths = (bytes * 10 + (1U << 20U) - 1) >> 20U;
    return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " MiB";
}

std::string hex4(unsigned v) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string s;
    for (int shift = 12; shift >= 0; shift -= 4) {
        s += kHex[(v >> static_cast<unsigned>(shift)) & 0xfU];
    }
    return s;
}

std::string gid_str(const Gid& g) {
    std::string s;
    for (std::size_t i = 0; i < 16; i += 2) {
        if (i != 0) {
            s += ':';
        }
        s += hex4((unsigned{g[i]} << 8U) | g[i + 1]);
    }
    return s;
}

const char* type_text(GidType t) noexcept {
    switch (t) {
        case GidType::ib: return "IB";
        case GidType::roce_v1: return "RoCE v1";
        case GidType::roce_v2: return "RoCE v2";
    }
    return "?";
}

}  // namespace

Depths clamp_depths(std::size_t rx, std::size_t tx, const DeviceLimits& dev) {
    Depths d;
    const std::size_t cap = std::min<std::size_t>(dev.max_qp_wr, dev.max_cqe);
    d.rx = std::min(rx, cap);
    d.tx = std::min(tx, cap);
    d.clamped = d.rx != rx || d.tx != tx;
    if (d.clamped) {
        d.note = "rx_depth " + std::to_string(rx) + " / tx_depth " + std::to_string(tx)
                 + " lowered to " + std::to_string(d.rx) + " / " + std::to_string(d.tx)
                 + " (device max_qp_wr " + std::to_string(dev.max_qp_wr) + ", max_cqe "
                 + std::to_string(dev.max_cqe) + ")";
    }
    return d;
}

InlineGrant step_inline(std::size_t want, const std::function<bool(std::size_t)>& accepts) {
    InlineGrant g;
    ++g.attempts;
    if (accepts(want)) {
        g.granted = static_cast<long long>(want);
        return g;
    }
    if (want == 0) {
        return g;
    }
    ++g.attempts;
    if (!accepts(0)) {
        return g;  // not about inline data
    }
    // accepts(lo) holds, accepts(hi) does not.
    std::size_t lo = 0;
    std::size_t hi = want;
    while (hi - lo > 1) {
        const std::size_t mid = lo + (hi - lo) / 2;
        ++g.attempts;
        if (accepts(mid)) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    g.granted = static_cast<long long>(lo);
    return g;
}

bool has_ud_multicast(const DeviceLimits& dev) noexcept {
    return dev.max_mcast_grp != 0 && dev.max_mcast_qp_attach != 0;
}

std::string no_multicast_text(const std::string& device) {
    return "RDMA device " + device
           + " has no UD multicast (its driver cannot attach a QP to a multicast group; "
             "bnxt_re is one such): use udp:// for this multicast channel, or verbs:// "
             "one-to-one (GROUP = the subscriber's address with ?qpn=N)";
}

std::string attach_error_text(const std::string& device, const std::string& mgid_text, int rc) {
    if (rc == EOPNOTSUPP || rc == ENOSYS || rc == -EOPNOTSUPP || rc == -ENOSYS) {
        return no_multicast_text(device) + " [ibv_attach_mcast: operation not supported]";
    }
    const int code = rc < 0 ? -rc : rc;
    const std::string why = code != 0 ? posix::errno_text(code) : "unknown error";
    return "ibv_attach_mcast " + mgid_text + " on " + device + " failed: " + why;
}

bool is_v4_mapped(const Gid& g) noexcept {
    static constexpr std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(g.data(), kPrefix, 12) == 0;
}

bool is_link_local(const Gid& g) noexcept {
    return g[0] == 0xfe && (g[1] & 0xc0U) == 0x80U;
}

int pick_gid(std::span<const GidEntry> table, bool infiniband, bool v4, const Gid* local) {
    int link_local = -1;
    for (std::size_t i = 0; i < table.size(); ++i) {
        const GidEntry& e = table[i];
        if (!e.valid) {
            continue;
        }
        if (local != nullptr) {
            if (e.gid == *local && (infiniband || e.type == GidType::roce_v2)) {
                return static_cast<int>(i);
            }
            continue;
        }
        if (infiniband) {
            return static_cast<int>(i);
        }
        if (e.type != GidType::roce_v2 || is_v4_mapped(e.gid) != v4) {
            continue;
        }
        if (v4 || !is_link_local(e.gid)) {
            return static_cast<int>(i);
        }
        if (link_local < 0) {
            link_local = static_cast<int>(i);
        }
    }
    return link_local;
}

std::string describe_gids(std::span<const GidEntry> table) {
    std::string out;
    for (std::size_t i = 0; i < table.size() && out.size() < 600; ++i) {
        if (table[i].valid) {
            out += " [" + std::to_string(i) + "] " + gid_str(table[i].gid) + " ("
                   + type_text(table[i].type) + ")";
        }
    }
    return out.empty() ? std::string(" none") : out;
}

std::size_t rx_stride(std::size_t mtu) noexcept {
    return round_up(kRxGrhOffset + kGrh + mtu, kSlotAlign);
}

std::size_t tx_stride(std::size_t mtu) noexcept {
    return round_up(mtu, kSlotAlign);
}

std::size_t pool_bytes(std::size_t rx, std::size_t tx, Mtus mtu) noexcept {
    return round_up(rx * rx_stride(mtu.rx) + tx * tx_stride(mtu.tx), kPage);
}

std::size_t pinned_estimate(std::size_t rx, std::size_t tx, Mtus mtu) noexcept {
    // pool + send queue + receive queue + send CQ + receive CQ
    return pool_bytes(rx, tx, mtu) + round_up(2 * (rx + tx) * kQueueEntryBytes, kPage);
}

std::size_t rx_depth_for_limit(std::size_t rx,
                               std::size_t tx,
                               Mtus mtu,
                               std::size_t limit) noexcept {
    if (pinned_estimate(8, tx, mtu) > limit) {
        return 0;
    }
    if (pinned_estimate(rx, tx, mtu) <= limit) {
        return rx;
    }
    std::size_t lo = 8;   // fits
    std::size_t hi = rx;  // does not fit
    while (hi - lo > 1) {
        const std::size_t mid = lo + (hi - lo) / 2;
        if (pinned_estimate(mid, tx, mtu) <= limit) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

std::string memlock_advice(std::size_t need, std::uint64_t limit) {
    std::string s = "pinning about " + mib_text(need) + " of memory failed; RLIMIT_MEMLOCK is ";
    s += limit == std::numeric_limits<std::uint64_t>::max() ? std::string("unlimited")
                                                            : mib_text(limit);
    s += ". Raise it for this user (/etc/security/limits.conf: `USER - memlock unlimited`, then "
         "log in again; systemd: LimitMEMLOCK=infinity; docker: --ulimit memlock=-1), or give "
         "the program CAP_IPC_LOCK (setcap cap_ipc_lock+ep PROGRAM), or pin less: "
         "rx_depth=, tx_depth=, mtu= or pinned_max=BYTES in the URI";
    return s;
}

std::string umad_advice(const std::string& ca, int port, int err) {
    std::string s = "cannot open the umad device of " + ca + " port " + std::to_string(port);
    if (err == EACCES || err == EPERM) {
        s += ": permission denied. /dev/infiniband/umad* is root-only by default; an "
             "InfiniBand subscriber needs read/write on it: add a udev rule (e.g. "
             "/etc/udev/rules.d/90-prizma-umad.rules: KERNEL==\"umad*\", GROUP=\"rdma\", "
             "MODE=\"0660\"), put the user in group rdma, and run `udevadm trigger`";
    } else if (err == ENOENT || err == ENODEV) {
        s += ": no such device; load ib_umad (modprobe ib_umad)";
    } else {
        s += ": " + (err != 0 ? posix::errno_text(err) : std::string("unknown error"))
             + " (needs the ib_umad module and read/write on /dev/infiniband/umad*)";
    }
    return s;
}

AhFields unicast_ah(const LocalPort& lp, const Gid& peer, const SourceRoute& route) noexcept {
    AhFields a;
    a.is_global = true;
    a.dgid = peer;
    a.sgid_index = lp.sgid_index;
    a.hop_limit = 64;
    a.traffic_class = lp.traffic_class;
    a.port_num = lp.port;
    a.sl = lp.sl;
    if (lp.infiniband) {
        a.dlid = route.slid;
        a.sl = route.sl;
        a.src_path_bits = route.dlid_path_bits;
    }
    return a;
}

bool route_changed(const SourceRoute& cached, const SourceRoute& now, bool infiniband) noexcept {
    return infiniband
           && (cached.slid != now.slid || cached.sl != now.sl
               || cached.dlid_path_bits != now.dlid_path_bits);
}

void apply_path(AhFields& a, const PathFacts& p) noexcept {
    a.sl = static_cast<std::uint8_t>(p.sl & 0x0FU);
    if (p.dlid != 0) {
        a.dlid = p.dlid;
    }
    a.static_rate = static_cast<std::uint8_t>(p.rate & 0x3FU);
}

AhFields configured_unicast_ah(const LocalPort& lp, const Gid& peer, std::uint16_t dlid) noexcept {
    AhFields a = unicast_ah(lp, peer, SourceRoute{});
    if (lp.infiniband) {
        a.dlid = dlid;
        a.sl = lp.sl;
    }
    return a;
}

AhFields group_ah(const LocalPort& lp,
                  const Gid& mgid,
                  std::uint16_t mlid,
                  const GroupPath* sa,
                  std::uint8_t hop_limit) noexcept {
    AhFields a;
    a.is_global = true;
    a.dgid = mgid;
    a.sgid_index = lp.sgid_index;
    a.hop_limit = hop_limit;
    a.traffic_class = lp.traffic_class;
    a.port_num = lp.port;
    a.sl = lp.sl;
    a.dlid = lp.infiniband ? mlid : 0;
    if (sa != nullptr) {
        a.sl = sa->sl;
        a.flow_label = sa->flow_label;
        a.static_rate = static_cast<std::uint8_t>(sa->rate & 0x3FU);
    }
    return a;
}

int rejoin_delay_ms(unsigned attempt, std::uint32_t random) noexcept {
    if (attempt == 0) {
        return static_cast<int>(random % 251U);
    }
    const std::uint32_t base = attempt > 9 ? 30000U : std::min(100U << (attempt - 1), 30000U);
    return static_cast<int>(base - base / 4 + random % (base / 2 + 1));
}

QpRecovery qp_recovery(QpState state) noexcept {
    switch (state) {
        case QpState::rts:
        case QpState::sqd: return QpRecovery::none;
        case QpState::sqe: return QpRecovery::to_rts;
        default: return QpRecovery::rebuild;
    }
}

MembershipPlan plan_membership(bool infiniband, bool multicast, bool subscriber) noexcept {
    MembershipPlan p;
    if (!multicast) {
        return p;
    }
    p.sa_join = infiniband;
    p.attach_qp = subscriber;
    p.ip_join = !infiniband && subscriber;
    return p;
}

std::size_t mtu_code_bytes(unsigned code) noexcept {
    if (code >= 1 && code <= 5) {
        return std::size_t{128} << code;
    }
    return 256;
}

std::size_t effective_mtu(std::size_t port_mtu,
                          unsigned group_mtu_code,
                          bool have_group,
                          std::size_t cap) noexcept {
    std::size_t m = port_mtu;
    if (have_group) {
        m = std::min(m, mtu_code_bytes(group_mtu_code & 0x3fU));
    }
    if (cap != 0) {
        m = std::min(m, cap);
    }
    return m;
}

Gid ib_mgid_v4(const std::uint8_t* group4, std::uint16_t pkey) noexcept {
    Gid g{};
    g[0] = 0xff;
    g[1] = 0x12;  // flags 1 (transient), scope 2 (link-local)
    g[2] = static_cast<std::uint8_t>(kMgidSignature >> 8U);
    g[3] = static_cast<std::uint8_t>(kMgidSignature);
    g[4] = static_cast<std::uint8_t>(pkey >> 8U);
    g[5] = static_cast<std::uint8_t>(pkey);
    g[12] = static_cast<std::uint8_t>(group4[0] & 0x0fU);
    g[13] = group4[1];
    g[14] = group4[2];
    g[15] = group4[3];
    return g;
}

std::uint8_t ib_rate_code(std::uint8_t active_width, std::uint32_t active_speed) noexcept {
    unsigned lanes = 0;
    switch (active_width) {
        case 1: lanes = 1; break;
        case 2: lanes = 4; break;
        case 4: lanes = 8; break;
        case 8: lanes = 12; break;
        case 16: lanes = 2; break;
        default: return 0;
    }
    unsigned lane_mbps = 0;  // the rates ibv_rate names (FDR10 counts as 10 Gb/s)
    switch (active_speed) {
        case 1: lane_mbps = 2500; break;      // SDR
        case 2: lane_mbps = 5000; break;      // DDR
        case 4:                               // QDR
        case 8: lane_mbps = 10000; break;     // FDR10
        case 16: lane_mbps = 14000; break;    // FDR
        case 32: lane_mbps = 25000; break;    // EDR
        case 64: lane_mbps = 50000; break;    // HDR
        case 128: lane_mbps = 100000; break;  // NDR
        case 256: lane_mbps = 200000; break;  // XDR
        default: return 0;
    }
    const unsigned mbps = lanes * lane_mbps;
    struct Code {
        unsigned mbps;
        std::uint8_t code;
    };
    static constexpr Code kCodes[] = {
        {2500, 2},    {5000, 5},    {10000, 3},   {14000, 11},  {20000, 6},   {25000, 15},
        {28000, 19},  {30000, 4},   {40000, 7},   {50000, 20},  {56000, 12},  {60000, 8},
        {80000, 9},   {100000, 16}, {112000, 13}, {120000, 10}, {168000, 14}, {200000, 17},
        {300000, 18}, {400000, 21}, {600000, 22}, {800000, 23}, {1200000, 24}};
    std::uint8_t best = 0;
    for (const Code& c : kCodes) {
        if (c.mbps <= mbps) {
            best = c.code;
        }
    }
    return best;
}

}  // namespace prizma::verbs::policy
