// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <prizma/context.hpp>
#include <prizma/error.hpp>
#include <prizma/result.hpp>
#include <prizma/types.hpp>

/// Lossless streams over pub/sub (docs/STREAMS.md): records with a gap-free 64-bit application
/// sequence, written by one or more StreamPublishers (a hot-standby pair writes the same
/// records) and read by a StreamSubscriber that merges every copy it hears, on any number of
/// channels and transports, and delivers each sequence number exactly once, in order.
namespace prizma {

namespace detail {
struct StreamSubscriberTesting;  // lib/streams/stream_testing.hpp: a clock for tests
}  // namespace detail

/// The record header every stream record starts with (28 bytes, big-endian; docs/STREAMS.md).
/// Version 2: the checksum is XXH3-64. Records of version 1 (prizma before XXH3) are not read:
/// a StreamSubscriber counts them (`StreamCounters::other_version`) and drops them.
struct RecordHeader {
    static constexpr std::size_t kBytes = 28;
    static constexpr std::uint8_t kVersion = 2;
    static constexpr std::size_t kChecksumOffset = 20;  ///< bytes 20-27; 0-19 are the fields
    std::uint32_t stream_id = 0;
    std::uint32_t epoch = 0;
    std::uint64_t sequence = 0;
    std::uint64_t checksum = 0;  ///< of every other header byte and the payload

