// SPDX-License-Identifier: Apache-2.0
// The journal's files, shared by the recorder and the journal reader (journal_files.hpp).
#include "lib/streams/journal_files.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "lib/posix/errors.hpp"

namespace prizma::journal {

using posix::os_error;

std::uint64_t frame_check(const std::byte* header, std::span<const std::byte> head) noexcept {
    const XXH64_hash_t seed = XXH3_64bits(header, kCheckOffset);
    return XXH3_64bits_withSeed(head.data(), head.size(), seed);
}

Error refused(const std::string& what, const std::string& why) {
    return {std::make_error_code(std::errc::permission_denied), what + " refused: " + why};
}

bool write_all(int fd, const std::byte* p, std::size_t n) noexcept {
    while (n > 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            return false;
        }
        p += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

ssize_t pread_full(int fd, std::byte* p, std::size_t n, std::uint64_t off) noexcept {
    std::size_t got = 0;
    while (got < n) {
        const ssize_t r = ::pread(fd, p + got, n - got, static_cast<off_t>(off + got));
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            return -1;
        }
        if (r == 0) {
            break;
        }
        got += static_cast<std::size_t>(r);
    }
    return static_cast<ssize_t>(got);
}

Result<void, Error> check_format(int fd, const std::string& path) {
    std::byte h[8];
    const ssize_t r = pread_full(fd, h, sizeof h, 0);
    if (r < 0) {
        return os_error("journal: read " + path);
    }
    const unsigned format = segment_format({h, static_cast<std::size_t>(r)});
    if (format == 0 || format == kFormat) {
        return {};
    }
    return Error(Errc::unsupported, "journal segment " + path + " is format "
                                        + std::to_string(format)
                                        + (format == 1 ? " (before XXH3)" : "")
                                        + "; this prizma reads format " + std::to_string(kFormat));
}

bool in_order(const Frame& f, std::uint64_t pos) noexcept {
    switch (f.kind) {
        case kRecord: return f.sequence == pos && f.sequence != UINT64_MAX;
        case kLoss: return f.sequence == pos && f.end() >= f.sequence;
        case kReset: return f.sequence >= pos;
        default: return false;
    }
}

Result<Scan> scan_file(int fd,
                       std::uint64_t size,
                       std::uint64_t offset,
                       std::uint64_t seq,
                       const std::vector<IndexEntry>* idx,
                       std::size_t* matched) {
    Scan s{offset, seq};
    if (offset >= size) {
        return s;
    }
    std::vector<std::byte> buf(std::min<std::uint64_t>(kReadChunk, size - offset));
    std::size_t begin = 0;
    std::size_t have = 0;
    for (;;) {
        Frame f;
        const auto avail = std::span<const std::byte>(buf).subspan(begin, have - begin);
        const Parse p = parse(avail, f);
        if (p == Parse::ok && in_order(f, s.end)) {
            if (idx != nullptr && *matched < idx->size()) {
                const IndexEntry& e = (*idx)[*matched];
                const std::uint64_t key = f.kind == kReset ? s.end : f.sequence;
                *matched += e.offset == s.valid && e.key == key ? 1U : 0U;
            }
            begin += f.size();
            s.valid += f.size();
            s.end = f.end();
            continue;
        }
        if (p != Parse::need_more) {
            return s;
        }
        std::size_t need = kFrameHeader;
        if (avail.size() >= kFrameHeader) {
            need += pgm::load_be32(avail.data());  // parse() checked it: at most kMaxBody
        }
        if (need > size - s.valid) {
            return s;  // torn: the frame's bytes are not all there
        }
        std::memmove(buf.data(), buf.data() + begin, avail.size());
        have = avail.size();
        begin = 0;
        if (need > buf.size()) {
            buf.resize(need);
        }
        const std::size_t want = std::min<std::uint64_t>(buf.size() - have, size - s.valid - have);
        const ssize_t r = pread_full(fd, buf.data() + have, want, s.valid + have);
        if (r < 0) {
            return posix::errno_code();
        }
        if (r == 0) {
            return s;
        }
        have += static_cast<std::size_t>(r);
    }
}

Result<bool> stopped_inside(int fd, std::uint64_t size, std::uint64_t at) noexcept {
    if (at >= size || size - at < kFrameHeader) {
        return false;
    }
    std::byte h[kFrameHeader];
    const ssize_t r = pread_full(fd, h, sizeof h, at);
    if (r < 0) {
        return posix::errno_code();
    }
    if (r != static_cast<ssize_t>(sizeof h)) {
        return false;
    }
    const std::uint32_t body = pgm::load_be32(h);
    return body <= kMaxBody && format_bytes_ok(h) && size - at > kFrameHeader + body;
}

Result<std::vector<IndexEntry>> read_index(int fd, std::uint64_t max) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        return posix::errno_code();
    }
    const std::uint64_t n =
        std::min<std::uint64_t>(static_cast<std::uint64_t>(st.st_size) / kIndexEntry, max);
    std::vector<std::byte> bytes(n * kIndexEntry);
    const ssize_t r = pread_full(fd, bytes.data(), bytes.size(), 0);
    if (r < 0) {
        return posix::errno_code();
    }
    std::vector<IndexEntry> out(static_cast<std::size_t>(r) / kIndexEntry);
    for (std::size_t k = 0; k < out.size(); ++k) {
        out[k] = {pgm::load_be64(bytes.data() + k * kIndexEntry),
                  pgm::load_be64(bytes.data() + k * kIndexEntry + 8)};
    }
    return out;
}

