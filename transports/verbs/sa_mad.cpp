// SPDX-License-Identifier: Apache-2.0
#include "transports/verbs/sa_mad.hpp"

#include <arpa/inet.h>

#include <cstdio>
#include <cstring>

namespace prizma::verbs::sa {
namespace {

void put8(std::array<std::byte, kMadSize>& m, std::size_t off, std::uint8_t v) noexcept {
    m[off] = std::byte{v};
}
void put16(std::array<std::byte, kMadSize>& m, std::size_t off, std::uint16_t v) noexcept {
    put8(m, off, static_cast<std::uint8_t>(v >> 8U));
    put8(m, off + 1, static_cast<std::uint8_t>(v));
}
void put32(std::array<std::byte, kMadSize>& m, std::size_t off, std::uint32_t v) noexcept {
    put16(m, off, static_cast<std::uint16_t>(v >> 16U));
    put16(m, off + 2, static_cast<std::uint16_t>(v));
}
void put64(std::array<std::byte, kMadSize>& m, std::size_t off, std::uint64_t v) noexcept {
    put32(m, off, static_cast<std::uint32_t>(v >> 32U));
    put32(m, off + 4, static_cast<std::uint32_t>(v));
}
std::uint8_t get8(std::span<const std::byte> m, std::size_t off) noexcept {
    return std::to_integer<std::uint8_t>(m[off]);
}
std::uint16_t get16(std::span<const std::byte> m, std::size_t off) noexcept {
    return static_cast<std::uint16_t>((get8(m, off) << 8U) | get8(m, off + 1));
}
std::uint32_t get32(std::span<const std::byte> m, std::size_t off) noexcept {
    return (std::uint32_t{get16(m, off)} << 16U) | get16(m, off + 2);
}
std::uint64_t get64(std::span<const std::byte> m, std::size_t off) noexcept {
    return (std::uint64_t{get32(m, off)} << 32U) | get32(m, off + 4);
}

// Offsets inside the MCMemberRecord (relative to kSaDataOffset).
constexpr std::size_t kRecMgid = 0;
constexpr std::size_t kRecPortGid = 16;
constexpr std::size_t kRecQkey = 32;
constexpr std::size_t kRecMlid = 36;
constexpr std::size_t kRecMtu = 38;
constexpr std::size_t kRecTclass = 39;
constexpr std::size_t kRecPkey = 40;
constexpr std::size_t kRecRate = 42;
constexpr std::size_t kRecLife = 43;
constexpr std::size_t kRecSlFlowHop = 44;
constexpr std::size_t kRecScopeState = 48;
constexpr std::size_t kRecProxy = 49;
constexpr std::size_t kRecordSize = 56;

}  // namespace

std::array<std::byte, kMadSize> encode_request(std::uint8_t method,
                                               std::uint64_t tid,
                                               std::uint64_t comp_mask,
                                               const McMemberRecord& rec) noexcept {
    std::array<std::byte, kMadSize> m{};
    // MAD common header
    put8(m, 0, kBaseVersion);
    put8(m, 1, kClassSubnAdm);
    put8(m, 2, kSaClassVersion);
    put8(m, 3, method);
    put64(m, 8, tid);
    put16(m, 16, kAttrMcMemberRecord);
    // RMPP header (24..35) stays zero: a single-segment request.
    // SA header: SM_Key 36..43 and AttributeOffset 44..45 stay 0 in a request (the offset only
    // matters in GetTable responses); ComponentMask at 48..55.
    put64(m, 48, comp_mask);
    const std::size_t d = kSaDataOffset;
    std::memcpy(&m[d + kRecMgid], rec.mgid.data(), 16);
    std::memcpy(&m[d + kRecPortGid], rec.port_gid.data(), 16);
    put32(m, d + kRecQkey, rec.qkey);
    put16(m, d + kRecMlid, rec.mlid);
    put8(m, d + kRecMtu, rec.mtu);
    put8(m, d + kRecTclass, rec.tclass);
    put16(m, d + kRecPkey, rec.pkey);
    put8(m, d + kRecRate, rec.rate);
    put8(m, d + kRecLife, rec.pkt_life);
    put32(
        m, d + kRecSlFlowHop,
        (std::uint32_t{rec.sl} & 0xfU) << 28U | (rec.flow_label & 0xfffffU) << 8U | rec.hop_limit);
    put8(m, d + kRecScopeState,
         static_cast<std::uint8_t>((rec.scope & 0xfU) << 4U
                                   | (static_cast<std::uint8_t>(rec.join_state) & 0xfU)));
    put8(m, d + kRecProxy, rec.proxy_join ? 0x80 : 0);
    return m;
}

bool decode_response(std::span<const std::byte> mad, Response& out) noexcept {
    if (mad.size() < kSaDataOffset + kRecordSize || get8(mad, 0) != kBaseVersion
        || get8(mad, 1) != kClassSubnAdm) {
        return false;
    }
    out.method = get8(mad, 3);
    out.status = get16(mad, 4);
    out.tid = get64(mad, 8);
    out.attr_id = get16(mad, 16);
    if (out.attr_id != kAttrMcMemberRecord) {
        return false;
    }
    const std::size_t d = kSaDataOffset;
    McMemberRecord& r = out.rec;
    std::memcpy(r.mgid.data(), &mad[d + kRecMgid], 16);
    std::memcpy(r.port_gid.data(), &mad[d + kRecPortGid], 16);
    r.qkey = get32(mad, d + kRecQkey);
    r.mlid = get16(mad, d + kRecMlid);
    r.mtu = get8(mad, d + kRecMtu);
    r.tclass = get8(mad, d + kRecTclass);
    r.pkey = get16(mad, d + kRecPkey);
    r.rate = get8(mad, d + kRecRate);
    r.pkt_life = get8(mad, d + kRecLife);
    const std::uint32_t sfh = get32(mad, d + kRecSlFlowHop);
    r.sl = static_cast<std::uint8_t>(sfh >> 28U);
    r.flow_label = (sfh >> 8U) & 0xfffffU;
    r.hop_limit = static_cast<std::uint8_t>(sfh);
    const std::uint8_t ss = get8(mad, d + kRecScopeState);
    r.scope = static_cast<std::uint8_t>(ss >> 4U);
    r.join_state = static_cast<JoinState>(ss & 0xfU);
    r.proxy_join = (get8(mad, d + kRecProxy) & 0x80U) != 0;
    return true;
}

namespace {
// Offsets inside the PathRecord (relative to kSaDataOffset); bytes 0..7 are the ServiceID.
constexpr std::size_t kPathDgid = 8;
constexpr std::size_t kPathSgid = 24;
constexpr std::size_t kPathDlid = 40;
constexpr std::size_t kPathSlid = 42;
constexpr std::size_t kPathFlowHop = 44;  // RawTraffic 1, reserved 3, FlowLabel 20, HopLimit 8
constexpr std::size_t kPathTclass = 48;
constexpr std::size_t kPathRevNumb = 49;  // Reversible 1, NumbPath 7
constexpr std::size_t kPathPkey = 50;
constexpr std::size_t kPathQosSl = 52;  // QosClass 12, SL 4
constexpr std::size_t kPathMtu = 54;
constexpr std::size_t kPathRate = 55;
constexpr std::size_t kPathLife = 56;
constexpr std::size_t kPathSize = 64;
}  // namespace

std::array<std::byte, kMadSize> encode_path_query(std::uint64_t tid,
                                                  const std::array<std::uint8_t, 16>& sgid,
                                                  const std::array<std::uint8_t, 16>& dgid,
                                                  std::uint16_t pkey) noexcept {
    std::array<std::byte, kMadSize> m{};
    put8(m, 0, kBaseVersion);
    put8(m, 1, kClassSubnAdm);
    put8(m, 2, kSaClassVersion);
    put8(m, 3, kMethodGet);
    put64(m, 8, tid);
    put16(m, 16, kAttrPathRecord);
    put64(m, 48, kPathCompDgid | kPathCompSgid | kPathCompNumbPath | kPathCompPkey);
    const std::size_t d = kSaDataOffset;
    std::memcpy(&m[d + kPathDgid], dgid.data(), 16);
    std::memcpy(&m[d + kPathSgid], sgid.data(), 16);
    put8(m, d + kPathRevNumb, 1);  // one path
    put16(m, d + kPathPkey, pkey);
    return m;
}

bool decode_path_response(std::span<const std::byte> mad,
                          std::uint64_t& tid,
                          std::uint16_t& status,
                          PathRecord& out) noexcept {
    if (mad.size() < kSaDataOffset + kPathSize || get8(mad, 0) != kBaseVersion
        || get8(mad, 1) != kClassSubnAdm || get16(mad, 16) != kAttrPathRecord) {
        return false;
    }
    status = get16(mad, 4);
    tid = get64(mad, 8);
    const std::size_t d = kSaDataOffset;
    std::memcpy(out.dgid.data(), &mad[d + kPathDgid], 16);
    std::memcpy(out.sgid.data(), &mad[d + kPathSgid], 16);
    out.dlid = get16(mad, d + kPathDlid);
    out.slid = get16(mad, d + kPathSlid);
    const std::uint32_t fh = get32(mad, d + kPathFlowHop);
    out.flow_label = (fh >> 8U) & 0xfffffU;
    out.hop_limit = static_cast<std::uint8_t>(fh);
    out.tclass = get8(mad, d + kPathTclass);
    const std::uint8_t rn = get8(mad, d + kPathRevNumb);
    out.reversible = (rn & 0x80U) != 0;
    out.numb_path = static_cast<std::uint8_t>(rn & 0x7fU);
    out.pkey = get16(mad, d + kPathPkey);
    out.sl = static_cast<std::uint8_t>(get16(mad, d + kPathQosSl) & 0xfU);
    out.mtu = get8(mad, d + kPathMtu);
    out.rate = get8(mad, d + kPathRate);
    out.pkt_life = get8(mad, d + kPathLife);
    return true;
}

std::string qkey_mismatch(const std::array<std::uint8_t, 16>& mgid,
                          std::uint32_t group_qkey,
                          std::uint32_t ours) {
    char g[64] = {};
    (void)inet_ntop(AF_INET6, mgid.data(), g, sizeof g);
    char q[64] = {};
    (void)std::snprintf(q, sizeof q, "0x%08x, this channel's is 0x%08x", group_qkey, ours);
    char fix[32] = {};
    (void)std::snprintf(fix, sizeof fix, "qkey=0x%08x", group_qkey);
    return std::string("multicast group ") + g + " already exists with Q_Key " + q
           + ": every datagram would be dropped. Use " + fix
           + " on the channel, or change the group in the subnet manager (partitions.conf)";
}

std::uint64_t join_mask(bool create) noexcept {
    std::uint64_t m = kCompMgid | kCompPortGid | kCompQkey | kCompPkey | kCompTclass | kCompSl
                      | kCompFlowLabel | kCompJoinState;
    if (create) {
        m |= kCompMtuSel | kCompMtu | kCompRateSel | kCompRate | kCompScope;
    }
    return m;
}

}  // namespace prizma::verbs::sa