    /// Writes the header for `payload` into out[0, kBytes).
    static void write(std::span<std::byte> out,
                      std::uint32_t stream_id,
                      std::uint32_t epoch,
                      std::uint64_t sequence,
                      std::span<const std::byte> payload) noexcept;
    /// Reads a record's header; false when the record is shorter than a header, of another
    /// version, or its reserved bytes are not zero. Does not check the checksum.
    static bool read(std::span<const std::byte> record, RecordHeader& out) noexcept;
    /// The checksum of a record's header (bytes 0-19, as write() lays them out) and payload:
    /// XXH3-64 of the payload, seeded with XXH3-64 of those 20 bytes.
    static std::uint64_t checksum_of(std::uint32_t stream_id,
                                     std::uint32_t epoch,
                                     std::uint64_t sequence,
                                     std::span<const std::byte> payload) noexcept;
};

/// Writes a stream's records on one Publisher. Deterministic: two StreamPublishers given the
/// same stream id, epoch, first sequence and payloads write the same bytes (a hot-standby pair).
/// A restarted publisher keeps its epoch and resumes its sequence from its own state; a new
/// epoch is a deliberate reset that subscribers see as one. Owner thread only.
class StreamPublisher {
public:
    /// Errors: the publisher's messages cannot hold a header and one byte.
    static Result<StreamPublisher, Error> create(Publisher& publisher,
                                                 std::uint32_t stream_id,
                                                 std::uint32_t epoch,
                                                 std::uint64_t next_sequence = 0);
    /// Writes the next record; returns its sequence number. Errors as Publisher::offer
    /// (is_transient(): back-pressure, rate limit: retry the same payload).
    Result<std::uint64_t> offer(std::span<const std::byte> payload) noexcept;
    [[nodiscard]] std::uint64_t next_sequence() const noexcept { return next_; }
    [[nodiscard]] std::uint32_t epoch() const noexcept { return epoch_; }
    [[nodiscard]] std::size_t max_payload() const noexcept {
        return scratch_.size() - RecordHeader::kBytes;
    }

private:
    StreamPublisher(Publisher& p, std::uint32_t id, std::uint32_t epoch, std::uint64_t next);
    Publisher* pub_;
    std::uint32_t stream_id_;
    std::uint32_t epoch_;
    std::uint64_t next_;
    std::vector<std::byte> scratch_;
};

enum class StreamEventKind : std::uint8_t {
    record,  ///< the next record: `sequence`, `payload`
    loss,    ///< records [sequence, sequence + count) will never be delivered
    reset,   ///< a new epoch began at `sequence`; older epochs' records are dropped
    /// A copy of `sequence` differs from the one delivered (checksums differ): `source` sent
    /// it, `payload` is it (last_record() the whole record). With Arbitration::quorum, a copy
    /// the others outvoted.
    divergence,
    /// Nothing came after the last record delivered (`sequence` - 1) for gap_timeout, and PGM
    /// reported a loss right after it on every copy that could bring more: records from
    /// `sequence` on may be lost, how many is unknown (none may follow: the publishers may
    /// have stopped). Informational: the position does not move; a later record or loss
    /// event resolves it. An application with a recording asks it from `sequence`. Once per
    /// position.
    stall,
    /// Arbitration::quorum only: the copies of `sequence` disagree and none has the quorum
    /// (`count`: how many different copies). Nothing from `sequence` on is delivered until
    /// resolve() picks one of disputed(), or a copy still coming completes a quorum. Once per
    /// position.
    dispute,
};

struct StreamEvent {
    StreamEventKind kind = StreamEventKind::record;
    std::uint32_t epoch = 0;
    std::uint64_t sequence = 0;
    /// loss: how many records; record (Arbitration::quorum): how many publishers sent this
    /// very copy; dispute: how many different copies there are
    std::uint64_t count = 0;
    std::span<const std::byte> payload;  ///< record: valid until the next call
    Tsi source{};                        ///< record, divergence: the copy it came from
};

/// How a StreamSubscriber picks among the copies of a record (docs/STREAMS.md, "Arbitration").
enum class Arbitration : std::uint8_t {
    /// Each record from the first copy that brings it: the lowest latency. A later copy that
    /// differs is reported (a divergence event), after the first was delivered.
    first,
    /// A record is delivered once `quorum` publishers sent the same copy (equal checksums):
    /// 2 with a hot-standby pair (both must agree), 2 of 3 for a majority. A copy the others
    /// outvote is a divergence event after the record; copies that disagree with no quorum
    /// stop the stream there (a dispute event) until resolve(). It waits for the slower
    /// publisher's copy, at most quorum_timeout; a publisher that left is not waited for.
    quorum,
};

/// One of the disputed copies of a record (StreamSubscriber::disputed()).
struct DisputedCopy {
    Tsi source{};                ///< the first publisher that sent it
    std::uint64_t checksum = 0;  ///< its RecordHeader checksum
    std::uint64_t votes = 0;     ///< how many publishers sent it
    /// Header + payload, valid until resolve() or next(); empty when the copy came while the
    /// buffer was full (its vote was kept, not its bytes: resolve() cannot pick it).
    std::span<const std::byte> record;
};

struct StreamOptions {
    std::uint32_t stream_id = 0;
    /// Records held while an earlier one is missing (bounded; beyond it the gap is declared
    /// lost so that the stream moves on).
    std::size_t buffer_records = 4096;
    /// A gap no copy fills within this long is reported lost (the copies that could still
    /// fill it are waited for at most this long; PGM repair happens within it).
    std::chrono::nanoseconds gap_timeout = std::chrono::milliseconds(500);
    /// Start at this sequence (0 for the stream's beginning); unset: the first record heard.
    std::optional<std::uint64_t> start_sequence;
    /// Delivered records whose checksums are kept to compare later copies (divergence),
    /// rounded up to a power of two.
    std::size_t history = 65536;
    Arbitration arbitration = Arbitration::first;
    /// Arbitration::quorum: publishers that must send the same copy (at least 1). When fewer
    /// publishers are heard and still there, all of them must.
    std::size_t quorum = 2;
    /// Arbitration::quorum: how long a record waits for the copies that could complete its
    /// quorum, from its first copy. A record that no copy contradicts is then delivered with
    /// the agreement it has (counted `unconfirmed`): a failed publisher must not stop the
    /// stream; a publisher that sent nothing for this long is then not waited for until it
    /// sends again. Copies that disagree are then a dispute.
    std::chrono::nanoseconds quorum_timeout = std::chrono::milliseconds(100);
    /// Arbitration::quorum: when quorum_timeout passes with fewer agreeing copies than the
    /// quorum needs, a loss event for that record instead of the copy it has (counted
    /// `quorum_losses`), for a subscriber that can read the settled copy elsewhere (an
    /// archive): a copy delayed past the timeout (a repair in a NAK storm) then never lets an
    /// unconfirmed copy through. Silent publishers are still not waited for again.
    bool quorum_timeout_loss = false;
};

struct StreamCounters {
    std::uint64_t records = 0;      ///< delivered
    std::uint64_t duplicates = 0;   ///< copies of records already delivered
    std::uint64_t divergences = 0;  ///< duplicates whose checksum differs
    std::uint64_t buffered = 0;     ///< records held for a gap (total)
    std::uint64_t loss_events = 0;
    std::uint64_t lost_records = 0;
    std::uint64_t resets = 0;        ///< new epochs
    std::uint64_t stale_epoch = 0;   ///< records of an older epoch, dropped
    std::uint64_t bad_checksum = 0;  ///< records whose checksum does not verify, dropped
    std::uint64_t foreign = 0;       ///< another stream's records, or not records at all
    std::uint64_t overflows = 0;     ///< gaps declared lost because the buffer was full
    std::uint64_t stalls = 0;        ///< stall events (a loss with nothing after it)
    /// Records of another RecordHeader version (a prizma of another record format), dropped.
    std::uint64_t other_version = 0;
    /// Arbitration::quorum: records delivered with fewer agreeing publishers than `quorum`
    /// (the others silent past quorum_timeout).
    std::uint64_t unconfirmed = 0;
    /// Arbitration::quorum with quorum_timeout_loss: records reported lost (in loss_events,
    /// lost_records) because their quorum did not come in time.
    std::uint64_t quorum_losses = 0;
    std::uint64_t disputes = 0;  ///< dispute events
    /// Records further ahead of the next sequence than the buffer reaches (buffer_records + 1;
    /// quorum: 16 x buffer_records - 1), and (quorum) records of a newer epoch past the
    /// buffer_records waiting for its quorum: dropped. Such a record never decides a loss by
    /// itself: only once every copy still there is that far ahead (docs/STREAMS.md, "Trust").
    std::uint64_t too_far = 0;
    /// Arbitration::quorum: records of a newer epoch held until the quorum's publishers sent
    /// that epoch (the reset), total.
    std::uint64_t epoch_pending = 0;
    /// Arbitration::quorum: votes not counted because a record already had 16 publishers'
    /// votes, or counted and then replaced by a publisher of more standing (records delivered
    /// with its vote on the winning copy).
    std::uint64_t votes_refused = 0;
    std::uint64_t resolved = 0;  ///< disputes settled by resolve()
};

/// Merges every copy of one stream heard on its subscribers: each sequence number once, in
/// order, from whichever copy comes first (or, with Arbitration::quorum, the copy enough
/// publishers agree on). A later record waits in a bounded buffer while the
/// gap is repaired (PGM repair on every copy); once no copy can fill it (each has passed it, or
/// gap_timeout), a loss event names the range. Owner thread of the subscribers' Context only.
class StreamSubscriber {
public:
    static Result<StreamSubscriber, Error> create(const StreamOptions& options);
    StreamSubscriber(StreamSubscriber&& other) noexcept;
    StreamSubscriber& operator=(StreamSubscriber&& other) noexcept;
    StreamSubscriber(const StreamSubscriber&) = delete;
    StreamSubscriber& operator=(const StreamSubscriber&) = delete;
    ~StreamSubscriber();

