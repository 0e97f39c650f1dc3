// SPDX-License-Identifier: Apache-2.0
#pragma once
// StreamSubscriber's state (private): shared by stream.cpp (arbitration by the first copy, the
// gap and tail logic, the API) and stream_quorum.cpp (Arbitration::quorum).
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include <prizma/stream.hpp>

namespace prizma {

struct StreamSubscriber::Impl {
    /// One copy of the stream: a source (TSI) on one of the subscribers.
    struct Copy {
        const Subscriber* sub = nullptr;
        Tsi tsi{};
        bool has_high = false;
        std::uint64_t high = 0;     // highest sequence it delivered (this epoch)
        bool loss_pending = false;  // PGM lost something after `high`
        bool gone = false;          // left (FIN, RST, expiry)
        bool absent = false;        // quorum: silent when a record was last waited for
        std::int64_t heard_ns = 0;  // quorum: when it last sent data
        // A record further ahead than the buffer reaches (far_ahead()): its first one is kept
        // (far_bytes) and none decides anything until every copy is that far (far_jump()).
        bool far = false;
        std::uint64_t far_high = 0;        // the latest such record's sequence
        std::vector<std::byte> far_bytes;  // the first such record, whole
        // Quorum: records delivered with its vote on the winning copy (capped): a full ballot
        // lets a publisher of standing replace a vote of none (kMaxVotes).
        std::uint64_t standing = 0;
    };
    /// Quorum: a record of a newer epoch than the stream's, waiting for that epoch's quorum.
    struct Pending {
        std::uint32_t epoch = 0;
        const Subscriber* sub = nullptr;
        Tsi tsi{};
        std::uint64_t seq = 0;
        std::uint64_t sum = 0;
        std::vector<std::byte> bytes;
    };
    struct Held {
        Tsi tsi{};
        std::vector<std::byte> bytes;  // the whole record
    };
    /// Arbitration::quorum: the copies heard of one record not delivered yet. Its vectors keep
    /// their capacity when the node is used again (spare_ballots): no allocation per record
    /// once warm.
    struct Ballot {
        struct Vote {
            Tsi tsi{};
            std::size_t copy = 0;
        };
        std::int64_t first_ns = 0;
        std::size_t n = 0;                           // different copies, in [0, n) below
        std::vector<Vote> votes;                     // one per publisher
        std::vector<std::vector<std::byte>> copies;  // whole records
        std::vector<std::uint64_t> sums;             // their checksums
        std::vector<std::uint64_t> tally;            // their votes
        void clear() noexcept {
            n = 0;
            votes.clear();
            sums.clear();
            tally.clear();
        }
        [[nodiscard]] bool voted(const Tsi& tsi) const noexcept {
            return std::any_of(votes.begin(), votes.end(),
                               [&](const Vote& v) { return v.tsi == tsi; });
        }
        [[nodiscard]] Tsi first_voter(std::size_t copy) const noexcept {
            for (const Vote& v : votes) {
                if (v.copy == copy) {
                    return v.tsi;
                }
            }
            return {};
        }
    };
    using Ballots = std::map<std::uint64_t, Ballot>;
    static constexpr std::size_t kMaxCopies = 64;
    static constexpr std::size_t kMaxVotes = 16;      // publishers per record (others dropped)
    static constexpr std::size_t kSpareBallots = 64;  // nodes kept for reuse
    /// Ballots (quorum) may be kFarFactor x buffer_records; each keeps its first copy's bytes,
    /// and other copies' bytes only within buffer_records of `next` (further ahead a differing
    /// copy is its vote only). So the bytes held are at most (kFarFactor + kMaxVotes - 1) x
    /// buffer_records whole records (stored_records() in tests), plus one per copy far ahead
    /// and buffer_records records of newer epochs (pending).
    static constexpr std::size_t kFarFactor = 16;
    static constexpr std::uint64_t kMaxStanding = 1U << 20U;

    StreamOptions opt;
    std::vector<Subscriber*> subs;
    std::size_t rr = 0;   // the subscriber read last
    std::size_t run = 0;  // messages read from subs[rr] in a row (kRun, then the next one's turn)
    static constexpr std::size_t kRun = 64;
    std::vector<Copy> copies;
    std::size_t last = 0;  // the copy the last message came from
    bool started = false;
    bool has_epoch = false;
    std::uint32_t epoch = 0;
    std::uint64_t next = 0;
    std::map<std::uint64_t, Held> held;  // records after a gap, by sequence
    std::int64_t gap_since = -1;
    // A tail loss (stall): since when every copy is unable to bring `tail_next`, and the
    // position a stall event was given for (once per position).
    std::uint64_t tail_next = UINT64_MAX;
    std::int64_t tail_since = -1;
    std::uint64_t stalled_at = UINT64_MAX;
    std::vector<std::uint64_t> hist_seq;
    std::vector<std::uint64_t> hist_sum;
    std::vector<std::byte> out_bytes;        // the held record being delivered
    std::span<const std::byte> last_record;  // of the last record delivered
    StreamCounters c;
    std::int64_t (*clock)() noexcept = &Context::now_ns;  // tests set their own
    // Arbitration::quorum: the records from `next` on, by sequence; the ballot just delivered
    // (its outvoted copies are reported next, then it is reused); the dispute at `next`.
    Ballots ballots;
    std::vector<Ballots::node_type> spare_ballots;
    Ballots::node_type done;
    std::size_t done_winner = 0;
    std::size_t done_at = 0;
    std::uint64_t disputed_at = UINT64_MAX;
    std::vector<DisputedCopy> dispute_list;
    std::optional<std::uint64_t> resolution;  // the checksum resolve() picked
    // Quorum: records of newer epochs (at most buffer_records), in arrival order.
    std::vector<Pending> pending;
    bool any_far = false;  // some copy is far ahead (far_jump() has something to look at)

