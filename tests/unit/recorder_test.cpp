// SPDX-License-Identifier: Apache-2.0
// The stream recorder's journal (docs/STREAMS.md, "Recording and late join"): written and read
// back, segment rollover, reads from the middle, loss/reset entries, explicit back-pressure, and
// crash recovery: the last segment truncated at every offset of its tail, and corrupted at every
// offset of it, recovers exactly the complete prefix. Counts and orders only.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <prizma/prizma.hpp>

#include "lib/streams/recorder_format.hpp"
#include "tests/support/catch.hpp"
#include "tests/support/full_size.hpp"
#include "tests/support/journal.hpp"

namespace {

namespace fs = std::filesystem;
using prizma::test::append;

/// A fresh directory for one test, removed with its contents.
struct TempDir : prizma::test::TempDir {
    TempDir() : prizma::test::TempDir("prizma-rec") {}
};

std::vector<std::byte> body(std::uint64_t i, std::size_t size) {
    std::vector<std::byte> b(size);
    for (std::size_t k = 0; k < size; ++k) {
        b[k] = static_cast<std::byte>((i * 131 + k * 7) & 0xffU);
    }
    return b;
}

std::size_t size_of(std::uint64_t i) {
    return 20 + (i * 37) % 180;  // varied sizes: 20..199 bytes
}

prizma::StreamEvent record(std::uint64_t seq, const std::vector<std::byte>& payload) {
    prizma::StreamEvent e;
    e.kind = prizma::StreamEventKind::record;
    e.epoch = 1;
    e.sequence = seq;
    e.payload = payload;
    return e;
}

prizma::Recorder open_recorder(const std::string& dir,
                               std::size_t segment_bytes = std::size_t{64} << 20U) {
    prizma::RecorderOptions o;
    o.directory = dir;
    o.stream_id = 42;
    o.segment_bytes = segment_bytes;
    o.index_bytes = 4096;
    auto r = prizma::Recorder::open(o);
    REQUIRE(r.has_value());
    return std::move(*r);
}

/// Writes records [first, first + n) with varied sizes.
void write_records(prizma::Recorder& rec, std::uint64_t first, std::uint64_t n) {
    for (std::uint64_t i = first; i < first + n; ++i) {
        const auto b = body(i, size_of(i));
        append(rec, record(i, b));
    }
    REQUIRE(rec.flush().has_value());
}

/// Reads the journal from `from` to its current end; checks every record against body().
/// Returns the sequences read, in order.
std::vector<std::uint64_t> read_all(const std::string& dir, std::uint64_t from) {
    std::vector<std::uint64_t> seqs;
    auto rd = prizma::JournalReader::open(dir, from);
    REQUIRE(rd.has_value());
    prizma::JournalEntry e;
    for (;;) {
        auto r = rd->next(e);
        REQUIRE(r.has_value());
        if (!*r) {
            break;
        }
        REQUIRE(e.kind == prizma::StreamEventKind::record);
        const auto want = body(e.sequence, size_of(e.sequence));
        REQUIRE(e.payload().size() == want.size());
        REQUIRE(std::memcmp(e.payload().data(), want.data(), want.size()) == 0);
        seqs.push_back(e.sequence);
    }
    return seqs;
}

bool contiguous(const std::vector<std::uint64_t>& s, std::uint64_t first, std::uint64_t n) {
    if (s.size() != n) {
        return false;
    }
    for (std::uint64_t i = 0; i < n; ++i) {
        if (s[i] != first + i) {
            return false;
        }
    }
    return true;
}

std::vector<fs::path> segments(const std::string& dir) {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir)) {
        if (e.path().extension() == ".seg") {
            out.push_back(e.path());
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<char> read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& p, const std::vector<char>& bytes, std::size_t n) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(n));
}

/// A record frame's size on disk: frame header, record header, payload.
std::size_t frame_bytes(std::uint64_t i) {
    return 32 + prizma::RecordHeader::kBytes + size_of(i);
}

}  // namespace

TEST_CASE("recorder: records written, reopened, read back contiguous across segments",
          "[unit][recorder]") {
    const TempDir dir;
    constexpr std::uint64_t kN = 20000;
    {
        auto rec = open_recorder(dir.path, 256 << 10);
        CHECK(rec.next_sequence() == 0);
        write_records(rec, 0, kN);
        CHECK(rec.next_sequence() == kN);
        CHECK(rec.written_sequence() == kN);
        CHECK(rec.counters().appended == kN);
        CHECK(rec.counters().segments > 5);  // rolled over
    }
    CHECK(segments(dir.path).size() > 5);
    {
        auto rec = open_recorder(dir.path, 256 << 10);
        CHECK(rec.next_sequence() == kN);
        CHECK(rec.counters().recovered_bytes_dropped == 0);
        write_records(rec, kN, 100);  // resumes where it was
    }
    CHECK(contiguous(read_all(dir.path, 0), 0, kN + 100));
    // From the middle (inside a segment, between index entries), at a segment's first record,
    // and at the very end.
    CHECK(contiguous(read_all(dir.path, 12345), 12345, kN + 100 - 12345));
    const auto segs = segments(dir.path);
    const std::uint64_t seg_first = std::stoull(segs[3].stem().string());
    CHECK(contiguous(read_all(dir.path, seg_first), seg_first, kN + 100 - seg_first));
    CHECK(read_all(dir.path, kN + 100).empty());
    auto past = prizma::JournalReader::open(dir.path, kN + 101);
    REQUIRE_FALSE(past.has_value());
    CHECK(past.error().code() == prizma::Errc::invalid_argument);
}

namespace {

std::uint64_t be64(const std::vector<char>& b, std::size_t at) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < 8; ++i) {
        v = (v << 8U) | static_cast<unsigned char>(b[at + i]);
    }
    return v;
}

/// Walks every segment's frames (header layout: be32 body length, kind, ..., be64 sequence,
/// be64 count) and checks its name and its sparse index exactly: an entry for the first frame,
/// then for the first frame at or beyond the previous entry's offset + index_bytes, each
/// (sequence, or the position before a reset; offset of the frame). Returns the frame count.
std::uint64_t check_layout(const std::string& dir,
                           std::size_t segment_bytes,
                           std::size_t index_bytes) {
    std::uint64_t frames = 0;
    std::uint64_t pos = 0;  // journal position after the last frame
    bool first_segment = true;
    for (const auto& seg : segments(dir)) {
        const auto bytes = read_file(seg);
        auto ipath = seg;
        const auto idx = read_file(ipath.replace_extension(".idx"));
        const std::uint64_t name = std::stoull(seg.stem().string());
        if (!first_segment) {
            CHECK(name == pos);  // named after the position before its first entry
        }
        first_segment = false;
        std::vector<std::pair<std::uint64_t, std::uint64_t>> want;
        std::size_t off = 0;
        std::size_t next_at = 0;
        std::uint64_t here = name;
        while (off < bytes.size()) {
            REQUIRE(off + 32 <= bytes.size());
            const std::size_t len = 32 + (be64(bytes, off) >> 32U);
            const auto kind = static_cast<unsigned char>(bytes[off + 4]);
            const std::uint64_t seq = be64(bytes, off + 8);
            const std::uint64_t count = be64(bytes, off + 16);
            if (off >= next_at) {
                want.emplace_back(kind == 3 ? here : seq, off);
                next_at = off + index_bytes;
            }
            here = kind == 1 ? seq + 1 : kind == 2 ? seq + count : seq;
            off += len;
            ++frames;
        }
        CHECK((bytes.size() <= segment_bytes || want.size() == 1));
        REQUIRE(idx.size() == want.size() * 16);
        for (std::size_t i = 0; i < want.size(); ++i) {
            INFO("segment " << seg.filename() << " index entry " << i);
            CHECK(be64(idx, i * 16) == want[i].first);
            CHECK(be64(idx, i * 16 + 8) == want[i].second);
        }
        pos = here;
    }
    return frames;
}

}  // namespace

