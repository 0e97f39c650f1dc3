// SPDX-License-Identifier: Apache-2.0
// What the verbs transport decides from a device, without a device: fake device tables with
// the limits and GID tables of the NICs prizma's users own (irdma, mlx5, bnxt_re), SA replies,
// and the address-handle fields and MADs that follow, checked field by field. Issue 19.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

#include "tests/support/catch.hpp"
#include "tests/support/temp_dir.hpp"
#include "transports/verbs/device_policy.hpp"
#include "transports/verbs/port_refcount.hpp"
#include "transports/verbs/sa_mad.hpp"

namespace policy = prizma::verbs::policy;
namespace sa = prizma::verbs::sa;
using policy::Gid;
using policy::GidEntry;
using policy::GidType;

namespace {

Gid v4_gid(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
    Gid g{};
    g[10] = 0xff;
    g[11] = 0xff;
    g[12] = a;
    g[13] = b;
    g[14] = c;
    g[15] = d;
    return g;
}

Gid v6_gid(std::uint16_t first, std::uint8_t last) {
    Gid g{};
    g[0] = static_cast<std::uint8_t>(first >> 8U);
    g[1] = static_cast<std::uint8_t>(first);
    g[15] = last;
    return g;
}

GidEntry entry(const Gid& g, GidType t) {
    GidEntry e;
    e.gid = g;
    e.type = t;
    e.valid = true;
    e.ifindex = 3;
    return e;
}

// An mlx5/bnxt_re RoCE port with IPv4 192.0.2.1 and a global IPv6 address: every address
// appears twice, the RoCE v1 entry first; the link-local pair first of all.
std::vector<GidEntry> mlx5_roce_table() {
    return {
        entry(v6_gid(0xfe80, 1), GidType::roce_v1),     // 0
        entry(v6_gid(0xfe80, 1), GidType::roce_v2),     // 1
        entry(v4_gid(192, 0, 2, 1), GidType::roce_v1),  // 2
        entry(v4_gid(192, 0, 2, 1), GidType::roce_v2),  // 3
        entry(v6_gid(0x2001, 7), GidType::roce_v1),     // 4
        entry(v6_gid(0x2001, 7), GidType::roce_v2),     // 5
    };
}

// irdma on an E810 (max_qp_wr 4063, inline 101), bnxt_re (no UD multicast), mlx5.
constexpr policy::DeviceLimits kIrdma{4063, 1048575, 16384, 8, 131072};
constexpr policy::DeviceLimits kBnxtRe{65535, 65535, 0, 0, 0};
constexpr policy::DeviceLimits kMlx5{32768, 4194303, 2097152, 240, 503316480};

}  // namespace

TEST_CASE("verbs device limits: depths clamped to irdma's max_qp_wr, kept on mlx5",
          "[verbs][policy]") {
    const auto d = policy::clamp_depths(4096, 256, kIrdma);
    CHECK(d.rx == 4063);
    CHECK(d.tx == 256);
    CHECK(d.clamped);
    CHECK(d.note.find("4063") != std::string::npos);
    const auto m = policy::clamp_depths(4096, 256, kMlx5);
    CHECK(m.rx == 4096);
    CHECK(m.tx == 256);
    CHECK_FALSE(m.clamped);
    CHECK(m.note.empty());
    // the CQ bound counts too
    const auto c = policy::clamp_depths(4096, 4096, policy::DeviceLimits{65536, 1000, 1, 1, 1});
    CHECK(c.rx == 1000);
    CHECK(c.tx == 1000);
}

TEST_CASE("verbs inline: a request above the device's maximum steps down to it, not to 0",
          "[verbs][policy]") {
    // a fake irdma: ibv_create_qp refuses max_inline_data > 101
    std::vector<std::size_t> asked;
    auto irdma = [&](std::size_t n) {
        asked.push_back(n);
        return n <= 101;
    };
    const auto g = policy::step_inline(256, irdma);
    CHECK(g.granted == 101);
    CHECK(asked.front() == 256);
    CHECK(g.attempts == static_cast<int>(asked.size()));
    CHECK(g.attempts <= 12);
    // a device that takes the request: one attempt
    const auto all = policy::step_inline(256, [](std::size_t) { return true; });
    CHECK(all.granted == 256);
    CHECK(all.attempts == 1);
    // refused even without inline: the failure is something else (memory, limits)
    const auto none = policy::step_inline(256, [](std::size_t) { return false; });
    CHECK(none.granted == -1);
    // a device with no inline at all
    const auto zero = policy::step_inline(64, [](std::size_t n) { return n == 0; });
    CHECK(zero.granted == 0);
}

