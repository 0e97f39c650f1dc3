// SPDX-License-Identifier: Apache-2.0
// A Context's counters in a shared-memory file that prizma-stat reads from outside, like
// AeronStat's CnC file. Fixed layout, sized at open: updating it never allocates or locks.
// This header is the writer side and the layout; the reader (read, list_files, default_dir
// and Snapshot) is public: <prizma/stats.hpp>.
// Consistency: a sequence lock in the header (odd while the owner thread writes; readers copy,
// then retry if the sequence moved).
//
// File: $PRIZMA_STATS_DIR (default /dev/shm/prizma-<uid>)/<pid>-<n>.stats; removed when the
// Context is destroyed. PRIZMA_STATS=0 turns it off.
//
// A shared host: another local user may have planted things in /dev/shm. The directory is
// ours alone (made 0700; refused unless it is a real directory owned by us and writable by
// nobody else), and the file is always a new one (O_EXCL|O_NOFOLLOW: never a symlink, never
// a file somebody else made). Nobody but us (and root) can then open the file for writing,
// so nobody can truncate it under our shared mapping (which would kill us with SIGBUS).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <prizma/counters.hpp>
#include <prizma/stats.hpp>

#include "lib/posix/unique_fd.hpp"
#include "lib/protocol/receiver.hpp"

namespace prizma::stats {

inline constexpr char kMagic[8] = {'P', 'R', 'Z', 'S', 'T', 'A', 'T', '1'};
inline constexpr std::uint32_t kVersion = 4;  // 4: ChannelRecord::transport
inline constexpr std::size_t kMaxChannels = 64;
inline constexpr std::size_t kMaxCounters = 96;
inline constexpr std::size_t kNameLen = 32;
inline constexpr std::size_t kUriLen = 192;
inline constexpr std::size_t kTransportLen = 320;  ///< Transport::description(), cut
inline constexpr std::size_t kMaxSources = 8;      ///< per subscriber channel
/// Per-source counters, in SourceRecord::values order.
inline constexpr std::string_view kSourceCounterNames[] = {
    "odata_received", "rdata_received", "duplicates",  "repaired",  "ncf_received",
    "naks_sent",      "nak_sqns_sent",  "loss_events", "lost_sqns", "messages_delivered",
    "parity_dropped", "fec_group_size", "fec_modes"};
inline constexpr std::size_t kSourceCounters = std::size(kSourceCounterNames);
/// A publisher channel's records are its flow-control receivers instead: these values.
inline constexpr std::string_view kReceiverFieldNames[] = {
    "id", "tag", "consumed", "window", "lag", "heard_ms_ago", "counted"};
static_assert(std::size(kReceiverFieldNames) <= kSourceCounters);

struct SourceRecord {
    std::uint8_t gsi[6];
    std::uint16_t sport;
    std::uint64_t values[kSourceCounters];
};

struct FileHeader {
    char magic[8];
    std::uint32_t version;
    std::uint32_t channel_count;  ///< records in use
    std::uint64_t pid;
    std::uint64_t seq;             ///< sequence lock (accessed atomically)
    std::int64_t updated_unix_ns;  ///< wall clock of the last update
    std::uint32_t max_channels;
    std::uint32_t channels_not_shown;  ///< channels beyond max_channels
    std::uint64_t updates;
};

struct ChannelRecord {
    char uri[kUriLen];
    char transport[kTransportLen];
    std::uint32_t role;  ///< 1 publisher, 2 subscriber
    std::uint32_t count;
    char names[kMaxCounters][kNameLen];
    std::uint64_t values[kMaxCounters];
    std::uint32_t source_count;       ///< records in `sources`
    std::uint32_t sources_not_shown;  ///< live sources beyond kMaxSources
    SourceRecord sources[kMaxSources];
};

inline constexpr std::size_t kFileSize = sizeof(FileHeader) + kMaxChannels * sizeof(ChannelRecord);
static_assert(kFileSize % 8 == 0 && sizeof(FileHeader) % 8 == 0, "read copies 8-byte words");

/// ChannelCounters as (name, value) pairs, every field in declaration order. Returns the count
/// written (at most out.size()).
std::size_t flatten(const ChannelCounters& c, std::span<NamedCounter> out) noexcept;

/// The writer side, owned by a Context.
class Writer {
public:
    Writer() = default;
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;
    Writer(Writer&&) = delete;
    Writer& operator=(Writer&&) = delete;
    ~Writer();

    /// Creates the file in `dir` (made if missing); an error (the writer stays disabled) says
    /// why it cannot: a directory that is not ours alone is refused.
    Result<void, Error> open(const std::string& dir);
    [[nodiscard]] bool enabled() const noexcept { return base_ != nullptr; }
    [[nodiscard]] const std::string& path() const noexcept { return path_; }

    /// Registers channel `index` (not on the hot path).
    /// `transport`: what the channel's transport chose (Transport::description()), cut.
    void set_channel(std::size_t index,
                     std::string_view uri,
                     bool publisher,
                     std::string_view transport = {}) noexcept;
    /// How many channels there are now (after one was removed; not on the hot path).
    void set_channel_count(std::size_t count) noexcept;
    /// One update: begin(), values(...) for each channel, end(). No allocation, no syscall.
    /// (A writer that has no file ignores them all.)
    void begin() noexcept;
    void values(std::size_t index, std::span<const NamedCounter> counters) noexcept;
    /// A subscriber channel's sources (`live` = how many it has, shown or not).
    void sources(std::size_t index,
                 std::span<const protocol::PeerCounters> sources,
                 std::size_t live) noexcept;
    /// A publisher channel's flow-control receivers (`next`: its next sequence number).
    void receivers(std::size_t index,
                   std::span<const protocol::FlowReceiver> receivers,
                   const protocol::FlowConfig& flow,
                   Sqn next,
                   std::int64_t now_ns) noexcept;
    void end() noexcept;

private:
    FileHeader* header() const noexcept { return static_cast<FileHeader*>(base_); }
    ChannelRecord* record(std::size_t i) const noexcept;
    void* base_ = nullptr;
    posix::UniqueFd dir_fd_;  ///< the directory checked at open: the file is removed there
    std::string name_;        ///< the file's name in it
    std::string path_;
};

}  // namespace prizma::stats