TEST_CASE("recorder: segment names and sparse index entries are exact", "[unit][recorder]") {
    const TempDir dir;
    constexpr std::size_t kSegment = 64 << 10;
    prizma::RecorderOptions o;
    o.directory = dir.path;
    o.stream_id = 42;
    o.segment_bytes = kSegment;
    o.index_bytes = 1000;
    std::uint64_t n = 0;
    {
        auto rec = prizma::Recorder::open(o);
        REQUIRE(rec.has_value());
        write_records(*rec, 0, 3000);
        prizma::StreamEvent loss;
        loss.kind = prizma::StreamEventKind::loss;
        loss.sequence = 3000;
        loss.count = 7;
        append(*rec, loss);
        prizma::StreamEvent reset;
        reset.kind = prizma::StreamEventKind::reset;
        reset.epoch = 2;
        reset.sequence = 5000;
        append(*rec, reset);
        write_records(*rec, 5000, 1000);
        n = 3000 + 1 + 1 + 1000;
    }
    {
        // Reopened: the index goes on at the recovered segment's spacing.
        o.index_bytes = 1000;
        auto rec = prizma::Recorder::open(o);
        REQUIRE(rec.has_value());
        REQUIRE(rec->next_sequence() == 6000);
        write_records(*rec, 6000, 2000);
        n += 2000;
    }
    CHECK(segments(dir.path).size() > 10);
    CHECK(check_layout(dir.path, kSegment, 1000) == n);
}

TEST_CASE("recorder: an index entry for every frame is exact and nothing is lost",
          "[unit][recorder]") {
    // index_bytes 1: every frame is an index entry, so the producer's marks (4096 in flight)
    // can fill before its buffer does; a full mark queue is back-pressure like a full buffer.
    const TempDir dir;
    prizma::RecorderOptions o;
    o.directory = dir.path;
    o.stream_id = 42;
    o.index_bytes = 1;
    o.buffer_bytes = 4 << 20;
    auto rec = prizma::Recorder::open(o);
    REQUIRE(rec.has_value());
    const auto b = body(0, 8);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::uint64_t refused = 0;
    const auto push = [&](const prizma::StreamEvent& ev) {
        for (;;) {
            const auto r = rec->append(ev);
            if (r) {
                return;
            }
            REQUIRE(r.error() == prizma::Errc::back_pressured);
            REQUIRE(std::chrono::steady_clock::now() < deadline);
            ++refused;
            std::this_thread::yield();
        }
    };
    for (std::uint64_t i = 0; i < 10000; ++i) {
        push(record(i, b));
    }
    prizma::StreamEvent loss;
    loss.kind = prizma::StreamEventKind::loss;
    loss.sequence = 10000;
    loss.count = 5;
    push(loss);
    prizma::StreamEvent reset;
    reset.kind = prizma::StreamEventKind::reset;
    reset.epoch = 2;
    reset.sequence = 20000;
    push(reset);  // indexed by the position before it, 10005
    for (std::uint64_t i = 20000; i < 30000; ++i) {
        push(record(i, b));
    }
    REQUIRE(rec->flush().has_value());
    INFO("appends refused as back-pressure: " << refused);
    CHECK(check_layout(dir.path, o.segment_bytes, 1) == 20002);
    auto rd = prizma::JournalReader::open(dir.path, 25000);
    REQUIRE(rd.has_value());
    prizma::JournalEntry e;
    std::uint64_t want = 25000;
    while (*rd->next(e)) {
        REQUIRE(e.sequence == want);
        ++want;
    }
    CHECK(want == 30000);
}

TEST_CASE("recorder: loss and reset entries are journaled, out of order is refused",
          "[unit][recorder]") {
    const TempDir dir;
    auto rec = open_recorder(dir.path);
    const auto b = body(0, 50);
    for (std::uint64_t i = 0; i < 10; ++i) {
        append(rec, record(i, b));
    }
    prizma::StreamEvent loss;
    loss.kind = prizma::StreamEventKind::loss;
    loss.sequence = 10;
    loss.count = 5;
    append(rec, loss);
    CHECK(rec.append(record(14, b)).error() == prizma::Errc::invalid_argument);
    append(rec, record(15, b));
    // One past the next position: a gap no loss entry names, refused like one before it.
    CHECK(rec.append(record(17, b)).error() == prizma::Errc::invalid_argument);
    CHECK(rec.next_sequence() == 16);
    prizma::StreamEvent reset;
    reset.kind = prizma::StreamEventKind::reset;
    reset.epoch = 2;
    reset.sequence = 100;
    append(rec, reset);
    append(rec, record(100, b));
    CHECK(rec.next_sequence() == 101);
    REQUIRE(rec.flush().has_value());

    auto rd = prizma::JournalReader::open(dir.path, 12);
    REQUIRE(rd.has_value());
    prizma::JournalEntry e;
    REQUIRE(*rd->next(e));
    CHECK(e.kind == prizma::StreamEventKind::loss);
    CHECK(e.sequence == 12);  // clipped to the start asked for
    CHECK(e.count == 3);
    REQUIRE(*rd->next(e));
    CHECK((e.kind == prizma::StreamEventKind::record && e.sequence == 15));
    REQUIRE(*rd->next(e));
    CHECK((e.kind == prizma::StreamEventKind::reset && e.sequence == 100 && e.epoch == 2));
    REQUIRE(*rd->next(e));
    CHECK((e.kind == prizma::StreamEventKind::record && e.sequence == 100 && e.epoch == 1));
    CHECK_FALSE(*rd->next(e));
}

TEST_CASE("recorder: a full hand-off buffer is reported as back-pressure, nothing dropped",
          "[unit][recorder]") {
    const TempDir dir;
    prizma::RecorderOptions o;
    o.directory = dir.path;
    o.stream_id = 42;
    o.buffer_bytes = 64 << 10;  // two 30 KB records fill it
    auto rec = prizma::Recorder::open(o);
    REQUIRE(rec.has_value());
    const auto big = body(1, 30000);
    std::uint64_t accepted = 0;
    std::uint64_t refused = 0;
    for (int k = 0; k < 100000 && (refused == 0 || accepted < 50); ++k) {
        const auto r = rec->append(record(accepted, big));
        if (r) {
            ++accepted;
        } else {
            REQUIRE(r.error() == prizma::Errc::back_pressured);
            ++refused;
        }
    }
    CHECK(refused > 0);
    CHECK(rec->counters().back_pressured == refused);
    CHECK(rec->append(record(accepted, body(0, std::size_t{40} << 10))).error()
          == prizma::Errc::message_too_large);
    REQUIRE(rec->flush().has_value());
    auto rd = prizma::JournalReader::open(dir.path, 0);
    REQUIRE(rd.has_value());
    prizma::JournalEntry e;
    std::uint64_t n = 0;
    while (*rd->next(e)) {
        REQUIRE(e.sequence == n);
        ++n;
    }
    CHECK(n == accepted);
}

