// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <prizma/error.hpp>
#include <prizma/result.hpp>
#include <prizma/stream.hpp>

/// Recording a stream to disk (docs/STREAMS.md, "Recording and late join"): a journal of
/// segment files of checksummed entries, indexed by application sequence.
namespace prizma {

struct RecorderOptions {
    /// The journal's directory (created with directory_mode if missing). One stream, one epoch
    /// line per directory, one Recorder at a time (open() locks it). It must not be a symbolic
    /// link, and an existing one must be owned by the process's effective uid and, unless
    /// allow_shared_directory, writable by no one else: whoever can write to it could plant
    /// files or links where the next segment goes.
    std::string directory;
    std::uint32_t stream_id = 0;
    /// A new segment file starts once the current one would exceed this many bytes.
    std::size_t segment_bytes = std::size_t{64} << 20U;
    /// The hand-off buffer between append() and the writer thread (rounded up to a power of
    /// two, at least 64 KiB). When it is full, append() returns Errc::back_pressured.
    std::size_t buffer_bytes = std::size_t{8} << 20U;
    /// fsync policy: the writer calls fdatasync() at most this often while data arrives (and
    /// always when a segment is closed, and on flush()/close). 0 = after every write batch.
    std::chrono::milliseconds fsync_interval{100};
    /// One sparse index entry (sequence → offset) per this many bytes of segment.
    std::size_t index_bytes = std::size_t{64} << 10U;
    /// Permission bits of the segment and index files the recorder creates (the umask still
    /// applies); the owner's read and write bits are required.
    std::uint32_t file_mode = 0600;
    /// Permission bits of the directory, when open() creates it (the umask still applies); the
    /// owner's bits are required.
    std::uint32_t directory_mode = 0700;
    /// Accept a directory (and modes) writable by its group or by others. Off by default: open()
    /// refuses such a directory with std::errc::permission_denied.
    bool allow_shared_directory = false;
};

struct RecorderCounters {
    std::uint64_t appended = 0;        ///< entries accepted by append()
    std::uint64_t back_pressured = 0;  ///< append() calls refused: buffer full (never dropped)
    std::uint64_t written_bytes = 0;   ///< bytes written to segments by the writer thread
    std::uint64_t fsyncs = 0;
    std::uint64_t segments = 0;                 ///< segments opened by this Recorder
    std::uint64_t recovered_bytes_dropped = 0;  ///< torn/corrupt tail dropped at open
    std::uint64_t write_errors = 0;  ///< writer thread I/O errors (then the recorder stops)
};

/// Journals one stream's events as a StreamSubscriber delivers them: records (in order, by
/// sequence), loss and reset events. append() copies the entry into a bounded lock-free
/// single-producer/single-consumer ring; a writer thread writes it to the current segment and
/// fsyncs per RecorderOptions::fsync_interval. Crash-safe: open() scans the last segment and
/// truncates a torn or corrupt tail, so next_sequence() is one past the last complete entry.
/// append()/next_sequence() from one thread (the producer) only; counters() and
/// durable_sequence() from any thread.
class Recorder {
public:
    /// Opens (recovering) or creates the journal; starts the writer thread. Files are opened
    /// O_NOFOLLOW and only as regular files of this user; new ones O_EXCL (an existing file is
    /// never replaced), and only a torn or corrupt tail after the last entry that verifies is
    /// cut. Errors: Errc::invalid_argument (options), std::errc::permission_denied (a directory
    /// or file of another user, a directory writable by others, a symbolic link),
    /// std::errc::device_or_resource_busy (another Recorder has the directory), OS errors (with
    /// the path in the detail).
    static Result<Recorder, Error> open(const RecorderOptions& options);
    Recorder(Recorder&& other) noexcept;
    Recorder& operator=(Recorder&& other) noexcept;
    Recorder(const Recorder&) = delete;
    Recorder& operator=(const Recorder&) = delete;
    /// Writes and fsyncs everything appended, then stops the writer thread.
    ~Recorder();

