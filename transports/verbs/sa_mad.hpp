// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace prizma::verbs::sa {

/// InfiniBand Subnet Administration MADs for multicast group membership (IBA vol. 1,
/// §15.2.5.17 MCMemberRecord). Pure encoding: no libibumad here, so it is unit-tested on any
/// machine; ib_sa.cpp sends and receives these through libibumad.

constexpr std::size_t kMadSize = 256;
constexpr std::size_t kSaDataOffset = 56;  ///< 24 MAD + 12 RMPP + 20 SA header
constexpr std::uint8_t kBaseVersion = 1;
constexpr std::uint8_t kClassSubnAdm = 0x03;
constexpr std::uint8_t kSaClassVersion = 2;
constexpr std::uint8_t kMethodSet = 0x02;
constexpr std::uint8_t kMethodGetResp = 0x81;
constexpr std::uint8_t kMethodDelete = 0x15;
constexpr std::uint8_t kMethodDeleteResp = 0x95;
constexpr std::uint16_t kAttrMcMemberRecord = 0x0038;
constexpr std::uint32_t kQp1Qkey = 0x80010000;

/// Component-mask bits of MCMemberRecord.
inline constexpr std::uint64_t kCompMgid = 1ULL << 0;
inline constexpr std::uint64_t kCompPortGid = 1ULL << 1;
inline constexpr std::uint64_t kCompQkey = 1ULL << 2;
inline constexpr std::uint64_t kCompMlid = 1ULL << 3;
inline constexpr std::uint64_t kCompMtuSel = 1ULL << 4;
inline constexpr std::uint64_t kCompMtu = 1ULL << 5;
inline constexpr std::uint64_t kCompTclass = 1ULL << 6;
inline constexpr std::uint64_t kCompPkey = 1ULL << 7;
inline constexpr std::uint64_t kCompRateSel = 1ULL << 8;
inline constexpr std::uint64_t kCompRate = 1ULL << 9;
inline constexpr std::uint64_t kCompLifeSel = 1ULL << 10;
inline constexpr std::uint64_t kCompLife = 1ULL << 11;
inline constexpr std::uint64_t kCompSl = 1ULL << 12;
inline constexpr std::uint64_t kCompFlowLabel = 1ULL << 13;
inline constexpr std::uint64_t kCompHopLimit = 1ULL << 14;
inline constexpr std::uint64_t kCompScope = 1ULL << 15;
inline constexpr std::uint64_t kCompJoinState = 1ULL << 16;

enum class JoinState : std::uint8_t {
    full_member = 1,
    non_member = 2,
    send_only_non_member = 4,
    send_only_full_member = 8,
};

struct McMemberRecord {
    std::array<std::uint8_t, 16> mgid{};
    std::array<std::uint8_t, 16> port_gid{};
    std::uint32_t qkey = 0;
    std::uint16_t mlid = 0;
    std::uint8_t mtu = 0;  ///< 2-bit selector in the top bits, IBA MTU code below
    std::uint8_t tclass = 0;
    std::uint16_t pkey = 0xffff;
    std::uint8_t rate = 0;
    std::uint8_t pkt_life = 0;
    std::uint8_t sl = 0;           ///< 4 bits
    std::uint32_t flow_label = 0;  ///< 20 bits
    std::uint8_t hop_limit = 0;
    std::uint8_t scope = 0;  ///< 4 bits
    JoinState join_state = JoinState::full_member;
    bool proxy_join = false;
};

/// The SA's class-specific MAD status (bits 8-14): ERR_REQ_INVALID 2, ERR_NO_RECORDS 3,
/// ERR_REQ_INSUFFICIENT_COMPONENTS 6, ...; bit 0 of the MAD status is BUSY.
constexpr unsigned sa_status(std::uint16_t mad_status) noexcept {
    return (mad_status >> 8U) & 0x7fU;
}
constexpr bool busy(std::uint16_t mad_status) noexcept {
    return (mad_status & 1U) != 0;
}