TEST_CASE("recorder: truncated at every offset of its tail, it recovers the complete prefix",
          "[unit][recorder]") {
    const TempDir dir;
    constexpr std::uint64_t kN = 300;
    {
        auto rec = open_recorder(dir.path);
        write_records(rec, 0, kN);
    }
    const auto seg = segments(dir.path).at(0);
    const auto whole = read_file(seg);
    std::vector<std::size_t> ends;  // ends[i]: file offset after record i
    std::size_t off = 0;
    for (std::uint64_t i = 0; i < kN; ++i) {
        off += frame_bytes(i);
        ends.push_back(off);
    }
    REQUIRE(whole.size() == off);
    const std::size_t tail_start = ends[kN - 4];  // the last three records, byte by byte
    for (std::size_t cut = tail_start; cut <= whole.size(); ++cut) {
        write_file(seg, whole, cut);
        const auto complete = static_cast<std::uint64_t>(
            std::upper_bound(ends.begin(), ends.end(), cut) - ends.begin());
        auto rec = open_recorder(dir.path);
        INFO("cut at " << cut);
        REQUIRE(rec.next_sequence() == complete);
        CHECK(rec.counters().recovered_bytes_dropped
              == cut - (complete == 0 ? 0 : ends[complete - 1]));
        if (cut % 7 == 0) {  // and it resumes there
            write_records(rec, complete, 1);
            REQUIRE(contiguous(read_all(dir.path, 0), 0, complete + 1));
        } else {
            REQUIRE(contiguous(read_all(dir.path, 0), 0, complete));
        }
    }
}

// Only a torn tail is cut. A corrupt byte in the last frame is such a tail (it and nothing
// else is dropped), and so is a length or format byte that makes a header implausible (the
// reader too takes it for the end). A corrupt byte in any other frame, whole frames after it,
// is corruption inside: the recorder refuses to open, naming it, and cuts nothing: the
// verified records after it are still there.
TEST_CASE("recorder: a byte corrupted in its tail: the last frame is cut, one inside is refused",
          "[unit][recorder]") {
    const TempDir dir;
    constexpr std::uint64_t kN = 300;
    {
        auto rec = open_recorder(dir.path);
        write_records(rec, 0, kN);
    }
    const auto seg = segments(dir.path).at(0);
    const auto whole = read_file(seg);
    std::vector<std::size_t> ends;
    std::size_t off = 0;
    for (std::uint64_t i = 0; i < kN; ++i) {
        off += frame_bytes(i);
        ends.push_back(off);
    }
    std::size_t refused = 0;
    for (std::size_t at = ends[kN - 4]; at < whole.size(); ++at) {
        auto bad = whole;
        bad[at] = static_cast<char>(bad[at] ^ 0x5A);
        write_file(seg, bad, bad.size());
        const auto holder = static_cast<std::uint64_t>(
            std::upper_bound(ends.begin(), ends.end(), at) - ends.begin());
        const std::size_t in_frame = at - ends[holder - 1];
        prizma::RecorderOptions o;
        o.directory = dir.path;
        o.stream_id = 42;
        o.index_bytes = 4096;
        auto rec = prizma::Recorder::open(o);
        INFO("byte " << at << " flipped, " << in_frame << " into record " << holder);
        if (holder == kN - 1) {
            REQUIRE(rec.has_value());  // the last frame: a torn tail, cut
            REQUIRE(rec->next_sequence() == holder);
            REQUIRE(contiguous(read_all(dir.path, 0), 0, holder));
            continue;
        }
        if (in_frame >= 8) {  // not its length or format bytes: the header still looks whole
            REQUIRE_FALSE(rec.has_value());
        }
        if (!rec.has_value()) {
            ++refused;
            CHECK(rec.error().code() == prizma::Errc::malformed_packet);
            CHECK(rec.error().message().find("inside") != std::string::npos);
            CHECK(fs::file_size(seg) == whole.size());  // nothing cut
            CHECK(read_file(seg) == bad);
        } else {
            REQUIRE(rec->next_sequence() == holder);
        }
    }
    CHECK(refused > 0);
}

// The verified records after a bad frame in the middle of a segment used to be cut at
// recovery. They stay, and the reader reports the bad frame as it always did.
TEST_CASE("recorder: a bad frame in the middle of a segment is reported, nothing after it cut",
          "[unit][recorder]") {
    const TempDir dir;
    constexpr std::uint64_t kN = 300;
    {
        auto rec = open_recorder(dir.path);
        write_records(rec, 0, kN);
    }
    const auto seg = segments(dir.path).at(0);
    auto bytes = read_file(seg);
    std::size_t at = 0;
    for (std::uint64_t i = 0; i < 100; ++i) {
        at += frame_bytes(i);
    }
    bytes[at + frame_bytes(100) - 1] ^= 0x01;  // the last payload byte of record 100
    write_file(seg, bytes, bytes.size());
    prizma::RecorderOptions o;
    o.directory = dir.path;
    o.stream_id = 42;
    o.index_bytes = 4096;
    auto rec = prizma::Recorder::open(o);
    REQUIRE_FALSE(rec.has_value());
    CHECK(rec.error().code() == prizma::Errc::malformed_packet);
    CHECK(rec.error().message().find("offset " + std::to_string(at)) != std::string::npos);
    CHECK(read_file(seg) == bytes);  // records 101-299 still there
    // The reader: records 0-99, then the error.
    auto reader = prizma::JournalReader::open(dir.path, 0).value();
    prizma::JournalEntry e;
    std::uint64_t n = 0;
    for (;;) {
        auto r = reader.next(e);
        if (!r) {
            CHECK(r.error() == prizma::Errc::malformed_packet);
            break;
        }
        REQUIRE(*r);
        CHECK(e.sequence == n);
        ++n;
    }
    CHECK(n == 100);
}

