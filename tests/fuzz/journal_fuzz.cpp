// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the journal's readers over any bytes (docs/STREAMS.md, "Recording and late
// join"). journal::parse (the frame parser of the journal reader and of the replay client) runs
// over the input; then the input, written as a journal segment (and an index, split off its
// end), is read by JournalReader from a few start sequences, and with input[0] & 1 a Recorder
// reopens (recovers) it. None may crash, hang, read out of bounds or size a buffer from an
// unchecked length (ASan + UBSan; run with -rss_limit_mb / -malloc_limit_mb). What is read must
// be in order, and after a recovery the journal must read back clean to the recorder's
// next_sequence().
//
// Input: [flags][index bytes: 1 byte, times 16][segment ...][index ...]. With flags & 2 the
// segment's frames are sealed again before it is written (checksums made right, whatever the
// mutation did to lengths, kinds, sequences and payloads), so that the order, loss, reset and
// index logic behind the checksums is reached too. Seeds: tests/fuzz/corpus_journal (segments
// the Recorder wrote, with their index).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>  // mkdtemp
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <prizma/recorder.hpp>

#include "lib/streams/recorder_format.hpp"

namespace {

namespace journal = prizma::journal;

void check(bool ok) {
    if (!ok) {
        __builtin_trap();
    }
}

/// A directory of our own for the whole run (on tmpfs when there is one: no disk syncs),
/// removed at exit (left behind by a crash, for a look at the files).
const std::string& work_dir() {
    static const struct Dir {
        std::string path;
        Dir() {
            const char* base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
            path = std::string(base) + "/prizma-journal-fuzz-XXXXXX";
            check(::mkdtemp(path.data()) != nullptr);
        }
        ~Dir() {
            std::error_code ec;
            std::filesystem::remove_all(path, ec);
        }
        Dir(const Dir&) = delete;
        Dir& operator=(const Dir&) = delete;
        Dir(Dir&&) = delete;
        Dir& operator=(Dir&&) = delete;
    } dir;
    return dir.path;
}

void put(const std::string& path, std::span<const std::uint8_t> bytes) {
    const int fd =
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    check(fd >= 0);
    check(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
    (void)::close(fd);
}

/// Makes every frame of the segment verify: the record header's sequence, epoch and checksum
/// and the frame's check, as the recorder would write them, for whatever the bytes now say.
void seal(std::vector<std::uint8_t>& seg) {
    std::size_t off = 0;
    while (seg.size() - off >= journal::kFrameHeader) {
        auto* h = reinterpret_cast<std::byte*>(seg.data() + off);
        const std::uint32_t len = prizma::pgm::load_be32(h);
        if (len > journal::kMaxBody || len > seg.size() - off - journal::kFrameHeader) {
            return;
        }
        const auto kind = std::to_integer<std::uint8_t>(h[4]);
        const std::uint64_t seq = prizma::pgm::load_be64(h + 8);
        const std::uint64_t count = prizma::pgm::load_be64(h + 16);
        const std::span<std::byte> body(h + journal::kFrameHeader, len);
        if (kind == journal::kRecord && len >= prizma::RecordHeader::kBytes) {
            prizma::RecordHeader::write(body, prizma::pgm::load_be32(body.data() + 4),
                                        static_cast<std::uint32_t>(count), seq,
                                        body.subspan(prizma::RecordHeader::kBytes));
            // The frame says the epoch in 64 bits, the record in 32: the same only below 2^32.
            prizma::pgm::store_be64(h + 16, static_cast<std::uint32_t>(count));
        }
        const auto head = body.first(std::min<std::size_t>(len, prizma::RecordHeader::kBytes));
        journal::write_header(h, len, kind, seq, prizma::pgm::load_be64(h + 16), head);
        off += journal::kFrameHeader + len;
    }
}

/// The frame parser over the bytes, frame after frame: what it accepts lies inside them.
void parse_all(std::span<const std::byte> in) {
    journal::Frame f;
    while (journal::parse(in, f) == journal::Parse::ok) {
        check(f.size() <= in.size() && f.body.size() <= journal::kMaxBody);
        check(f.body.data() == in.data() + journal::kFrameHeader);
        in = in.subspan(f.size());
    }
}

/// Reads from `from` to the end or an error: entries in order, at most one per 32 bytes, and
/// (with `end`) none past it. Returns the position after the last entry read, and whether the
/// read ended without error.
std::pair<std::uint64_t, bool> read_from(const std::string& dir,
                                         std::uint64_t from,
                                         std::size_t bytes,
                                         std::uint64_t end = UINT64_MAX) {
    auto rd = prizma::JournalReader::open(dir, from);
    if (!rd) {
        return {from, false};
    }
    check(from <= rd->end_sequence());
    prizma::JournalEntry e;
    std::uint64_t pos = from;
    for (std::size_t n = 0;; ++n) {
        check(n <= bytes / journal::kFrameHeader + 1);
        auto r = rd->next(e);
        if (!r || !*r) {
            return {pos, r.has_value()};
        }
        if (e.kind == prizma::StreamEventKind::reset) {
            check(e.sequence >= pos);
            pos = e.sequence;
            continue;
        }
        check(e.sequence == pos);
        if (e.kind == prizma::StreamEventKind::record) {
            prizma::RecordHeader h;
            check(prizma::RecordHeader::read(e.record, h) && h.sequence == e.sequence);
            pos += 1;
        } else {
            check(e.kind == prizma::StreamEventKind::loss && pos + e.count >= pos);
            pos += e.count;
        }
        check(pos <= end);
    }
}

}  // namespace

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    parse_all({reinterpret_cast<const std::byte*>(data), size});
    if (size < 2) {
        return 0;
    }
    const std::uint8_t flags = data[0];
    const std::size_t index_bytes = std::min<std::size_t>(std::size_t{data[1]} * 16, size - 2);
    std::span<const std::uint8_t> seg(data + 2, size - 2 - index_bytes);
    const std::span<const std::uint8_t> idx(data + size - index_bytes, index_bytes);
    const std::string& dir = work_dir();
    std::vector<std::uint8_t> sealed;
    if ((flags & 2U) != 0) {
        sealed.assign(seg.begin(), seg.end());
        seal(sealed);
        seg = sealed;
    }
    put(dir + "/" + journal::file_name(0, "seg").text, seg);
    put(dir + "/" + journal::file_name(0, "idx").text, idx);

