// SPDX-License-Identifier: Apache-2.0
// The journal reader: a recorder's journal read in order from a sequence, through the sparse
// index, while the recorder may still be writing it (docs/STREAMS.md, "Recording and late
// join").
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <prizma/recorder.hpp>

#include "lib/posix/errors.hpp"
#include "lib/posix/unique_fd.hpp"
#include "lib/streams/journal_files.hpp"
#include "lib/streams/recorder_format.hpp"

namespace prizma {

namespace {

using journal::check_format;
using journal::Frame;
using journal::in_order;
using journal::kFirstChunk;
using journal::kReadChunk;
using journal::kReadFlags;
using journal::locate;
using journal::Parse;
using journal::Place;
using journal::pread_full;
using journal::scan_file;
using journal::segment_index;
using posix::os_error;

}  // namespace

// ---- JournalReader ------------------------------------------------------------------------

struct JournalReader::Impl {
    posix::UniqueFd dir_fd;     // every segment is opened through it
    std::uint64_t first = 0;    // the journal's first sequence
    std::uint64_t segment = 0;  // first sequence of the open segment
    posix::UniqueFd fd;
    std::uint64_t pos = 0;       // the journal position before the next entry
    std::uint64_t from = 0;      // entries ending at or before it are skipped
    std::vector<std::byte> buf;  // file bytes [file_off, file_off + len)
    std::size_t begin = 0;       // parse position in buf
    std::size_t len = 0;
    std::uint64_t file_off = 0;
    std::uint64_t file_size = 0;  // at the last refill

    /// Opens segment `name` at `offset`: 0, or the errno (ENOENT: not there yet; ELOOP: a
    /// symbolic link by its name, never followed).
    int open_segment(std::uint64_t name, std::uint64_t offset) noexcept {
        posix::UniqueFd f(::openat(dir_fd.get(), journal::file_name(name, "seg").text, kReadFlags));
        struct stat st {};
        if (!f.valid() || ::fstat(f.get(), &st) != 0) {
            return errno;
        }
        if (!S_ISREG(st.st_mode)) {
            return EINVAL;
        }
        fd = std::move(f);
        segment = name;
        file_off = offset;
        begin = len = 0;
        return 0;
    }
    /// Whether a segment by that name exists (a link counts: it is no end of the journal).
    [[nodiscard]] bool segment_exists(std::uint64_t name) const noexcept {
        struct stat st {};
        return ::fstatat(dir_fd.get(), journal::file_name(name, "seg").text, &st,
                         AT_SYMLINK_NOFOLLOW)
               == 0;
    }
    /// Reads the segment from the first unparsed byte (again: a recorder reopening may have cut
    /// a torn tail and written on since it was read), as much as the buffer holds. The buffer
    /// grows to kReadChunk while the file has more, and to `need` (at most kFrameHeader +
    /// kMaxBody) for a larger frame only once all of it is in the file. Returns the unparsed
    /// bytes now in the buffer.
    Result<std::size_t> refill(std::size_t need) noexcept;
    /// At a frame that does not verify (`at`: its bytes): false at the end of the journal (a
    /// torn tail the recorder cuts when it reopens), Errc::malformed_packet inside it.
    Result<bool> at_bad_frame(std::span<const std::byte> at) const noexcept;
};

Result<std::size_t> JournalReader::Impl::refill(std::size_t need) noexcept {
    file_off += begin;
    begin = len = 0;
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        return posix::errno_code();
    }
    file_size = static_cast<std::uint64_t>(st.st_size);
    const std::uint64_t present = file_size > file_off ? file_size - file_off : 0;
    std::size_t cap = buf.size();
    if (present > cap && cap < kReadChunk) {  // grown while the file has more than it holds
        cap = std::min(kReadChunk, std::max(cap * 2, kFirstChunk));
    }
    if (need > cap && present >= need) {
        cap = need;  // a frame larger than any before, all of it in the file (rare; kept)
    }
    if (cap > buf.size()) {
        buf.resize(cap);
    }
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), present));
    const ssize_t r = pread_full(fd.get(), buf.data(), want, file_off);
    if (r < 0) {
        return posix::errno_code();
    }
    len = static_cast<std::size_t>(r);
    return len;
}