TEST_CASE("verbs no UD multicast: bnxt_re's limits and attach's EOPNOTSUPP say so plainly",
          "[verbs][policy]") {
    CHECK_FALSE(policy::has_ud_multicast(kBnxtRe));
    CHECK(policy::has_ud_multicast(kIrdma));
    CHECK(policy::has_ud_multicast(kMlx5));
    // the dummy op returns EOPNOTSUPP and leaves errno alone: the text comes from rc
    errno = 0;
    const std::string t = policy::attach_error_text("bnxt_re0", "::ffff:239.1.1.1", EOPNOTSUPP);
    INFO(t);
    CHECK(t.find("bnxt_re0 has no UD multicast") != std::string::npos);
    CHECK(t.find("udp://") != std::string::npos);
    CHECK(t.find("qpn=") != std::string::npos);
    const std::string other = policy::attach_error_text("mlx5_0", "ff12::1", ENOMEM);
    CHECK(other.find("no UD multicast") == std::string::npos);
    CHECK(other.find(std::system_category().message(ENOMEM)) != std::string::npos);
}

TEST_CASE("verbs GID choice: RoCE v2 only, the v2 twin of a local address, global IPv6 first",
          "[verbs][policy]") {
    const auto t = mlx5_roce_table();
    // IPv4 group: the v2 IPv4-mapped entry, never its v1 twin at index 2
    CHECK(policy::pick_gid(t, false, true, nullptr) == 3);
    // IPv6 group: the global v2 entry, not the link-local default at index 1
    CHECK(policy::pick_gid(t, false, false, nullptr) == 5);
    // by local address: the v2 entry holding it
    const Gid local4 = v4_gid(192, 0, 2, 1);
    CHECK(policy::pick_gid(t, false, true, &local4) == 3);
    const Gid local6 = v6_gid(0x2001, 7);
    CHECK(policy::pick_gid(t, false, false, &local6) == 5);
    // only link-local IPv6: that one (v2)
    const std::vector<GidEntry> ll(t.begin(), t.begin() + 4);
    CHECK(policy::pick_gid(ll, false, false, nullptr) == 1);
    // only RoCE v1 entries (a v1-only port): none fits, and the description says why
    const std::vector<GidEntry> v1{entry(v4_gid(192, 0, 2, 1), GidType::roce_v1)};
    CHECK(policy::pick_gid(v1, false, true, nullptr) == -1);
    CHECK(policy::pick_gid(v1, false, true, &local4) == -1);
    CHECK(policy::describe_gids(v1).find("RoCE v1") != std::string::npos);
    // an address not on the port
    const Gid other = v4_gid(10, 0, 0, 1);
    CHECK(policy::pick_gid(t, false, true, &other) == -1);
    // InfiniBand: index 0 (empty entries skipped), or the entry holding the local GID
    std::vector<GidEntry> ib{GidEntry{}, entry(v6_gid(0xfe80, 9), GidType::ib),
                             entry(v6_gid(0xfec0, 9), GidType::ib)};
    CHECK(policy::pick_gid(ib, true, true, nullptr) == 1);
    const Gid site = v6_gid(0xfec0, 9);
    CHECK(policy::pick_gid(ib, true, false, &site) == 2);
}