TEST_CASE("recorder: killed with SIGKILL while recording, it reopens contiguous",
          "[unit][recorder]") {
    const TempDir dir;
    // Seeded kill point: once the journal holds this many bytes (printed for a rerun).
    const auto seed = static_cast<std::uint64_t>(::getpid());
    const std::uint64_t kill_at = (std::uint64_t{1} << 20U) + (seed * 2654435761ULL) % (6U << 20U);
    std::printf("recorder kill -9: seed %llu, kill after %llu bytes\n",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(kill_at));
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        // The child records as fast as it can until killed (no Catch macros here).
        prizma::RecorderOptions o;
        o.directory = dir.path;
        o.stream_id = 42;
        o.segment_bytes = std::size_t{2} << 20U;
        auto rec = prizma::Recorder::open(o);
        if (!rec) {
            std::_Exit(2);
        }
        for (std::uint64_t i = 0;; ++i) {
            const auto b = body(i, size_of(i));
            while (!rec->append(record(i, b))) {
                std::this_thread::yield();
            }
        }
    }
    for (;;) {
        std::uint64_t bytes = 0;
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(dir.path, ec)) {
            if (e.path().extension() == ".seg") {
                bytes += e.file_size(ec);
            }
        }
        if (bytes >= kill_at) {
            break;
        }
        int status = 0;
        REQUIRE(::waitpid(child, &status, WNOHANG) == 0);  // still recording
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE(::kill(child, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    auto rec = open_recorder(dir.path, std::size_t{2} << 20U);
    const std::uint64_t n = rec.next_sequence();
    CHECK(n > 1000);
    write_records(rec, n, 10);  // and it goes on from there
    CHECK(contiguous(read_all(dir.path, 0), 0, n + 10));
}

namespace {

/// What a recorded live run left in its journal, and what held the publisher back.
struct RecordedRun {
    std::vector<std::uint64_t> records;               // journaled record sequences, in order
    std::uint64_t lost = 0;                           // records journaled as lost
    std::uint64_t flow_blocked = 0;                   // offers the publisher's flow control refused
    std::uint64_t recorder_full = 0;                  // appends the recorder's buffer refused
    std::vector<prizma::FlowReceiverInfo> receivers;  // what the publisher's flow control saw
    std::uint64_t status_received = 0;
};

/// An unpaced stream publisher and a Recorder behind a StreamSubscriber on one mem:// channel
/// (`query` added to both URIs). The recorder is slow: a 64 KiB hand-off buffer and an
/// fdatasync after every write batch; the loop reads the stream only while the recorder takes
/// what it read, so a full recorder stops its subscriber consuming.
RecordedRun record_live(const std::string& dir, const std::string& query, std::uint64_t n) {
    prizma::ChannelOptions co;
    co.window_sqns = 512;
    auto ctx = prizma::Context::create().value();
    const std::string uri = "mem://rec-flow:7500" + query;
    auto sub = ctx.add_subscriber(uri);
    auto pub = ctx.add_publisher(uri);
    REQUIRE((sub.has_value() && pub.has_value()));
    auto out = prizma::StreamPublisher::create(*pub, 42, 1).value();
    prizma::StreamOptions so;
    so.stream_id = 42;
    so.start_sequence = 0;
    so.gap_timeout = std::chrono::milliseconds(50);
    auto in = prizma::StreamSubscriber::create(so).value();
    REQUIRE(in.add(*sub).has_value());
    prizma::RecorderOptions ro;
    ro.directory = dir;
    ro.stream_id = 42;
    ro.buffer_bytes = std::size_t{64} << 10U;
    ro.fsync_interval = std::chrono::milliseconds(0);
    auto rec = prizma::Recorder::open(ro).value();
    RecordedRun run;
    prizma::StreamEvent pending;
    std::vector<std::byte> held;  // the pending record's bytes
    bool has_pending = false;
    const std::int64_t deadline = prizma::Context::now_ns() + 60'000'000'000LL;
    while (rec.next_sequence() < n && prizma::Context::now_ns() < deadline) {
        for (int k = 0; k < 64 && out.next_sequence() < n; ++k) {
            const auto b = body(out.next_sequence(), 100);
            if (!out.offer(b)) {
                break;
            }
        }
        (void)ctx.poll();
        for (int k = 0; k < 256; ++k) {
            if (!has_pending && !in.next(pending)) {
                break;
            }
            if (!has_pending && pending.kind == prizma::StreamEventKind::record) {
                // Ours until appended: the subscriber's bytes are valid only until its next
                // call, and ctx.poll() runs between retries of a back-pressured append.
                const auto whole = in.last_record();
                held.assign(whole.begin(), whole.end());
                pending.payload =
                    std::span<const std::byte>(held).subspan(prizma::RecordHeader::kBytes);
            }
            has_pending = true;
            const auto r = pending.kind == prizma::StreamEventKind::record
                               ? rec.append(pending, held)
                               : rec.append(pending);
            if (!r) {
                REQUIRE(r.error() == prizma::Errc::back_pressured);
                break;  // the event stays pending; the subscriber stops consuming
            }
            has_pending = false;
        }
    }
    REQUIRE(rec.flush().has_value());
    run.flow_blocked = pub->counters().flow_blocked;
    run.recorder_full = rec.counters().back_pressured;
    run.receivers = pub->flow_receivers();
    run.status_received = pub->counters().status_received;
    auto rd = prizma::JournalReader::open(dir, 0).value();
    prizma::JournalEntry e;
    for (auto more = rd.next(e); more && *more; more = rd.next(e)) {
        if (e.kind == prizma::StreamEventKind::record) {
            run.records.push_back(e.sequence);
        } else if (e.kind == prizma::StreamEventKind::loss) {
            run.lost += e.count;
        }
    }
    return run;
}

}  // namespace

TEST_CASE("recorder: as a tagged flow-control member, live traffic never outruns it",
          "[unit][recorder][flow]") {
    // (Without flow control a subscriber slower than its publisher loses data: flow_api_test.)
    constexpr std::uint64_t kN = 60000;
    const TempDir tagged;
    const RecordedRun r = record_live(tagged.path, "?flow=tagged&flow_tag=9", kN);
    CHECK(r.lost == 0);
    CHECK(contiguous(r.records, 0, kN));
    // The recorder's subscriber is the one tagged member the publisher waited for.
    CHECK(r.status_received > 0);
    REQUIRE(r.receivers.size() == 1);
    CHECK(r.receivers[0].tag == 9);
    CHECK(r.receivers[0].counted);
}

namespace {

/// The child of the live kill test: a stream publisher paced at `rate` records/s on mem://, a
/// StreamSubscriber and a Recorder behind it, until killed (no Catch macros here).
[[noreturn]] void record_live_until_killed(const std::string& dir, double rate) {
    auto ctx = prizma::Context::create();
    auto sub =
        ctx ? ctx->add_subscriber("mem://rec-kill:7500") : prizma::Error(prizma::Errc::closed);
    auto pub =
        ctx ? ctx->add_publisher("mem://rec-kill:7500") : prizma::Error(prizma::Errc::closed);
    if (!sub || !pub) {
        std::_Exit(2);
    }
    auto out = prizma::StreamPublisher::create(*pub, 42, 1);
    prizma::StreamOptions so;
    so.stream_id = 42;
    so.start_sequence = 0;
    auto in = prizma::StreamSubscriber::create(so);
    prizma::RecorderOptions ro;
    ro.directory = dir;
    ro.stream_id = 42;
    ro.segment_bytes = std::size_t{16} << 20U;
    auto rec = prizma::Recorder::open(ro);
    if (!out || !in || !in->add(*sub) || !rec) {
        std::_Exit(3);
    }
    const std::int64_t start = prizma::Context::now_ns();
    for (;;) {
        const auto due = static_cast<std::uint64_t>(
            static_cast<double>(prizma::Context::now_ns() - start) * rate * 1e-9);
        for (int k = 0; k < 256 && out->next_sequence() < due; ++k) {
            const std::uint64_t i = out->next_sequence();
            if (!out->offer(body(i, size_of(i)))) {
                break;
            }
        }
        // Until the channel is idle: a burst left half-read would overflow the subscriber's
        // mem:// ring (a socket buffer's model) and lose records the test is not about.
        for (int work = 1; work > 0;) {
            work = ctx->poll();
            prizma::StreamEvent e;
            while (in->next(e)) {
                while (!rec->append(e, in->last_record())) {
                    std::this_thread::yield();
                }
            }
        }
    }
}

}  // namespace

// The child of the case below, run by exec (hidden: [.]): records until killed.
TEST_CASE("recorder live child", "[.]") {
    const char* dir = std::getenv("PRIZMA_REC_LIVE_DIR");  // NOLINT(concurrency-mt-unsafe)
    if (dir != nullptr) {
        record_live_until_killed(dir, 1e6);
    }
}

TEST_CASE("recorder: killed with SIGKILL while recording a live stream offered at 1 M records/s",
          "[unit][recorder][process]") {
    const TempDir dir;
    // Seeded kill point in time (printed for a rerun); long: a later kill, a bigger journal.
    const auto seed = static_cast<std::uint64_t>(::getpid());
    const std::uint64_t span_ms = prizma::test::sized(600, 8000);
    const std::uint64_t kill_ms = 200 + (seed * 2654435761ULL) % span_ms;
    std::printf("recorder live kill -9: seed %llu, kill after %llu ms\n",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(kill_ms));
    (void)std::fflush(stdout);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        // A fresh process image: a fork of a process with other threads (earlier cases in
        // the same run) could inherit a lock held by one of them.
        (void)::setenv("PRIZMA_REC_LIVE_DIR", dir.path.c_str(), 1);
        ::execl("/proc/self/exe", "prizma_unit_tests", "recorder live child", nullptr);
        std::_Exit(127);
    }
    // The kill time counts from the first bytes in the journal (a sanitizer build's child
    // takes a while to start).
    int status = 0;
    const auto recording = [&] {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(dir.path, ec)) {
            if (e.path().extension() == ".seg" && e.file_size(ec) > 0) {
                return true;
            }
        }
        return false;
    };
    for (int k = 0; k < 3000 && !recording(); ++k) {
        REQUIRE(::waitpid(child, &status, WNOHANG) == 0);  // not dead before it started
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kill_ms));
    REQUIRE(::waitpid(child, &status, WNOHANG) == 0);  // still recording
    REQUIRE(::kill(child, SIGKILL) == 0);
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    auto rec = open_recorder(dir.path, std::size_t{16} << 20U);
    const std::uint64_t n = rec.next_sequence();
    std::printf("recorder live kill -9: %llu records journaled (%.2f M records/s recorded)\n",
                static_cast<unsigned long long>(n),
                static_cast<double>(n) / static_cast<double>(kill_ms) / 1e3);
    CHECK(n > 1000);
    CHECK(contiguous(read_all(dir.path, 0), 0, n));  // every record intact, up to the kill
    write_records(rec, n, 10);                       // and it goes on from there
    CHECK(contiguous(read_all(dir.path, 0), 0, n + 10));
}

