// SPDX-License-Identifier: Apache-2.0
#include "lib/replay/wire.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>

#include "lib/pgm/bytes.hpp"
#include "lib/streams/recorder_format.hpp"

namespace prizma::replay {

void encode_request(std::byte* out, const ReplayRequest& r) noexcept {
    pgm::store_be32(out, kMagic);
    out[4] = std::byte{kProtocolVersion};
    out[5] = std::byte{r.follow ? std::uint8_t{1} : std::uint8_t{0}};
    out[6] = out[7] = std::byte{0};
    pgm::store_be32(out + 8, r.stream_id);
    pgm::store_be32(out + 12, 0);
    pgm::store_be64(out + 16, r.from);
    pgm::store_be64(out + 24, r.to);
}

bool decode_request(const std::byte* in, ReplayRequest& r) noexcept {
    if (pgm::load_be32(in) != kMagic || in[4] != std::byte{kProtocolVersion}
        || (std::to_integer<unsigned>(in[5]) & ~1U) != 0 || in[6] != std::byte{0}
        || in[7] != std::byte{0} || pgm::load_be32(in + 12) != 0) {
        return false;
    }
    r.follow = in[5] == std::byte{1};
    r.stream_id = pgm::load_be32(in + 8);
    r.from = pgm::load_be64(in + 16);
    r.to = pgm::load_be64(in + 24);
    return true;
}

unsigned request_version(const std::byte* in) noexcept {
    return pgm::load_be32(in) == kMagic ? std::to_integer<unsigned>(in[4]) : 0U;
}

std::string version_refusal(unsigned version) {
    return "replay: the client speaks replay protocol version " + std::to_string(version)
           + (version == 1 ? " (journal frames before XXH3)" : "") + "; this server speaks version "
           + std::to_string(kProtocolVersion) + ": upgrade the client";
}

FrameReader::Next FrameReader::next(JournalEntry& out,
                                    std::uint64_t& error_code,
                                    std::string& error) {
    journal::Frame f;
    const auto avail = std::span<const std::byte>(buf_).subspan(begin_, len_ - begin_);
    const auto p = journal::parse(avail, f);
    if (p == journal::Parse::need_more) {
        // The length is the server's word: refused past the largest frame before any memory
        // is sized from it (a length of 2^32 - 1 asked for 4 GiB).
        if (avail.size() >= 4 && pgm::load_be32(avail.data()) > journal::kMaxBody) {
            error = "replay: the server announced a frame of "
                    + std::to_string(pgm::load_be32(avail.data())) + " bytes (at most "
                    + std::to_string(journal::kMaxBody) + ")";
            return Next::malformed;
        }
        return Next::need_more;
    }
    if (p == journal::Parse::bad) {
        // A server of replay protocol version 1 sends format-1 frames (its error frame too).
        if (const unsigned format = journal::segment_format(avail);
            format != 0 && format != journal::kFormat) {
            error = "replay: the server sends journal frames of format " + std::to_string(format)
                    + (format == 1 ? " (replay protocol version 1, before XXH3)" : "")
                    + "; this client speaks replay protocol version "
                    + std::to_string(kProtocolVersion) + ": upgrade the server";
            return Next::malformed;
        }
        error = "replay: malformed frame from the server";
        return Next::malformed;
    }
    begin_ += f.size();
    switch (f.kind) {
        case journal::kEnd: return Next::end;
        case journal::kError:
            error_code = f.sequence;
            error.assign(reinterpret_cast<const char*>(f.body.data()), f.body.size());
            return Next::error_frame;
        default: break;
    }
    out.kind = f.kind == journal::kRecord ? StreamEventKind::record
               : f.kind == journal::kLoss ? StreamEventKind::loss
                                          : StreamEventKind::reset;
    out.sequence = f.sequence;
    out.count = f.kind == journal::kLoss ? f.count : f.kind == journal::kRecord ? 1U : 0U;
    out.epoch = f.kind == journal::kLoss ? 0 : static_cast<std::uint32_t>(f.count);
    out.record = f.kind == journal::kRecord ? f.body : std::span<const std::byte>{};
    return Next::entry;
}

std::span<std::byte> FrameReader::space() noexcept {
    std::memmove(buf_.data(), buf_.data() + begin_, len_ - begin_);
    len_ -= begin_;
    begin_ = 0;
    if (len_ >= 4) {
        const std::size_t body = pgm::load_be32(buf_.data());  // checked by next()
        const std::size_t need = journal::kFrameHeader + std::min(body, journal::kMaxBody);
        if (need > buf_.size()) {
            try {
                buf_.resize(need);
            } catch (...) {  // NOLINT(bugprone-empty-catch): at most 16 MiB; no room: none
                return {};
            }
        }
    }
    return std::span<std::byte>(buf_).subspan(len_);
}

Result<std::pair<sockaddr_storage, socklen_t>, Error> socket_address(std::string_view address,
                                                                     std::uint16_t port) {
    sockaddr_storage ss{};
    const std::string a(address);
    auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
    if (::inet_pton(AF_INET, a.c_str(), &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        return std::pair{ss, static_cast<socklen_t>(sizeof(sockaddr_in))};
    }
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (::inet_pton(AF_INET6, a.c_str(), &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        return std::pair{ss, static_cast<socklen_t>(sizeof(sockaddr_in6))};
    }
    return Error(Errc::invalid_argument, "replay: not a numeric IPv4 or IPv6 address: '" + a + "'");
}

bool operator==(const PeerAddress& a, const PeerAddress& b) noexcept {
    return a.family == b.family && std::memcmp(a.bytes, b.bytes, sizeof a.bytes) == 0;
}

PeerAddress peer_address(const sockaddr_storage& sa) noexcept {
    PeerAddress p;
    if (sa.ss_family == AF_INET) {
        p.family = AF_INET;
        std::memcpy(p.bytes, &reinterpret_cast<const sockaddr_in*>(&sa)->sin_addr, 4);
    } else if (sa.ss_family == AF_INET6) {
        const auto& a6 = reinterpret_cast<const sockaddr_in6*>(&sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(&a6)) {
            p.family = AF_INET;
            std::memcpy(p.bytes, a6.s6_addr + 12, 4);
        } else {
            p.family = AF_INET6;
            std::memcpy(p.bytes, a6.s6_addr, 16);
        }
    }
    return p;
}

bool Prefix::contains(const PeerAddress& a) const noexcept {
    if (a.family != net.family) {
        return false;
    }
    unsigned left = bits;
    for (std::size_t i = 0; left > 0; ++i) {
        const unsigned take = left >= 8 ? 8U : left;
        const auto mask = static_cast<std::uint8_t>(0xFFU << (8U - take));
        if (((a.bytes[i] ^ net.bytes[i]) & mask) != 0) {
            return false;
        }
        left -= take;
    }
    return true;
}

Result<std::vector<Prefix>, Error> parse_allow_list(const std::vector<std::string>& entries) {
    std::vector<Prefix> out;
    for (const std::string& e : entries) {
        const auto slash = e.find('/');
        const std::string addr = e.substr(0, slash);
        auto sa = socket_address(addr, 0);
        Prefix p;
        if (sa) {
            p.net = peer_address(sa->first);
        }
        const unsigned max = p.net.family == AF_INET ? 32U : 128U;
        p.bits = max;
        bool ok = sa.has_value();
        if (ok && slash != std::string::npos) {
            const char* b = e.data() + slash + 1;
            const char* end = e.data() + e.size();
            const auto [ptr, ec] = std::from_chars(b, end, p.bits);
            ok = ec == std::errc{} && ptr == end && b != end && p.bits <= max;
        }
        if (!ok) {
            return Error(Errc::invalid_argument,
                         "replay: allow-list entry '" + e
                             + "' is not an address or ADDRESS/BITS (IPv4 or IPv6)");
        }
        out.push_back(p);
    }
    return out;
}

}  // namespace prizma::replay
