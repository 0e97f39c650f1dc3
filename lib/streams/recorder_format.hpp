// SPDX-License-Identifier: Apache-2.0
#pragma once
// The journal's on-disk entry ("frame"), shared by the recorder, the journal reader and the
// replay service, which sends the same frames over TCP (docs/STREAMS.md, "Recording and late
// join"). Big-endian:
//   0-3 body length | 4 kind | 5 format, 2 | 6-7 zero | 8-15 sequence | 16-23 count/epoch |
//   24-31 check | body
// kind 1 record (body = the whole record, count = epoch), 2 loss (count), 3 reset (count =
// epoch), 0x80 end of a replay, 0x81 replay error (sequence = code, body = text).
// check = XXH3-64 (libxxhash) of the first <= 28 body bytes, seeded with XXH3-64 of header
// bytes 0-23: with the record's own checksum (which covers its payload) every byte of a record
// frame is covered. Format 1 (prizma before XXH3) had byte 5 zero and another check; it is not
// read: a segment of it is refused by name (segment_format()).
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <prizma/stream.hpp>

#include "lib/pgm/bytes.hpp"

namespace prizma::journal {

inline constexpr std::size_t kFrameHeader = 32;
inline constexpr std::size_t kMaxBody = std::size_t{1} << 24U;
inline constexpr std::uint8_t kRecord = 1;
inline constexpr std::uint8_t kLoss = 2;
inline constexpr std::uint8_t kReset = 3;
inline constexpr std::uint8_t kEnd = 0x80;
inline constexpr std::uint8_t kError = 0x81;

struct Frame {
    std::uint8_t kind = 0;
    std::uint64_t sequence = 0;
    std::uint64_t count = 0;
    std::span<const std::byte> body;
    [[nodiscard]] std::size_t size() const noexcept { return kFrameHeader + body.size(); }
    /// The sequence after this entry.
    [[nodiscard]] std::uint64_t end() const noexcept {
        return kind == kRecord ? sequence + 1 : kind == kLoss ? sequence + count : sequence;
    }
};

/// The frame format this prizma writes and reads (header byte 5). Format 1, before XXH3, had
/// a zero there.
inline constexpr std::uint8_t kFormat = 2;
inline constexpr std::size_t kCheckOffset = 24;

/// The check of a frame: `header` is its bytes [0, 24), `head` its body's first min(28, body
/// length) bytes (lib/streams/recorder.cpp).
std::uint64_t frame_check(const std::byte* header, std::span<const std::byte> head) noexcept;

/// Whether bytes 5-7 of a frame header are this format's: kFormat, 0, 0.
inline bool format_bytes_ok(const std::byte* header) noexcept {
    return header[5] == std::byte{kFormat} && header[6] == std::byte{0}
           && header[7] == std::byte{0};
}

/// The format of the frame header at the start of `in` (a segment's first bytes): 1 for a
/// header of prizma before XXH3 (byte 5 zero), the byte itself for another, 0 when the bytes
/// say nothing (fewer than 8, or bytes 6-7 not zero: no frame header of any format).
inline unsigned segment_format(std::span<const std::byte> in) noexcept {
    if (in.size() < 8 || in[6] != std::byte{0} || in[7] != std::byte{0}) {
        return 0;
    }
    const auto b = std::to_integer<unsigned>(in[5]);
    return b == 0 ? 1U : b;
}

/// Writes a frame header; `head` is the body's first min(28, body_len) bytes.
inline void write_header(std::byte* out,
                         std::uint32_t body_len,
                         std::uint8_t kind,
                         std::uint64_t sequence,
                         std::uint64_t count,
                         std::span<const std::byte> head) noexcept {
    pgm::store_be32(out, body_len);
    out[4] = std::byte{kind};
    out[5] = std::byte{kFormat};
    out[6] = out[7] = std::byte{0};
    pgm::store_be64(out + 8, sequence);
    pgm::store_be64(out + 16, count);
    pgm::store_be64(out + kCheckOffset, frame_check(out, head));
}

enum class Parse : std::uint8_t { ok, need_more, bad };

/// Parses and verifies the frame at the start of `in`.
inline Parse parse(std::span<const std::byte> in, Frame& out) noexcept {
    if (in.size() < kFrameHeader) {
        return Parse::need_more;
    }
    const std::uint32_t len = pgm::load_be32(in.data());
    const auto kind = std::to_integer<std::uint8_t>(in[4]);
    if (len > kMaxBody || !format_bytes_ok(in.data())) {
        return Parse::bad;
    }
    if (in.size() < kFrameHeader + len) {
        return Parse::need_more;
    }
    out.kind = kind;
    out.sequence = pgm::load_be64(in.data() + 8);
    out.count = pgm::load_be64(in.data() + 16);
    out.body = in.subspan(kFrameHeader, len);
    const auto head = out.body.first(std::min<std::size_t>(len, RecordHeader::kBytes));
    if (pgm::load_be64(in.data() + kCheckOffset) != frame_check(in.data(), head)) {
        return Parse::bad;
    }
    if (kind == kRecord) {
        RecordHeader h;
        if (!RecordHeader::read(out.body, h) || h.sequence != out.sequence || h.epoch != out.count
            || h.checksum
                   != RecordHeader::checksum_of(h.stream_id, h.epoch, h.sequence,
                                                out.body.subspan(RecordHeader::kBytes))) {
            return Parse::bad;
        }
        return Parse::ok;
    }
    const bool known = kind == kLoss || kind == kReset || kind == kEnd || kind == kError;
    return known ? Parse::ok : Parse::bad;
}

/// A segment's or index's file name in its directory: the first sequence, 20 digits, and `ext`.
struct FileName {
    char text[32];
};

inline FileName file_name(std::uint64_t first, const char* ext) noexcept {
    FileName n{};
    (void)std::snprintf(n.text, sizeof n.text, "%020llu.%s", static_cast<unsigned long long>(first),
                        ext);
    return n;
}

/// The path of a segment or index file, for messages.
inline std::string segment_path(const std::string& dir, std::uint64_t first, const char* ext) {
    return dir + "/" + file_name(first, ext).text;
}

/// The first sequence a segment's file name says, or false: 20 decimal digits then ".seg",
/// within 64 bits (a larger number is no segment of ours).
inline bool parse_segment_name(const char* name, std::uint64_t& first) noexcept {
    std::uint64_t v = 0;
    for (int i = 0; i < 20; ++i) {
        const char c = name[i];
        if (c < '0' || c > '9') {
            return false;
        }
        const auto d = static_cast<std::uint64_t>(c - '0');
        if (v > (UINT64_MAX - d) / 10) {
            return false;
        }
        v = v * 10 + d;
    }
    if (std::strcmp(name + 20, ".seg") != 0) {
        return false;
    }
    first = v;
    return true;
}

/// The first sequences of the segments in the directory open as `dir_fd`, ascending
/// (allocates; set-up only). false: the directory cannot be listed (errno says why).
inline bool list_segments(int dir_fd, std::vector<std::uint64_t>& out) {
    out.clear();
    // fdopendir() takes the descriptor it is given: a new one, to the same directory.
    const int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    DIR* d = ::fdopendir(fd);
    if (d == nullptr) {
        (void)::close(fd);
        return false;
    }
    // NOLINTNEXTLINE(concurrency-mt-unsafe): one DIR per call, readdir is safe per stream
    while (const dirent* e = ::readdir(d)) {
        std::uint64_t first = 0;
        if (std::strlen(e->d_name) == 24 && parse_segment_name(e->d_name, first)) {
            out.push_back(first);
        }
    }
    (void)::closedir(d);
    std::sort(out.begin(), out.end());
    return true;
}

}  // namespace prizma::journal