TEST_CASE("verbs pinned memory: stated, bounded by pinned_max, advice names what to change",
          "[verbs][policy]") {
    // the defaults at MTU 4096: 4096 receive slots of 4160 bytes + 256 send slots, page
    // rounded, plus the queues
    const std::size_t pool = policy::pool_bytes(4096, 256, {4096, 4096});
    CHECK(policy::rx_stride(4096) == 4160);
    CHECK(policy::tx_stride(4096) == 4096);
    CHECK(pool == (std::size_t{4096} * 4160 + std::size_t{256} * 4096 + 4095) / 4096 * 4096);
    const std::size_t need = policy::pinned_estimate(4096, 256, {4096, 4096});
    CHECK(need > pool);
    CHECK(need < pool + (1U << 20U));
    // pinned_max = 8 MiB: the largest rx depth that fits, and one more does not
    const std::size_t lim = 8U << 20U;
    const std::size_t rx = policy::rx_depth_for_limit(4096, 256, {4096, 4096}, lim);
    CHECK(rx < 4096);
    CHECK(rx >= 8);
    CHECK(policy::pinned_estimate(rx, 256, {4096, 4096}) <= lim);
    CHECK(policy::pinned_estimate(rx + 1, 256, {4096, 4096}) > lim);
    CHECK(policy::rx_depth_for_limit(4096, 256, {4096, 4096}, 1U << 30U) == 4096);
    CHECK(policy::rx_depth_for_limit(4096, 256, {4096, 4096}, 4096) == 0);
    // mtu=1024 on a 4096 port: receive slots still take a 4096-byte datagram (a peer sending
    // at the port MTU is not truncated), send slots are 1024.
    CHECK(policy::pool_bytes(8, 8, {4096, 1024}) == (8 * 4160 + 8 * 1024 + 4095) / 4096 * 4096);
    CHECK(policy::pool_bytes(64, 8, {4096, 1024}) > policy::pool_bytes(64, 8, {1024, 1024}));
    const std::string a = policy::memlock_advice(need, 8U << 20U);
    INFO(a);
    CHECK(a.find("8.0 MiB") != std::string::npos);
    CHECK(a.find("limits.conf") != std::string::npos);
    CHECK(a.find("CAP_IPC_LOCK") != std::string::npos);
    CHECK(a.find("pinned_max=") != std::string::npos);
    const std::string u = policy::umad_advice("mlx5_0", 1, EACCES);
    CHECK(u.find("udev") != std::string::npos);
    CHECK(u.find("KERNEL==\"umad*\"") != std::string::npos);
    CHECK(policy::umad_advice("mlx5_0", 1, ENOENT).find("modprobe ib_umad") != std::string::npos);
}

TEST_CASE("verbs IB unicast AH: DLID, SL and path bits from the completion, RoCE: GID only",
          "[verbs][policy]") {
    policy::LocalPort ib{true, 1, 0, 0x20, 3};
    const Gid peer = v6_gid(0xfe80, 0x42);
    // a NAK target seen in a completion: wc.slid 0x0017, wc.sl 5, wc.dlid_path_bits 2
    const auto a = policy::unicast_ah(ib, peer, policy::SourceRoute{0x0017, 5, 2});
    CHECK(a.is_global);
    CHECK(a.dgid == peer);
    CHECK(a.dlid == 0x0017);
    CHECK(a.sl == 5);
    CHECK(a.src_path_bits == 2);
    CHECK(a.port_num == 1);
    CHECK(a.sgid_index == 0);
    CHECK(a.traffic_class == 0x20);
    CHECK(a.hop_limit == 64);
    // RoCE ignores the LID fields (a completion reports 0 there anyway)
    policy::LocalPort roce{false, 1, 3, 0, 0};
    const auto r = policy::unicast_ah(roce, v4_gid(192, 0, 2, 9), policy::SourceRoute{7, 5, 1});
    CHECK(r.dlid == 0);
    CHECK(r.sl == 0);
    CHECK(r.src_path_bits == 0);
    CHECK(r.sgid_index == 3);
    // unicast publisher mode on IB: the given LID (dlid=)
    const auto c = policy::configured_unicast_ah(ib, peer, 0x0031);
    CHECK(c.dlid == 0x0031);
    CHECK(c.sl == 3);
}

