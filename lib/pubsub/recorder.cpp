// SPDX-License-Identifier: Apache-2.0
// The stream recorder (a journal of segment files written by a writer thread fed through a
// lock-free SPSC ring) and the journal reader (docs/STREAMS.md, "Recording and late join").
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>

#include <prizma/recorder.hpp>

#include "lib/posix/errors.hpp"
#include "lib/posix/unique_fd.hpp"
#include "lib/pubsub/recorder_format.hpp"

namespace prizma {
namespace {

using journal::Frame;

constexpr std::uint64_t kBatchBytes = 256 << 10;    // the writer's preferred write size
constexpr std::uint64_t kWritebackBytes = 1 << 20;  // writeback is started per this much
using journal::Parse;

Error os_error(const std::string& what, int err = errno) {
    return {posix::errno_code(err), what + ": " + posix::errno_text(err)};
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

/// Reads a whole file (set-up only).
std::vector<std::byte> slurp(const std::string& path) {
    std::vector<std::byte> out;
    const posix::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) {
        return out;
    }
    std::byte buf[65536];
    for (;;) {
        const ssize_t r = ::read(fd.get(), buf, sizeof buf);
        if (r <= 0) {
            break;
        }
        out.insert(out.end(), buf, buf + r);
    }
    return out;
}

/// The valid prefix of a segment: its length and the sequence after it.
struct Scan {
    std::size_t valid = 0;
    std::uint64_t end = 0;
    bool any = false;
};

Scan scan_segment(std::span<const std::byte> bytes, std::uint64_t first) {
    Scan s{0, first, false};
    Frame f;
    while (journal::parse(bytes.subspan(s.valid), f) == Parse::ok) {
        const bool in_order = f.kind == journal::kReset ? f.sequence >= s.end : f.sequence == s.end;
        if (!in_order
            || (f.kind != journal::kRecord && f.kind != journal::kLoss
                && f.kind != journal::kReset)) {
            break;
        }
        s.valid += f.size();
        s.end = f.end();
        s.any = true;
    }
    return s;
}

}  // namespace

// ---- Recorder -----------------------------------------------------------------------------

struct Recorder::Impl {
    RecorderOptions opt;
    // The SPSC ring: the producer owns tail_, the writer head_ (monotonic byte positions).
    std::vector<std::byte> ring;
    std::size_t mask = 0;
    alignas(64) std::atomic<std::uint64_t> tail{0};
    alignas(64) std::atomic<std::uint64_t> head{0};
    alignas(64) std::atomic<std::uint64_t> synced{0};  // ring position fdatasync()ed
    std::atomic<std::uint64_t> written_seq{0};
    std::atomic<bool> flush_wanted{false};
    std::atomic<bool> stop{false};
    std::atomic<bool> failed{false};
    std::atomic<std::uint64_t> c_written{0};
    std::atomic<std::uint64_t> c_fsyncs{0};
    std::atomic<std::uint64_t> c_segments{0};
    std::uint64_t c_appended = 0;
    std::uint64_t c_back_pressured = 0;
    std::uint64_t c_dropped = 0;
    // Producer state. The producer also keeps the segment and index bookkeeping (it knows
    // every frame's size), so the writer never reads a frame: it writes ring bytes up to the
    // next mark, and a mark says "a new segment starts here" and/or "index this frame".
    std::uint64_t next = 0;
    bool started = false;     // next is meaningful (journal not empty or first append seen)
    bool p_seg_open = false;  // a segment is open (recovered or rolled by an earlier mark)
    std::size_t p_seg_size = 0;
    std::size_t p_next_index_at = 0;
    struct Mark {
        std::uint64_t pos = 0;        // ring position of the frame
        std::uint64_t key = 0;        // its index key (sequence, or position before a reset)
        std::uint64_t offset = 0;     // its offset in the segment
        std::uint64_t roll_name = 0;  // the new segment's name, if roll
        bool roll = false;
    };
    static constexpr std::size_t kMarks = 4096;  // in flight; full = back-pressure
    std::vector<Mark> marks = std::vector<Mark>(kMarks);
    alignas(64) std::atomic<std::uint64_t> mark_tail{0};
    alignas(64) std::atomic<std::uint64_t> mark_head{0};
    // The journal position after the last frame the producer published; stored after tail,
    // so a writer that reads it before tail gets a position at or before tail's.
    std::atomic<std::uint64_t> tail_seq{0};
    // Writer state.
    posix::UniqueFd seg;
    posix::UniqueFd idx;
    std::uint64_t seg_written = 0;  // bytes in the open segment
    std::uint64_t seg_kicked = 0;   // of which writeback has been started
    std::vector<std::byte> idx_pending;
    std::jthread writer;

