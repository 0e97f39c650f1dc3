// SPDX-License-Identifier: Apache-2.0
// Lossless streams over the public pub/sub API (docs/STREAMS.md): the record header, the
// publisher that writes it and the arbitrating subscriber that merges copies.
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <string>

#include <prizma/stream.hpp>

#include "lib/pgm/bytes.hpp"
#include "lib/pubsub/stream_testing.hpp"

namespace prizma {
namespace {

/// Header bytes 0-19 (version, header length, reserved, stream id, epoch, sequence) as
/// RecordHeader::write() lays them out.
void header_fields(std::byte* p,
                   std::uint32_t stream_id,
                   std::uint32_t epoch,
                   std::uint64_t sequence) noexcept {
    p[0] = std::byte{RecordHeader::kVersion};
    p[1] = std::byte{static_cast<std::uint8_t>(RecordHeader::kBytes)};
    p[2] = std::byte{0};
    p[3] = std::byte{0};
    pgm::store_be32(p + 4, stream_id);
    pgm::store_be32(p + 8, epoch);
    pgm::store_be64(p + 12, sequence);
}

}  // namespace

// XXH3-64 (libxxhash) of the payload, seeded with XXH3-64 of header bytes 0-19: every byte of
// the record but the checksum itself, the payload's length included (XXH3 hashes it). Not
// cryptographic: it finds corruption and diverging copies, not forgeries (authentication is
// the channel's key_file=). docs/STREAMS.md, "The record".
std::uint64_t RecordHeader::checksum_of(std::uint32_t stream_id,
                                        std::uint32_t epoch,
                                        std::uint64_t sequence,
                                        std::span<const std::byte> payload) noexcept {
    std::byte fields[kChecksumOffset];
    header_fields(fields, stream_id, epoch, sequence);
    const XXH64_hash_t seed = XXH3_64bits(fields, sizeof fields);
    return XXH3_64bits_withSeed(payload.data(), payload.size(), seed);
}

void RecordHeader::write(std::span<std::byte> out,
                         std::uint32_t stream_id,
                         std::uint32_t epoch,
                         std::uint64_t sequence,
                         std::span<const std::byte> payload) noexcept {
    std::byte* p = out.data();
    header_fields(p, stream_id, epoch, sequence);
    pgm::store_be64(p + kChecksumOffset, checksum_of(stream_id, epoch, sequence, payload));
}

bool RecordHeader::read(std::span<const std::byte> record, RecordHeader& out) noexcept {
    if (record.size() < kBytes || std::to_integer<std::uint8_t>(record[0]) != kVersion
        || std::to_integer<std::uint8_t>(record[1]) != kBytes || record[2] != std::byte{0}
        || record[3] != std::byte{0}) {
        return false;
    }
    const std::byte* p = record.data();
    out.stream_id = pgm::load_be32(p + 4);
    out.epoch = pgm::load_be32(p + 8);
    out.sequence = pgm::load_be64(p + 12);
    out.checksum = pgm::load_be64(p + 20);
    return true;
}

// ---- StreamPublisher ----------------------------------------------------------------------

StreamPublisher::StreamPublisher(Publisher& p,
                                 std::uint32_t id,
                                 std::uint32_t epoch,
                                 std::uint64_t next)
    : pub_(&p), stream_id_(id), epoch_(epoch), next_(next), scratch_(p.max_message_size()) {}

Result<StreamPublisher, Error> StreamPublisher::create(Publisher& publisher,
                                                       std::uint32_t stream_id,
                                                       std::uint32_t epoch,
                                                       std::uint64_t next_sequence) {
    if (!publisher.valid() || publisher.max_message_size() <= RecordHeader::kBytes) {
        return Error(Errc::invalid_argument,
                     "a stream publisher needs a live publisher whose messages hold a record "
                     "header (28 bytes) and a payload");
    }
    return StreamPublisher(publisher, stream_id, epoch, next_sequence);
}

Result<std::uint64_t> StreamPublisher::offer(std::span<const std::byte> payload) noexcept {
    const std::size_t n = RecordHeader::kBytes + payload.size();
    if (n > scratch_.size()) {
        return Errc::message_too_large;
    }
    // Built in a scratch buffer and offered (a Claim would flush each record on its own;
    // offer() batches them like any message).
    RecordHeader::write(scratch_, stream_id_, epoch_, next_, payload);
    if (!payload.empty()) {
        std::memcpy(scratch_.data() + RecordHeader::kBytes, payload.data(), payload.size());
    }
    if (auto r = pub_->offer(std::span<const std::byte>(scratch_.data(), n)); !r) {
        return r.error();
    }
    return next_++;
}

// ---- StreamSubscriber ---------------------------------------------------------------------

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
    /// Ballots (quorum) may be kFarFactor x buffer_records, those past buffer_records holding
    /// votes only (checksums, no bytes).
    static constexpr std::size_t kFarFactor = 16;