TEST_CASE("verbs IB publisher: joins as a full member and sends to the SA's MLID",
          "[verbs][policy]") {
    // IB publisher (not a subscriber): SA join, no QP attach, no IP join
    const auto pub = policy::plan_membership(true, true, false);
    CHECK(pub.sa_join);
    CHECK_FALSE(pub.attach_qp);
    CHECK_FALSE(pub.ip_join);
    const auto sub = policy::plan_membership(true, true, true);
    CHECK(sub.sa_join);
    CHECK(sub.attach_qp);
    CHECK_FALSE(sub.ip_join);
    const auto roce_pub = policy::plan_membership(false, true, false);
    CHECK_FALSE(roce_pub.sa_join);
    CHECK_FALSE(roce_pub.attach_qp);
    const auto roce_sub = policy::plan_membership(false, true, true);
    CHECK(roce_sub.ip_join);
    CHECK(roce_sub.attach_qp);
    CHECK_FALSE(policy::plan_membership(true, false, true).sa_join);  // unicast

    // The SA's reply to the publisher's join: MLID 0xc005, SL 2, flow label 0x12345, MTU code
    // 4 (2048) -> the group AH's LRH and GRH fields
    std::array<std::byte, sa::kMadSize> reply{};
    sa::McMemberRecord rec;
    rec.mgid = policy::ib_mgid_v4(std::array<std::uint8_t, 4>{239, 1, 2, 3}.data(), 0xffff);
    rec.mlid = 0xc005;
    rec.sl = 2;
    rec.flow_label = 0x12345;
    rec.mtu = (2U << 6U) | 4U;
    reply = sa::encode_request(sa::kMethodGetResp, 7, sa::join_mask(true), rec);
    sa::Response resp;
    REQUIRE(sa::decode_response(reply, resp));
    policy::LocalPort ib{true, 1, 0, 0, 0};
    const policy::GroupPath path{resp.rec.sl, resp.rec.flow_label, resp.rec.rate};
    const auto g = policy::group_ah(ib, resp.rec.mgid, resp.rec.mlid, &path, 1);
    CHECK(g.dlid == 0xc005);
    CHECK(g.sl == 2);
    CHECK(g.flow_label == 0x12345);
    CHECK(g.dgid == rec.mgid);
    CHECK(g.hop_limit == 1);
    // RoCE: no MLID in the LRH (there is none)
    policy::LocalPort roce{false, 1, 3, 0, 1};
    const auto rg = policy::group_ah(roce, v4_gid(239, 1, 2, 3), 0, nullptr, 4);
    CHECK(rg.dlid == 0);
    CHECK(rg.sl == 1);
    // item 11: the payload MTU is the group's, when smaller than the port's
    CHECK(policy::effective_mtu(4096, resp.rec.mtu, true, 0) == 2048);
    CHECK(policy::effective_mtu(4096, resp.rec.mtu, false, 0) == 4096);
    CHECK(policy::effective_mtu(4096, resp.rec.mtu, true, 1024) == 1024);
}

TEST_CASE("verbs IB MGID: prizma's own signature, not IPoIB's 0x401b", "[verbs][policy]") {
    const std::array<std::uint8_t, 4> grp{239, 192, 0, 41};
    const Gid g = policy::ib_mgid_v4(grp.data(), 0x8001);
    const std::array<std::uint8_t, 16> want{0xff, 0x12, 0x50, 0x47, 0x80, 0x01, 0, 0,
                                            0,    0,    0,    0,    0x0f, 192,  0, 41};
    CHECK(g == want);
    CHECK_FALSE((g[2] == 0x40 && g[3] == 0x1b));
    // the SA join MAD carries it at the record's MGID offset
    sa::McMemberRecord r;
    r.mgid = g;
    const auto mad = sa::encode_request(sa::kMethodSet, 1, sa::join_mask(false), r);
    for (std::size_t i = 0; i < 16; ++i) {
        CHECK(std::to_integer<std::uint8_t>(mad[sa::kSaDataOffset + i]) == want[i]);
    }
}

TEST_CASE("verbs IB unicast path: the SA PathRecord query and reply, byte by byte",
          "[verbs][policy]") {
    const Gid sgid = v6_gid(0xfe80, 0x11);
    const Gid dgid = v6_gid(0xfe80, 0x22);
    const auto q = sa::encode_path_query(0x0102030405060708ULL, sgid, dgid, 0xffff);
    auto at = [&](std::size_t i) {
        return std::to_integer<std::uint8_t>(q[i]);
    };
    CHECK(at(0) == 1);     // base version
    CHECK(at(1) == 0x03);  // SubnAdm
    CHECK(at(2) == 2);
    CHECK(at(3) == 0x01);  // SubnAdmGet
    CHECK(at(8) == 0x01);
    CHECK(at(15) == 0x08);  // TID
    CHECK(at(16) == 0x00);
    CHECK(at(17) == 0x35);  // PathRecord
    // component mask: DGID (2) | SGID (3) | NumbPath (12) | P_Key (13) = 0x300c
    CHECK(at(48) == 0);
    CHECK(at(53) == 0);
    CHECK(at(54) == 0x30);
    CHECK(at(55) == 0x0c);
    const std::size_t d = sa::kSaDataOffset;
    for (std::size_t i = 0; i < 16; ++i) {
        CHECK(at(d + 8 + i) == dgid[i]);
        CHECK(at(d + 24 + i) == sgid[i]);
    }
    CHECK(at(d + 49) == 1);  // NumbPath 1, not reversible
    CHECK(at(d + 50) == 0xff);
    CHECK(at(d + 51) == 0xff);
    // the SA's reply: DLID 0x0042, SLID 0x0007, SL 9, MTU code 4 (2048), flow label 0xabcde
    auto reply = q;
    reply[3] = std::byte{0x81};
    reply[d + 40] = std::byte{0x00};
    reply[d + 41] = std::byte{0x42};
    reply[d + 42] = std::byte{0x00};
    reply[d + 43] = std::byte{0x07};
    reply[d + 44] = std::byte{0x0a};
    reply[d + 45] = std::byte{0xbc};
    reply[d + 46] = std::byte{0xde};
    reply[d + 47] = std::byte{0x40};
    reply[d + 53] = std::byte{0x09};
    reply[d + 54] = std::byte{0x84};
    std::uint64_t tid = 0;
    std::uint16_t status = 1;
    sa::PathRecord p;
    REQUIRE(sa::decode_path_response(reply, tid, status, p));
    CHECK(tid == 0x0102030405060708ULL);
    CHECK(status == 0);
    CHECK(p.dlid == 0x0042);
    CHECK(p.slid == 0x0007);
    CHECK(p.sl == 9);
    CHECK(p.flow_label == 0xabcde);
    CHECK(p.hop_limit == 0x40);
    CHECK(policy::effective_mtu(4096, p.mtu, true, 0) == 2048);
    // the unicast publisher's AH from the path
    policy::LocalPort ib{true, 1, 0, 0, p.sl};
    const auto a = policy::configured_unicast_ah(ib, dgid, p.dlid);
    CHECK(a.dlid == 0x0042);
    CHECK(a.sl == 9);
    // an MCMemberRecord reply is not a path
    sa::McMemberRecord r;
    CHECK_FALSE(sa::decode_path_response(sa::encode_request(0x81, 1, 0, r), tid, status, p));
}

