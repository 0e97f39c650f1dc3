// SPDX-License-Identifier: Apache-2.0
// StreamSubscriber with Arbitration::quorum (docs/STREAMS.md, "Arbitration"): the copies of a
// record are votes; it is delivered once enough publishers sent the same copy.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "lib/streams/stream_impl.hpp"

namespace prizma {

// ---- Arbitration::quorum ------------------------------------------------------------------

StreamSubscriber::Impl::Ballot& StreamSubscriber::Impl::ballot_for(std::uint64_t seq, bool& fresh) {
    fresh = false;
    if (const auto it = ballots.find(seq); it != ballots.end()) {
        return it->second;
    }
    fresh = true;
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
    bool fresh = false;
    Ballot& b = ballot_for(seq, fresh);
    if (!fresh) {
        ++c.duplicates;  // every copy after the first, as with Arbitration::first
    } else if (seq > next) {
        ++c.buffered;
        if (gap_since < 0 && after_gap()) {
            gap_since = clock();
        }
    }
    if (b.voted(tsi)) {
        return;  // this publisher's copy again (a repair, a second path): one vote
    }
    if (b.votes.size() == kMaxVotes) {
        // Too many publishers: sixteen forged sources must not lock the true ones out. The
        // vote of least standing goes if this publisher has more (it agreed with delivered
        // records), else this one is not counted.
        const std::uint64_t mine = standing_of(tsi);
        std::size_t worst = 0;
        std::uint64_t least = UINT64_MAX;
        for (std::size_t i = 0; i < b.votes.size(); ++i) {
            const std::uint64_t st = standing_of(b.votes[i].tsi);
            if (st < least) {
                least = st;
                worst = i;
            }
        }
        ++c.votes_refused;
        if (mine <= least) {
            return;
        }
        --b.tally[b.votes[worst].copy];
        b.votes.erase(b.votes.begin() + static_cast<std::ptrdiff_t>(worst));
    }
    std::size_t k = 0;
    while (k < b.n && b.sums[k] != sum) {
        ++k;
    }
    // Bytes are kept for a record's first copy, and for other copies within buffer_records of
    // `next`; further ahead a copy that differs is kept as its vote only (its checksum). One
    // publisher's backlog can come before the other's (a subscriber reads up to 64 messages of
    // each source in turn), and the backlog of a halt can be longer than the buffer.
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
        const bool voted = b.voted(cp.tsi);
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
    const bool in_time = clock() - b.first_ns < opt.quorum_timeout.count();
    if (b.tally[best] >= need) {
        if (!b.copies[best].empty()) {
            return deliver_ballot(best, out);
        }
        if (more > 0 && in_time) {
            return false;  // agreed on, its bytes not kept: a copy still coming brings them
        }
        return lose_next(out);  // no copy of it with its bytes will come
    }
    if (disputed_at == next) {
        return false;  // the application decides, or a copy still coming completes a quorum
    }
    const bool possible = b.tally[best] + more >= need;
    if (possible && in_time) {
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
            cp.absent = cp.absent || (!past && !b.voted(cp.tsi));
        }
        if (opt.quorum_timeout_loss) {
            ++c.quorum_losses;
            return lose_next(out, false);  // the subscriber reads the settled copy elsewhere
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

bool StreamSubscriber::Impl::quorum_past_gap() const noexcept {
    const std::size_t n = need();
    return std::any_of(ballots.begin(), ballots.end(), [&](const auto& kv) {
        const Ballot& b = kv.second;
        return std::any_of(b.tally.begin(), b.tally.end(), [&](std::uint64_t t) { return t >= n; });
    });
}

// A record of a newer epoch: its vote for a reset. The reset comes once the quorum's
// publishers (need(): fewer when fewer are there) sent records of that epoch; it starts at the
// lowest sequence that many of them began the epoch at or before, and their records of the
// epoch from there on are then voted on as if they came now. Until then the stream goes on in
// its epoch: one copy (a forged record, XXH3 being no signature) cannot reset it.
bool StreamSubscriber::Impl::epoch_vote(const Subscriber* sub,
                                        Tsi tsi,
                                        const RecordHeader& h,
                                        std::span<const std::byte> record,
                                        StreamEvent& out) {
    if (pending.size() >= opt.buffer_records) {
        ++c.too_far;
        return false;
    }
    pending.push_back(Pending{h.epoch, sub, tsi, h.sequence, h.checksum, {}});
    pending.back().bytes.assign(record.begin(), record.end());
    ++c.epoch_pending;
    // The publishers of this epoch and where each began it (records come in order per copy).
    std::array<std::uint64_t, kMaxVotes> firsts{};
    std::array<Tsi, kMaxVotes> who{};
    std::size_t voters = 0;
    for (const Pending& p : pending) {
        if (p.epoch != h.epoch) {
            continue;
        }
        std::size_t i = 0;
        while (i < voters && !(who[i] == p.tsi)) {
            ++i;
        }
        if (i == voters && voters < kMaxVotes) {
            who[voters] = p.tsi;
            firsts[voters++] = p.seq;
        } else if (i < voters) {
            firsts[i] = std::min(firsts[i], p.seq);
        }
    }
    const std::size_t n = need();
    if (voters < n) {
        return false;
    }
    std::sort(firsts.begin(), firsts.begin() + static_cast<std::ptrdiff_t>(voters));
    const std::uint64_t at = firsts[n - 1];
    const std::uint32_t e = h.epoch;
    std::vector<Pending> taken;
    taken.swap(pending);
    start_epoch(e, at);
    ++c.resets;
    for (Pending& p : taken) {
        if (p.epoch > e) {
            pending.push_back(std::move(p));  // a newer epoch still: it waits on
            continue;
        }
        if (p.epoch < e || p.seq < at) {
            continue;
        }
        if (p.seq - next > reach()) {
            ++c.too_far;
            continue;
        }
        Copy& cp = copy_of(p.sub, p.tsi);
        cp.high = cp.has_high ? std::max(cp.high, p.seq) : p.seq;
        cp.has_high = true;
        vote(p.seq, p.tsi, p.sum, p.bytes);
    }
    out = StreamEvent{StreamEventKind::reset, e, at, 0, {}, tsi};
    return true;
}

// The record at `next` is agreed on, but none of its copies' bytes were kept (they all came
// while the buffer was full: `overflow`), or its quorum timed out (quorum_timeout_loss): a
// loss, reported.
bool StreamSubscriber::Impl::lose_next(StreamEvent& out, bool overflow) {
    recycle(ballots.extract(ballots.begin()));
    out = StreamEvent{StreamEventKind::loss, epoch, next, 1, {}, {}};
    ++c.loss_events;
    ++c.lost_records;
    c.overflows += overflow ? 1U : 0U;
    ++next;
    dispute_list.clear();
    restart_gap_clock();
    return true;
}

bool StreamSubscriber::Impl::deliver_ballot(std::size_t k, StreamEvent& out, bool resolved) {
    if (ballots.begin()->second.copies[k].empty()) {
        return lose_next(out);
    }
    Ballot& b = ballots.begin()->second;
    out_bytes.swap(b.copies[k]);
    remember(next, b.sums[k]);
    out = StreamEvent{StreamEventKind::record,
                      epoch,
                      next,
                      b.tally[k],
                      std::span<const std::byte>(out_bytes).subspan(RecordHeader::kBytes),
                      b.first_voter(k)};
    last_record = out_bytes;
    c.unconfirmed += !resolved && b.tally[k] < opt.quorum ? 1U : 0U;
    for (const Ballot::Vote& v : b.votes) {  // its voters gain standing
        if (v.copy != k) {
            continue;
        }
        for (Copy& cp : copies) {
            cp.standing += cp.tsi == v.tsi && cp.standing < kMaxStanding ? 1U : 0U;
        }
    }
    ++next;
    ++c.records;
    dispute_list.clear();
    recycle(std::move(done));
    // Its other copies are reported as divergences, then the node is reused.
    done = ballots.extract(ballots.begin());
    done_winner = k;
    done_at = 0;
    restart_gap_clock();
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

}  // namespace prizma
