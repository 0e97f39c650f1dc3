// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
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
///   for (const auto& dir : prizma::stats::readable_dirs()) {
///       auto files = prizma::stats::list_files(dir);
///       for (const auto& path : files ? *files : std::vector<std::string>{}) {
///           auto s = prizma::stats::read(path);
///           if (s && s->process == prizma::stats::ProcessState::running) {
///               for (const auto& ch : s->channels) show(s->pid, printable(ch.uri), ch.counters);
///           }
///       }
///   }
/// @endcode
/// Each user has a directory of its own (mode 0700: only its owner and root read it), so a
/// monitor sees its own user's processes, and root everyone's. A file's content is whatever
/// its owner wrote: Snapshot's strings are bytes as found (print them through printable()),
/// and its pid is a claim, checked against the file's owner (Snapshot::process).
namespace prizma::stats {

/// What read() found of the process a stats file names (Snapshot::pid).
enum class ProcessState : std::uint8_t {
    running,     ///< the pid runs as the file's owner: the file's writer, live
    exited,      ///< no such process: a stale file (its writer was killed)
    other_user,  ///< the pid runs as another user than the file's owner: not its writer (a
                 ///< pid reused since, or a forged claim); not to be trusted
};

/// One consistent copy of a stats file.
struct Snapshot {
    std::uint64_t pid = 0;                        ///< the process that writes the file (its claim)
    std::uint32_t file_uid = 0;                   ///< the file's owner
    ProcessState process = ProcessState::exited;  ///< `pid`, checked when read
    std::int64_t updated_unix_ns = 0;             ///< wall clock (system_clock) of its last update
    std::uint64_t updates = 0;                    ///< how many updates it has made
    std::uint32_t channels_not_shown = 0;         ///< channels beyond the file's capacity (64)
    struct Channel {
        /// As given to add_publisher/add_subscriber (or the custom channel's name), cut at 191
        /// bytes.
        std::string uri;
        /// What its transport chose (Transport::description()), cut at 319 bytes; may be
        /// empty. Bytes from the file: printable() before showing it.
        std::string transport;
        bool publisher = false;  ///< false: a subscriber
        /// Every ChannelCounters field by name (kChannelCounterFields order), then the
        /// transport's own counters (verbs: rx_ring_low, ...).
        std::vector<std::pair<std::string, std::uint64_t>> counters;
        /// A subscriber's sources (at most 8); on a publisher with flow control, its tracked
        /// receivers (at most 8).
        struct Source {
            /// GSI in hex "." source port, e.g. "deadbeef0001.4321"; "receiver" for a
            /// publisher's flow-control receiver.
            std::string tsi;
            /// A source: odata_received, rdata_received, duplicates, repaired, ncf_received,
            /// naks_sent, nak_sqns_sent, loss_events, lost_sqns, messages_delivered. A
            /// receiver: id, tag, consumed, window, lag, heard_ms_ago, counted (1 or 0).
            std::vector<std::pair<std::string, std::uint64_t>> counters;
        };
        std::vector<Source> sources;
        std::uint32_t sources_not_shown = 0;  ///< live sources beyond those in `sources`
    };
    std::vector<Channel> channels;
};

/// Reads the stats file at `path` by copying it (read(2), no mapping: a file truncated while
/// it is read is an error, not a SIGBUS), then checks its pid against its owner. Errors (the
/// detail starts with the path): the OS error when it cannot be opened or read (a symbolic
/// link is not followed: ELOOP); Errc::invalid_argument when it is not a prizma stats file
/// (not a regular file, size, magic or version) or was truncated while being read;
/// Errc::back_pressured when the writer kept it mid-update for too long to get a consistent
/// copy (transient: try again).
Result<Snapshot, Error> read(const std::string& path);

/// `s` made safe to print on a terminal: every byte outside printable ASCII (0x20-0x7e;
/// escape sequences, control characters, UTF-8) is written as `\xNN`.
std::string printable(std::string_view s);

/// The directory this process writes its stats files to: $PRIZMA_STATS_DIR, or
/// /dev/shm/prizma-<uid> (uid: this process's effective user id).
std::string default_dir();

/// The directories a monitor reads: $PRIZMA_STATS_DIR alone when it is set; otherwise every
/// /dev/shm/prizma-<uid> directory this process may list (its own; root: every user's), its
/// own first. Empty when there is none.
std::vector<std::string> readable_dirs();

/// The stats files (`*.stats`) in `dir`, as paths (`dir/name`), sorted by name. Files of
/// processes that have exited are listed too (Snapshot::pid tells whose a file is). Errors:
/// std::errc::no_such_file_or_directory when `dir` does not exist (no process has written
/// stats there), std::errc::not_a_directory, or the OS error of reading it.
Result<std::vector<std::string>, Error> list_files(const std::string& dir);

}  // namespace prizma::stats