namespace {
prizma::Result<void, prizma::Error> ok_join(bool /*first*/) {
    return {};
}

/// A forked child that runs `setup` (true: it holds what the test needs), says so, and then
/// waits to be killed with -9 (kill(), or the destructor): what a crashed member leaves.
class ParkedChild {
public:
    template <typename Setup>
    explicit ParkedChild(Setup setup) {
        int ready[2];
        REQUIRE(::pipe(ready) == 0);
        pid_ = ::fork();
        REQUIRE(pid_ >= 0);
        if (pid_ == 0) {
            const char c = setup() ? '1' : '0';
            (void)::write(ready[1], &c, 1);
            ::pause();
            ::_exit(0);
        }
        char c = 0;
        const bool heard = ::read(ready[0], &c, 1) == 1;
        ::close(ready[0]);
        ::close(ready[1]);
        REQUIRE(heard);
        REQUIRE(c == '1');
    }
    ~ParkedChild() { kill(); }
    ParkedChild(const ParkedChild&) = delete;
    ParkedChild& operator=(const ParkedChild&) = delete;
    ParkedChild(ParkedChild&&) = delete;
    ParkedChild& operator=(ParkedChild&&) = delete;
    /// Kills it with -9 and reaps it.
    void kill() {
        if (pid_ <= 0) {
            return;
        }
        CHECK(::kill(pid_, SIGKILL) == 0);
        int status = 0;
        CHECK(::waitpid(pid_, &status, 0) == pid_);
        pid_ = -1;
    }

private:
    pid_t pid_ = -1;
};
}  // namespace

TEST_CASE("verbs SA membership count: the first member joins, the last one leaves",
          "[verbs][policy]") {
    using prizma::verbs::PortMembership;
    const prizma::test::TempDir tmp("prizma-refcount");
    const std::string dir = tmp.path + "/sa";
    const std::string key = "mlx5_0-1-ff12504780010000000000000fc00029";
    bool first_a = false;
    bool first_b = true;
    auto a = PortMembership::enter(dir, key, [&](bool f) {
        first_a = f;
        return ok_join(f);
    });
    REQUIRE(a);
    auto b = PortMembership::enter(dir, key, [&](bool f) {
        first_b = f;
        return ok_join(f);
    });
    REQUIRE(b);
    CHECK(first_a);
    CHECK_FALSE(first_b);
    CHECK(PortMembership::count(dir, key).value() == 2);
    // a failed join leaves no member behind
    auto c = PortMembership::enter(dir, key, [](bool) -> prizma::Result<void, prizma::Error> {
        return prizma::Error(std::make_error_code(std::errc::timed_out), "no SA");
    });
    CHECK_FALSE(c);
    CHECK(PortMembership::count(dir, key).value() == 2);
    int lasts = 0;
    int leaves = 0;
    (*a)->leave([&](bool last) {
        ++leaves;
        lasts += last ? 1 : 0;
    });
    CHECK(leaves == 1);
    CHECK(lasts == 0);  // b still there: no SA leave
    (*b)->leave([&](bool last) {
        ++leaves;
        lasts += last ? 1 : 0;
    });
    CHECK(leaves == 2);
    CHECK(lasts == 1);  // the last one leaves
    CHECK(PortMembership::count(dir, key).value() == 0);
}

