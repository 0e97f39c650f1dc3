// SPDX-License-Identifier: Apache-2.0
// The stream recorder: a journal of segment files written by a writer thread fed through a
// lock-free SPSC ring (docs/STREAMS.md, "Recording and late join"). The files' helpers are in
// journal_files.cpp, the journal reader in journal_reader.cpp.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>

#include <prizma/recorder.hpp>

#include "lib/posix/errors.hpp"
#include "lib/posix/unique_fd.hpp"
#include "lib/streams/journal_files.hpp"
#include "lib/streams/recorder_format.hpp"

namespace prizma {

namespace {

using journal::check_format;
using journal::Frame;
using journal::IndexEntry;
using journal::kIndexEntry;
using journal::open_own_file;
using journal::read_index;
using journal::refused;
using journal::scan_file;
using journal::write_all;
using posix::os_error;

constexpr std::uint64_t kBatchBytes = 256 << 10;    // the writer's preferred write size
constexpr std::uint64_t kWritebackBytes = 1 << 20;  // writeback is started per this much

/// Opens the journal directory, made with the options' mode if missing: never through a
/// symbolic link; owned by this process's effective uid; writable by no one else unless
/// allowed. Checked on the open descriptor, through which every file is then opened: nothing
/// can be swapped in between. Locked (flock) for this Recorder alone.
Result<posix::UniqueFd, Error> open_directory(const RecorderOptions& o) {
    const std::string& dir = o.directory;
    if (::mkdir(dir.c_str(), o.directory_mode) != 0 && errno != EEXIST) {
        return os_error("recorder: mkdir " + dir);
    }
    posix::UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!fd.valid()) {
        const int err = errno;
        if (::lstat(dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
            return refused("recorder: directory " + dir, "a symbolic link");
        }
        return os_error("recorder: open directory " + dir, err);
    }
    if (::fstat(fd.get(), &st) != 0) {
        return os_error("recorder: stat " + dir);
    }
    if (st.st_uid != ::geteuid()) {
        return refused("recorder: directory " + dir, "owned by uid " + std::to_string(st.st_uid)
                                                         + ", not by this process's uid "
                                                         + std::to_string(::geteuid()));
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && !o.allow_shared_directory) {
        char mode[8];
        (void)std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777U);
        return refused("recorder: directory " + dir,
                       std::string("writable by other users (mode ") + mode
                           + "; RecorderOptions::allow_shared_directory accepts it)");
    }
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) {
            return Error(std::make_error_code(std::errc::device_or_resource_busy),
                         "recorder: " + dir + " is in use by another Recorder");
        }
        return os_error("recorder: lock " + dir);
    }
    return fd;
}

}  // namespace

// ---- Recorder -----------------------------------------------------------------------------

struct Recorder::Impl {
    RecorderOptions opt;
    posix::UniqueFd dir;  // the journal directory, locked; every file is opened through it
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
    Error failure;  // why the writer stopped: written before `failed` is set, read after
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
    std::uint64_t seg_name = 0;     // the open segment's first sequence
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

    void fail(const char* what, std::uint64_t name, const char* ext, int err) noexcept;
    bool roll(std::uint64_t name) noexcept;
    bool write_range(std::uint64_t from, std::uint64_t to) noexcept;
    bool sync() noexcept;
    void run(const std::stop_token& st) noexcept;
    Result<void, Error> recover();
    Result<std::vector<IndexEntry>, Error> open_index(std::uint64_t name, std::uint64_t size);
};

// The writer's error, for write_error(); then `failed` stops appends.
void Recorder::Impl::fail(const char* what, std::uint64_t name, const char* ext, int err) noexcept {
    try {
        failure = os_error(std::string("recorder: ") + what + " "
                               + journal::segment_path(opt.directory, name, ext),
                           err);
    } catch (...) {  // no memory for the text: the code alone
        failure = Error(posix::errno_code(err));
    }
    failed.store(true, std::memory_order_release);
}

