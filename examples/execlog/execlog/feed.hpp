// SPDX-License-Identifier: Apache-2.0
// What every ExecLog consumer shares: the stream as a gap-free sequence of records from the
// application's own position on (live, arbitrated over both cores; from the archiver when it
// is behind), atomic state files.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <prizma/prizma.hpp>

namespace execlog {

/// `uri` without the flow-control keys (a core listening to its own channel must not count
/// as a flow-control receiver).
std::string strip_flow_keys(std::string_view uri);

/// Writes `content` to `path` atomically and durably: a temporary file of its own beside it
/// (`path.tmp.XXXXXX`, created exclusively, mode 0600), fdatasync, rename over `path`, fsync
/// of the directory. Every step is checked; on failure the temporary file is removed and
/// `path` keeps its previous content. Returns an error text, empty on success.
std::string write_file_atomically(const std::string& path, std::string_view content);

/// The wall clock (ns since the Unix epoch) latency anchors are in: a core's --anchor-file
/// holds the time its input 0 is due on it, so processes on one host share its schedule.
std::int64_t unix_now_ns() noexcept;
/// The anchor in a core's --anchor-file; nullopt while it is missing or holds none.
std::optional<std::int64_t> read_anchor_file(const std::string& path);

/// fsyncs the directory holding `path` (so that a file created or renamed there survives a
/// crash). Returns an error text, empty on success.
std::string sync_directory_of(const std::string& path);

/// Checkpoints a state file (write_file_atomically) on a thread of its own, so its fdatasync
/// (milliseconds when the disk is busy) never blocks the event loop. submit() replaces a
/// write not started yet: the file always holds one complete checkpoint, at most one period
/// older than the last submitted. finish() writes the final state and joins the thread.
class Checkpointer {
public:
    explicit Checkpointer(std::string path);
    Checkpointer(const Checkpointer&) = delete;
    Checkpointer& operator=(const Checkpointer&) = delete;
    Checkpointer(Checkpointer&&) = delete;
    Checkpointer& operator=(Checkpointer&&) = delete;
    ~Checkpointer();
    void submit(std::string content);
    /// As submit(content), with the content made on the checkpoint thread.
    void submit(std::function<std::string()> make);
    /// The first write error, empty if none.
    std::string error();
    /// Writes `content` now (after any write in progress); returns an error text or empty.
    std::string finish(std::string_view content);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// "HOST:PORT" (HOST an IPv4 literal); nullopt when malformed.
std::optional<std::pair<std::string, std::uint16_t>> parse_host_port(std::string_view text);

/// A core's GSI from its name (1 to 6 letters, digits, '-' or '_', e.g. core-a): the name's
/// bytes, then NULs, so that every consumer can name the core a copy came from. nullopt for
/// another name.
std::optional<prizma::Gsi> core_gsi(std::string_view name);

/// TSI as "NAME.port" for a named core (core_gsi), else "gsi-hex.port".
std::string tsi_text(const prizma::Tsi& tsi);

struct FeedOptions {
    std::string uri;
    std::uint32_t stream_id = 21;
    std::string replay_host;  ///< the archiver's replay service; empty: none
    std::uint16_t replay_port = 0;
    prizma::ReplaySecurity replay_security;  ///< how the replay service is reached
    std::uint32_t window = 65536;            ///< receive window, packets
    bool passive = false;                    ///< never NAK (the monitor)
    std::string name;                        ///< for messages
    /// How long a live gap may wait for PGM repair before the archiver is asked (or, with no
    /// archiver to ask, before it counts as lost); 0: 500 ms with an archiver, else as long as
    /// PGM keeps asking (nak_retries). The archiver itself waits longer.
    std::chrono::milliseconds gap_timeout{0};
    /// Records held behind a gap; beyond it the gap counts as lost. The archiver holds more:
    /// while PGM recovers its gap from one core, the other core's copies keep coming.
    std::size_t buffer_records = 4096;
    /// PGM history recovered by a fresh subscriber (0: the whole window).
    std::uint32_t max_recover = 0;
    /// NAKs (and NCFs) without a repair before PGM gives a packet up. The lan preset's 20
    /// (~0.2 s) is short on a busy host whose processes wait for a CPU: an ExecLog consumer
    /// would rather wait than lose, so 255 (~2.6 s: 10 ms apart, after a 2 ms back-off).
    std::uint32_t nak_retries = 255;
    /// Live silent this long (nothing delivered) with an archiver configured: ask it whether
    /// the stream went on. A consumer that fell behind can lose the live tail in its socket
    /// buffer with nothing after it to show the loss (the cores have stopped): without this it
    /// would wait for ever. 0: never.
    std::chrono::milliseconds silence_probe{1000};
    /// How the cores' copies are arbitrated (prizma::StreamOptions): `first` (the default)
    /// takes the first copy, lowest latency, a divergence reported afterwards. `quorum`
    /// delivers a record once `quorum` cores sent the same copy, so a divergent copy is never
    /// applied; copies that disagree with no quorum are a dispute, settled by the archive (a
    /// consumer with an archiver reads the operator's choice from it; the archiver asks the
    /// operator).
    prizma::Arbitration arbitration = prizma::Arbitration::first;
    std::size_t quorum = 2;
    std::chrono::milliseconds quorum_timeout{1000};
};

struct FeedCounters {
    std::uint64_t delivered = 0;   ///< records handed to the application
    std::uint64_t skipped = 0;     ///< records at or below the application's position, dropped
    std::uint64_t late_joins = 0;  ///< times the feed went to the archiver
    std::uint64_t replayed = 0;    ///< records that came from the archiver
    std::uint64_t late_join_failures = 0;
    std::uint64_t live_gaps = 0;       ///< live gaps the archiver filled
    std::uint64_t silence_probes = 0;  ///< late joins because live went silent
    std::uint64_t disputes = 0;        ///< records whose copies disagreed: the archive decided
    /// The last late join: records replayed until it merged into live, and how long it took.
    std::uint64_t catchup_records = 0;
    std::int64_t catchup_ns = 0;
};

/// The stream from `next` on: each record once, in order. Live gaps that PGM cannot repair
/// (a consumer stopped or restarted, started mid-day) are filled from the archiver with a
/// LateJoin; a loss event reaches the application only when the records are lost for good
/// (no archiver configured, or the archive itself records the loss).
class Feed {
public:
    static prizma::Result<std::unique_ptr<Feed>, prizma::Error> open(prizma::Context& ctx,
                                                                     const FeedOptions& options,
                                                                     std::uint64_t next);
    ~Feed();
    Feed(const Feed&) = delete;
    Feed& operator=(const Feed&) = delete;
    Feed(Feed&&) = delete;
    Feed& operator=(Feed&&) = delete;