Result<bool> JournalReader::Impl::at_bad_frame(std::span<const std::byte> at) const noexcept {
    // A header that looks whole, its frame all in the file and more bytes after it: corruption
    // inside. So is any bad frame at the end of a segment the journal goes on after.
    const std::uint32_t body = pgm::load_be32(at.data());
    const bool plausible = body <= journal::kMaxBody && journal::format_bytes_ok(at.data());
    const std::uint64_t here = file_off + begin;
    if (plausible && file_size - here > journal::kFrameHeader + body) {
        return Errc::malformed_packet;
    }
    if (pos != segment && segment_exists(pos)) {
        return Errc::malformed_packet;
    }
    return false;
}

Result<bool> JournalReader::next(JournalEntry& out) noexcept {
    Impl& m = *impl_;
    std::size_t fresh = SIZE_MAX;  // unparsed bytes right after this call's last read
    for (;;) {
        Frame f;
        const auto avail = std::span<const std::byte>(m.buf).subspan(m.begin, m.len - m.begin);
        const Parse p = journal::parse(avail, f);
        if (p == Parse::ok) {
            if (!in_order(f, m.pos)) {
                return Errc::malformed_packet;  // verifies, yet is not the next entry
            }
            m.begin += f.size();
            m.pos = f.end();
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
            m.from = 0;
            return true;
        }
        if (avail.size() == fresh) {  // read in this call, and nothing more came
            if (p == Parse::bad) {
                return m.at_bad_frame(avail);
            }
            // At the end of this segment's written bytes: a later segment starting where we
            // are means this one is finished (with a torn frame left: corrupt).
            if (m.pos != m.segment && !avail.empty() && m.segment_exists(m.pos)) {
                return Errc::malformed_packet;
            }
            if (m.pos != m.segment && avail.empty()) {
                const int err = m.open_segment(m.pos, 0);
                if (err == 0) {
                    fresh = SIZE_MAX;
                    continue;
                }
                if (err != ENOENT) {
                    return posix::errno_code(err);
                }
            }
            return false;
        }
        std::size_t need = journal::kFrameHeader;
        if (p == Parse::need_more && avail.size() >= journal::kFrameHeader) {
            need += pgm::load_be32(avail.data());  // parse() checked it: at most kMaxBody
        }
        auto got = m.refill(need);
        if (!got) {
            return got.error();
        }
        fresh = *got;
    }
}

Result<JournalReader, Error> JournalReader::open(const std::string& directory, std::uint64_t from) {
    auto impl = std::make_unique<Impl>();
    const int dfd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0 && errno != ENOENT) {
        return os_error("journal: open directory " + directory);  // ELOOP: a symbolic link
    }
    impl->dir_fd.reset(dfd);
    std::vector<std::uint64_t> segs;
    if (dfd < 0 || !journal::list_segments(dfd, segs) || segs.empty()) {
        return Error(std::make_error_code(std::errc::no_such_file_or_directory),
                     "journal: no segments in " + directory);
    }
    impl->first = segs.front();
    if (from < segs.front()) {
        return Error(Errc::invalid_argument, "journal: sequence " + std::to_string(from)
                                                 + " is before the journal's first, "
                                                 + std::to_string(segs.front()));
    }
    const std::uint64_t name = *(std::upper_bound(segs.begin(), segs.end(), from) - 1);
    if (const int err = impl->open_segment(name, 0); err != 0) {
        return os_error("journal: open " + journal::segment_path(directory, name, "seg"), err);
    }
    const std::string path = journal::segment_path(directory, name, "seg");
    if (auto ok = check_format(impl->fd.get(), path); !ok) {
        return ok.error();
    }
    // The sparse index: the last entry at or before `from` that holds for the segment.
    struct stat st {};
    if (::fstat(impl->fd.get(), &st) != 0) {
        return os_error("journal: stat " + path);
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    const auto entries = segment_index(dfd, name, size);
    const Place start = locate(impl->fd.get(), size, entries, name, from);
    impl->file_off = start.offset;
    impl->pos = start.seq;
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
    std::vector<std::uint64_t> segs;
    if (!journal::list_segments(impl_->dir_fd.get(), segs) || segs.empty()) {
        return 0;
    }
    // Scan from the last segment's last index entry that holds (at most index_bytes plus what
    // follows), else from its start.
    const std::uint64_t name = segs.back();
    const int dfd = impl_->dir_fd.get();
    const posix::UniqueFd fd(::openat(dfd, journal::file_name(name, "seg").text, kReadFlags));
    struct stat st {};
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        return name;
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    const Place start = locate(fd.get(), size, segment_index(dfd, name, size), name, UINT64_MAX);
    const auto s = scan_file(fd.get(), size, start.offset, start.seq);
    return s ? s->end : start.seq;
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
