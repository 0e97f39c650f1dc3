// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include <prizma/packet.hpp>
#include <prizma/types.hpp>

#include "lib/pgm/sqn.hpp"

// PGM packet views and writers (RFC 3208 §8 packets, §9 options), as OpenPGM and Wireshark
// read them. Every field is read through bounds-checked big-endian loads; nothing is cast.
namespace prizma::pgm {

/// RFC 3208 §8: the common header is 16 bytes.
inline constexpr std::size_t kHeaderBytes = 16;
/// RFC 3208 §8.2: data SQN + TRAIL follow the header in ODATA/RDATA.
inline constexpr std::size_t kDataHeaderBytes = kHeaderBytes + 8;
/// RFC 3208 §9.3: at most 62 sequence numbers in OPT_NAK_LIST (plus the NAK's own).
inline constexpr std::size_t kMaxNakList = 62;
/// RFC 3208 §9: at most 16 options per packet.
inline constexpr std::size_t kMaxOptions = 16;
/// OpenPGM PGM_MAX_APDU / PGM_MAX_FRAGMENTS.
inline constexpr std::size_t kMaxApduBytes = 65535;
inline constexpr std::size_t kMaxFragments = 16;
/// OPT_LENGTH (4) + OPT_FRAGMENT (16): what a fragment adds to an ODATA header.
inline constexpr std::size_t kFragmentOptionBytes = 20;

/// RFC 3208 §8 packet types (low nibble; version bits are zero).
/// The PGM packet types (the public <prizma/packet.hpp> enumeration; ack is PGMCC's, an
/// OpenPGM extension: prizma's flow control carries receiver status on it; POLL/POLR are
/// parsed as header only and ignored).
using PacketType = prizma::PacketKind;

/// Options-byte bits as OpenPGM (packet.h) and Wireshark read them (LSB first).
inline constexpr std::uint8_t kOptPresent = 0x01;
inline constexpr std::uint8_t kOptNetwork = 0x02;
inline constexpr std::uint8_t kOptVarPktlen = 0x40;
inline constexpr std::uint8_t kOptParity = 0x80;

/// RFC 3208 §9 option types; bit 7 of the type byte is OPT_END.
inline constexpr std::uint8_t kOptEnd = 0x80;
enum class OptionType : std::uint8_t {
    length = 0x00,
    fragment = 0x01,
    nak_list = 0x02,
    join = 0x03,
    /// RFC 3208 §11.8 (FEC): the source's parity parameters (SPM), a parity packet's group
    /// number beyond the transmission group size, and a shortened group's actual size.
    /// OpenPGM lays each out as type, length, OPX, one byte, a 32-bit value (8 bytes).
    parity_prm = 0x08,
    parity_grp = 0x09,
    curr_tgsize = 0x0a,
    syn = 0x0d,
    fin = 0x0e,
    rst = 0x0f,
    /// prizma's authentication option (docs/PROTOCOL.md, "Authentication"): a type RFC 3208
    /// and OpenPGM leave unassigned, sent with OPX = 00 ("ignore when unknown"), so OpenPGM
    /// and Wireshark skip it. Key id, sender time, 16-byte tag.
    auth = 0x3d,
    /// prizma's receiver status option (docs/PROTOCOL.md, "Flow control"), on ACK packets
    /// only: consumed position, receive window, receiver id, group tag, leaving flag. OPX =
    /// 00 as for auth, so OpenPGM and Wireshark skip it.
    status = 0x3e,
};
inline constexpr std::size_t kParityOptionBytes = 8;  ///< PRM, GRP and CURR_TGSIZE alike
/// OPT_PARITY_PRM's flags byte (OpenPGM packet.h): the source sends pro-active parity,
/// answers parity NAKs (on-demand parity), or both.
inline constexpr std::uint8_t kParityPrmProactive = 0x01;
inline constexpr std::uint8_t kParityPrmOnDemand = 0x02;
/// OPT_PARITY_PRM's transmission group size: a power of two, 2 to 128 (OpenPGM refuses others).
inline constexpr std::uint32_t kMinParityGroup = 2;
inline constexpr std::uint32_t kMaxParityGroup = 128;
/// A variable-length parity packet (options byte kOptVarPktlen) ends with the 2-byte
/// encoded original length.
inline constexpr std::size_t kVarPktlenTrailerBytes = 2;
inline constexpr std::size_t kStatusOptionBytes = 28;  ///< type, length, OPX, flags, 24 bytes
inline constexpr std::uint8_t kStatusLeaving = 0x01;   ///< flags: the receiver leaves
/// ACK (PGMCC, as OpenPGM and Wireshark read it): RX_MAX and a receive bitmap after the header.
inline constexpr std::size_t kAckFixedBytes = 8;
inline constexpr std::size_t kAuthOptionBytes = 32;  ///< type, length, OPX, 0, id, time, tag
inline constexpr std::size_t kAuthTagBytes = 16;
/// What authentication adds to a packet at most: the option, and OPT_LENGTH when the packet
/// had no options.
inline constexpr std::size_t kAuthOverheadBytes = kAuthOptionBytes + 4;

/// Network Layer Address with its RFC 1700 AFI: 1 = IPv4 (4 bytes), 2 = IPv6 (16 bytes, also
/// used for InfiniBand/RoCE GIDs).
struct Nla {
    std::uint16_t afi = 0;
    std::array<std::uint8_t, 16> addr{};
    friend bool operator==(const Nla&, const Nla&) = default;
    [[nodiscard]] std::size_t size() const noexcept { return afi == 1 ? 4 : 16; }
    static Nla ipv4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) noexcept {
        Nla n;
        n.afi = 1;
        n.addr[0] = a;
        n.addr[1] = b;
        n.addr[2] = c;
        n.addr[3] = d;
        return n;
    }
};
inline constexpr std::uint16_t kAfiIpv4 = 1;
inline constexpr std::uint16_t kAfiIpv6 = 2;

