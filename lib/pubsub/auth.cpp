// SPDX-License-Identifier: Apache-2.0
#include "lib/pubsub/auth.hpp"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <ctime>
#include <string>

#include "lib/pgm/bytes.hpp"
#include "lib/pgm/checksum.hpp"
#include "lib/posix/errors.hpp"

namespace prizma {

namespace {

Error key_error(const std::string& path, const std::string& what) {
    return {Errc::invalid_argument, "key file " + path + ": " + what};
}

int hex_digit(char c) noexcept {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

std::string_view trim(std::string_view s) {
    const auto b = s.find_first_not_of(" \t\r");
    if (b == std::string_view::npos) {
        return {};
    }
    return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// "ID HEX": false on any other shape (the line itself is never quoted back: it is a secret).
bool parse_key_line(std::string_view line, AuthKey& out) {
    const auto sp = line.find_first_of(" \t");
    if (sp == std::string_view::npos) {
        return false;
    }
    const std::string_view id = line.substr(0, sp);
    const std::string_view hex = trim(line.substr(sp));
    const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), out.id);
    if (ec != std::errc{} || end != id.data() + id.size() || hex.size() != 2 * out.bytes.size()) {
        return false;
    }
    for (std::size_t i = 0; i < out.bytes.size(); ++i) {
        const int hi = hex_digit(hex[2 * i]);
        const int lo = hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            return false;
        }
        out.bytes[i] = static_cast<std::uint8_t>(hi * 16 + lo);
    }
    return true;
}

// The whole file, after checking it is a regular file of ours that nobody else may read.
Result<std::string, Error> read_private_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        return key_error(path, posix::errno_text());
    }
    struct stat st {};
    std::string text;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        return key_error(path, "not a regular file");
    }
    if (st.st_uid != ::geteuid() || (st.st_mode & 077U) != 0) {
        ::close(fd);
        return key_error(path, "must be yours with mode 0600 or 0400 (chmod 600)");
    }
    if (st.st_size > off_t{64} * 1024) {
        ::close(fd);
        return key_error(path, "larger than 64 KiB: not a key file");
    }
    text.resize(static_cast<std::size_t>(st.st_size));
    const ssize_t n = ::read(fd, text.data(), text.size());
    ::close(fd);
    if (n != st.st_size) {
        sodium_memzero(text.data(), text.size());
        return key_error(path, "cannot read it whole");
    }
    return text;
}

}  // namespace

Result<AuthOptions, Error> read_key_file(const std::string& path) {
    auto text = read_private_file(path);
    if (!text) {
        return text.error();
    }
    std::string& body = *text;
    AuthOptions o;
    std::string_view rest = body;
    std::size_t line_no = 0;
    bool bad = false;
    while (!rest.empty() && !bad) {
        const auto nl = rest.find('\n');
        const std::string_view line = trim(rest.substr(0, nl));
        rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
        ++line_no;
        if (line.empty() || line.front() == '#') {
            continue;
        }
        AuthKey k;
        bad = !parse_key_line(line, k);
        if (!bad) {
            o.keys.push_back(k);
        }
    }
    sodium_memzero(body.data(), body.size());
    if (bad) {
        return key_error(path, "line " + std::to_string(line_no)
                                   + ": not 'ID HEX' (a decimal id, 32 hex digits)");
    }
    if (o.keys.empty() || o.keys.size() > pubsub::Authenticator::kMaxKeys) {
        return key_error(path, "1 to 4 keys, one per line");
    }
    return o;
}