// ---- The journal's directory and files are the recorder's alone; what it reads back is
// checked before it is trusted (docs/STREAMS.md, "Recording and late join").

namespace {

/// A fresh directory to hold journal directories, removed with its contents.
struct Base : prizma::test::TempDir {
    Base() : prizma::test::TempDir("prizma-rec-base") {}
};

prizma::RecorderOptions options(const std::string& dir, std::size_t segment_bytes = 4096) {
    prizma::RecorderOptions o;
    o.directory = dir;
    o.stream_id = 42;
    o.segment_bytes = segment_bytes;
    o.index_bytes = 1000;
    return o;
}

unsigned mode_of(const std::string& path) {
    struct stat st {};
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    return st.st_mode & 07777U;
}

std::string name_of(std::uint64_t first, const char* ext) {
    char n[32];
    (void)std::snprintf(n, sizeof n, "%020llu.%s", static_cast<unsigned long long>(first), ext);
    return n;
}

/// A victim file with known contents, for links planted in a journal directory to point at.
struct Victim {
    std::string path;
    std::vector<char> bytes;
    explicit Victim(const std::string& p) : path(p), bytes(5000, 'V') {
        write_file(path, bytes, bytes.size());
    }
    [[nodiscard]] bool intact() const { return read_file(path) == bytes; }
};

/// Records of a 100-byte payload: 160-byte frames, 25 to a 4096-byte segment, so the
/// segments are named 0, 25, 50, ...
void write_fixed(prizma::Recorder& rec, std::uint64_t first, std::uint64_t n) {
    for (std::uint64_t i = first; i < first + n; ++i) {
        const auto b = body(i, 100);
        append(rec, record(i, b));
    }
}

/// Reads records from `from` to the journal's end; each must be record `from + k` with the
/// payload write_fixed() gave it (never another record's bytes).
std::uint64_t read_fixed(const std::string& dir, std::uint64_t from) {
    auto rd = prizma::JournalReader::open(dir, from);
    REQUIRE(rd.has_value());
    prizma::JournalEntry e;
    std::uint64_t want = from;
    for (;;) {
        auto r = rd->next(e);
        REQUIRE(r.has_value());
        if (!*r) {
            return want;
        }
        REQUIRE(e.kind == prizma::StreamEventKind::record);
        REQUIRE(e.sequence == want);
        const auto b = body(want, 100);
        REQUIRE(e.payload().size() == b.size());
        REQUIRE(std::memcmp(e.payload().data(), b.data(), b.size()) == 0);
        ++want;
    }
}

/// The process's resident set now, in bytes.
std::uint64_t resident_bytes() {
    std::ifstream in("/proc/self/statm");
    std::uint64_t pages = 0;
    std::uint64_t resident = 0;
    in >> pages >> resident;
    return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

void put_be32(std::vector<char>& b, std::size_t at, std::uint32_t v) {
    for (std::size_t i = 0; i < 4; ++i) {
        b[at + i] = static_cast<char>((v >> (24U - 8U * i)) & 0xffU);
    }
}

void put_be64(std::vector<char>& b, std::size_t at, std::uint64_t v) {
    for (std::size_t i = 0; i < 8; ++i) {
        b[at + i] = static_cast<char>((v >> (56U - 8U * i)) & 0xffU);
    }
}

}  // namespace

TEST_CASE("recorder: a new directory is 0700, its files 0600, other modes by option",
          "[unit][recorder]") {
    const Base base;
    const mode_t old_umask = ::umask(022);
    {
        const std::string dir = base.path + "/journal";
        auto rec = prizma::Recorder::open(options(dir));
        REQUIRE(rec.has_value());
        write_fixed(*rec, 0, 60);  // three segments
        REQUIRE(rec->flush().has_value());
        CHECK(mode_of(dir) == 0700);
        std::size_t files = 0;
        for (const auto& e : fs::directory_iterator(dir)) {
            INFO(e.path());
            CHECK(mode_of(e.path()) == 0600);
            ++files;
        }
        CHECK(files == 6);  // .seg and .idx of segments 0, 25, 50
    }
    {
        const std::string dir = base.path + "/group";
        auto o = options(dir);
        o.file_mode = 0640;
        o.directory_mode = 0750;
        auto rec = prizma::Recorder::open(o);
        REQUIRE(rec.has_value());
        write_fixed(*rec, 0, 10);
        REQUIRE(rec->flush().has_value());
        CHECK(mode_of(dir) == 0750);
        CHECK(mode_of(dir + "/" + name_of(0, "seg")) == 0640);
        CHECK(mode_of(dir + "/" + name_of(0, "idx")) == 0640);
    }
    (void)::umask(old_umask);
    // Modes the recorder cannot work with, or that let others write without saying so.
    for (const auto& [fm, dm] :
         {std::pair{0400U, 0700U}, std::pair{0600U, 0500U}, std::pair{04600U, 0700U},
          std::pair{0620U, 0700U}, std::pair{0600U, 0770U}}) {
        auto o = options(base.path + "/bad");
        o.file_mode = fm;
        o.directory_mode = dm;
        auto rec = prizma::Recorder::open(o);
        INFO("file_mode " << fm << " directory_mode " << dm);
        REQUIRE_FALSE(rec.has_value());
        CHECK(rec.error().code() == prizma::Errc::invalid_argument);
    }
    CHECK_FALSE(fs::exists(base.path + "/bad"));
}

TEST_CASE("recorder: a directory others can write to, or a link, is refused", "[unit][recorder]") {
    const Base base;
    for (const unsigned mode : {0777U, 01777U, 0770U, 0702U}) {
        const std::string dir = base.path + "/open";
        REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
        REQUIRE(::chmod(dir.c_str(), mode) == 0);
        auto rec = prizma::Recorder::open(options(dir));
        INFO("mode " << std::oct << mode);
        REQUIRE_FALSE(rec.has_value());
        CHECK(rec.error().code() == std::errc::permission_denied);
        CHECK(rec.error().detail().find("writable by other users") != std::string::npos);
        CHECK(fs::is_empty(dir));  // nothing made in it
        auto o = options(dir);
        o.allow_shared_directory = true;  // said explicitly: accepted
        {
            auto shared = prizma::Recorder::open(o);
            REQUIRE(shared.has_value());
            write_fixed(*shared, 0, 5);
            REQUIRE(shared->flush().has_value());
        }
        CHECK(read_fixed(dir, 0) == 5);
        fs::remove_all(dir);
    }
    // The directory itself a symbolic link, even to a directory of ours.
    const std::string real = base.path + "/real";
    REQUIRE(::mkdir(real.c_str(), 0700) == 0);
    REQUIRE(::symlink(real.c_str(), (base.path + "/link").c_str()) == 0);
    auto rec = prizma::Recorder::open(options(base.path + "/link"));
    REQUIRE_FALSE(rec.has_value());
    CHECK(rec.error().code() == std::errc::permission_denied);
    CHECK(rec.error().detail().find("symbolic link") != std::string::npos);
    CHECK(fs::is_empty(real));
    // Not a directory at all.
    write_file(base.path + "/file", {'x'}, 1);
    CHECK_FALSE(prizma::Recorder::open(options(base.path + "/file")).has_value());
}

TEST_CASE("recorder: a directory or segment of another user is refused (as root)",
          "[unit][recorder]") {
    if (::geteuid() != 0) {
        PRIZMA_SKIP("not root: no directory of another user can be made");
    }
    const Base base;
    const std::string theirs = base.path + "/theirs";
    REQUIRE(::mkdir(theirs.c_str(), 0700) == 0);
    REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
    auto rec = prizma::Recorder::open(options(theirs));
    REQUIRE_FALSE(rec.has_value());
    CHECK(rec.error().code() == std::errc::permission_denied);
    CHECK(rec.error().detail().find("owned by uid 65534") != std::string::npos);
    CHECK(fs::is_empty(theirs));
    // A directory of ours, but its last segment (or index) is another user's.
    for (const char* ext : {"seg", "idx"}) {
        const std::string dir = base.path + "/ours-" + ext;
        {
            auto r = prizma::Recorder::open(options(dir));
            REQUIRE(r.has_value());
            write_fixed(*r, 0, 10);
            REQUIRE(r->flush().has_value());
        }
        const std::string file = dir + "/" + name_of(0, ext);
        REQUIRE(::chown(file.c_str(), 65534, 65534) == 0);
        const auto before = read_file(file);
        auto again = prizma::Recorder::open(options(dir));
        INFO(file);
        REQUIRE_FALSE(again.has_value());
        CHECK(again.error().code() == std::errc::permission_denied);
        CHECK(again.error().detail().find("owned by uid 65534") != std::string::npos);
        CHECK(read_file(file) == before);
    }
}

TEST_CASE("recorder: a link or file planted where the next segment goes is never written",
          "[unit][recorder]") {
    const Base base;
    const std::string dir = base.path + "/journal";
    const Victim seg_victim(base.path + "/victim-seg");
    const Victim idx_victim(base.path + "/victim-idx");
    SECTION("links at the next segment's and index's names") {
        auto rec = prizma::Recorder::open(options(dir));
        REQUIRE(rec.has_value());
        write_fixed(*rec, 0, 25);  // segment 0, full
        REQUIRE(rec->flush().has_value());
        REQUIRE(::symlink(seg_victim.path.c_str(), (dir + "/" + name_of(25, "seg")).c_str()) == 0);
        REQUIRE(::symlink(idx_victim.path.c_str(), (dir + "/" + name_of(25, "idx")).c_str()) == 0);
        write_fixed(*rec, 25, 1);  // rolls to segment 25
        const auto r = rec->flush();
        REQUIRE_FALSE(r.has_value());
        CHECK(r.error() == std::errc::file_exists);
        const auto why = rec->write_error();
        CHECK(why.code() == std::errc::file_exists);
        CHECK(why.detail().find(name_of(25, "seg")) != std::string::npos);
        CHECK(rec->append(record(26, body(26, 100))).error() == prizma::Errc::closed);
        // A reader meets the link as an error, never as the victim's bytes.
        auto rd = prizma::JournalReader::open(dir, 0);
        REQUIRE(rd.has_value());
        prizma::JournalEntry e;
        auto more = rd->next(e);
        for (; more.has_value() && *more; more = rd->next(e)) {
        }
        REQUIRE_FALSE(more.has_value());
        CHECK(more.error() == std::error_code(ELOOP, std::system_category()));
        fs::remove(dir + "/" + name_of(25, "seg"));
        fs::remove(dir + "/" + name_of(25, "idx"));
    }
    SECTION("a link at the next index's name only: the new segment is removed again") {
        auto rec = prizma::Recorder::open(options(dir));
        REQUIRE(rec.has_value());
        write_fixed(*rec, 0, 25);
        REQUIRE(rec->flush().has_value());
        REQUIRE(::symlink(idx_victim.path.c_str(), (dir + "/" + name_of(25, "idx")).c_str()) == 0);
        write_fixed(*rec, 25, 1);
        REQUIRE_FALSE(rec->flush().has_value());
        CHECK(rec->write_error().detail().find(name_of(25, "idx")) != std::string::npos);
        CHECK_FALSE(fs::exists(dir + "/" + name_of(25, "seg")));
    }
    SECTION("a regular file at the next segment's name is not clobbered") {
        auto rec = prizma::Recorder::open(options(dir));
        REQUIRE(rec.has_value());
        write_fixed(*rec, 0, 25);
        REQUIRE(rec->flush().has_value());
        const Victim planted(dir + "/" + name_of(25, "seg"));
        write_fixed(*rec, 25, 1);
        REQUIRE_FALSE(rec->flush().has_value());
        CHECK(rec->write_error().code() == std::errc::file_exists);
        CHECK(planted.intact());
        fs::remove(planted.path);  // (else it would be read as a corrupt segment below)
    }
    SECTION("links in place of the last segment or its index: refused at open") {
        {
            auto rec = prizma::Recorder::open(options(dir));
            REQUIRE(rec.has_value());
            write_fixed(*rec, 0, 30);  // segments 0 and 25
        }
        for (const auto& [ext, victim] : {std::pair{"seg", &seg_victim}, {"idx", &idx_victim}}) {
            const std::string file = dir + "/" + name_of(25, ext);
            const std::string kept = file + ".kept";
            fs::rename(file, kept);
            REQUIRE(::symlink(victim->path.c_str(), file.c_str()) == 0);
            auto rec = prizma::Recorder::open(options(dir));
            INFO(file);
            REQUIRE_FALSE(rec.has_value());
            CHECK(rec.error().code() == std::errc::permission_denied);
            CHECK(rec.error().detail().find("symbolic link") != std::string::npos);
            if (std::string(ext) == "seg") {
                // Readers do not follow it either: an error, not the victim's bytes.
                auto rd = prizma::JournalReader::open(dir, 26);
                REQUIRE_FALSE(rd.has_value());
                CHECK(rd.error().code() == std::error_code(ELOOP, std::system_category()));
            }
            fs::remove(file);
            fs::rename(kept, file);
        }
        CHECK(read_fixed(dir, 0) == 30);
    }
    CHECK(seg_victim.intact());
    CHECK(idx_victim.intact());
    CHECK(read_fixed(dir, 0) >= 25);  // what was written before is all there
}

TEST_CASE("recorder: reopening never cuts a complete segment, one Recorder per directory",
          "[unit][recorder]") {
    const Base base;
    const std::string dir = base.path + "/journal";
    {
        auto rec = prizma::Recorder::open(options(dir));
        REQUIRE(rec.has_value());
        write_fixed(*rec, 0, 110);  // segments 0, 25, 50, 75, 100 (10 records)
        // A second Recorder on the same directory (its recovery would cut the first one's
        // entries in flight as a torn tail) is refused while the first one has it.
        auto second = prizma::Recorder::open(options(dir));
        REQUIRE_FALSE(second.has_value());
        CHECK(second.error().code() == std::errc::device_or_resource_busy);
        REQUIRE(rec->flush().has_value());
    }
    std::vector<std::pair<fs::path, std::vector<char>>> before;
    for (const auto& e : fs::directory_iterator(dir)) {
        before.emplace_back(e.path(), read_file(e.path()));
    }
    for (int k = 0; k < 3; ++k) {
        auto rec = prizma::Recorder::open(options(dir));
        REQUIRE(rec.has_value());
        CHECK(rec->next_sequence() == 110);
        CHECK(rec->counters().recovered_bytes_dropped == 0);
    }
    for (const auto& [path, bytes] : before) {
        INFO(path);
        CHECK(read_file(path) == bytes);
    }
    CHECK(read_fixed(dir, 0) == 110);
}

TEST_CASE("journal reader: a torn tail with a garbage length is read to its good prefix",
          "[unit][recorder]") {
    const Base base;
    const std::string dir = base.path + "/journal";
    {
        auto rec = prizma::Recorder::open(options(dir, std::size_t{1} << 20U));
        REQUIRE(rec.has_value());
        write_fixed(*rec, 0, 100);
    }
    const std::string seg = dir + "/" + name_of(0, "seg");
    const auto good = read_file(seg);
    REQUIRE(good.size() == 100 * 160);
    // Lengths past 16 MiB, 16 MiB, and lengths within it that the file does not hold; whole
    // headers with bytes after them, and headers torn after their length.
    for (const std::uint32_t len :
         {0xFFFFFFF0U, 0xFFFFFFFFU, 0x01000001U, 0x01000000U, 0x00FFFFF0U, 0x00100000U}) {
        for (const std::size_t tail : {4U, 17U, 32U, 40U, 300U}) {
            INFO("length " << std::hex << len << std::dec << ", " << tail << " bytes of tail");
            auto bytes = good;
            bytes.resize(good.size() + tail, '\x5A');
            put_be32(bytes, good.size(), len);
            if (tail >= 8) {
                std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(good.size()) + 4,
                          bytes.begin() + static_cast<std::ptrdiff_t>(good.size()) + 8, '\0');
            }
            write_file(seg, bytes, bytes.size());
            const std::uint64_t rss = resident_bytes();
            auto rd = prizma::JournalReader::open(dir, 0);
            REQUIRE(rd.has_value());
            CHECK(rd->end_sequence() == 100);
            prizma::JournalEntry e;
            std::uint64_t n = 0;
            auto r = rd->next(e);
            for (; r.has_value() && *r; r = rd->next(e)) {
                REQUIRE(e.sequence == n);
                ++n;
            }
            REQUIRE(r.has_value());  // the end, not an error: a tail the recorder will cut
            CHECK(n == 100);
            for (int k = 0; k < 1000; ++k) {  // a follow read waits at it, bounded
                r = rd->next(e);
                REQUIRE((r.has_value() && !*r));
            }
            // Nothing sized from the length: the reader's buffer is its 1 MiB chunk.
            CHECK(resident_bytes() < rss + (std::uint64_t{6} << 20U));
            CHECK(prizma::JournalReader::open(dir, 100).has_value());
            CHECK_FALSE(prizma::JournalReader::open(dir, 101).has_value());
        }
    }
    // The recorder reopening cuts exactly the tail, and a waiting reader goes on past it.
    auto rd = prizma::JournalReader::open(dir, 100);
    REQUIRE(rd.has_value());
    prizma::JournalEntry e;
    REQUIRE_FALSE(*rd->next(e));
    auto rec = prizma::Recorder::open(options(dir, std::size_t{1} << 20U));
    REQUIRE(rec.has_value());
    CHECK(rec->counters().recovered_bytes_dropped == 300);
    CHECK(read_file(seg) == good);
    write_fixed(*rec, 100, 5);
    REQUIRE(rec->flush().has_value());
    for (std::uint64_t want = 100; want < 105; ++want) {
        auto r = rd->next(e);
        REQUIRE((r.has_value() && *r));
        CHECK(e.sequence == want);
    }
}