TEST_CASE("verbs SA membership count: a member killed with -9 is not counted",
          "[verbs][policy][process]") {
    using prizma::verbs::PortMembership;
    const prizma::test::TempDir tmp("prizma-refcount");
    const std::string dir = tmp.path + "/sa";
    const std::string key = "dev-1-mgid";
    ParkedChild child([&] {
        static auto m = PortMembership::enter(dir, key, ok_join);  // held until the -9
        return m.has_value();
    });
    bool first = true;
    auto me = PortMembership::enter(dir, key, [&](bool f) {
        first = f;
        return ok_join(f);
    });
    REQUIRE(me);
    CHECK_FALSE(first);  // the child is a live member
    child.kill();
    bool last = false;
    (*me)->leave([&](bool l) { last = l; });
    CHECK(last);  // the killed child's file no longer counts
    CHECK(PortMembership::count(dir, key).value() == 0);
}

TEST_CASE("verbs SA membership directory: made 0770, refused when others may write it",
          "[verbs][policy]") {
    using prizma::verbs::PortMembership;
    const prizma::test::TempDir tmp("prizma-refcount");
    const std::string dir = tmp.path + "/sa";
    const std::string key = "dev-1-mgid";
    const ::mode_t old = ::umask(022);
    auto m = PortMembership::enter(dir, key, ok_join);
    ::umask(old);
    REQUIRE(m);
    struct stat st {};
    REQUIRE(::stat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0770);  // past the umask: the members' group may share it
    REQUIRE(::stat((dir + "/" + key + ".lock").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0660);
    (*m)->leave([](bool) {});
    // Writable by every user: anyone could hold the key lock or plant member files.
    REQUIRE(::chmod(dir.c_str(), 0777) == 0);
    auto open_dir = PortMembership::enter(dir, key, ok_join);
    REQUIRE_FALSE(open_dir);
    CHECK_THAT(open_dir.error().message(), Catch::Contains(dir) && Catch::Contains("every user"));
    REQUIRE(::chmod(dir.c_str(), 0775) == 0);  // group-writable, others not: accepted
    CHECK(PortMembership::enter(dir, key, ok_join));
    if (::geteuid() == 0) {  // another user's directory
        REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
        auto theirs = PortMembership::enter(dir, key, ok_join);
        REQUIRE_FALSE(theirs);
        CHECK_THAT(theirs.error().message(), Catch::Contains("another user"));
    }
}

TEST_CASE("verbs SA membership: a key lock held by a stuck process is an error in time",
          "[verbs][policy][process]") {
    using prizma::verbs::PortMembership;
    const prizma::test::TempDir tmp("prizma-refcount");
    const std::string dir = tmp.path + "/sa";
    const std::string key = "dev-1-mgid";
    REQUIRE(PortMembership::count(dir, key).value() == 0);  // creates the directory
    ParkedChild holder([&] {                                // takes the key lock and never lets go
        const int fd = ::open((dir + "/" + key + ".lock").c_str(), O_RDWR | O_CREAT, 0660);
        return fd >= 0 && ::flock(fd, LOCK_EX) == 0;
    });
    const auto t0 = std::chrono::steady_clock::now();
    auto m = PortMembership::enter(dir, key, ok_join, std::chrono::milliseconds(200));
    const auto waited = std::chrono::steady_clock::now() - t0;
    REQUIRE_FALSE(m);
    CHECK(m.error().code() == std::errc::timed_out);
    CHECK_THAT(m.error().message(), Catch::Contains(key + ".lock") && Catch::Contains("200 ms"));
    CHECK(waited >= std::chrono::milliseconds(200));
    holder.kill();
    // The holder gone, its lock went with it: the next member enters.
    CHECK(PortMembership::enter(dir, key, ok_join, std::chrono::milliseconds(200)));
}

#if PRIZMA_HAVE_VERBS
#include "transports/verbs/verbs_transport.hpp"

TEST_CASE("verbs GRH source: an IPv4 header without checksum (rxe loopback) is still IPv4",
          "[verbs][policy]") {
    // rxe's same-device loopback: 20 zero bytes, then an IPv4 header whose checksum is 0
    std::array<std::uint8_t, 40> grh{};
    const std::uint8_t ip[20] = {0x45, 0, 0,   60, 0, 0, 0x40, 0, 64, 17,
                                 0,    0, 192, 0,  2, 1, 192,  0, 2,  1};
    std::memcpy(&grh[20], ip, 20);
    const std::array<std::uint8_t, 16> want{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1};
    CHECK(prizma::verbs::source_gid_from_grh(grh.data()) == want);
}

TEST_CASE("verbs:// keys of issue 19: pinned_max, dlid, comp_vector, cq_moderation",
          "[verbs][policy]") {
    auto c = prizma::verbs::parse_uri(
        "verbs://mlx5_0/"
        "239.1.1.1:7500?pinned_max=8388608&dlid=0x17&comp_vector=3&cq_moderation=16");
    REQUIRE(c);
    CHECK(c->pinned_max == 8388608);
    CHECK(c->dlid == 0x17);
    CHECK(c->comp_vector == 3);
    CHECK(c->cq_moderation == 16);
    auto bad = prizma::verbs::parse_uri("verbs://mlx5_0/239.1.1.1:7500?pinned_max=100");
    REQUIRE_FALSE(bad);
    CHECK(bad.error().message().find("pinned_max") != std::string::npos);
    CHECK_FALSE(prizma::verbs::parse_uri("verbs://mlx5_0/239.1.1.1:7500?dlid=0"));
    CHECK_FALSE(prizma::verbs::parse_uri("verbs://mlx5_0/239.1.1.1:7500?dlid=0xffff"));
}
#endif

TEST_CASE("verbs IB group rate: the creator's link rate, not a fixed 10 Gb/s", "[unit][verbs]") {
    // ibv_port_attr: active_width 1 = 1x, 2 = 4x, 4 = 8x, 8 = 12x, 16 = 2x; active_speed
    // 1 SDR, 2 DDR, 4 QDR, 8 FDR10, 16 FDR, 32 EDR, 64 HDR, 128 NDR. Codes as the SA and
    // ibv_rate encode them.
    CHECK(policy::ib_rate_code(1, 1) == 2);     // 1x SDR: 2.5 Gb/s
    CHECK(policy::ib_rate_code(2, 4) == 7);     // 4x QDR: 40 Gb/s
    CHECK(policy::ib_rate_code(2, 16) == 12);   // 4x FDR: 56 Gb/s
    CHECK(policy::ib_rate_code(2, 32) == 16);   // 4x EDR: 100 Gb/s (ConnectX-5)
    CHECK(policy::ib_rate_code(2, 64) == 17);   // 4x HDR: 200 Gb/s (ConnectX-6)
    CHECK(policy::ib_rate_code(2, 128) == 21);  // 4x NDR: 400 Gb/s (ConnectX-7)
    CHECK(policy::ib_rate_code(16, 64) == 16);  // 2x HDR: 100 Gb/s
    CHECK(policy::ib_rate_code(8, 4) == 10);    // 12x QDR: 120 Gb/s
    CHECK(policy::ib_rate_code(3, 4) == 0);     // unknown width
    CHECK(policy::ib_rate_code(2, 3) == 0);     // unknown speed
}

TEST_CASE("verbs IB group AH: the SA record's SL, flow label and rate, on RoCE none",
          "[unit][verbs]") {
    policy::LocalPort lp;
    lp.infiniband = true;
    lp.port = 1;
    lp.sl = 3;
    policy::Gid mgid{};
    mgid[0] = 0xff;
    // rate byte: selector "exactly" (2) in the top bits, code 7 (40 Gb/s) below
    const policy::GroupPath path{5, 0x12345, static_cast<std::uint8_t>((2U << 6U) | 7U)};
    const auto ib = policy::group_ah(lp, mgid, 0xc001, &path, 1);
    CHECK(ib.dlid == 0xc001);
    CHECK(ib.sl == 5);
    CHECK(ib.flow_label == 0x12345);
    CHECK(ib.static_rate == 7);  // the group's rate: a 100 Gb/s sender does not overrun it
    const auto no_sa = policy::group_ah(lp, mgid, 0xc001, nullptr, 1);
    CHECK(no_sa.sl == 3);  // the channel's own
    CHECK(no_sa.static_rate == 0);
    lp.infiniband = false;  // RoCE: no MLID
    CHECK(policy::group_ah(lp, mgid, 0xc001, nullptr, 1).dlid == 0);
}

TEST_CASE("verbs rejoin delays: spread at first, then doubling with jitter, capped",
          "[unit][verbs]") {
    // The first attempt after a fabric event: 0-250 ms, both ends reachable.
    CHECK(policy::rejoin_delay_ms(0, 0) == 0);
    CHECK(policy::rejoin_delay_ms(0, 250) == 250);
    CHECK(policy::rejoin_delay_ms(0, 251) == 0);
    // Then 100 ms doubling, each within +-25%: 75-125, 150-250, ...
    CHECK(policy::rejoin_delay_ms(1, 0) == 75);
    CHECK(policy::rejoin_delay_ms(1, 50) == 125);
    CHECK(policy::rejoin_delay_ms(1, 51) == 75);
    CHECK(policy::rejoin_delay_ms(2, 0) == 150);
    CHECK(policy::rejoin_delay_ms(2, 100) == 250);
    CHECK(policy::rejoin_delay_ms(9, 0) == 19200);  // 25.6 s - 25%
    // Capped at 30 s (+-25%), whatever the attempt: no shift overflow.
    CHECK(policy::rejoin_delay_ms(10, 0) == 22500);
    CHECK(policy::rejoin_delay_ms(10, 15000) == 37500);
    CHECK(policy::rejoin_delay_ms(1000, 15000) == 37500);
    CHECK(policy::rejoin_delay_ms(~0U, 0) == 22500);
}

TEST_CASE("verbs QP recovery: SQE back to RTS, the error state rebuilt, RTS left alone",
          "[unit][verbs]") {
    using policy::QpRecovery;
    using policy::QpState;
    CHECK(policy::qp_recovery(QpState::sqe) == QpRecovery::to_rts);
    CHECK(policy::qp_recovery(QpState::err) == QpRecovery::rebuild);
    CHECK(policy::qp_recovery(QpState::rts) == QpRecovery::none);  // a late flush
    CHECK(policy::qp_recovery(QpState::sqd) == QpRecovery::none);
    // Not ready at all (someone reset it): only a new QP brings it back.
    CHECK(policy::qp_recovery(QpState::reset) == QpRecovery::rebuild);
    CHECK(policy::qp_recovery(QpState::init) == QpRecovery::rebuild);
    CHECK(policy::qp_recovery(QpState::rtr) == QpRecovery::rebuild);
}

TEST_CASE("verbs NAK route on IB: the SA path's SL, LID and rate over the completion's",
          "[unit][verbs]") {
    policy::LocalPort lp;
    lp.infiniband = true;
    lp.sl = 1;
    policy::SourceRoute seen;  // what the completion showed: the group's SL
    seen.slid = 0x21;
    seen.sl = 2;
    policy::AhFields a = policy::unicast_ah(lp, policy::Gid{}, seen);
    CHECK(a.sl == 2);
    CHECK(a.dlid == 0x21);
    policy::apply_path(a, {0x21, 0x1b, static_cast<std::uint8_t>((2U << 6U) | 16U)});
    CHECK(a.sl == 0xb);  // 4 bits of the path's SL
    CHECK(a.dlid == 0x21);
    CHECK(a.static_rate == 16);
    policy::apply_path(a, {0, 3, 0});  // a path without a LID keeps the one seen
    CHECK(a.dlid == 0x21);
    CHECK(a.sl == 3);
    CHECK(a.static_rate == 0);
}

TEST_CASE("verbs NAK route: a source heard on another LID or SL is a new route", "[unit][verbs]") {
    const policy::SourceRoute cached{0x21, 2, 0};
    CHECK_FALSE(policy::route_changed(cached, {0x21, 2, 0}, true));
    CHECK(policy::route_changed(cached, {0x22, 2, 0}, true));  // the SM gave it another LID
    CHECK(policy::route_changed(cached, {0x21, 3, 0}, true));  // another SL
    CHECK(policy::route_changed(cached, {0x21, 2, 1}, true));  // another of our path bits
    // requested before it was heard (an SPMR target): the first datagram brings its route
    CHECK(policy::route_changed(policy::SourceRoute{}, cached, true));
    // RoCE: the GID is the route; whatever the completion's SL/LID fields say, no change
    CHECK_FALSE(policy::route_changed(cached, {0x22, 3, 1}, false));
    CHECK_FALSE(policy::route_changed(policy::SourceRoute{}, cached, false));
}
