// SPDX-License-Identifier: Apache-2.0
#pragma once
// The journal's files as the recorder and the journal reader both use them: whole reads and
// writes, the format check, the scan of a segment's valid prefix, the sparse index and its
// lookup, opening a file of this user's only (docs/STREAMS.md, "Recording and late join").
#include <fcntl.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <prizma/error.hpp>
#include <prizma/result.hpp>

#include "lib/posix/unique_fd.hpp"
#include "lib/streams/recorder_format.hpp"

namespace prizma::journal {

inline constexpr std::size_t kReadChunk = std::size_t{1}
                                          << 20U;  // readers' buffer (more: one frame)
inline constexpr std::size_t kFirstChunk = std::size_t{64} << 10U;  // ... to start with
inline constexpr std::size_t kIndexEntry = 16;                      // be64 key, be64 offset
// Never through a symbolic link, never inherited, never blocking on a FIFO planted by a name.
inline constexpr int kReadFlags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;

/// An error with std::errc::permission_denied: "<what> refused: <why>".
Error refused(const std::string& what, const std::string& why);

/// Writes all `n` bytes (retrying on EINTR); false on an error (errno).
bool write_all(int fd, const std::byte* p, std::size_t n) noexcept;

/// Reads up to `n` bytes at `off`: fewer only at the end of the file. -1: an error (errno).
ssize_t pread_full(int fd, std::byte* p, std::size_t n, std::uint64_t off) noexcept;

/// Refuses a segment (open as `fd`) whose first frame header is of another format than ours,
/// by name: a journal of an older prizma is neither read as corrupt nor cut by a recovery.
Result<void, Error> check_format(int fd, const std::string& path);

/// Whether `f` may follow journal position `pos`: a record or loss at it (neither wrapping
/// past 2^64 - 1), a reset at or after it. Replay's end and error frames are no journal entries.
bool in_order(const Frame& f, std::uint64_t pos) noexcept;

struct IndexEntry {
    std::uint64_t key = 0;     // a sequence (or the journal position before a reset)
    std::uint64_t offset = 0;  // of its frame in the segment
};

/// The valid prefix of a segment: where it ends (a file offset) and the sequence after it.
struct Scan {
    std::uint64_t valid = 0;
    std::uint64_t end = 0;
};

/// Scans the segment open as `fd` (`size` bytes) from `offset`, the journal at `seq` there: the
/// frames that verify, in order. Reads a chunk at a time; more only for a frame whose length
/// verified (at most kMaxBody) and whose bytes are all in the file. With `idx`, counts in
/// `matched` how many of its first entries are exactly the scanned frames' (offset, key).
Result<Scan> scan_file(int fd,
                       std::uint64_t size,
                       std::uint64_t offset,
                       std::uint64_t seq,
                       const std::vector<IndexEntry>* idx = nullptr,
                       std::size_t* matched = nullptr);

/// Whether the scan of a segment (`size` bytes) that stopped at `at` stopped inside it rather
/// than at a torn tail: the frame there has a header that looks whole (its length at most
/// kMaxBody, its format bytes right), all its bytes are in the file and more follow. As
/// JournalReader reads it: corruption inside is an error there, a torn tail the end. Only a
/// torn tail may be cut. Errors: the read's.
Result<bool> stopped_inside(int fd, std::uint64_t size, std::uint64_t at) noexcept;

/// The entries of the index open as `fd`: at most `max` (a segment of n bytes has at most
/// n / kFrameHeader + 1 frames), so never more than the file and its segment can hold.
Result<std::vector<IndexEntry>> read_index(int fd, std::uint64_t max);

/// Whether index entry `e` holds for the segment open as `fd` (its first `size` bytes): a frame
/// whose header verifies starts at its offset, and is the record or loss of its key (a reset's
/// entry, keyed by the position before it, cannot be checked so: it never holds). Reads the
/// header and at most 28 body bytes; allocates nothing.
bool entry_holds(int fd, std::uint64_t size, const IndexEntry& e) noexcept;

/// A place in a segment: a file offset, and the journal position there.
struct Place {
    std::uint64_t offset = 0;
    std::uint64_t seq = 0;
};

/// Where to read the segment `name` (open as `fd`, `size` bytes) from for sequence `from`: the
/// last index entry at or before it that holds (entry_holds: a record or loss of its key at
/// its offset), else the segment's start. Entries out of order end the lookup.
Place locate(int fd,
             std::uint64_t size,
             const std::vector<IndexEntry>& idx,
             std::uint64_t name,
             std::uint64_t from) noexcept;

/// The index of segment `name` (`size` bytes) in the directory open as `dir_fd`, as far as it
/// can be read; empty without one (the segment is then scanned from its start).
std::vector<IndexEntry> segment_index(int dir_fd, std::uint64_t name, std::uint64_t size);

/// Opens `name` in the directory open as `dir_fd` with `flags` (O_NOFOLLOW, O_CLOEXEC added):
/// a regular file of this user only. `path` names it in errors.
Result<posix::UniqueFd, Error> open_own_file(
    int dir_fd, const FileName& name, int flags, std::uint32_t mode, const std::string& path);

}  // namespace prizma::journal