TEST_CASE("journal reader: an index entry that does not hold for its segment is not used",
          "[unit][recorder]") {
    const Base base;
    const std::string dir = base.path + "/journal";
    {
        auto rec = prizma::Recorder::open(options(dir, std::size_t{1} << 20U));
        REQUIRE(rec.has_value());
        write_fixed(*rec, 0, 300);  // one segment; an entry per 7 frames (1120 bytes)
    }
    const std::string ipath = dir + "/" + name_of(0, "idx");
    const auto idx = read_file(ipath);
    REQUIRE(idx.size() == 43 * 16);
    CHECK(be64(idx, 10 * 16) == 70);
    CHECK(be64(idx, 10 * 16 + 8) == 70 * 160);
    const auto check_reads = [&] {
        for (const std::uint64_t from : {0U, 3U, 70U, 71U, 75U, 77U, 80U, 294U, 299U, 300U}) {
            INFO("from " << from);
            CHECK(read_fixed(dir, from) == 300);
        }
        auto rd = prizma::JournalReader::open(dir, 0);
        REQUIRE(rd.has_value());
        CHECK(rd->end_sequence() == 300);
    };
    SECTION("an offset past the segment") {
        auto bad = idx;
        put_be64(bad, 10 * 16 + 8, std::uint64_t{1} << 40U);
        put_be64(bad, 42 * 16 + 8, 300 * 160 + 5);  // the last entry too (end_sequence)
        write_file(ipath, bad, bad.size());
        check_reads();
    }
    SECTION("an offset at another frame (whose sequence is not the key)") {
        auto bad = idx;
        put_be64(bad, 10 * 16 + 8, 77 * 160);  // key 70 -> frame 77: from 71 would skip 71..76
        put_be64(bad, 42 * 16 + 8, 0);         // key 294 -> frame 0
        write_file(ipath, bad, bad.size());
        check_reads();
    }
    SECTION("an offset inside a frame, a key changed, entries out of order") {
        auto bad = idx;
        put_be64(bad, 10 * 16 + 8, 70 * 160 + 32);
        put_be64(bad, 11 * 16, 80);  // key 77 -> 80 at frame 77's offset
        put_be64(bad, 5 * 16 + 8, 200 * 160);
        write_file(ipath, bad, bad.size());
        check_reads();
    }
    SECTION("garbage, and a torn last entry") {
        std::vector<char> bad(idx.size() + 9);
        for (std::size_t k = 0; k < bad.size(); ++k) {
            bad[k] = static_cast<char>((k * 2654435761ULL) >> 13U);
        }
        write_file(ipath, bad, bad.size());
        check_reads();
    }
    // The recorder reopening keeps only the entries that hold, and indexes on from there.
    {
        auto rec = prizma::Recorder::open(options(dir, std::size_t{1} << 20U));
        REQUIRE(rec.has_value());
        CHECK(rec->next_sequence() == 300);
        write_fixed(*rec, 300, 200);
    }
    for (const std::uint64_t from : {0U, 71U, 299U, 301U, 450U, 500U}) {
        INFO("from " << from << " after reopening");
        CHECK(read_fixed(dir, from) == 500);
    }
    const auto after = read_file(ipath);
    REQUIRE(after.size() % 16 == 0);
    for (std::size_t k = 0; k < after.size(); k += 16) {  // every entry is true
        const std::uint64_t key = be64(after, k);
        CHECK(be64(after, k + 8) == key * 160);
    }
}

