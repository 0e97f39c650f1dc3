// SPDX-License-Identifier: Apache-2.0
// The stream recorder's journal (docs/STREAMS.md, "Recording and late join"): written and read
// back, segment rollover, reads from the middle, loss/reset entries, explicit back-pressure, and
// crash recovery: the last segment truncated at every offset of its tail, and corrupted at every
// offset of it, recovers exactly the complete prefix. Counts and orders only.
#include <sys/wait.h>
#include <unistd.h>

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

TEST_CASE("recorder: a byte corrupted anywhere in its tail drops that record and what follows",
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
    for (std::size_t at = ends[kN - 4]; at < whole.size(); ++at) {
        auto bad = whole;
        bad[at] = static_cast<char>(bad[at] ^ 0x5A);
        write_file(seg, bad, bad.size());
        // The record holding the corrupt byte, and everything after it, is dropped.
        const auto holder = static_cast<std::uint64_t>(
            std::upper_bound(ends.begin(), ends.end(), at) - ends.begin());
        auto rec = open_recorder(dir.path);
        INFO("byte " << at << " flipped");
        REQUIRE(rec.next_sequence() == holder);
        REQUIRE(contiguous(read_all(dir.path, 0), 0, holder));
    }
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
          "[unit][recorder]") {
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