/// The text of the Q_Key mismatch: the group exists with `group_qkey`, the channel uses
/// `ours` (both named, and what to do).
std::string qkey_mismatch(const std::array<std::uint8_t, 16>& mgid,
                          std::uint32_t group_qkey,
                          std::uint32_t ours);

/// Builds a join (SubnAdmSet) or leave (SubnAdmDelete) request for `rec`.
std::array<std::byte, kMadSize> encode_request(std::uint8_t method,
                                               std::uint64_t tid,
                                               std::uint64_t comp_mask,
                                               const McMemberRecord& rec) noexcept;

struct Response {
    std::uint8_t method = 0;
    std::uint16_t status = 0;  ///< MAD status; 0 = success
    std::uint64_t tid = 0;
    std::uint16_t attr_id = 0;
    McMemberRecord rec;
};

/// Parses an SA response; false when it is too short or not an SA MCMemberRecord MAD.
bool decode_response(std::span<const std::byte> mad, Response& out) noexcept;

/// Whether a reply's transaction id answers the request sent with `sent`. The kernel's
/// ib_umad_write (drivers/infiniband/core/user_mad.c) replaces the top 32 bits of a sent
/// MAD's TID with the agent's own, and the SA answers with that TID: only the low 32 bits
/// are the sender's, and they are all that libibmad and perftest compare.
constexpr bool same_transaction(std::uint64_t sent, std::uint64_t reply) noexcept {
    return static_cast<std::uint32_t>(sent) == static_cast<std::uint32_t>(reply);
}

// -------------------------------------------------------------------------------------------
// PathRecord (IBA vol. 1 §15.2.5.16): the LID, SL and MTU of the path to a unicast peer, for a
// one-to-one publisher on InfiniBand that was given no `dlid=`.

constexpr std::uint8_t kMethodGet = 0x01;
constexpr std::uint16_t kAttrPathRecord = 0x0035;
inline constexpr std::uint64_t kPathCompDgid = 1ULL << 2;
inline constexpr std::uint64_t kPathCompSgid = 1ULL << 3;
inline constexpr std::uint64_t kPathCompNumbPath = 1ULL << 12;
inline constexpr std::uint64_t kPathCompPkey = 1ULL << 13;

struct PathRecord {
    std::array<std::uint8_t, 16> dgid{};
    std::array<std::uint8_t, 16> sgid{};
    std::uint16_t dlid = 0;
    std::uint16_t slid = 0;
    std::uint32_t flow_label = 0;  ///< 20 bits
    std::uint8_t hop_limit = 0;
    std::uint8_t tclass = 0;
    bool reversible = false;
    std::uint8_t numb_path = 0;  ///< 7 bits
    std::uint16_t pkey = 0;
    std::uint8_t sl = 0;    ///< 4 bits
    std::uint8_t mtu = 0;   ///< selector (2 bits) + IBA MTU code
    std::uint8_t rate = 0;  ///< selector (2 bits) + rate code
    std::uint8_t pkt_life = 0;
};

/// SubnAdmGet(PathRecord) from `sgid` to `dgid` on partition `pkey`, one path.
std::array<std::byte, kMadSize> encode_path_query(std::uint64_t tid,
                                                  const std::array<std::uint8_t, 16>& sgid,
                                                  const std::array<std::uint8_t, 16>& dgid,
                                                  std::uint16_t pkey) noexcept;
/// Parses a PathRecord response; false when it is not one. `status` gets the MAD status.
bool decode_path_response(std::span<const std::byte> mad,
                          std::uint64_t& tid,
                          std::uint16_t& status,
                          PathRecord& out) noexcept;

/// The component mask of a join: MGID, PortGID, Q_Key, P_Key, TClass, SL, FlowLabel and
/// JoinState; when `create`, also the MTU and rate selectors and the scope, which the SA needs
/// to create a group that does not exist yet.
std::uint64_t join_mask(bool create) noexcept;

}  // namespace prizma::verbs::sa