TEST_CASE("journal reader: an entry out of order inside a segment is an error, not data",
          "[unit][recorder]") {
    const Base base;
    const std::string dir = base.path + "/journal";
    {
        auto rec = prizma::Recorder::open(options(dir, std::size_t{1} << 20U));
        REQUIRE(rec.has_value());
        write_fixed(*rec, 0, 10);
    }
    const std::string seg = dir + "/" + name_of(0, "seg");
    const auto good = read_file(seg);
    // Frames 0..5, frame 3 again (it verifies: it is a real frame), then 6..9.
    // Sized once and copied into (g++ 12 -O2 sees a false out-of-bounds copy in insert()).
    std::vector<char> spliced(good.size() + 160);
    auto out = std::copy(good.begin(), good.begin() + 6 * 160, spliced.begin());
    out = std::copy(good.begin() + 3 * 160, good.begin() + 4 * 160, out);
    std::copy(good.begin() + 6 * 160, good.end(), out);
    write_file(seg, spliced, spliced.size());
    auto rd = prizma::JournalReader::open(dir, 0);
    REQUIRE(rd.has_value());
    prizma::JournalEntry e;
    for (std::uint64_t want = 0; want < 6; ++want) {
        auto r = rd->next(e);
        REQUIRE((r.has_value() && *r));
        CHECK(e.sequence == want);
    }
    auto r = rd->next(e);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error() == prizma::Errc::malformed_packet);
    // A name that is no segment of ours (past 64 bits) is ignored, not a crash.
    write_file(dir + "/99999999999999999999.seg", {'x'}, 1);
    auto again = prizma::JournalReader::open(dir, 0);
    REQUIRE(again.has_value());
    // The recorder refuses it likewise: corruption inside, not a torn tail; nothing is cut.
    auto rec = prizma::Recorder::open(options(dir, std::size_t{1} << 20U));
    REQUIRE_FALSE(rec.has_value());
    CHECK(rec.error().code() == prizma::Errc::malformed_packet);
    CHECK(read_file(seg) == spliced);
}