    /// A channel carrying copies of the stream (any transport; several publishers on it are
    /// several copies). The subscriber must outlive this object or be removed first.
    Result<void, Error> add(Subscriber& subscriber);
    /// Stops reading `subscriber`.
    void remove(Subscriber& subscriber) noexcept;

    /// The next event, if any; reads the subscribers as needed (Context::poll() still moves the
    /// network). The payload stays valid until the next call.
    bool next(StreamEvent& out) noexcept;
    template <typename Handler>
    std::size_t poll(std::size_t limit, Handler&& handler) {
        std::size_t n = 0;
        StreamEvent e;
        while (n < limit && next(e)) {
            ++n;
            handler(static_cast<const StreamEvent&>(e));
        }
        return n;
    }
    /// The next sequence number to deliver (unset until the first record, without a start).
    [[nodiscard]] std::optional<std::uint64_t> next_sequence() const noexcept;
    [[nodiscard]] const StreamCounters& counters() const noexcept;
    /// The whole record (header + payload, as received and verified) of the last record event
    /// next() returned; valid as that event's payload. A Recorder journals it as is.
    [[nodiscard]] std::span<const std::byte> last_record() const noexcept;

    /// After a dispute event: the different copies of that record, the first heard first
    /// (empty when there is no dispute now).
    [[nodiscard]] std::span<const DisputedCopy> disputed() const noexcept;
    /// Settles the dispute at `sequence` with the copy whose checksum is `checksum`: it is
    /// delivered next, and every other copy is a divergence event. Errors (invalid_argument):
    /// no dispute at `sequence`, or no copy with that checksum and its bytes.
    Result<void, Error> resolve(std::uint64_t sequence, std::uint64_t checksum);

private:
    friend struct detail::StreamSubscriberTesting;
    struct Impl;
    explicit StreamSubscriber(std::unique_ptr<Impl> impl) noexcept;
    std::unique_ptr<Impl> impl_;
};

}  // namespace prizma
