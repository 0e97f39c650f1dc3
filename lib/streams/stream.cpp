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
#include "lib/streams/stream_impl.hpp"
#include "lib/streams/stream_testing.hpp"

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
    Copy fresh;
    fresh.sub = sub;
    fresh.tsi = tsi;
    copies.push_back(std::move(fresh));
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
        cp.far = false;
        cp.far_bytes.clear();
    }
    any_far = false;
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
    if (quorum() && has_epoch && h.epoch > epoch) {
        return epoch_vote(cp.sub, cp.tsi, h, m.payload, out);  // a reset needs the quorum too
    }
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
    if (h.sequence > next && h.sequence - next > reach()) {
        far_ahead(cp, h, m.payload);  // decides nothing alone: not held, not a gap's end
        return false;
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
    restart_gap_clock();
    return true;
}

void StreamSubscriber::Impl::far_ahead(Copy& cp,
                                       const RecordHeader& h,
                                       std::span<const std::byte> record) {
    ++c.too_far;
    if (!cp.far) {
        cp.far_bytes.assign(record.begin(), record.end());
        cp.far = true;
        cp.far_high = h.sequence;
        any_far = true;
    }
    cp.far_high = std::max(cp.far_high, h.sequence);
}

// One copy far ahead is one copy's word (a forged record at next + 10^9 would otherwise be a
// loss of 10^9 records at the gap timeout): the stream jumps only once every copy still there
// is far ahead (a subscriber that starts behind the publishers: all of them are), and with
// Arbitration::quorum once at least the quorum's publishers are. The records before the lowest
// first far record are lost; each copy's first far record is taken as if it came now.
bool StreamSubscriber::Impl::far_jump(StreamEvent& out) {
    if (!any_far || !started) {
        return false;
    }
    std::uint64_t to = UINT64_MAX;
    std::size_t voters = 0;
    for (std::size_t i = 0; i < copies.size(); ++i) {
        const Copy& cp = copies[i];
        if (cp.gone || (!cp.far && !cp.has_high)) {
            continue;  // left, or no record of this epoch from it yet: it says nothing
        }
        if (!cp.far) {
            return false;  // this copy may still bring `next`: nothing is decided
        }
        RecordHeader h;
        (void)RecordHeader::read(cp.far_bytes, h);
        to = std::min(to, h.sequence);
        bool seen = false;
        for (std::size_t j = 0; j < i && !seen; ++j) {
            seen = !copies[j].gone && copies[j].tsi == cp.tsi;
        }
        voters += seen ? 0U : 1U;
    }
    if (to == UINT64_MAX || (quorum() && voters < need())) {
        return false;
    }
    out = StreamEvent{StreamEventKind::loss, epoch, next, to - next, {}, {}};
    ++c.loss_events;
    c.lost_records += to - next;
    next = to;
    held.clear();
    clear_ballots();
    any_far = false;
    for (Copy& cp : copies) {
        if (!cp.far) {
            continue;
        }
        cp.far = false;
        RecordHeader h;
        (void)RecordHeader::read(cp.far_bytes, h);
        if (h.sequence - next > reach()) {
            ++c.too_far;  // this copy's first far record is far from the others' too
        } else if (quorum()) {
            vote(h.sequence, cp.tsi, h.checksum, cp.far_bytes);
        } else if (held.find(h.sequence) == held.end()) {
            held.emplace(h.sequence, Held{cp.tsi, std::move(cp.far_bytes)});
        }
        cp.far_bytes.clear();
        cp.high = cp.far_high;  // in order: it never brings what it passed
        cp.has_high = true;
    }
    restart_gap_clock();
    return true;
}

// The gap at `next` (records after it are held): lost once no copy can fill it any more, at
// the gap timeout, or at once when `force` (the buffer is full). With Arbitration::quorum only
// when the quorum's publishers agree on a record after it: one copy's record does not move the
// stream.
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
    if (quorum() && !quorum_past_gap()) {
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
        if (s.gap_lost(out, full) || s.far_jump(out)) {
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
            if (at != s.rr) {
                s.rr = at;
                s.run = 0;
            }
            if (++s.run == Impl::kRun) {  // the next subscriber's turn (fairness, as PGM's)
                s.run = 0;
                s.rr = at + 1 == n ? 0 : at + 1;
            }
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

std::size_t detail::StreamSubscriberTesting::stored_records(const StreamSubscriber& s) noexcept {
    const StreamSubscriber::Impl& i = *s.impl_;
    std::size_t n = i.held.size() + i.pending.size();
    const auto count = [&](const StreamSubscriber::Impl::Ballot& b) {
        for (std::size_t k = 0; k < b.n; ++k) {
            n += b.copies[k].empty() ? 0U : 1U;
        }
    };
    for (const auto& kv : i.ballots) {
        count(kv.second);
    }
    if (!i.done.empty()) {
        count(i.done.mapped());
    }
    for (const auto& cp : i.copies) {
        n += cp.far_bytes.empty() ? 0U : 1U;
    }
    return n;
}

}  // namespace prizma