bool Recorder::Impl::sync() noexcept {
    if (seg.valid() && ::fdatasync(seg.get()) != 0) {
        fail("fdatasync", seg_name, "seg", errno);
        return false;
    }
    if (idx.valid() && !idx_pending.empty()) {
        if (!write_all(idx.get(), idx_pending.data(), idx_pending.size())) {
            fail("write", seg_name, "idx", errno);
            return false;
        }
        idx_pending.clear();
    }
    c_fsyncs.fetch_add(1, std::memory_order_relaxed);
    return true;
}

// A new segment named after the sequence it starts at (the journal position before its first
// entry), with its index file. Both are new files (O_EXCL): a file or link already there by
// that name is never opened, truncated or written, it stops the recorder (write_error()).
bool Recorder::Impl::roll(std::uint64_t name) noexcept {
    if (seg.valid() && !sync()) {
        return false;
    }
    constexpr int kNew = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    const auto s = journal::file_name(name, "seg");
    const auto i = journal::file_name(name, "idx");
    seg.reset(::openat(dir.get(), s.text, kNew, opt.file_mode));
    if (!seg.valid()) {
        fail("create segment", name, "seg", errno);
        return false;
    }
    idx.reset(::openat(dir.get(), i.text, kNew, opt.file_mode));
    if (!idx.valid()) {
        const int err = errno;
        seg.reset();
        (void)::unlinkat(dir.get(), s.text, 0);  // ours (O_EXCL), and empty
        fail("create index", name, "idx", err);
        return false;
    }
    seg_name = name;
    seg_written = seg_kicked = 0;
    c_segments.fetch_add(1, std::memory_order_relaxed);
    // The directory entry must be durable too, or a crash could lose a whole segment.
    (void)::fsync(dir.get());
    return true;
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
                fail("write", seg_name, "seg", errno);
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
                return;  // failed (fail() said why)
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

// Reopens the last segment: scans it and cuts what follows the last entry that verifies (a
// torn or corrupt tail, never a verified entry), and its index after the last entry that is
// exactly one of the scanned frames'; the writer appends from there.
Result<void, Error> Recorder::Impl::recover() {
    std::vector<std::uint64_t> segs;
    if (!journal::list_segments(dir.get(), segs)) {
        return os_error("recorder: list " + opt.directory);
    }
    if (segs.empty()) {
        return {};
    }
    if (segs.size() > 1) {
        // The journal's format is its first segment's too (the last may be new and empty).
        const std::string first = journal::segment_path(opt.directory, segs.front(), "seg");
        auto f =
            open_own_file(dir.get(), journal::file_name(segs.front(), "seg"), O_RDONLY, 0, first);
        if (!f) {
            return f.error();
        }
        if (auto ok = check_format(f->get(), first); !ok) {
            return ok.error();
        }
    }
    const std::uint64_t name = segs.back();
    const std::string path = journal::segment_path(opt.directory, name, "seg");
    auto f = open_own_file(dir.get(), journal::file_name(name, "seg"), O_RDWR, 0, path);
    if (!f) {
        return f.error();
    }
    seg = std::move(*f);
    seg_name = name;
    struct stat st {};
    if (::fstat(seg.get(), &st) != 0) {
        return os_error("recorder: stat " + path);
    }
    if (auto ok = check_format(seg.get(), path); !ok) {
        return ok.error();
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    const auto entries = open_index(name, size);
    if (!entries) {
        return entries.error();
    }
    std::size_t keep = 0;
    const auto s = scan_file(seg.get(), size, 0, name, &*entries, &keep);
    if (!s) {
        return os_error("recorder: read " + path, s.error().value());
    }
    if (s->valid < size) {
        // Only a torn tail (a write cut short) is cut. A bad frame with whole frames after it is
        // corruption inside, as JournalReader reports it: the verified records after it stay,
        // and the recorder does not write on after them.
        const auto inside = journal::stopped_inside(seg.get(), size, s->valid);
        if (!inside) {
            return os_error("recorder: read " + path, inside.error().value());
        }
        if (*inside) {
            return Error(Errc::malformed_packet,
                         "recorder: " + path + ": a bad frame at offset "
                             + std::to_string(s->valid) + " with "
                             + std::to_string(size - s->valid)
                             + " bytes from it on: corruption inside the segment, not a torn "
                               "tail; nothing was cut (move the segment aside, or repair it, "
                               "to record on)");
        }
    }
    c_dropped = size - s->valid;
    if (s->valid < size
        && (::ftruncate(seg.get(), static_cast<off_t>(s->valid)) != 0
            || ::fdatasync(seg.get()) != 0)) {
        return os_error("recorder: cutting the torn tail of " + path);
    }
    const auto idx_bytes = static_cast<off_t>(keep * kIndexEntry);
    if (::lseek(seg.get(), static_cast<off_t>(s->valid), SEEK_SET) < 0
        || ::ftruncate(idx.get(), idx_bytes) != 0 || ::lseek(idx.get(), idx_bytes, SEEK_SET) < 0) {
        return os_error("recorder: recovering " + path);
    }
    p_seg_open = true;
    p_seg_size = s->valid;
    seg_written = seg_kicked = s->valid;
    p_next_index_at = keep == 0 ? 0 : (*entries)[keep - 1].offset + opt.index_bytes;
    next = s->end;
    started = true;
    tail_seq.store(s->end);
    written_seq.store(s->end);
    return {};
}

// Opens (or makes) the index of the recovered segment `name` (`size` bytes) and reads it.
Result<std::vector<IndexEntry>, Error> Recorder::Impl::open_index(std::uint64_t name,
                                                                  std::uint64_t size) {
    const std::string path = journal::segment_path(opt.directory, name, "idx");
    auto f = open_own_file(dir.get(), journal::file_name(name, "idx"), O_RDWR | O_CREAT,
                           opt.file_mode, path);
    if (!f) {
        return f.error();
    }
    idx = std::move(*f);
    auto entries = read_index(idx.get(), size / journal::kFrameHeader + 1);
    if (!entries) {
        return os_error("recorder: read " + path, entries.error().value());
    }
    return std::move(*entries);
}

Result<Recorder, Error> Recorder::open(const RecorderOptions& options) {
    if (options.directory.empty() || options.segment_bytes < 4096 || options.index_bytes == 0) {
        return Error(Errc::invalid_argument,
                     "recorder: directory must be set, segment_bytes >= 4096, index_bytes > 0");
    }
    const std::uint32_t fm = options.file_mode;
    const std::uint32_t dm = options.directory_mode;
    if ((fm & ~0666U) != 0 || (fm & 0600U) != 0600U || (dm & ~0777U) != 0 || (dm & 0700U) != 0700U
        || (((fm | dm) & 0022U) != 0 && !options.allow_shared_directory)) {
        return Error(Errc::invalid_argument,
                     "recorder: file_mode must lie within 0666 and have 0600, directory_mode "
                     "within 0777 and have 0700; write bits for group or others need "
                     "allow_shared_directory");
    }
    auto dir = open_directory(options);
    if (!dir) {
        return dir.error();
    }
    auto impl = std::make_unique<Impl>();
    impl->opt = options;
    impl->dir = std::move(*dir);
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
        case StreamEventKind::dispute:
        case StreamEventKind::stall: return {};  // nothing to journal
    }
    const bool in_order =
        !m.started || (kind == journal::kReset ? e.sequence >= m.next : e.sequence == m.next);
    if (!in_order || Frame{kind, e.sequence, count, {}}.end() < e.sequence
        || (kind == journal::kRecord && e.sequence == UINT64_MAX)) {  // the position would wrap
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
            return m.failure ? m.failure.code() : make_error_code(Errc::closed);
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

Error Recorder::write_error() const {
    return impl_->failed.load(std::memory_order_acquire) ? impl_->failure : Error{};
}

const std::string& Recorder::directory() const noexcept {
    return impl_->opt.directory;
}

}  // namespace prizma