/// OPT_FRAGMENT contents (RFC 3208 §9.2; 16 bytes with its header, as OpenPGM sends it).
struct FragmentInfo {
    Sqn first_sqn{};
    std::uint32_t offset = 0;
    std::uint32_t apdu_length = 0;
};

/// prizma's status option (on an ACK): what a flow-controlled receiver tells the source.
struct StatusInfo {
    Sqn consumed{};            ///< the next sequence number it will deliver
    std::uint32_t window = 0;  ///< its receive window, sequence numbers
    std::uint64_t receiver_id = 0;
    std::uint64_t tag = 0;  ///< its flow-control group tag; 0 = none
    bool leaving = false;
};

/// The options of one packet, parsed. NAK list entries are read from the packet in place.
struct Options {
    std::uint16_t total_length = 0;  ///< OPT_LENGTH value (0 when no options)
    bool has_fragment = false;
    bool has_join = false;
    bool syn = false;
    bool fin = false;
    bool rst = false;
    bool rst_n = false;
    std::uint8_t rst_code = 0;
    std::uint8_t nak_list_count = 0;
    std::uint8_t unknown_count = 0;  ///< options skipped by length
    bool has_auth = false;
    std::uint16_t auth_offset = 0;  ///< of the auth option in the packet (its tag at +16)
    std::uint32_t auth_key_id = 0;
    std::uint64_t auth_time_ms = 0;  ///< the sender's clock, ms since the Unix epoch
    bool has_status = false;
    StatusInfo status{};
    /// FEC options (RFC 3208 §11.8), validated and read; prizma sends none and never uses
    /// parity (docs/PROTOCOL.md §2).
    bool has_parity_prm = false;
    std::uint8_t parity_prm_flags = 0;  ///< kParityPrmProactive | kParityPrmOnDemand
    std::uint32_t parity_group_size = 0;
    bool has_parity_grp = false;
    std::uint32_t parity_grp = 0;
    bool has_curr_tgsize = false;
    std::uint32_t curr_tgsize = 0;
    FragmentInfo fragment{};
    Sqn join_min{};
    const std::byte* nak_list = nullptr;  ///< nak_list_count big-endian u32s

    [[nodiscard]] Sqn nak_list_at(std::size_t i) const noexcept;
};

/// A parsed, validated packet. Spans point into the buffer given to parse().
struct Packet {
    std::uint16_t sport = 0;
    std::uint16_t dport = 0;
    PacketType type = PacketType::spm;
    std::uint8_t options_byte = 0;
    std::uint16_t checksum = 0;
    Gsi gsi{};
    std::uint16_t tsdu_length = 0;
    /// SPM: spm_sqn; ODATA/RDATA: data sqn; NAK/NNAK/NCF: requested sqn; ACK: RX_MAX
    Sqn sqn{};
    Sqn trail{};                   ///< SPM, ODATA, RDATA
    Sqn lead{};                    ///< SPM
    std::uint32_t ack_bitmap = 0;  ///< ACK
    Nla nla{};                     ///< SPM: path NLA; NAK/NNAK/NCF: source NLA
    Nla group{};                   ///< NAK/NNAK/NCF: multicast group NLA
    Options opts{};
    std::span<const std::byte> payload;
    std::span<const std::byte> raw;

    /// The TSI of the source this packet concerns: downstream packets carry it as
    /// (GSI, sport); upstream ones (NAK, NNAK, SPMR) as (GSI, dport).
    [[nodiscard]] Tsi source_tsi() const noexcept {
        return Tsi{gsi, is_upstream() ? dport : sport};
    }
    /// NAK/NNAK/NCF: how many sequence numbers the packet names (its own + OPT_NAK_LIST).
    [[nodiscard]] std::size_t requested_count() const noexcept { return 1U + opts.nak_list_count; }
    /// The i-th of them, i < requested_count().
    [[nodiscard]] Sqn requested(std::size_t i) const noexcept {
        return i == 0 ? sqn : opts.nak_list_at(i - 1);
    }
    /// RFC 3208 §9 / OpenPGM: a Reed-Solomon parity packet (ODATA/RDATA: parity data, never
    /// the source's own; NAK/NCF: a parity repair request and its confirmation, whose
    /// sequence number is a transmission group and a count, not a packet).
    [[nodiscard]] bool is_parity() const noexcept { return (options_byte & kOptParity) != 0; }
    [[nodiscard]] bool is_upstream() const noexcept {
        return type == PacketType::nak || type == PacketType::nnak || type == PacketType::spmr
               || type == PacketType::ack;
    }
};