TEST_CASE("recorder: a position past 2^64 - 1 is refused, not wrapped", "[unit][recorder]") {
    const TempDir dir;
    auto rec = open_recorder(dir.path);
    const auto b = body(0, 10);
    constexpr std::uint64_t kMax = UINT64_MAX;
    CHECK(rec.append(record(kMax, b)).error() == prizma::Errc::invalid_argument);  // next: 2^64
    prizma::StreamEvent loss;
    loss.kind = prizma::StreamEventKind::loss;
    loss.sequence = kMax - 5;
    loss.count = 7;
    CHECK(rec.append(loss).error() == prizma::Errc::invalid_argument);
    loss.count = 5;  // up to 2^64 - 1: the last position there is
    append(rec, loss);
    CHECK(rec.next_sequence() == kMax);
    CHECK(rec.append(record(kMax, b)).error() == prizma::Errc::invalid_argument);
    REQUIRE(rec.flush().has_value());
    auto rd = prizma::JournalReader::open(dir.path, kMax - 5);
    REQUIRE(rd.has_value());
    CHECK(rd->end_sequence() == kMax);
}

TEST_CASE("journal: a frame as written verifies and one flipped bit in any byte does not",
          "[unit][recorder]") {
    namespace journal = prizma::journal;
    const auto payload = body(9, 50);
    std::vector<std::byte> rec_frame(journal::kFrameHeader + prizma::RecordHeader::kBytes + 50);
    const auto rec = std::span<std::byte>(rec_frame).subspan(journal::kFrameHeader);
    prizma::RecordHeader::write(rec, 42, 3, 77, payload);
    std::memcpy(rec.data() + prizma::RecordHeader::kBytes, payload.data(), payload.size());
    journal::write_header(rec_frame.data(), static_cast<std::uint32_t>(rec.size()),
                          journal::kRecord, 77, 3, rec.first(prizma::RecordHeader::kBytes));
    std::vector<std::byte> loss_frame(journal::kFrameHeader);
    journal::write_header(loss_frame.data(), 0, journal::kLoss, 78, 5, {});
    CHECK(std::to_integer<int>(rec_frame[5]) == journal::kFormat);
    for (auto* frame : {&rec_frame, &loss_frame}) {
        journal::Frame f;
        REQUIRE(journal::parse(*frame, f) == journal::Parse::ok);
        CHECK(f.size() == frame->size());
        std::size_t accepted = 0;
        for (std::size_t i = 0; i < frame->size(); ++i) {
            for (unsigned bit = 0; bit < 8; ++bit) {
                (*frame)[i] ^= std::byte{static_cast<unsigned char>(1U << bit)};
                // A longer length is a frame not all there (need_more), never one that verifies.
                accepted += journal::parse(*frame, f) == journal::Parse::ok ? 1U : 0U;
                (*frame)[i] ^= std::byte{static_cast<unsigned char>(1U << bit)};
            }
        }
        CHECK(accepted == 0);
    }
}

namespace {

/// A frame header as prizma before XXH3 wrote it (format 1: byte 5 zero, a check of its own,
/// here any 8 bytes: the format is refused before any check is made).
std::vector<char> format1_loss_frame(std::uint64_t seq, std::uint64_t count) {
    std::vector<char> f(32, 0);
    f[4] = 2;  // loss
    for (int k = 0; k < 8; ++k) {
        f[static_cast<std::size_t>(8 + k)] = static_cast<char>((seq >> (56 - 8 * k)) & 0xffU);
        f[static_cast<std::size_t>(16 + k)] = static_cast<char>((count >> (56 - 8 * k)) & 0xffU);
        f[static_cast<std::size_t>(24 + k)] = static_cast<char>(0xA5 ^ k);
    }
    return f;
}

}  // namespace

TEST_CASE("journal: a segment of format 1 is refused by name and never cut", "[unit][recorder]") {
    const TempDir dir;
    const std::string seg = dir.path + "/00000000000000000000.seg";
    auto bytes = format1_loss_frame(0, 5);
    const auto second = format1_loss_frame(5, 3);
    bytes.insert(bytes.end(), second.begin(), second.end());
    bytes.push_back('x');  // a torn tail, as a recovery would cut in a journal of ours
    write_file(seg, bytes, bytes.size());
    const std::string want =
        "journal segment " + seg + " is format 1 (before XXH3); this prizma reads format 2";
    auto rec = prizma::Recorder::open(options(dir.path));
    REQUIRE_FALSE(rec.has_value());
    CHECK(rec.error().code() == prizma::Errc::unsupported);
    CHECK(rec.error().detail() == want);
    CHECK(fs::file_size(seg) == bytes.size());  // nothing cut
    auto rd = prizma::JournalReader::open(dir.path, 0);
    REQUIRE_FALSE(rd.has_value());
    CHECK(rd.error().detail() == want);
    // An older prizma may have started a segment and written nothing to it: the first
    // segment still names the journal's format.
    write_file(dir.path + "/00000000000000000008.seg", {}, 0);
    auto again = prizma::Recorder::open(options(dir.path));
    REQUIRE_FALSE(again.has_value());
    CHECK(again.error().detail() == want);
    CHECK(fs::file_size(dir.path + "/00000000000000000008.seg") == 0);
    // A format this prizma does not know (byte 5 = 3) is named as such.
    bytes[5] = 3;
    write_file(seg, bytes, bytes.size());
    auto other = prizma::JournalReader::open(dir.path, 0);
    REQUIRE_FALSE(other.has_value());
    CHECK(other.error().detail()
          == "journal segment " + seg + " is format 3; this prizma reads format 2");
}
