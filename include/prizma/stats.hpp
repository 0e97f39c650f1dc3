// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <prizma/error.hpp>
#include <prizma/result.hpp>

/// Reading the counters of other processes. Every Context keeps its channels' counters in a
/// shared-memory stats file (Context::stats_file(): `<pid>-<n>.stats` in default_dir(), updated
/// ten times a second, removed with the Context; PRIZMA_STATS=0 turns it off). These calls read
/// such files from any process, as prizma-stat does: a monitor lists a directory's files and
/// reads each one.
/// @code
///   for (const auto& path : prizma::stats::list_files(prizma::stats::default_dir()).value()) {
///       if (auto s = prizma::stats::read(path)) {
///           for (const auto& ch : s->channels) show(s->pid, ch.uri, ch.counters);
///       }
///   }
/// @endcode
namespace prizma::stats {

/// One consistent copy of a stats file.
struct Snapshot {
    std::uint64_t pid = 0;                 ///< the process that writes the file
    std::int64_t updated_unix_ns = 0;      ///< wall clock (system_clock) of its last update
    std::uint64_t updates = 0;             ///< how many updates it has made
    std::uint32_t channels_not_shown = 0;  ///< channels beyond the file's capacity (64)
    struct Channel {
        /// As given to add_publisher/add_subscriber (or the custom channel's name), cut at 191
        /// bytes.
        std::string uri;
        bool publisher = false;  ///< false: a subscriber
        /// Every ChannelCounters field by name (kChannelCounterFields order), then the
        /// transport's own counters (verbs: rx_ring_low, ...).
        std::vector<std::pair<std::string, std::uint64_t>> counters;
        /// A subscriber's sources (at most 8).
        struct Source {
            std::string tsi;  ///< GSI in hex "." source port, e.g. "deadbeef0001.4321"
            /// odata_received, rdata_received, duplicates, repaired, ncf_received, naks_sent,
            /// nak_sqns_sent, loss_events, lost_sqns, messages_delivered.
            std::vector<std::pair<std::string, std::uint64_t>> counters;
        };
        std::vector<Source> sources;
        std::uint32_t sources_not_shown = 0;  ///< live sources beyond those in `sources`
    };
    std::vector<Channel> channels;
};

/// Reads the stats file at `path`. Errors (the detail starts with the path): the OS error
/// when it cannot be opened or mapped; Errc::invalid_argument when it is not a prizma stats
/// file (size, magic or version); Errc::back_pressured when the writer kept it mid-update
/// for too long to get a consistent copy (transient: try again).
Result<Snapshot, Error> read(const std::string& path);

/// The directory stats files are written to: $PRIZMA_STATS_DIR, or /dev/shm/prizma.
std::string default_dir();

/// The stats files (`*.stats`) in `dir`, as paths (`dir/name`), sorted by name. Files of
/// processes that have exited are listed too (Snapshot::pid tells whose a file is). Errors:
/// std::errc::no_such_file_or_directory when `dir` does not exist (no process has written
/// stats there), std::errc::not_a_directory, or the OS error of reading it.
Result<std::vector<std::string>, Error> list_files(const std::string& dir);

}  // namespace prizma::stats