    Copy& copy_of(const Subscriber* sub, const Tsi& tsi) noexcept;
    std::uint64_t hist_mask = 0;  // history slots - 1 (a power of two: no division per record)
    void remember(std::uint64_t seq, std::uint64_t sum) noexcept {
        const std::size_t i = seq & hist_mask;
        hist_seq[i] = seq;
        hist_sum[i] = sum;
    }
    bool take(const Subscriber* sub, const Message& m, StreamEvent& out);
    bool take_record(Copy& cp, const Message& m, StreamEvent& out);
    bool deliver_held(StreamEvent& out);
    bool gap_lost(StreamEvent& out, bool force);
    bool tail_stalled(StreamEvent& out) noexcept;
    /// PGM reported a loss right after the copy's last record, which is `next` - 1.
    [[nodiscard]] bool lost_before_next(const Copy& cp) const noexcept {
        return cp.loss_pending && cp.has_high && cp.high + 1 == next;
    }
    void start_epoch(std::uint32_t e, std::uint64_t seq) noexcept;
    /// How far past `next` a record may be and still be held or voted on: first, the buffer
    /// and the one record that overflows it; quorum, the ballots' bound.
    [[nodiscard]] std::uint64_t reach() const noexcept {
        return quorum() ? kFarFactor * opt.buffer_records - 1 : opt.buffer_records + 1;
    }
    /// A record further ahead than reach(): counted, its copy marked far (the first kept).
    void far_ahead(Copy& cp, const RecordHeader& h, std::span<const std::byte> record);
    /// Every copy still there is far ahead (quorum: at least the quorum's publishers): the
    /// records before the lowest one they hold are lost, and theirs taken.
    bool far_jump(StreamEvent& out);
    /// Quorum: a record of an epoch newer than the stream's; a reset once the quorum's
    /// publishers sent that epoch.
    bool epoch_vote(const Subscriber* sub,
                    Tsi tsi,
                    const RecordHeader& h,
                    std::span<const std::byte> record,
                    StreamEvent& out);
    /// Quorum: publishers of standing (the most agreeing copy with this TSI).
    [[nodiscard]] std::uint64_t standing_of(const Tsi& tsi) const noexcept {
        std::uint64_t s = 0;
        for (const Copy& cp : copies) {
            s = cp.tsi == tsi ? std::max(s, cp.standing) : s;
        }
        return s;
    }
    /// Quorum: some waiting ballot has the quorum's publishers on one copy (a jump to the
    /// first waiting record, a loss of the gap before it, is then allowed).
    [[nodiscard]] bool quorum_past_gap() const noexcept;
    [[nodiscard]] std::size_t need() const noexcept {
        return std::min(opt.quorum, std::max<std::size_t>(live_voters(), 1));
    }

    [[nodiscard]] bool quorum() const noexcept { return opt.arbitration == Arbitration::quorum; }
    /// Records waiting (held behind a gap, or being voted on).
    [[nodiscard]] std::size_t waiting() const noexcept {
        return quorum() ? ballots.size() : held.size();
    }
    /// No more is read: first, more than buffer_records held (a gap is then lost); quorum,
    /// kFarFactor x buffer_records ballots.
    [[nodiscard]] bool full() const noexcept {
        if (!quorum()) {
            return held.size() > opt.buffer_records;
        }
        // Halted too: the copy that settles the dispute may come after the others' backlog
        // (a subscriber reads each source up to 64 messages in turn).
        return ballots.size() >= kFarFactor * opt.buffer_records;
    }
    /// The first record waiting after a gap at `next`, if there is a gap.
    [[nodiscard]] std::optional<std::uint64_t> after_gap() const noexcept {
        if (quorum()) {
            if (ballots.empty() || ballots.begin()->first == next) {
                return std::nullopt;
            }
            return ballots.begin()->first;
        }
        return held.empty() ? std::nullopt : std::optional<std::uint64_t>(held.begin()->first);
    }
    void vote(std::uint64_t seq,
              const Tsi& tsi,
              std::uint64_t sum,
              std::span<const std::byte> record);
    /// The ballot of `seq`, made (from a spare node if any) when `fresh` is set.
    Ballot& ballot_for(std::uint64_t seq, bool& fresh);
    /// After `next` moved: a gap starts now if records wait beyond it.
    void restart_gap_clock() noexcept { gap_since = after_gap() ? clock() : -1; }
    void recycle(Ballots::node_type node) noexcept;
    void clear_ballots() noexcept;
    [[nodiscard]] std::size_t live_voters() const noexcept;
    [[nodiscard]] std::size_t could_vote(const Ballot& b, std::uint64_t seq) const noexcept;
    bool decide(StreamEvent& out);
    bool deliver_ballot(std::size_t k, StreamEvent& out, bool resolved = false);
    bool lose_next(StreamEvent& out, bool overflow = true);
    bool report_dissent(StreamEvent& out) noexcept;
};

}  // namespace prizma