    /// Journals one event (record, loss or reset; divergence and stall events are ignored and
    /// return success). Never blocks, never allocates. Errors: Errc::back_pressured (buffer full:
    /// retry later; nothing was taken), Errc::invalid_argument (out of order: a record's or
    /// loss's sequence is not next_sequence(), a reset goes backwards (the stream needs a new
    /// journal), or `record` is another stream's), Errc::message_too_large (more than half the
    /// buffer, or 16 MiB), Errc::closed (the writer hit an I/O error).
    /// `record`: the whole record of a record event as received (StreamSubscriber::last_record())
    /// is journaled as is; without it the header is made again (the checksum recomputed).
    Result<void> append(const StreamEvent& event, std::span<const std::byte> record = {}) noexcept;
    /// The next sequence the journal expects (0 for an empty journal, unless a first append
    /// sets it: an empty journal accepts any first sequence).
    [[nodiscard]] std::uint64_t next_sequence() const noexcept;
    /// One past the last entry the writer has written to the file (any thread).
    [[nodiscard]] std::uint64_t written_sequence() const noexcept;
    /// Blocks until everything appended so far is written and fdatasync()ed. Errors: the
    /// writer's I/O error (write_error() has its detail).
    Result<void> flush();
    /// Why the writer thread stopped (once append() returns Errc::closed): the OS code and what
    /// it was doing, with the path, e.g. a segment's name already taken (EEXIST) by a file or
    /// a link the recorder does not overwrite. An empty Error while the writer runs. Any thread.
    [[nodiscard]] Error write_error() const;
    [[nodiscard]] RecorderCounters counters() const noexcept;
    [[nodiscard]] const std::string& directory() const noexcept;

    struct Impl;

private:
    explicit Recorder(std::unique_ptr<Impl> impl) noexcept;
    std::unique_ptr<Impl> impl_;
};

/// One journal entry as read back.
struct JournalEntry {
    StreamEventKind kind = StreamEventKind::record;
    std::uint32_t epoch = 0;
    std::uint64_t sequence = 0;
    std::uint64_t count = 0;            ///< loss: records lost; record: 1; reset: 0
    std::span<const std::byte> record;  ///< record: the whole record (header + payload)
    /// The payload of a record (after the 28-byte header).
    [[nodiscard]] std::span<const std::byte> payload() const noexcept {
        return record.size() >= RecordHeader::kBytes ? record.subspan(RecordHeader::kBytes)
                                                     : std::span<const std::byte>{};
    }
};

/// Reads a journal from a sequence, following its end as the recorder writes (next() returns
/// false at the current end; call it again later). Any thread, one at a time; the journal may
/// be written meanwhile by a Recorder in this or another process.
class JournalReader {
public:
    /// Positions at `from` (via the segments' sparse indexes; an index entry is used only when
    /// the frame it points at is in the segment and has its sequence, else the segment is
    /// scanned). Files are opened O_NOFOLLOW. Errors: std::errc::no_such_file_or_directory (no
    /// journal), Errc::invalid_argument (`from` is past the journal's end or before its first
    /// entry), OS errors (ELOOP: a symbolic link where a segment or the directory should be).
    static Result<JournalReader, Error> open(const std::string& directory, std::uint64_t from);
    JournalReader(JournalReader&& other) noexcept;
    JournalReader& operator=(JournalReader&& other) noexcept;
    JournalReader(const JournalReader&) = delete;
    JournalReader& operator=(const JournalReader&) = delete;
    ~JournalReader();

    /// The next entry (a loss covering `from` is clipped to start at it). The record span
    /// stays valid until the next call. false: nothing more written yet (a torn or corrupt
    /// tail at the end of the last segment reads as that: the recorder cuts it when it
    /// reopens). Its buffer is at most 1 MiB, or the largest entry the file holds whole: a
    /// length read from the file sizes nothing before its bytes are there. Errors:
    /// Errc::malformed_packet (a corrupt or out-of-order entry inside the journal, not at its
    /// end), OS errors.
    Result<bool> next(JournalEntry& out) noexcept;
    /// The sequence the next entry starts at.
    [[nodiscard]] std::uint64_t position() const noexcept;
    /// One past the last complete entry on disk now (scans the last segment's tail).
    [[nodiscard]] std::uint64_t end_sequence() const;
    /// The first sequence the journal holds.
    [[nodiscard]] std::uint64_t first_sequence() const noexcept;

    struct Impl;

private:
    explicit JournalReader(std::unique_ptr<Impl> impl) noexcept;
    std::unique_ptr<Impl> impl_;
};

}  // namespace prizma