    StreamOptions opt;
    std::vector<Subscriber*> subs;
    std::size_t rr = 0;
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

    [[nodiscard]] bool quorum() const noexcept { return opt.arbitration == Arbitration::quorum; }
    /// Records waiting (held behind a gap, or being voted on).
    [[nodiscard]] std::size_t waiting() const noexcept {
        return quorum() ? ballots.size() : held.size();
    }
    /// No more is read: first, more than buffer_records held (a gap is then lost); quorum,
    /// kFarFactor x buffer_records ballots, or buffer_records while a dispute holds the stream.
    [[nodiscard]] bool full() const noexcept {
        if (!quorum()) {
            return held.size() > opt.buffer_records;
        }
        const bool halted = disputed_at == next && !dispute_list.empty();
        return ballots.size() >= (halted ? opt.buffer_records : kFarFactor * opt.buffer_records);
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
    Ballot& ballot_for(std::uint64_t seq);
    void recycle(Ballots::node_type node) noexcept;
    void clear_ballots() noexcept;
    [[nodiscard]] std::size_t live_voters() const noexcept;
    [[nodiscard]] std::size_t could_vote(const Ballot& b, std::uint64_t seq) const noexcept;
    bool decide(StreamEvent& out);
    bool deliver_ballot(std::size_t k, StreamEvent& out, bool resolved = false);
    bool lose_next(StreamEvent& out);
    bool report_dissent(StreamEvent& out) noexcept;
};

StreamSubscriber::Impl::Copy& StreamSubscriber::Impl::copy_of(const Subscriber* sub,
                                                              const Tsi& tsi) noexcept {
    if (last < copies.size() && copies[last].sub == sub && copies[last].tsi == tsi) {
        return copies[last];  // runs of one copy: the common case
    }
    for (std::size_t i = 0; i < copies.size(); ++i) {
        Copy& cp = copies[i];
        if (cp.sub == sub && cp.tsi == tsi) {
            last = i;
            return cp;
        }
    }
    if (copies.size() == kMaxCopies) {  // forget a copy that left, or the oldest
        auto it = std::find_if(copies.begin(), copies.end(), [](const Copy& x) { return x.gone; });
        copies.erase(it != copies.end() ? it : copies.begin());
    }
    copies.push_back(Copy{sub, tsi});
    last = copies.size() - 1;
    return copies.back();
}

void StreamSubscriber::Impl::start_epoch(std::uint32_t e, std::uint64_t seq) noexcept {
    epoch = e;
    has_epoch = true;
    started = true;
    next = seq;
    held.clear();
    clear_ballots();
    gap_since = -1;
    std::fill(hist_seq.begin(), hist_seq.end(), UINT64_MAX);
    for (Copy& cp : copies) {
        cp.has_high = false;
        cp.loss_pending = false;
    }
}

bool StreamSubscriber::Impl::take(const Subscriber* sub, const Message& m, StreamEvent& out) {
    Copy& cp = copy_of(sub, m.tsi);
    switch (m.kind) {
        case MessageKind::loss: cp.loss_pending = true; return false;
        case MessageKind::left: cp.gone = true; return false;
        case MessageKind::joined: cp.gone = false; return false;
        case MessageKind::data: break;
    }
    cp.absent = false;
    if (quorum()) {
        cp.heard_ns = clock();
    }
    return take_record(cp, m, out);
}

bool StreamSubscriber::Impl::take_record(Copy& cp, const Message& m, StreamEvent& out) {
    RecordHeader h;
    if (!RecordHeader::read(m.payload, h) || h.stream_id != opt.stream_id) {
        // This stream's records in another header version (an older prizma's: version 1,
        // before XXH3; its header has the same layout) are told apart from another stream's
        // and from what is no record at all. All are dropped, never delivered.
        const bool other_version = m.payload.size() >= RecordHeader::kBytes
                                   && m.payload[0] != std::byte{RecordHeader::kVersion}
                                   && m.payload[1] == std::byte{RecordHeader::kBytes}
                                   && pgm::load_be32(m.payload.data() + 4) == opt.stream_id;
        ++(other_version ? c.other_version : c.foreign);
        return false;
    }
    const auto payload = m.payload.subspan(RecordHeader::kBytes);
    if (RecordHeader::checksum_of(h.stream_id, h.epoch, h.sequence, payload) != h.checksum) {
        ++c.bad_checksum;  // another copy may still bring it
        return false;
    }
    if (has_epoch && h.epoch < epoch) {
        ++c.stale_epoch;
        return false;
    }
    cp.loss_pending = false;
    if (!has_epoch || h.epoch > epoch) {
        const bool reset = has_epoch;
        start_epoch(h.epoch, reset ? h.sequence : opt.start_sequence.value_or(h.sequence));
        if (reset) {
            ++c.resets;
            if (quorum()) {
                vote(h.sequence, m.tsi, h.checksum, m.payload);
            } else {
                held.emplace(h.sequence, Held{m.tsi, {m.payload.begin(), m.payload.end()}});
            }
            out = StreamEvent{StreamEventKind::reset, h.epoch, h.sequence, 0, {}, m.tsi};
            return true;
        }
    }
    cp.high = cp.has_high ? std::max(cp.high, h.sequence) : h.sequence;
    cp.has_high = true;
    if (h.sequence < next) {
        ++c.duplicates;
        const std::size_t i = h.sequence & hist_mask;
        if (hist_seq[i] == h.sequence && hist_sum[i] != h.checksum) {
            ++c.divergences;
            out = StreamEvent{StreamEventKind::divergence, h.epoch, h.sequence, 0, payload, m.tsi};
            last_record = m.payload;
            return true;
        }
        return false;
    }
    if (quorum()) {
        vote(h.sequence, m.tsi, h.checksum, m.payload);
        return false;
    }
    if (h.sequence == next) {
        remember(next, h.checksum);
        ++next;
        ++c.records;
        out = StreamEvent{StreamEventKind::record, epoch, h.sequence, 0, payload, m.tsi};
        last_record = m.payload;
        return true;
    }
    if (held.find(h.sequence) == held.end()) {  // later: held until the gap closes
        held.emplace(h.sequence, Held{m.tsi, {m.payload.begin(), m.payload.end()}});
        ++c.buffered;
        if (gap_since < 0) {
            gap_since = clock();
        }
    }
    return false;
}

bool StreamSubscriber::Impl::deliver_held(StreamEvent& out) {
    if (held.empty() || held.begin()->first != next) {
        return false;
    }
    const auto it = held.begin();
    out_bytes.swap(it->second.bytes);
    const Tsi from = it->second.tsi;
    held.erase(it);
    const auto payload = std::span<const std::byte>(out_bytes).subspan(RecordHeader::kBytes);
    RecordHeader h;
    (void)RecordHeader::read(out_bytes, h);
    remember(next, h.checksum);
    out = StreamEvent{StreamEventKind::record, epoch, next, 0, payload, from};
    last_record = out_bytes;
    ++next;
    ++c.records;
    gap_since = held.empty() ? -1 : clock();
    return true;
}

// ---- Arbitration::quorum ------------------------------------------------------------------

StreamSubscriber::Impl::Ballot& StreamSubscriber::Impl::ballot_for(std::uint64_t seq) {
    if (const auto it = ballots.find(seq); it != ballots.end()) {
        return it->second;
    }
    Ballots::iterator it;
    if (!spare_ballots.empty()) {
        Ballots::node_type node = std::move(spare_ballots.back());
        spare_ballots.pop_back();
        node.key() = seq;
        node.mapped().clear();
        it = ballots.insert(std::move(node)).position;
    } else {
        it = ballots.try_emplace(seq).first;
    }
    it->second.first_ns = clock();
    return it->second;
}

void StreamSubscriber::Impl::recycle(Ballots::node_type node) noexcept {
    if (!node.empty() && spare_ballots.size() < kSpareBallots) {
        spare_ballots.push_back(std::move(node));  // capacity reserved at create()
    }
}

void StreamSubscriber::Impl::clear_ballots() noexcept {
    recycle(std::move(done));
    done = {};
    while (!ballots.empty()) {
        recycle(ballots.extract(ballots.begin()));
    }
    dispute_list.clear();
    resolution.reset();
    disputed_at = UINT64_MAX;
}

// A copy of record `seq` from publisher `tsi`: its vote. Decisions are taken in order, at
// `next` (decide()).
void StreamSubscriber::Impl::vote(std::uint64_t seq,
                                  const Tsi& tsi,
                                  std::uint64_t sum,
                                  std::span<const std::byte> record) {
    const bool fresh = ballots.find(seq) == ballots.end();
    Ballot& b = ballot_for(seq);
    if (!fresh) {
        ++c.duplicates;  // every copy after the first, as with Arbitration::first
    } else if (seq > next) {
        ++c.buffered;
        if (gap_since < 0 && (ballots.empty() || ballots.begin()->first != next)) {
            gap_since = clock();
        }
    }
    if (b.votes.size() == kMaxVotes
        || std::any_of(b.votes.begin(), b.votes.end(),
                       [&](const Ballot::Vote& v) { return v.tsi == tsi; })) {
        return;  // this publisher's copy again (a repair, a second path), or too many publishers
    }
    std::size_t k = 0;
    while (k < b.n && b.sums[k] != sum) {
        ++k;
    }
    // Bytes are kept for a record's first copy, and for other copies within buffer_records of
    // `next`; further ahead a copy that differs is kept as its vote only (its checksum). One
    // publisher's backlog comes before the other's (each source's window is read in turn), and the
    // backlog of a halt can be longer than the buffer.
    const bool keep = seq - next < opt.buffer_records || k == 0;  // the first copy: always
    if (k == b.n) {
        if (b.copies.size() == b.n) {
            b.copies.emplace_back();
        }
        b.copies[k].clear();
        b.sums.push_back(sum);
        b.tally.push_back(0);
        ++b.n;
    }
    if (keep && b.copies[k].empty()) {
        b.copies[k].assign(record.begin(), record.end());
    }
    ++b.tally[k];
    b.votes.push_back(Ballot::Vote{tsi, k});
}

// Publishers heard and still there (a publisher heard on two subscribers is one voter).
std::size_t StreamSubscriber::Impl::live_voters() const noexcept {
    std::size_t n = 0;
    for (std::size_t i = 0; i < copies.size(); ++i) {
        if (copies[i].gone || copies[i].absent) {
            continue;
        }
        bool seen = false;
        for (std::size_t j = 0; j < i && !seen; ++j) {
            seen = !copies[j].gone && copies[j].tsi == copies[i].tsi;
        }
        n += seen ? 0U : 1U;
    }
    return n;
}

// Publishers still there that have not voted on `seq` and may still: not past it (a copy
// delivers in order: one that sent later records lost this one).
std::size_t StreamSubscriber::Impl::could_vote(const Ballot& b, std::uint64_t seq) const noexcept {
    std::size_t n = 0;
    for (std::size_t i = 0; i < copies.size(); ++i) {
        const Copy& cp = copies[i];
        if (cp.gone || cp.absent || (cp.has_high && cp.high >= seq)) {
            continue;
        }
        const bool voted = std::any_of(b.votes.begin(), b.votes.end(),
                                       [&](const Ballot::Vote& v) { return v.tsi == cp.tsi; });
        bool seen = false;
        for (std::size_t j = 0; j < i && !seen; ++j) {
            seen = copies[j].tsi == cp.tsi;
        }
        n += voted || seen ? 0U : 1U;
    }
    return n;
}

// The record at `next`, once its copies agree enough: delivered, or a dispute.
bool StreamSubscriber::Impl::decide(StreamEvent& out) {
    if (ballots.empty() || ballots.begin()->first != next) {
        return false;
    }
    const Ballot& b = ballots.begin()->second;
    if (resolution) {
        std::size_t k = 0;
        while (k < b.n && b.sums[k] != *resolution) {
            ++k;
        }
        resolution.reset();
        if (k < b.n) {
            ++c.resolved;
            return deliver_ballot(k, out, true);
        }
    }
    std::size_t best = 0;
    for (std::size_t k = 1; k < b.n; ++k) {
        best = b.tally[k] > b.tally[best] ? k : best;
    }
    const std::size_t need = std::min(opt.quorum, std::max<std::size_t>(live_voters(), 1));
    const std::size_t more = could_vote(b, next);
    if (b.tally[best] >= need) {
        if (!b.copies[best].empty()) {
            return deliver_ballot(best, out);
        }
        if (more > 0 && clock() - b.first_ns < opt.quorum_timeout.count()) {
            return false;  // agreed on, its bytes not kept: a copy still coming brings them
        }
        return lose_next(out);  // no copy of it with its bytes will come
    }
    if (disputed_at == next) {
        return false;  // the application decides, or a copy still coming completes a quorum
    }
    const bool possible = b.tally[best] + more >= need;
    if (possible && clock() - b.first_ns < opt.quorum_timeout.count()) {
        return false;
    }
    if (b.n == 1) {
        // Nothing contradicts it; the publishers that stayed silent are not waited for again
        // until they send (one failed publisher delays one record, not every record).
        const std::int64_t now = clock();
        for (Copy& cp : copies) {
            // Silent: sent nothing for quorum_timeout (one merely behind is waited for).
            const bool past =
                (cp.has_high && cp.high >= next) || now - cp.heard_ns < opt.quorum_timeout.count();
            cp.absent =
                cp.absent
                || (!past
                    && std::none_of(b.votes.begin(), b.votes.end(),
                                    [&](const Ballot::Vote& v) { return v.tsi == cp.tsi; }));
        }
        return deliver_ballot(0, out);
    }
    disputed_at = next;
    ++c.disputes;
    dispute_list.clear();
    for (std::size_t k = 0; k < b.n; ++k) {
        dispute_list.push_back(DisputedCopy{b.first_voter(k), b.sums[k], b.tally[k], b.copies[k]});
    }
    out = StreamEvent{StreamEventKind::dispute, epoch, next, b.n, {}, b.votes.front().tsi};
    return true;
}

// The record at `next` is agreed on, but none of its copies' bytes were kept (they all came
// while the buffer was full): a loss, reported.
bool StreamSubscriber::Impl::lose_next(StreamEvent& out) {
    recycle(ballots.extract(ballots.begin()));
    out = StreamEvent{StreamEventKind::loss, epoch, next, 1, {}, {}};
    ++c.loss_events;
    ++c.lost_records;
    ++c.overflows;
    ++next;
    dispute_list.clear();
    gap_since = ballots.empty() || ballots.begin()->first == next ? -1 : clock();
    return true;
}

bool StreamSubscriber::Impl::deliver_ballot(std::size_t k, StreamEvent& out, bool resolved) {
    if (ballots.begin()->second.copies[k].empty()) {
        return lose_next(out);
    }
    auto node = ballots.extract(ballots.begin());
    Ballot& b = node.mapped();
    out_bytes.swap(b.copies[k]);
    remember(next, b.sums[k]);
    out = StreamEvent{StreamEventKind::record,
                      epoch,
                      next,
                      b.tally[k],
                      std::span<const std::byte>(out_bytes).subspan(RecordHeader::kBytes),
                      b.first_voter(k)};
    last_record = out_bytes;
    ++next;
    ++c.records;
    c.unconfirmed += !resolved && b.tally[k] < opt.quorum ? 1U : 0U;
    dispute_list.clear();
    recycle(std::move(done));
    done = std::move(node);  // its other copies are reported as divergences, then it is reused
    done_winner = k;
    done_at = 0;
    gap_since = ballots.empty() || ballots.begin()->first == next ? -1 : clock();
    return true;
}

// The copies the delivered record's ballot outvoted: one divergence event each.
bool StreamSubscriber::Impl::report_dissent(StreamEvent& out) noexcept {
    if (done.empty()) {
        return false;
    }
    const Ballot& b = done.mapped();
    while (done_at < b.n) {
        const std::size_t k = done_at++;
        if (k == done_winner) {
            continue;
        }
        ++c.divergences;
        out = StreamEvent{
            StreamEventKind::divergence,
            epoch,
            done.key(),
            0,
            (b.copies[k].empty()
                 ? std::span<const std::byte>{}
                 : std::span<const std::byte>(b.copies[k]).subspan(RecordHeader::kBytes)),
            b.first_voter(k)};
        last_record = b.copies[k];
        return true;
    }
    recycle(std::move(done));
    done = {};
    return false;
}

// The gap at `next` (records after it are held): lost once no copy can fill it any more, at
// the gap timeout, or at once when `force` (the buffer is full).
bool StreamSubscriber::Impl::gap_lost(StreamEvent& out, bool force) {
    const auto first_waiting = after_gap();
    if (!first_waiting) {
        return false;
    }
    const auto able = [&](const Copy& cp) {
        if (cp.gone) {
            return false;
        }
        if (cp.has_high && cp.high >= next) {
            return false;  // it delivered later records: in order, it never brings `next`
        }
        return !lost_before_next(cp);
    };
    const bool none_able = std::none_of(copies.begin(), copies.end(), able);
    const bool timed_out = gap_since >= 0 && clock() - gap_since >= opt.gap_timeout.count();
    if (!force && !none_able && !timed_out) {
        return false;
    }
    const std::uint64_t first_held = *first_waiting;
    out = StreamEvent{StreamEventKind::loss, epoch, next, first_held - next, {}, {}};
    ++c.loss_events;
    c.lost_records += first_held - next;
    if (force) {
        ++c.overflows;
    }
    next = first_held;
    gap_since = clock();
    return true;
}

// Nothing held and nothing coming: if PGM lost data right after `next` - 1 on a copy and no
// copy can still bring `next` (each left, or lost data right after its last record), a stall
// event after gap_timeout, once per position. Without it a loss at the very end of what the
// publishers sent (their last records, the session end) would leave the application waiting
// in silence.
bool StreamSubscriber::Impl::tail_stalled(StreamEvent& out) noexcept {
    if (waiting() != 0 || !started || stalled_at == next || copies.empty()) {
        return false;
    }
    bool lost_at_tail = false;
    for (const Copy& cp : copies) {
        const bool tail_loss = lost_before_next(cp);
        if (!cp.gone && !tail_loss) {
            tail_next = UINT64_MAX;  // a copy may still bring it
            return false;
        }
        lost_at_tail = lost_at_tail || tail_loss;
    }
    if (!lost_at_tail) {
        return false;  // every copy left cleanly: the stream ended
    }
    const std::int64_t now = clock();
    if (tail_next != next) {
        tail_next = next;
        tail_since = now;
        return false;
    }
    if (now - tail_since < opt.gap_timeout.count()) {
        return false;
    }
    stalled_at = next;
    ++c.stalls;
    out = StreamEvent{StreamEventKind::stall, epoch, next, 0, {}, {}};
    return true;
}

StreamSubscriber::StreamSubscriber(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
StreamSubscriber::StreamSubscriber(StreamSubscriber&&) noexcept = default;
StreamSubscriber& StreamSubscriber::operator=(StreamSubscriber&&) noexcept = default;
StreamSubscriber::~StreamSubscriber() = default;

Result<StreamSubscriber, Error> StreamSubscriber::create(const StreamOptions& options) {
    if (options.buffer_records == 0 || options.history == 0 || options.gap_timeout.count() <= 0
        || options.quorum == 0 || options.quorum_timeout.count() < 0) {
        return Error(Errc::invalid_argument,
                     "stream options: buffer_records, history and quorum at least 1, "
                     "gap_timeout > 0, quorum_timeout >= 0");
    }
    auto impl = std::make_unique<Impl>();
    impl->opt = options;
    const std::size_t slots = std::bit_ceil(options.history);
    impl->hist_mask = slots - 1;
    impl->hist_seq.assign(slots, UINT64_MAX);
    impl->hist_sum.assign(slots, 0);
    impl->copies.reserve(Impl::kMaxCopies);
    impl->spare_ballots.reserve(Impl::kSpareBallots);
    impl->dispute_list.reserve(Impl::kMaxVotes);
    return StreamSubscriber(std::move(impl));
}

Result<void, Error> StreamSubscriber::add(Subscriber& subscriber) {
    if (!subscriber.valid()) {
        return Error(Errc::invalid_argument, "not a live subscriber");
    }
    if (std::find(impl_->subs.begin(), impl_->subs.end(), &subscriber) != impl_->subs.end()) {
        return Error(Errc::invalid_argument, "this subscriber is already a copy of the stream");
    }
    impl_->subs.push_back(&subscriber);
    return {};
}

void StreamSubscriber::remove(Subscriber& subscriber) noexcept {
    auto& s = impl_->subs;
    s.erase(std::remove(s.begin(), s.end(), &subscriber), s.end());
    auto& cs = impl_->copies;
    cs.erase(std::remove_if(cs.begin(), cs.end(),
                            [&](const Impl::Copy& cp) { return cp.sub == &subscriber; }),
             cs.end());
}

bool StreamSubscriber::next(StreamEvent& out) noexcept {
    Impl& s = *impl_;
    for (;;) {
        if (s.report_dissent(out) || (s.quorum() ? s.decide(out) : s.deliver_held(out))) {
            return true;
        }
        const bool full = s.full();
        if (s.gap_lost(out, full)) {
            return true;
        }
        if (full) {
            return false;  // quorum: the record at `next` is still being decided; read no more
        }
        bool any = false;
        const std::size_t n = s.subs.size();
        std::size_t at = s.rr < n ? s.rr : 0;  // round robin without a division per record
        for (std::size_t k = 0; k < n; ++k, at = at + 1 == n ? 0 : at + 1) {
            Subscriber* sub = s.subs[at];
            Message m;
            if (!sub->next(m)) {
                continue;
            }
            any = true;
            s.rr = at;
            bool produced = false;
            try {
                produced = s.take(sub, m, out);
            } catch (const std::bad_alloc&) {
                ++s.c.overflows;  // a held copy could not be stored: the gap logic covers it
            }
            if (produced) {
                return true;
            }
            break;
        }
        if (!any) {
            return s.tail_stalled(out);
        }
    }
}

std::optional<std::uint64_t> StreamSubscriber::next_sequence() const noexcept {
    return impl_->started ? std::optional<std::uint64_t>(impl_->next) : std::nullopt;
}

const StreamCounters& StreamSubscriber::counters() const noexcept {
    return impl_->c;
}

std::span<const std::byte> StreamSubscriber::last_record() const noexcept {
    return impl_->last_record;
}

std::span<const DisputedCopy> StreamSubscriber::disputed() const noexcept {
    return impl_->dispute_list;
}

Result<void, Error> StreamSubscriber::resolve(std::uint64_t sequence, std::uint64_t checksum) {
    Impl& s = *impl_;
    if (s.dispute_list.empty() || s.disputed_at != sequence || s.next != sequence) {
        return Error(Errc::invalid_argument,
                     "resolve: no dispute at record " + std::to_string(sequence));
    }
    if (std::none_of(s.dispute_list.begin(), s.dispute_list.end(), [&](const DisputedCopy& d) {
            return d.checksum == checksum && !d.record.empty();
        })) {
        return Error(Errc::invalid_argument, "resolve: no copy of record "
                                                 + std::to_string(sequence) + " has that checksum");
    }
    s.resolution = checksum;
    return {};
}

void detail::StreamSubscriberTesting::set_clock(StreamSubscriber& s,
                                                std::int64_t (*clock)() noexcept) noexcept {
    s.impl_->clock = clock;
}

}  // namespace prizma
