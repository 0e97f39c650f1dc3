// SPDX-License-Identifier: Apache-2.0
#include "lib/pgm/packet.hpp"

#include <cstring>

#include "lib/pgm/bytes.hpp"
#include "lib/pgm/checksum.hpp"

namespace prizma::pgm {
namespace {

bool is_known_type(std::uint8_t t) noexcept {
    switch (t) {
        case 0x00:
        case 0x01:
        case 0x02:
        case 0x04:
        case 0x05:
        case 0x08:
        case 0x09:
        case 0x0a:
        case 0x0c:
        case 0x0d: return true;
        default: return false;
    }
}

// Reads AFI(2) reserved(2) NLA at `off`; advances `off`.
ParseStatus read_nla(std::span<const std::byte> d, std::size_t& off, Nla& out) noexcept {
    if (d.size() < off + 4) {
        return ParseStatus::truncated;
    }
    out.afi = load_be16(d.data() + off);
    if (out.afi != kAfiIpv4 && out.afi != kAfiIpv6) {
        return ParseStatus::bad_afi;
    }
    const std::size_t n = out.size();
    if (d.size() < off + 4 + n) {
        return ParseStatus::truncated;
    }
    out.addr = {};
    std::memcpy(out.addr.data(), d.data() + off + 4, n);
    off += 4 + n;
    return ParseStatus::ok;
}

// RFC 3208 §9: the options start with OPT_LENGTH (4 bytes), whose value is the total bytes of
// all options. Reads that total from the option at `off`.
ParseStatus read_opt_length(std::span<const std::byte> d,
                            std::size_t off,
                            std::uint16_t& total) noexcept {
    if (d.size() < off + 4) {
        return ParseStatus::truncated;
    }
    const auto first_type = std::to_integer<std::uint8_t>(d[off]);
    const auto first_len = std::to_integer<std::uint8_t>(d[off + 1]);
    if ((first_type & 0x7fU) != static_cast<std::uint8_t>(OptionType::length) || first_len != 4) {
        return ParseStatus::bad_options;
    }
    total = load_be16(d.data() + off + 2);
    return ParseStatus::ok;
}

// One option TLV (not OPT_LENGTH) of `len` bytes at `body`, read into `o`.
// The OPX/U byte (body[2]) is ignored on known options: OpenPGM leaves it uninitialised on
// OPT_FRAGMENT (docs/PROTOCOL.md §6).
ParseStatus read_option(const std::byte* body,
                        std::size_t len,
                        std::size_t at,
                        Options& o) noexcept {
    const auto type = static_cast<OptionType>(std::to_integer<std::uint8_t>(body[0]) & 0x7fU);
    // OPT_PARITY_GRP and OPT_CURR_TGSIZE: 8 bytes, a 32-bit value; once each.
    const auto read_u32 = [&](bool& has, std::uint32_t& value) {
        if (len != kParityOptionBytes || has) {
            return ParseStatus::bad_options;
        }
        has = true;
        value = load_be32(body + 4);
        return ParseStatus::ok;
    };
    switch (type) {
        case OptionType::length: return ParseStatus::bad_options;  // only once, first
        case OptionType::fragment:
            if (len != 16 || o.has_fragment) {
                return ParseStatus::bad_options;
            }
            o.has_fragment = true;
            o.fragment.first_sqn = Sqn{load_be32(body + 4)};
            o.fragment.offset = load_be32(body + 8);
            o.fragment.apdu_length = load_be32(body + 12);
            break;
        case OptionType::nak_list: {
            const std::size_t n = (len - 4) / 4;
            if ((len - 4) % 4 != 0 || n == 0 || n > kMaxNakList || o.nak_list != nullptr) {
                return ParseStatus::bad_options;
            }
            o.nak_list = body + 4;
            o.nak_list_count = static_cast<std::uint8_t>(n);
            break;
        }
        case OptionType::join:
            if (len != 8) {
                return ParseStatus::bad_options;
            }
            o.has_join = true;
            o.join_min = Sqn{load_be32(body + 4)};
            break;
        case OptionType::parity_prm:
            if (len != kParityOptionBytes || o.has_parity_prm) {
                return ParseStatus::bad_options;
            }
            o.has_parity_prm = true;
            o.parity_prm_flags = std::to_integer<std::uint8_t>(body[3]);
            o.parity_group_size = load_be32(body + 4);
            if ((o.parity_prm_flags & (kParityPrmProactive | kParityPrmOnDemand)) == 0
                || o.parity_group_size < kMinParityGroup || o.parity_group_size > kMaxParityGroup
                || (o.parity_group_size & (o.parity_group_size - 1)) != 0) {
                return ParseStatus::bad_options;  // as OpenPGM refuses such an SPM
            }
            break;
        case OptionType::parity_grp: return read_u32(o.has_parity_grp, o.parity_grp);
        case OptionType::curr_tgsize: return read_u32(o.has_curr_tgsize, o.curr_tgsize);
        case OptionType::syn: o.syn = true; break;
        case OptionType::fin: o.fin = true; break;
        case OptionType::auth:
            if (len != kAuthOptionBytes || o.has_auth) {
                return ParseStatus::bad_options;
            }
            o.has_auth = true;
            o.auth_offset = static_cast<std::uint16_t>(at);
            o.auth_key_id = load_be32(body + 4);
            o.auth_time_ms = (std::uint64_t{load_be32(body + 8)} << 32U) | load_be32(body + 12);
            break;
        case OptionType::status:
            if (len != kStatusOptionBytes || o.has_status) {
                return ParseStatus::bad_options;
            }
            o.has_status = true;
            o.status.leaving = (std::to_integer<std::uint8_t>(body[3]) & kStatusLeaving) != 0;
            o.status.consumed = Sqn{load_be32(body + 4)};
            o.status.window = load_be32(body + 8);
            o.status.receiver_id =
                (std::uint64_t{load_be32(body + 12)} << 32U) | load_be32(body + 16);
            o.status.tag = (std::uint64_t{load_be32(body + 20)} << 32U) | load_be32(body + 24);
            break;
        case OptionType::rst: {
            o.rst = true;
            const auto b = std::to_integer<std::uint8_t>(body[3]);
            o.rst_n = (b & 0x80U) != 0;
            o.rst_code = static_cast<std::uint8_t>(b & 0x3fU);
            break;
        }
        default: ++o.unknown_count; break;
    }
    return ParseStatus::ok;
}

// OPT_LENGTH first, then TLVs, the last one with OPT_END. Every length is checked against the
// bytes that are really there.
ParseStatus read_options(std::span<const std::byte> d, std::size_t& off, Options& o) noexcept {
    std::uint16_t total = 0;
    if (const ParseStatus st = read_opt_length(d, off, total); st != ParseStatus::ok) {
        return st;
    }
    if (total < 8 || d.size() < off + total) {
        // At least OPT_LENGTH plus one real option; lying totals past the datagram are refused.
        return total < 8 ? ParseStatus::bad_options : ParseStatus::truncated;
    }
    o.total_length = total;
    const std::size_t end = off + total;
    std::size_t p = off + 4;
    std::size_t count = 1;
    bool saw_end = false;
    while (p < end) {
        if (end - p < 4 || saw_end || ++count > kMaxOptions) {
            return ParseStatus::bad_options;
        }
        const auto type_byte = std::to_integer<std::uint8_t>(d[p]);
        const std::size_t len = std::to_integer<std::uint8_t>(d[p + 1]);
        if (len < 4 || len > end - p) {
            return ParseStatus::bad_options;  // zero/short lengths would loop or overrun
        }
        saw_end = (type_byte & kOptEnd) != 0;
        if (const ParseStatus st = read_option(d.data() + p, len, p, o); st != ParseStatus::ok) {
            return st;
        }
        p += len;
    }
    if (!saw_end) {
        return ParseStatus::bad_options;
    }
    off = end;
    return ParseStatus::ok;
}

}  // namespace

Sqn Options::nak_list_at(std::size_t i) const noexcept {
    return Sqn{load_be32(nak_list + 4 * i)};
}

const char* to_string(ParseStatus s) noexcept {
    switch (s) {
        case ParseStatus::ok: return "ok";
        case ParseStatus::truncated: return "truncated";
        case ParseStatus::bad_type: return "bad type";
        case ParseStatus::bad_checksum: return "bad checksum";
        case ParseStatus::zero_checksum: return "zero checksum on data";
        case ParseStatus::bad_options: return "bad options";
        case ParseStatus::bad_afi: return "bad AFI";
        case ParseStatus::bad_length: return "bad TSDU length";
    }
    return "?";
}

namespace {

// The type's fixed part after the common header (RFC 3208 §8; ACK as PGMCC's); advances
// `off`. POLL and POLR set `header_only`.
ParseStatus read_fixed(std::span<const std::byte> d,
                       std::size_t& off,
                       Packet& out,
                       bool& header_only) noexcept {
    const std::byte* h = d.data();
    ParseStatus st = ParseStatus::ok;
    switch (out.type) {
        case PacketType::spm:
            if (d.size() < off + 12) {
                return ParseStatus::truncated;
            }
            out.sqn = Sqn{load_be32(h + off)};
            out.trail = Sqn{load_be32(h + off + 4)};
            out.lead = Sqn{load_be32(h + off + 8)};
            off += 12;
            st = read_nla(d, off, out.nla);
            break;
        case PacketType::odata:
        case PacketType::rdata:
            if (d.size() < off + 8) {
                return ParseStatus::truncated;
            }
            out.sqn = Sqn{load_be32(h + off)};
            out.trail = Sqn{load_be32(h + off + 4)};
            off += 8;
            break;
        case PacketType::nak:
        case PacketType::nnak:
        case PacketType::ncf:
            if (d.size() < off + 4) {
                return ParseStatus::truncated;
            }
            out.sqn = Sqn{load_be32(h + off)};
            off += 4;
            st = read_nla(d, off, out.nla);
            if (st == ParseStatus::ok) {
                st = read_nla(d, off, out.group);
            }
            break;
        case PacketType::ack:
            if (d.size() < off + kAckFixedBytes) {
                return ParseStatus::truncated;
            }
            out.sqn = Sqn{load_be32(h + off)};
            out.ack_bitmap = load_be32(h + off + 4);
            off += kAckFixedBytes;
            break;
        case PacketType::poll:
        case PacketType::polr: header_only = true; break;
        case PacketType::spmr: break;
    }
    return st;
}

}  // namespace

ParseStatus parse(std::span<const std::byte> d, Packet& out, const ParseConfig& cfg) noexcept {
    if (d.size() < kHeaderBytes) {
        return ParseStatus::truncated;
    }
    const std::byte* h = d.data();
    const auto type_byte = std::to_integer<std::uint8_t>(h[4]);
    if (!is_known_type(type_byte)) {
        return ParseStatus::bad_type;
    }
    // Every field is set below or reset here (no whole-struct clear: this runs per packet).
    out.sqn = Sqn{};
    out.trail = Sqn{};
    out.lead = Sqn{};
    out.ack_bitmap = 0;
    out.nla.afi = 0;
    out.group.afi = 0;
    out.opts = Options{};
    out.payload = {};
    out.sport = load_be16(h);
    out.dport = load_be16(h + 2);
    out.type = static_cast<PacketType>(type_byte);
    out.options_byte = std::to_integer<std::uint8_t>(h[5]);
    out.checksum = load_be16(h + 6);
    std::memcpy(out.gsi.bytes.data(), h + 8, 6);
    out.tsdu_length = load_be16(h + 14);
    out.raw = d;

    const bool is_data = out.type == PacketType::odata || out.type == PacketType::rdata;
    if (out.checksum == 0) {
        if (is_data && !cfg.allow_zero_data_checksum) {
            return ParseStatus::zero_checksum;  // RFC 3208 §8: mandatory on ODATA/RDATA
        }
    } else if (cfg.verify_checksum && !csum_verify(d)) {
        return ParseStatus::bad_checksum;
    }

    std::size_t off = kHeaderBytes;
    bool header_only = false;
    ParseStatus st = read_fixed(d, off, out, header_only);
    if (header_only) {
        return st;  // POLL/POLR: parsed as header only and ignored by the protocol
    }
    if (st != ParseStatus::ok) {
        return st;
    }
    if ((out.options_byte & kOptPresent) != 0) {
        st = read_options(d, off, out.opts);
        if (st != ParseStatus::ok) {
            return st;
        }
    }
    const std::size_t rest = d.size() - off;
    if (out.tsdu_length != rest) {
        return ParseStatus::bad_length;
    }
    const bool parity = is_data && out.is_parity();
    if (parity && (out.options_byte & kOptVarPktlen) != 0) {
        // The encoded original length closes a variable-length parity packet (OpenPGM
        // txw.c): it must be there, and the parity block before it is what it encodes.
        if (rest < kVarPktlenTrailerBytes) {
            return ParseStatus::bad_length;
        }
    }
    // A parity packet's OPT_FRAGMENT is Reed-Solomon encoded (its F bit set): no offsets to
    // check. The receiver drops parity data before it looks at the option.
    if (out.opts.has_fragment && !parity) {
        const auto& f = out.opts.fragment;
        if (f.apdu_length == 0 || f.offset > f.apdu_length || rest > f.apdu_length - f.offset) {
            return ParseStatus::bad_options;
        }
    }
    out.payload = d.subspan(off);
    return ParseStatus::ok;
}

std::size_t options_offset(std::span<const std::byte> header) noexcept {
    const std::span<const std::byte> d = header;
    if (d.size() < kHeaderBytes) {
        return 0;
    }
    const auto type = static_cast<PacketType>(std::to_integer<std::uint8_t>(d[4]));
    std::size_t off = kHeaderBytes;
    Nla nla;
    switch (type) {
        case PacketType::spm:
            off += 12;
            if (read_nla(d, off, nla) != ParseStatus::ok) {
                return 0;
            }
            break;
        case PacketType::odata:
        case PacketType::rdata: off += 8; break;
        case PacketType::nak:
        case PacketType::nnak:
        case PacketType::ncf:
            off += 4;
            if (read_nla(d, off, nla) != ParseStatus::ok
                || read_nla(d, off, nla) != ParseStatus::ok) {
                return 0;
            }
            break;
        case PacketType::ack: off += kAckFixedBytes; break;
        case PacketType::spmr: break;
        default: return 0;  // unknown, or POLL/POLR (header-only to parse())
    }
    return off <= d.size() ? off : 0;
}

std::size_t wire_length(std::span<const std::byte> d) noexcept {
    std::size_t off = options_offset(d);
    if (off == 0) {
        return 0;
    }
    if ((std::to_integer<std::uint8_t>(d[5]) & kOptPresent) != 0) {
        std::uint16_t total = 0;
        if (read_opt_length(d, off, total) != ParseStatus::ok) {
            return 0;
        }
        off += total;
    }
    return off + load_be16(d.data() + 14);
}

std::size_t append_auth_option(std::span<std::byte> buf,
                               std::size_t hlen,
                               std::uint32_t key_id,
                               std::uint64_t time_ms) noexcept {
    if (buf.size() < hlen + kAuthOverheadBytes) {
        return 0;
    }
    const std::size_t opt = options_offset(buf.first(hlen));
    if (opt == 0) {
        return 0;
    }
    std::byte* h = buf.data();
    std::size_t at = hlen;  // where the auth option goes: the end of the header
    if ((std::to_integer<std::uint8_t>(h[5]) & kOptPresent) != 0) {
        std::uint16_t total = 0;
        if (read_opt_length(buf.first(hlen), opt, total) != ParseStatus::ok
            || opt + total != hlen) {
            return 0;
        }
        // Clear OPT_END on the last option: walk the TLVs after OPT_LENGTH.
        std::size_t p = opt + 4;
        std::size_t last = 0;
        while (p + 4 <= hlen) {
            const std::size_t len = std::to_integer<std::uint8_t>(h[p + 1]);
            if (len < 4 || p + len > hlen) {
                return 0;
            }
            last = p;
            p += len;
        }
        if (last == 0) {
            return 0;
        }
        h[last] &= std::byte{static_cast<std::uint8_t>(~kOptEnd)};
        store_be16(h + opt + 2, static_cast<std::uint16_t>(total + kAuthOptionBytes));
    } else {
        h[5] |= std::byte{kOptPresent};
        h[at] = std::byte{static_cast<std::uint8_t>(OptionType::length)};
        h[at + 1] = std::byte{4};
        store_be16(h + at + 2, static_cast<std::uint16_t>(4 + kAuthOptionBytes));
        at += 4;
    }
    std::byte* o = h + at;
    std::memset(o, 0, kAuthOptionBytes);
    o[0] =
        std::byte{static_cast<std::uint8_t>(static_cast<std::uint8_t>(OptionType::auth) | kOptEnd)};
    o[1] = std::byte{static_cast<std::uint8_t>(kAuthOptionBytes)};
    store_be32(o + 4, key_id);
    store_be32(o + 8, static_cast<std::uint32_t>(time_ms >> 32U));
    store_be32(o + 12, static_cast<std::uint32_t>(time_ms));
    return at + kAuthOptionBytes;
}

namespace {

std::size_t fixed_part(const PacketSpec& s) noexcept {
    switch (s.type) {
        case PacketType::spm: return 12 + 4 + s.nla.size();
        case PacketType::odata:
        case PacketType::rdata: return 8;
        case PacketType::nak:
        case PacketType::nnak:
        case PacketType::ncf: return 4 + 4 + s.nla.size() + 4 + s.group.size();
        case PacketType::ack: return kAckFixedBytes;
        default: return 0;
    }
}

std::size_t options_part(const PacketSpec& s) noexcept {
    std::size_t n = 0;
    if (s.fragment != nullptr) {
        n += 16;
    }
    if (!s.nak_list.empty()) {
        n += 4 + 4 * s.nak_list.size();
    }
    if (s.join_min != nullptr) {
        n += 8;
    }
    n += (s.syn ? 4U : 0U) + (s.fin ? 4U : 0U) + (s.rst ? 4U : 0U);
    if (s.status != nullptr) {
        n += kStatusOptionBytes;
    }
    if (s.parity_prm_flags != 0) {
        n += kParityOptionBytes;
    }
    return n == 0 ? 0 : n + 4;  // + OPT_LENGTH
}

void write_nla(std::byte* p, const Nla& n) noexcept {
    store_be16(p, n.afi);
    store_be16(p + 2, 0);
    std::memcpy(p + 4, n.addr.data(), n.size());
}

std::byte* opt_header(std::byte* p, OptionType t, std::uint8_t len, std::byte*& last) noexcept {
    p[0] = static_cast<std::byte>(t);
    p[1] = static_cast<std::byte>(len);
    p[2] = std::byte{0};
    p[3] = std::byte{0};
    last = p;
    return p;
}

// OPT_LENGTH (total `opt_bytes`) and the options `s` names, the last with OPT_END, at `q`.
void write_options(std::byte* q, const PacketSpec& s, std::size_t opt_bytes) noexcept {
    std::byte* last = nullptr;
    opt_header(q, OptionType::length, 4, last);
    store_be16(q + 2, static_cast<std::uint16_t>(opt_bytes));
    q += 4;
    if (s.fragment != nullptr) {
        opt_header(q, OptionType::fragment, 16, last);
        store_be32(q + 4, s.fragment->first_sqn.value);
        store_be32(q + 8, s.fragment->offset);
        store_be32(q + 12, s.fragment->apdu_length);
        q += 16;
    }
    if (!s.nak_list.empty()) {
        const auto len = static_cast<std::uint8_t>(4 + 4 * s.nak_list.size());
        opt_header(q, OptionType::nak_list, len, last);
        for (std::size_t i = 0; i < s.nak_list.size(); ++i) {
            store_be32(q + 4 + 4 * i, s.nak_list[i].value);
        }
        q += len;
    }
    if (s.join_min != nullptr) {
        opt_header(q, OptionType::join, 8, last);
        store_be32(q + 4, s.join_min->value);
        q += 8;
    }
    if (s.syn) {
        opt_header(q, OptionType::syn, 4, last);
        q += 4;
    }
    if (s.fin) {
        opt_header(q, OptionType::fin, 4, last);
        q += 4;
    }
    if (s.rst) {
        opt_header(q, OptionType::rst, 4, last);
        q[3] = static_cast<std::byte>(s.rst_code & 0x3fU);
        q += 4;
    }
    if (s.status != nullptr) {
        const StatusInfo& st = *s.status;
        opt_header(q, OptionType::status, static_cast<std::uint8_t>(kStatusOptionBytes), last);
        q[3] = std::byte{st.leaving ? kStatusLeaving : std::uint8_t{0}};
        store_be32(q + 4, st.consumed.value);
        store_be32(q + 8, st.window);
        store_be32(q + 12, static_cast<std::uint32_t>(st.receiver_id >> 32U));
        store_be32(q + 16, static_cast<std::uint32_t>(st.receiver_id));
        store_be32(q + 20, static_cast<std::uint32_t>(st.tag >> 32U));
        store_be32(q + 24, static_cast<std::uint32_t>(st.tag));
        q += kStatusOptionBytes;
    }
    if (s.parity_prm_flags != 0) {
        opt_header(q, OptionType::parity_prm, static_cast<std::uint8_t>(kParityOptionBytes), last);
        q[3] = std::byte{s.parity_prm_flags};
        store_be32(q + 4, s.parity_group_size);
    }
    *last |= std::byte{kOptEnd};
}

}  // namespace

std::size_t encoded_size(const PacketSpec& s) noexcept {
    return kHeaderBytes + fixed_part(s) + options_part(s);
}

std::size_t encode(std::span<std::byte> out, const PacketSpec& s) noexcept {
    const std::size_t total = encoded_size(s);
    const bool nla_ok = (s.nla.afi == kAfiIpv4 || s.nla.afi == kAfiIpv6);
    const bool grp_ok = (s.group.afi == kAfiIpv4 || s.group.afi == kAfiIpv6);
    const bool needs_nla = s.type == PacketType::spm || s.type == PacketType::nak
                           || s.type == PacketType::nnak || s.type == PacketType::ncf;
    const bool needs_grp = needs_nla && s.type != PacketType::spm;
    if (out.size() < total || s.nak_list.size() > kMaxNakList || (needs_nla && !nla_ok)
        || (needs_grp && !grp_ok)) {
        return 0;
    }
    std::byte* p = out.data();
    const std::size_t opt_bytes = options_part(s);
    std::uint8_t options_byte = 0;
    if (opt_bytes != 0) {
        options_byte = kOptPresent;
        if (!s.nak_list.empty() || s.parity_prm_flags != 0) {
            options_byte |= kOptNetwork;  // as OpenPGM sets it with both
        }
    }
    if (s.parity) {
        options_byte |= kOptParity;
    }
    store_be16(p, s.sport);
    store_be16(p + 2, s.dport);
    p[4] = static_cast<std::byte>(s.type);
    p[5] = static_cast<std::byte>(options_byte);
    store_be16(p + 6, 0);
    std::memcpy(p + 8, s.gsi.bytes.data(), 6);
    store_be16(p + 14, s.tsdu_length);
    std::byte* q = p + kHeaderBytes;
    switch (s.type) {
        case PacketType::spm:
            store_be32(q, s.sqn.value);
            store_be32(q + 4, s.trail.value);
            store_be32(q + 8, s.lead.value);
            write_nla(q + 12, s.nla);
            break;
        case PacketType::odata:
        case PacketType::rdata:
            store_be32(q, s.sqn.value);
            store_be32(q + 4, s.trail.value);
            break;
        case PacketType::nak:
        case PacketType::nnak:
        case PacketType::ncf:
            store_be32(q, s.sqn.value);
            write_nla(q + 4, s.nla);
            write_nla(q + 8 + s.nla.size(), s.group);
            break;
        case PacketType::ack:
            store_be32(q, s.sqn.value);
            store_be32(q + 4, s.ack_bitmap);
            break;
        default: break;
    }
    q += fixed_part(s);
    if (opt_bytes != 0) {
        write_options(q, s, opt_bytes);
    }
    return total;
}

void store_checksum(std::span<std::byte> header, std::uint16_t payload_sum) noexcept {
    store_be16(header.data() + 6, 0);
    // Header + options are always a multiple of 4 bytes, so the payload starts at an even offset.
    const std::uint16_t sum = csum_add(csum_partial(header), payload_sum);
    store_be16(header.data() + 6, csum_finish(sum));
}

}  // namespace prizma::pgm