namespace pubsub {

Result<Authenticator, Error> Authenticator::create(const AuthOptions& o) {
    if (sodium_init() < 0) {
        return Error(Errc::unsupported, "libsodium cannot be initialised");
    }
    if (o.keys.empty() || o.keys.size() > kMaxKeys) {
        return Error(Errc::invalid_argument, "auth.keys: 1 to 4 keys");
    }
    for (std::size_t i = 0; i < o.keys.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j) {
            if (o.keys[i].id == o.keys[j].id) {
                return Error(Errc::invalid_argument, "auth.keys: key ids must differ");
            }
        }
    }
    const auto skew = o.max_clock_skew.count();
    if (skew < 1 || skew > 3600) {
        return Error(Errc::invalid_argument, "auth.max_clock_skew: 1 s to 1 h");
    }
    Authenticator a;
    std::copy(o.keys.begin(), o.keys.end(), a.keys_.begin());
    a.count_ = o.keys.size();
    a.skew_ms_ = skew * 1000;
    return a;
}

std::uint64_t Authenticator::wall_now_ms() noexcept {
    timespec ts{};
    (void)::clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000U
           + static_cast<std::uint64_t>(ts.tv_nsec) / 1'000'000U;
}

namespace {

// The tag of a packet whose checksum field and tag are zero.
void mac(std::span<const std::byte> packet, const AuthKey& k, std::byte* tag) noexcept {
    (void)crypto_shorthash_siphashx24(reinterpret_cast<unsigned char*>(tag),
                                      reinterpret_cast<const unsigned char*>(packet.data()),
                                      packet.size(), k.bytes.data());
}

}  // namespace

std::size_t Authenticator::sign(std::span<const std::byte> header,
                                std::span<const std::byte> payload,
                                std::span<std::byte> out,
                                std::uint64_t wall_ms) const noexcept {
    if (out.size() < header.size() + payload.size() + pgm::kAuthOverheadBytes) {
        return 0;
    }
    std::memcpy(out.data(), header.data(), header.size());
    const std::size_t hlen = pgm::append_auth_option(out, header.size(), keys_[0].id, wall_ms);
    if (hlen == 0) {
        return 0;
    }
    if (!payload.empty()) {
        std::memcpy(out.data() + hlen, payload.data(), payload.size());
    }
    const std::size_t len = hlen + payload.size();
    const auto packet = out.first(len);
    pgm::store_be16(out.data() + 6, 0);
    mac(packet, keys_[0], out.data() + hlen - pgm::kAuthTagBytes);
    pgm::store_checksum(packet, 0);
    return len;
}

Authenticator::Verdict Authenticator::verify(const pgm::Packet& p,
                                             std::span<std::byte> scratch,
                                             std::uint64_t wall_ms) const noexcept {
    if (!p.opts.has_auth) {
        return Verdict::missing;
    }
    const AuthKey* key = nullptr;
    for (std::size_t i = 0; i < count_; ++i) {
        if (keys_[i].id == p.opts.auth_key_id) {
            key = &keys_[i];
        }
    }
    if (key == nullptr) {
        return Verdict::unknown_key;
    }
    const auto now = static_cast<std::int64_t>(wall_ms);
    const auto sent = static_cast<std::int64_t>(p.opts.auth_time_ms);
    if (sent < now - skew_ms_ || sent > now + skew_ms_) {
        return Verdict::stale;
    }
    const std::size_t tag_at = p.opts.auth_offset + pgm::kAuthOptionBytes - pgm::kAuthTagBytes;
    if (scratch.size() < p.raw.size() || tag_at + pgm::kAuthTagBytes > p.raw.size()) {
        return Verdict::bad_tag;
    }
    std::memcpy(scratch.data(), p.raw.data(), p.raw.size());
    pgm::store_be16(scratch.data() + 6, 0);
    std::memset(scratch.data() + tag_at, 0, pgm::kAuthTagBytes);
    std::array<std::byte, pgm::kAuthTagBytes> want{};
    mac(scratch.first(p.raw.size()), *key, want.data());
    const bool same =
        crypto_verify_16(reinterpret_cast<const unsigned char*>(want.data()),
                         reinterpret_cast<const unsigned char*>(p.raw.data() + tag_at))
        == 0;
    return same ? Verdict::ok : Verdict::bad_tag;
}

}  // namespace pubsub
}  // namespace prizma