    /// The next event (record, loss, reset, divergence); payload valid until the next call.
    bool next(prizma::StreamEvent& out);
    /// The next sequence the application gets.
    [[nodiscard]] std::uint64_t next_sequence() const noexcept { return next_; }
    /// Reading the archiver (not merged into live yet): do not sleep long between polls.
    [[nodiscard]] bool catching_up() const noexcept;
    [[nodiscard]] const FeedCounters& counters() const noexcept { return counters_; }
    /// The live arbitration's counters (duplicates, divergences, stale epochs, ...); those of
    /// the late join's own live reader are not visible through LateJoin.
    [[nodiscard]] prizma::StreamCounters stream_counters() const noexcept;
    [[nodiscard]] prizma::Subscriber& subscriber() noexcept { return sub_; }
    /// The whole record (header + payload) of the last record event, as received, when read
    /// live; empty when it came through the archiver (then a journal remakes the header).
    [[nodiscard]] std::span<const std::byte> last_record() const noexcept {
        return live_ ? live_->last_record() : std::span<const std::byte>{};
    }
    /// After a dispute event (no archiver to ask): the different copies of the record.
    [[nodiscard]] std::span<const prizma::DisputedCopy> disputed() const noexcept {
        return live_ ? live_->disputed() : std::span<const prizma::DisputedCopy>{};
    }
    /// Held at a dispute (its copies in disputed()) until it is settled.
    [[nodiscard]] bool halted() const noexcept { return !disputed().empty(); }
    /// Settles the dispute with the copy whose checksum is `checksum`.
    prizma::Result<void, prizma::Error> resolve(std::uint64_t sequence, std::uint64_t checksum);

private:
    Feed(prizma::Context& ctx, FeedOptions options, prizma::Subscriber sub, std::uint64_t next);
    bool start_live();
    bool start_late(const char* why);
    /// false: the event is behind the application's position (dropped).
    bool accept(prizma::StreamEvent& e) noexcept;
    [[nodiscard]] bool is_gap(const prizma::StreamEvent& e) const noexcept;
    void note_dispute(const prizma::StreamEvent& e);
    bool next_late(prizma::StreamEvent& out);
    bool next_live(prizma::StreamEvent& out);

    prizma::Context* ctx_;
    FeedOptions opt_;
    prizma::Subscriber sub_;
    std::uint64_t next_;
    std::optional<prizma::StreamSubscriber> live_;
    std::optional<prizma::LateJoin> late_;
    prizma::StreamCounters live_counters_{};  // of live readers replaced so far
    std::int64_t retry_late_at_ns_ = 0;
    std::int64_t heard_ns_ = 0;  // when the last event was delivered (or a reader started)
    std::int64_t late_started_ns_ = 0;
    std::uint64_t late_replayed_ = 0;
    std::uint64_t dispute_said_ = UINT64_MAX;  // the dispute last reported
    FeedCounters counters_;
};

/// ChannelOptions of a consumer's subscriber: a hot-standby pair's two sources preallocated,
/// history recovered back to the source's trail (a restarted consumer misses nothing PGM still
/// holds).
prizma::ChannelOptions consumer_channel_options(std::uint32_t window, bool passive);

}  // namespace execlog