    // As written: any bytes. Reads from a few starts are in order (a segment broken in the
    // middle may hold frames past the break that its index finds: those are real frames too).
    const std::uint64_t end = read_from(dir, 0, seg.size()).first;
    for (const std::uint64_t from : {end / 2, end > 0 ? end - 1 : 0, end}) {
        (void)read_from(dir, from, seg.size());
    }
    if (auto rd = prizma::JournalReader::open(dir, 0); rd && rd->end_sequence() < UINT64_MAX) {
        check(!prizma::JournalReader::open(dir, rd->end_sequence() + 1).has_value());
    }
    if ((flags & 1U) != 0) {
        // Recovery cuts what does not verify and the index entries off its chain of frames;
        // then the journal reads back clean to its end from every start.
        prizma::RecorderOptions o;
        o.directory = dir;
        o.stream_id = 42;
        o.index_bytes = 256;
        o.buffer_bytes = 64 << 10;
        auto rec = prizma::Recorder::open(o);
        // A segment whose first header is another format's is refused, never recovered (cut).
        const unsigned format =
            journal::segment_format({reinterpret_cast<const std::byte*>(seg.data()), seg.size()});
        if (format != 0 && format != journal::kFormat) {
            check(!rec.has_value() && rec.error().code() == prizma::Errc::unsupported);
            return 0;
        }
        if (!rec.has_value()) {
            // Corruption inside the segment (a bad frame with whole frames after it): refused,
            // and nothing cut.
            check(rec.error().code() == prizma::Errc::malformed_packet);
            std::ifstream in(dir + "/" + journal::file_name(0, "seg").text, std::ios::binary);
            const std::vector<char> now((std::istreambuf_iterator<char>(in)),
                                        std::istreambuf_iterator<char>());
            check(now.size() == seg.size()
                  && std::equal(now.begin(), now.end(), seg.begin(), [](char a, std::uint8_t b) {
                         return static_cast<std::uint8_t>(a) == b;
                     }));
            return 0;
        }
        const std::uint64_t next = rec->next_sequence();
        std::uint64_t first = 0;
        if (auto rd = prizma::JournalReader::open(dir, 0)) {
            first = rd->first_sequence();
            check(rd->end_sequence() == next);
        }
        for (const std::uint64_t from : {first, first + (next - first) / 2, next}) {
            const auto after = read_from(dir, from, seg.size(), next);
            check(after.second && after.first == next);
        }
    }
    return 0;
}