/// Why parse() refused a packet; each has its own counter.
enum class ParseStatus : std::uint8_t {
    ok = 0,
    truncated,      ///< shorter than its fixed part or than a length it declares
    bad_type,       ///< version bits set or an unknown type
    bad_checksum,   ///< non-zero checksum that does not verify
    zero_checksum,  ///< ODATA/RDATA without a checksum (mandatory, as OpenPGM)
    bad_options,    ///< option chain malformed: missing OPT_LENGTH, loops, lengths lie
    bad_afi,        ///< an NLA family other than 1 or 2
    bad_length,     ///< TSDU length disagrees with the datagram
};
const char* to_string(ParseStatus s) noexcept;

struct ParseConfig {
    /// Accept ODATA/RDATA with a zero checksum (RDMA: the ICRC covers the datagram).
    bool allow_zero_data_checksum = false;
    /// Verify non-zero checksums.
    bool verify_checksum = true;
};

/// The length of the PGM packet at the front of `bytes`, from its own fields: header, the
/// type's fixed part (with its NLAs), OPT_LENGTH's total and the TSDU length. 0 when the
/// front is no packet whose length can be known (too short, unknown type, POLL/POLR, bad
/// AFI, options without OPT_LENGTH first); more than bytes.size() when the packet is cut
/// short after its fixed part. Checks nothing else (no checksum): it finds the
/// packet boundaries in a GRO-merged datagram read without its segment size, and every piece
/// is still parsed. For any datagram that parse() accepts it returns the datagram's size.
/// Never reads out of bounds.
std::size_t wire_length(std::span<const std::byte> d) noexcept;

/// Validates and parses one PGM packet (the whole datagram). Never reads out of bounds.
ParseStatus parse(std::span<const std::byte> datagram,
                  Packet& out,
                  const ParseConfig& cfg = {}) noexcept;

/// What to write: header, type-specific fields and options, but not the payload.
struct PacketSpec {
    PacketType type = PacketType::odata;
    std::uint16_t sport = 0;
    std::uint16_t dport = 0;
    Gsi gsi{};
    std::uint16_t tsdu_length = 0;
    Sqn sqn{};
    Sqn trail{};
    Sqn lead{};
    Nla nla{};
    Nla group{};
    // options
    const FragmentInfo* fragment = nullptr;
    std::span<const Sqn> nak_list{};  ///< extra sqns after `sqn`, ≤ kMaxNakList
    const Sqn* join_min = nullptr;
    bool syn = false;
    bool fin = false;
    bool rst = false;
    std::uint8_t rst_code = 0;
    std::uint32_t ack_bitmap = 0;        ///< ACK (sqn is its RX_MAX)
    const StatusInfo* status = nullptr;  ///< ACK: prizma's status option
    /// The options byte's parity bit (prizma sends no parity: tests and tools write it).
    bool parity = false;
    /// SPM: OPT_PARITY_PRM with these flags and group size, when the flags are not 0.
    std::uint8_t parity_prm_flags = 0;
    std::uint32_t parity_group_size = 0;
};

/// Where a packet's options (or, without options, its payload) start: after the common header
/// and its type's fixed part. 0 when the type has no such layout (POLL, POLR, unknown)
/// or the bytes end first.
std::size_t options_offset(std::span<const std::byte> header) noexcept;

/// Appends prizma's auth option (tag zero) to the packet header in buf[0, hlen): into its
/// options (OPT_LENGTH's total grown, OPT_END moved), or as new options with OPT_LENGTH.
/// buf needs kAuthOverheadBytes of room after hlen; whatever follows hlen (the payload) is
/// not moved. Returns the new header length, 0 when the header cannot take it.
std::size_t append_auth_option(std::span<std::byte> buf,
                               std::size_t hlen,
                               std::uint32_t key_id,
                               std::uint64_t time_ms) noexcept;

/// Bytes encode() writes for `spec` (header + fixed part + options).
std::size_t encoded_size(const PacketSpec& spec) noexcept;

/// Writes the packet's header, fixed part and options into `out` with a zero checksum field.
/// Returns the bytes written, or 0 when `out` is too small or the spec is invalid.
std::size_t encode(std::span<std::byte> out, const PacketSpec& spec) noexcept;

/// Stores the checksum of header + payload into the header (bytes 6..7). `payload_sum` is
/// csum_partial(payload), which a caller can cache. Header length must be even.
void store_checksum(std::span<std::byte> header, std::uint16_t payload_sum) noexcept;

}  // namespace prizma::pgm