    void copy_in(std::uint64_t pos, const std::byte* p, std::size_t n) noexcept {
        if (n == 0) {
            return;
        }
        const std::size_t at = pos & mask;
        const std::size_t first = std::min(n, ring.size() - at);
        std::memcpy(ring.data() + at, p, first);
        std::memcpy(ring.data(), p + first, n - first);
    }
    void copy_out(std::uint64_t pos, std::byte* p, std::size_t n) const noexcept {
        const std::size_t at = pos & mask;
        const std::size_t first = std::min(n, ring.size() - at);
        std::memcpy(p, ring.data() + at, first);
        std::memcpy(p + first, ring.data(), n - first);
    }

    bool roll(std::uint64_t name) noexcept;
    bool write_range(std::uint64_t from, std::uint64_t to) noexcept;
    bool sync() noexcept;
    void run(const std::stop_token& st) noexcept;
    Result<void, Error> recover();
};

bool Recorder::Impl::sync() noexcept {
    if (seg.valid() && ::fdatasync(seg.get()) != 0) {
        return false;
    }
    if (idx.valid() && !idx_pending.empty()) {
        if (!write_all(idx.get(), idx_pending.data(), idx_pending.size())) {
            return false;
        }
        idx_pending.clear();
    }
    c_fsyncs.fetch_add(1, std::memory_order_relaxed);
    return true;
}

// A new segment named after the sequence it starts at (the journal position before its first
// entry), with its index file.
bool Recorder::Impl::roll(std::uint64_t name) noexcept {
    if (seg.valid() && !sync()) {
        return false;
    }
    const std::string s = journal::segment_path(opt.directory, name, "seg");
    const std::string i = journal::segment_path(opt.directory, name, "idx");
    seg.reset(::open(s.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    idx.reset(::open(i.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    seg_written = seg_kicked = 0;
    c_segments.fetch_add(1, std::memory_order_relaxed);
    // The directory entry must be durable too, or a crash could lose a whole segment.
    const posix::UniqueFd dir(::open(opt.directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir.valid()) {
        (void)::fsync(dir.get());
    }
    return seg.valid() && idx.valid();
}

// Writes ring positions [from, to): one write(2) per contiguous run between marks; at a mark,
// rolls to a new segment and/or adds an index entry. Never reads the frames themselves.
bool Recorder::Impl::write_range(std::uint64_t from, std::uint64_t to) noexcept {
    std::uint64_t run_start = from;
    const auto flush_run = [&](std::uint64_t end) {
        while (run_start < end) {
            const std::size_t at = run_start & mask;
            const std::size_t n = std::min<std::uint64_t>(end - run_start, ring.size() - at);
            if (!write_all(seg.get(), ring.data() + at, n)) {
                return false;
            }
            run_start += n;
            seg_written += n;
            c_written.fetch_add(n, std::memory_order_relaxed);
        }
        return true;
    };
    std::uint64_t mh = mark_head.load(std::memory_order_relaxed);
    const std::uint64_t mt = mark_tail.load(std::memory_order_acquire);
    for (; mh != mt; ++mh) {
        const Mark& k = marks[mh % kMarks];
        if (k.pos >= to) {
            break;  // a frame not published yet (its mark went out before the tail moved)
        }
        if (!flush_run(k.pos)) {
            return false;
        }
        if (k.roll && !roll(k.roll_name)) {
            return false;
        }
        std::byte e[16];
        pgm::store_be64(e, k.key);
        pgm::store_be64(e + 8, k.offset);
        idx_pending.insert(idx_pending.end(), e, e + 16);
        mark_head.store(mh + 1, std::memory_order_release);
    }
    if (!flush_run(to)) {
        return false;
    }
    // Start writeback of what is written as it goes, so an fdatasync() waits for the last
    // megabyte or so rather than for everything since the previous one.
    if (seg_written - seg_kicked >= kWritebackBytes) {
        (void)::sync_file_range(seg.get(), static_cast<off_t>(seg_kicked),
                                static_cast<off_t>(seg_written - seg_kicked),
                                SYNC_FILE_RANGE_WRITE);
        seg_kicked = seg_written;
    }
    return true;
}

void Recorder::Impl::run(const std::stop_token& st) noexcept {
    auto last_sync = std::chrono::steady_clock::now();
    bool dirty = false;
    bool batched = false;
    for (;;) {
        const std::uint64_t h = head.load(std::memory_order_relaxed);
        const std::uint64_t ts = tail_seq.load(std::memory_order_acquire);  // before tail
        const std::uint64_t t = tail.load(std::memory_order_acquire);
        // Fewer, larger writes: a small batch waits once, briefly, for more to come.
        const bool urgent = flush_wanted.load(std::memory_order_relaxed) || st.stop_requested();
        if (t != h && t - h < kBatchBytes && !urgent && !batched) {
            batched = true;
            std::this_thread::sleep_for(std::chrono::microseconds(50));
            continue;
        }
        batched = false;
        // At most one batch per write(2): its ring space goes back to the producer as soon as
        // it is written, so appends go on while the writer works through a long backlog.
        const std::uint64_t end = std::min(t, h + kBatchBytes);
        if (end != h) {
            if (!write_range(h, end)) {
                failed.store(true, std::memory_order_release);
                return;
            }
            head.store(end, std::memory_order_release);
            dirty = true;
        }
        if (end == t) {
            written_seq.store(ts, std::memory_order_release);  // at or before t's position
        }
        const auto now = std::chrono::steady_clock::now();
        const bool asked = flush_wanted.load(std::memory_order_acquire) || st.stop_requested();
        if (dirty && ((asked && end == t) || now - last_sync >= opt.fsync_interval)) {
            if (!sync()) {
                failed.store(true, std::memory_order_release);
                return;
            }
            dirty = false;
            last_sync = now;
            synced.store(end, std::memory_order_release);
        } else if (!dirty) {
            synced.store(end, std::memory_order_release);
        }
        if (t == h) {
            if (st.stop_requested()) {
                return;
            }
            // Idle: poll again shortly (the producer never signals: no syscall on its path).
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    }
}

Result<void, Error> Recorder::Impl::recover() {
    const auto segs = journal::list_segments(opt.directory);
    if (segs.empty()) {
        return {};
    }
    const std::uint64_t first = segs.back();
    const std::string path = journal::segment_path(opt.directory, first, "seg");
    const auto bytes = slurp(path);
    const Scan s = scan_segment(bytes, first);
    c_dropped = bytes.size() - s.valid;
    seg.reset(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!seg.valid() || ::ftruncate(seg.get(), static_cast<off_t>(s.valid)) != 0
        || ::lseek(seg.get(), 0, SEEK_END) < 0 || ::fdatasync(seg.get()) != 0) {
        return os_error("recorder: recovering " + path);
    }
    // Keep the index entries that point inside the valid prefix.
    const std::string ipath = journal::segment_path(opt.directory, first, "idx");
    auto ib = slurp(ipath);
    std::size_t keep = 0;
    for (; keep + 16 <= ib.size() && pgm::load_be64(ib.data() + keep + 8) < s.valid; keep += 16) {
    }
    idx.reset(::open(ipath.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    if (!idx.valid() || ::ftruncate(idx.get(), static_cast<off_t>(keep)) != 0
        || ::lseek(idx.get(), 0, SEEK_END) < 0) {
        return os_error("recorder: recovering " + ipath);
    }
    p_seg_open = true;
    p_seg_size = s.valid;
    seg_written = seg_kicked = s.valid;
    p_next_index_at = keep == 0 ? 0 : pgm::load_be64(ib.data() + keep - 8) + opt.index_bytes;
    next = s.end;
    started = true;
    tail_seq.store(s.end);
    written_seq.store(s.end);
    return {};
}

Result<Recorder, Error> Recorder::open(const RecorderOptions& options) {
    if (options.directory.empty() || options.segment_bytes < 4096 || options.index_bytes == 0) {
        return Error(Errc::invalid_argument,
                     "recorder: directory must be set, segment_bytes >= 4096, index_bytes > 0");
    }
    if (::mkdir(options.directory.c_str(), 0755) != 0 && errno != EEXIST) {
        return os_error("recorder: mkdir " + options.directory);
    }
    auto impl = std::make_unique<Impl>();
    impl->opt = options;
    std::size_t cap = 65536;
    while (cap < options.buffer_bytes) {
        cap <<= 1U;
    }
    impl->ring.resize(cap);
    impl->mask = cap - 1;
    impl->idx_pending.reserve(4096);
    if (auto r = impl->recover(); !r) {
        return r.error();
    }
    Impl* p = impl.get();
    impl->writer = std::jthread([p](const std::stop_token& st) { p->run(st); });
    return Recorder(std::move(impl));
}

Recorder::Recorder(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
Recorder::Recorder(Recorder&& other) noexcept = default;
Recorder& Recorder::operator=(Recorder&& other) noexcept = default;
Recorder::~Recorder() = default;  // jthread: request_stop + join; run() syncs before leaving

Result<void> Recorder::append(const StreamEvent& e, std::span<const std::byte> record) noexcept {
    Impl& m = *impl_;
    if (m.failed.load(std::memory_order_acquire)) {
        return Errc::closed;
    }
    std::uint8_t kind = journal::kRecord;
    std::uint64_t count = e.epoch;
    std::size_t body = 0;
    switch (e.kind) {
        case StreamEventKind::record: body = RecordHeader::kBytes + e.payload.size(); break;
        case StreamEventKind::loss:
            kind = journal::kLoss;
            count = e.count;
            break;
        case StreamEventKind::reset: kind = journal::kReset; break;
        case StreamEventKind::divergence:
        case StreamEventKind::stall: return {};  // nothing to journal
    }
    const bool in_order =
        !m.started || (kind == journal::kReset ? e.sequence >= m.next : e.sequence == m.next);
    if (!in_order) {
        return Errc::invalid_argument;
    }
    const std::size_t len = journal::kFrameHeader + body;
    if (body > journal::kMaxBody || len > m.ring.size() / 2) {
        return Errc::message_too_large;
    }
    const std::uint64_t t = m.tail.load(std::memory_order_relaxed);
    if (t + len - m.head.load(std::memory_order_acquire) > m.ring.size()) {
        ++m.c_back_pressured;
        return Errc::back_pressured;
    }
    // Segment and index bookkeeping: does this frame start a segment or an index entry?
    const std::uint64_t before = m.started ? m.next : e.sequence;  // journal position
    const bool roll =
        !m.p_seg_open || (m.p_seg_size > 0 && m.p_seg_size + len > m.opt.segment_bytes);
    const std::size_t offset = roll ? 0 : m.p_seg_size;
    const bool mark = roll || offset >= m.p_next_index_at;
    const std::uint64_t mt = m.mark_tail.load(std::memory_order_relaxed);
    if (mark && mt - m.mark_head.load(std::memory_order_acquire) >= Impl::kMarks) {
        ++m.c_back_pressured;
        return Errc::back_pressured;
    }
    std::byte rh[RecordHeader::kBytes];
    std::span<const std::byte> head;
    if (kind == journal::kRecord) {
        // The header as received (a StreamSubscriber verified it), or made again.
        const bool whole =
            record.size() == body && record.data() + RecordHeader::kBytes == e.payload.data();
        if (whole) {
            if (pgm::load_be32(record.data() + 4) != m.opt.stream_id) {
                return Errc::invalid_argument;  // another stream's record
            }
            head = record.first(RecordHeader::kBytes);
        } else {
            RecordHeader::write(rh, m.opt.stream_id, e.epoch, e.sequence, e.payload);
            head = rh;
        }
    }
    std::byte fh[journal::kFrameHeader];
    journal::write_header(fh, static_cast<std::uint32_t>(body), kind, e.sequence, count, head);
    m.copy_in(t, fh, sizeof fh);
    m.copy_in(t + sizeof fh, head.data(), head.size());
    m.copy_in(t + sizeof fh + head.size(), e.payload.data(), body - head.size());
    if (mark) {
        // A segment is named after the journal position before its first entry; a reset is
        // indexed by that position too (its own sequence may lie beyond it).
        m.marks[mt % Impl::kMarks] = {.pos = t,
                                      .key = kind == journal::kReset ? before : e.sequence,
                                      .offset = offset,
                                      .roll_name = before,
                                      .roll = roll};
        m.mark_tail.store(mt + 1, std::memory_order_release);
        m.p_seg_open = true;
        m.p_next_index_at = offset + m.opt.index_bytes;
    }
    m.p_seg_size = offset + len;
    m.started = true;
    m.next = Frame{kind, e.sequence, count, {}}.end();
    m.tail.store(t + len, std::memory_order_release);
    m.tail_seq.store(m.next, std::memory_order_release);  // after tail: never ahead of it
    ++m.c_appended;
    return {};
}

std::uint64_t Recorder::next_sequence() const noexcept {
    return impl_->next;
}

std::uint64_t Recorder::written_sequence() const noexcept {
    return impl_->written_seq.load(std::memory_order_acquire);
}

Result<void> Recorder::flush() {
    Impl& m = *impl_;
    const std::uint64_t t = m.tail.load(std::memory_order_relaxed);
    m.flush_wanted.store(true, std::memory_order_release);
    while (m.synced.load(std::memory_order_acquire) < t) {
        if (m.failed.load(std::memory_order_acquire)) {
            m.flush_wanted.store(false);
            return Errc::closed;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    m.flush_wanted.store(false, std::memory_order_release);
    return {};
}

RecorderCounters Recorder::counters() const noexcept {
    const Impl& m = *impl_;
    RecorderCounters c;
    c.appended = m.c_appended;
    c.back_pressured = m.c_back_pressured;
    c.written_bytes = m.c_written.load(std::memory_order_relaxed);
    c.fsyncs = m.c_fsyncs.load(std::memory_order_relaxed);
    c.segments = m.c_segments.load(std::memory_order_relaxed);
    c.recovered_bytes_dropped = m.c_dropped;
    c.write_errors = m.failed.load(std::memory_order_relaxed) ? 1 : 0;
    return c;
}

const std::string& Recorder::directory() const noexcept {
    return impl_->opt.directory;
}

// ---- JournalReader ------------------------------------------------------------------------

struct JournalReader::Impl {
    std::string dir;
    std::uint64_t first = 0;    // the journal's first sequence
    std::uint64_t segment = 0;  // first sequence of the open segment
    posix::UniqueFd fd;
    std::uint64_t pos = 0;       // sequence of the next entry
    std::uint64_t from = 0;      // entries ending at or before it are skipped
    std::vector<std::byte> buf;  // file bytes [file_off, file_off + len)
    std::size_t begin = 0;       // parse position in buf
    std::size_t len = 0;
    std::uint64_t file_off = 0;

    bool open_segment(std::uint64_t first_seq, std::uint64_t offset) noexcept {
        posix::UniqueFd f(
            ::open(journal::segment_path(dir, first_seq, "seg").c_str(), O_RDONLY | O_CLOEXEC));
        if (!f.valid()) {
            return false;
        }
        fd = std::move(f);
        segment = first_seq;
        file_off = offset;
        begin = len = 0;
        return true;
    }
    /// Reads more of the segment after the unparsed bytes; returns the bytes added.
    Result<std::size_t> refill(std::size_t need) noexcept;
};

Result<std::size_t> JournalReader::Impl::refill(std::size_t need) noexcept {
    if (begin > 0) {
        std::memmove(buf.data(), buf.data() + begin, len - begin);
        file_off += begin;
        len -= begin;
        begin = 0;
    }
    if (need > buf.size()) {
        buf.resize(need);  // a record larger than any before (rare; then kept)
    }
    const ssize_t r =
        ::pread(fd.get(), buf.data() + len, buf.size() - len, static_cast<off_t>(file_off + len));
    if (r < 0) {
        return posix::errno_code();
    }
    len += static_cast<std::size_t>(r);
    return static_cast<std::size_t>(r);
}

Result<bool> JournalReader::next(JournalEntry& out) noexcept {
    Impl& m = *impl_;
    for (;;) {
        Frame f;
        const auto avail = std::span<const std::byte>(m.buf).subspan(m.begin, m.len - m.begin);
        const Parse p = journal::parse(avail, f);
        if (p == Parse::ok) {
            m.begin += f.size();
            const bool before = f.kind == journal::kReset ? f.sequence < m.from : f.end() <= m.from;
            if (before) {
                continue;  // before the requested start (positioned by a sparse index)
            }
            out.kind = f.kind == journal::kRecord ? StreamEventKind::record
                       : f.kind == journal::kLoss ? StreamEventKind::loss
                                                  : StreamEventKind::reset;
            out.sequence = std::max(f.sequence, f.kind == journal::kReset ? 0 : m.from);
            out.count = f.kind == journal::kLoss     ? f.end() - out.sequence
                        : f.kind == journal::kRecord ? 1U
                                                     : 0U;
            out.epoch = f.kind == journal::kLoss ? 0 : static_cast<std::uint32_t>(f.count);
            out.record = f.kind == journal::kRecord ? f.body : std::span<const std::byte>{};
            m.pos = f.end();
            m.from = 0;
            return true;
        }
        std::size_t need = journal::kFrameHeader;
        if (avail.size() >= 4) {
            need += pgm::load_be32(avail.data());
        }
        auto got = m.refill(std::max(need, std::size_t{1} << 20U));
        if (!got) {
            return got.error();
        }
        if (*got > 0) {
            continue;
        }
        if (p == Parse::bad && m.len - m.begin >= need) {
            return Errc::malformed_packet;  // a complete entry that does not verify
        }
        // At the end of this segment's written bytes: a later segment starting where we are
        // means this one is finished.
        if (m.len == m.begin && m.pos != m.segment && m.open_segment(m.pos, 0)) {
            continue;
        }
        return false;
    }
}

Result<JournalReader, Error> JournalReader::open(const std::string& directory, std::uint64_t from) {
    const auto segs = journal::list_segments(directory);
    if (segs.empty()) {
        return Error(std::make_error_code(std::errc::no_such_file_or_directory),
                     "journal: no segments in " + directory);
    }
    auto impl = std::make_unique<Impl>();
    impl->dir = directory;
    impl->first = segs.front();
    impl->buf.resize(std::size_t{1} << 20U);
    if (from < segs.front()) {
        return Error(Errc::invalid_argument, "journal: sequence " + std::to_string(from)
                                                 + " is before the journal's first, "
                                                 + std::to_string(segs.front()));
    }
    const auto it = std::upper_bound(segs.begin(), segs.end(), from) - 1;
    // The sparse index: the last entry at or before `from`.
    const auto ib = slurp(journal::segment_path(directory, *it, "idx"));
    std::uint64_t offset = 0;
    for (std::size_t k = 0; k + 16 <= ib.size(); k += 16) {
        if (pgm::load_be64(ib.data() + k) > from) {
            break;
        }
        offset = pgm::load_be64(ib.data() + k + 8);
    }
    if (!impl->open_segment(*it, offset)) {
        return os_error("journal: open segment in " + directory);
    }
    impl->pos = *it;
    impl->from = from;
    JournalReader r(std::move(impl));
    if (const std::uint64_t end = r.end_sequence(); from > end) {
        return Error(Errc::invalid_argument, "journal: sequence " + std::to_string(from)
                                                 + " is past the journal's end, "
                                                 + std::to_string(end));
    }
    return r;
}

std::uint64_t JournalReader::end_sequence() const {
    const auto segs = journal::list_segments(impl_->dir);
    if (segs.empty()) {
        return 0;
    }
    // Scan from the last segment's last index entry (at most index_bytes plus what follows).
    const auto ib = slurp(journal::segment_path(impl_->dir, segs.back(), "idx"));
    std::uint64_t seq = segs.back();
    std::uint64_t off = 0;
    if (ib.size() >= 16) {
        const std::size_t k = ib.size() / 16 * 16 - 16;
        seq = pgm::load_be64(ib.data() + k);
        off = pgm::load_be64(ib.data() + k + 8);
    }
    const posix::UniqueFd fd(::open(journal::segment_path(impl_->dir, segs.back(), "seg").c_str(),
                                    O_RDONLY | O_CLOEXEC));
    struct stat st {};
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0
        || static_cast<std::uint64_t>(st.st_size) < off) {
        return seq;
    }
    std::vector<std::byte> bytes(static_cast<std::size_t>(st.st_size) - off);
    const ssize_t r = ::pread(fd.get(), bytes.data(), bytes.size(), static_cast<off_t>(off));
    bytes.resize(r > 0 ? static_cast<std::size_t>(r) : 0);
    return scan_segment(bytes, seq).end;
}

std::uint64_t JournalReader::position() const noexcept {
    return std::max(impl_->pos, impl_->from);
}

std::uint64_t JournalReader::first_sequence() const noexcept {
    return impl_->first;
}

JournalReader::JournalReader(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
JournalReader::JournalReader(JournalReader&& other) noexcept = default;
JournalReader& JournalReader::operator=(JournalReader&& other) noexcept = default;
JournalReader::~JournalReader() = default;

}  // namespace prizma