bool entry_holds(int fd, std::uint64_t size, const IndexEntry& e) noexcept {
    if (e.offset >= size || size - e.offset < kFrameHeader) {
        return false;
    }
    std::byte h[kFrameHeader + RecordHeader::kBytes];
    const std::size_t want = std::min<std::uint64_t>(sizeof h, size - e.offset);
    if (pread_full(fd, h, want, e.offset) != static_cast<ssize_t>(want)) {
        return false;
    }
    const std::uint32_t len = pgm::load_be32(h);
    const auto kind = std::to_integer<std::uint8_t>(h[4]);
    if (len > kMaxBody || kFrameHeader + len > size - e.offset || !format_bytes_ok(h)) {
        return false;
    }
    const std::uint64_t seq = pgm::load_be64(h + 8);
    const std::span<const std::byte> head(h + kFrameHeader,
                                          std::min<std::size_t>(len, RecordHeader::kBytes));
    if (pgm::load_be64(h + kCheckOffset) != frame_check(h, head)) {
        return false;
    }
    return (kind == kRecord || kind == kLoss) && seq == e.key;
}

Place locate(int fd,
             std::uint64_t size,
             const std::vector<IndexEntry>& idx,
             std::uint64_t name,
             std::uint64_t from) noexcept {
    std::size_t n = 0;  // candidates: idx[0, n)
    for (; n < idx.size() && idx[n].key <= from && idx[n].key >= name; ++n) {
        if (n > 0 && (idx[n].offset <= idx[n - 1].offset || idx[n].key < idx[n - 1].key)) {
            break;
        }
    }
    // A few tries back (the last one may be a reset's). The recorder's recovery keeps only
    // entries on its segment's chain of frames; older segments' entries that hold are trusted.
    for (std::size_t k = n; k > 0 && n - k < 4; --k) {
        if (entry_holds(fd, size, idx[k - 1])) {
            return {idx[k - 1].offset, idx[k - 1].key};
        }
    }
    return {0, name};
}

std::vector<IndexEntry> segment_index(int dir_fd, std::uint64_t name, std::uint64_t size) {
    const posix::UniqueFd fd(::openat(dir_fd, file_name(name, "idx").text, kReadFlags));
    struct stat st {};
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        return {};
    }
    auto e = read_index(fd.get(), size / kFrameHeader + 1);
    return e ? std::move(*e) : std::vector<IndexEntry>{};
}

Result<posix::UniqueFd, Error> open_own_file(
    int dir_fd, const FileName& name, int flags, std::uint32_t mode, const std::string& path) {
    posix::UniqueFd fd(
        ::openat(dir_fd, name.text, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, mode));
    if (!fd.valid()) {
        if (errno == ELOOP) {
            return refused("recorder: " + path, "a symbolic link");
        }
        return os_error("recorder: open " + path);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        return os_error("recorder: stat " + path);
    }
    if (!S_ISREG(st.st_mode)) {
        return refused("recorder: " + path, "not a regular file");
    }
    if (st.st_uid != ::geteuid()) {
        return refused("recorder: " + path, "owned by uid " + std::to_string(st.st_uid)
                                                + ", not by this process's uid "
                                                + std::to_string(::geteuid()));
    }
    return fd;
}

}  // namespace prizma::journal
