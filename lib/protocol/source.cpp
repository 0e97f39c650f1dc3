// SPDX-License-Identifier: Apache-2.0
#include "lib/protocol/source.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "lib/pgm/bytes.hpp"
#include "lib/pgm/checksum.hpp"
#include "lib/protocol/packed_ring.hpp"

namespace prizma::protocol {

using pgm::PacketSpec;
using pgm::PacketType;

namespace {

/// repair_burst_bytes = 0: the credit a source and a new requester start with, and the least
/// that can be saved, in packets of max_tpdu.
constexpr std::size_t kDefaultBurstPackets = 64;

}  // namespace

// ---- token bucket (RFC 3208 §5.1.1: rate-limited transmission) -------------------------------

void Source::Bucket::refill(std::int64_t now_ns) noexcept {
    if (rate == 0) {
        return;
    }
    if (now_ns > last_ns) {
        tokens = std::min(
            depth,
            tokens + static_cast<double>(rate) * (static_cast<double>(now_ns - last_ns) / 1e9));
        last_ns = now_ns;
    }
}

bool Source::Bucket::take(std::size_t bytes, std::int64_t now_ns) noexcept {
    if (rate == 0) {
        return true;
    }
    refill(now_ns);
    if (tokens < static_cast<double>(bytes)) {
        return false;
    }
    tokens -= static_cast<double>(bytes);
    return true;
}

std::int64_t Source::Bucket::when_available(std::size_t bytes, std::int64_t now_ns) const noexcept {
    if (rate == 0 || tokens >= static_cast<double>(bytes)) {
        return now_ns;
    }
    const double missing = static_cast<double>(bytes) - tokens;
    return now_ns + static_cast<std::int64_t>(missing * 1e9 / static_cast<double>(rate)) + 1;
}

// ---- repair credit (docs/PROTOCOL.md, "Publisher repair limits") --------------------------

void Source::Credit::earn(std::uint64_t odata_bytes, double fraction, double depth) noexcept {
    bytes = std::min(depth, bytes + fraction * static_cast<double>(odata_bytes - mark));
    mark = odata_bytes;
}

// ---- construction ---------------------------------------------------------------------------

Result<std::unique_ptr<Source>, Error> Source::create(const SourceConfig& cfg) {
    if (auto r = validate(cfg); !r) {
        return r.error();
    }
    return std::unique_ptr<Source>(new Source(cfg));
}

Source::Source(const SourceConfig& cfg) : cfg_(cfg), flow_(cfg.flow) {
    max_tsdu_ = cfg.max_tpdu - pgm::kDataHeaderBytes;
    max_frag_payload_ = max_tsdu_ - pgm::kFragmentOptionBytes;
    max_apdu_ = std::min(pgm::kMaxApduBytes, cfg.max_fragments * max_frag_payload_);
    max_apdu_ = std::max(max_apdu_, max_tsdu_);
    const std::uint32_t cap = std::bit_ceil(cfg.txw_sqns);
    mask_ = cap - 1;
    slots_.resize(cap);
    // Worst case: every packet of a full window at max size, plus the end-of-buffer waste.
    buffers_ = runtime::PageBuffer(txw_ring_bytes(cfg), true);
    repair_queue_.resize(cap);
    scratch_.resize(256 + cfg.max_tpdu);
    trail_ = cfg.initial_sqn;
    next_ = cfg.initial_sqn;
    PacketSpec tmpl;
    tmpl.type = PacketType::odata;
    tmpl.sport = cfg.tsi.sport;
    tmpl.dport = cfg.dport;
    tmpl.gsi = cfg.tsi.gsi;
    (void)pgm::encode(odata_template_, tmpl);
    // The template's TSDU length and checksum fields are still 0: their sum is the fixed part.
    odata_template_sum_ =
        pgm::csum_partial(std::span<const std::byte>(odata_template_.data(), pgm::kHeaderBytes));
    const auto rate_depth = [&](std::uint64_t rate) {
        const double one_ms = static_cast<double>(rate) / 1000.0;
        const auto min_depth = static_cast<double>(max_apdu_ + cfg.max_fragments * 64);
        return cfg.rate_burst_bytes != 0
                   ? std::max(static_cast<double>(cfg.rate_burst_bytes), min_depth)
                   : std::max(one_ms, min_depth);
    };
    odata_bucket_.rate = cfg.odata_rate_bytes_per_sec;
    odata_bucket_.depth = rate_depth(odata_bucket_.rate);
    odata_bucket_.tokens = odata_bucket_.depth;
    rdata_bucket_.rate = cfg.rdata_rate_bytes_per_sec;
    rdata_bucket_.depth = rate_depth(rdata_bucket_.rate);
    rdata_bucket_.tokens = rdata_bucket_.depth;
    repair_fraction_ = static_cast<double>(cfg.repair_budget_percent) / 100.0;
    requester_fraction_ = static_cast<double>(cfg.requester_budget_percent) / 100.0;
    min_credit_ = static_cast<double>(
        cfg.repair_burst_bytes != 0 ? cfg.repair_burst_bytes : kDefaultBurstPackets * cfg.max_tpdu);
    repair_credit_.bytes = min_credit_;
    // A receiver NAKs again only nak_rdata_ivl after an NCF: a faster repeat helps nobody.
    repeat_ivl_ns_ = std::max(cfg.timers.nak_elimination_ns, cfg.timers.nak_rdata_ivl_ns / 2);
    // Idle: no data for one NAK round of our own timers (a source sending steadily, at any
    // rate above one packet per round, earns from its data alone).
    idle_grace_ns_ =
        cfg.timers.nak_bo_ivl_ns + std::max(cfg.timers.nak_rpt_ivl_ns, cfg.timers.nak_rdata_ivl_ns);
}

std::int64_t Source::quiet_ns() const noexcept {
    return cfg_.close_quiet_ns >= 0 ? cfg_.close_quiet_ns : protocol::quiet_ns(cfg_.timers);
}

std::int64_t Source::linger_cap_ns() const noexcept {
    const std::int64_t cap =
        cfg_.close_cap_ns >= 0 ? cfg_.close_cap_ns : protocol::repair_limit_ns(cfg_.timers);
    return std::max(cap, quiet_ns());
}

bool Source::quiet(std::int64_t now_ns) const noexcept {
    if (now_ns - last_data_ns_ >= linger_cap_ns()) {
        return true;
    }
    // Flow control: every counted receiver has also said it consumed the last message.
    return repair_count_ == 0 && now_ns - std::max(last_data_ns_, last_nak_ns_) >= quiet_ns()
           && flow_.all_consumed(next_);
}

void Source::open(std::int64_t now_ns, PacketSink& sink) noexcept {
    last_data_ns_ = now_ns;
    odata_bucket_.last_ns = now_ns;
    rdata_bucket_.last_ns = now_ns;
    for (int i = 0; i < 3; ++i) {
        send_spm(now_ns, sink);
    }
    next_ambient_ns_ = now_ns + cfg_.timers.ambient_spm_ns;
}

bool Source::contains(Sqn s) const noexcept {
    return next_ != trail_ && precedes_or_equal(trail_, s) && precedes(s, next_);
}

// RFC 3208 §3.3 / Appendix F: the window advances with data; the oldest packet leaves when
// room is needed, unless it is still inside the configured retention time.
// Drops the `n` oldest packets from the window, unless the youngest of them is still inside
// the configured retention time (then nothing is dropped and the caller is back-pressured).
Result<void> Source::evict(std::uint32_t n, std::int64_t now_ns) noexcept {
    if (n == 0) {
        return {};
    }
    const Slot& youngest_evicted = slot(trail_ + (n - 1));
    if (cfg_.txw_retention_ns > 0 && now_ns - youngest_evicted.sent_ns < cfg_.txw_retention_ns) {
        ++counters_.back_pressured;
        return Errc::back_pressured;
    }
    trail_ = trail_ + n;
    counters_.window_evictions += n;
    return {};
}

Result<void> Source::make_room(std::uint32_t n, std::int64_t now_ns) noexcept {
    const std::uint32_t cap = mask_ + 1;
    if (n > cap) {
        return Errc::message_too_large;
    }
    if (flow_.active() && !flow_.allows(next_, n)) {
        flow_.note_blocked(now_ns);  // a receiver's window is full: the app retries
        note_held(true, now_ns);
        ++counters_.back_pressured;
        if (flow_.gate_closed() && now_ns >= gate_spm_ns_) {
            // Waiting for a tagged group: an SPM (at the next timer run) every 100 ms lets
            // receivers that joined since the last one know this source and send status.
            gate_spm_ns_ = now_ns + 100 * kMs;
            spmr_answer_due_ns_ = now_ns;
        }
        return Errc::back_pressured;
    }
    if (held_ || meter_ns_ < 0 || now_ns - meter_ns_ >= kMeterNs) {
        note_held(false, now_ns);
    }
    return evict(in_window() + n > cap ? in_window() + n - cap : 0, now_ns);
}

Result<std::byte*> Source::place(Sqn s, std::size_t bytes, std::int64_t now_ns) noexcept {
    const std::size_t n = (bytes + 63) & ~std::size_t{63};
    for (;;) {
        const std::size_t off =
            ring_fit(in_window() == 0, head_off_, slot(trail_).offset, n, buffers_.size());
        if (off != kNoFit) {
            slot(s).offset = static_cast<std::uint32_t>(off);
            head_off_ = off + n;
            return buffers_.data() + off;
        }
        if (in_window() == 0 || trail_ == s) {
            return Errc::message_too_large;
        }
        if (auto r = evict(1, now_ns); !r) {
            return r.error();
        }
    }
}

Result<Sqn> Source::send(std::span<const std::byte> apdu,
                         std::int64_t now_ns,
                         PacketSink& sink) noexcept {
    if (closed_) {
        return Errc::closed;
    }
    if (claim_active_) {
        return Errc::invalid_argument;  // commit or abort the claim first
    }
    if (apdu.size() > max_apdu_) {
        return Errc::message_too_large;
    }
    // Never put OPT_FRAGMENT on an APDU that fits one packet: OpenPGM receivers crash on it.
    const bool fragmented = apdu.size() > max_tsdu_;
    const std::size_t nfrag =
        fragmented ? (apdu.size() + max_frag_payload_ - 1) / max_frag_payload_ : 1;
    const std::size_t wire =
        apdu.size() + nfrag * (pgm::kDataHeaderBytes + (fragmented ? 20U : 0U));
    if (odata_bucket_.rate != 0) {
        odata_bucket_.refill(now_ns);
        if (odata_bucket_.tokens < static_cast<double>(wire)) {
            ++counters_.rate_limited;
            return Errc::rate_limited;
        }
    }
    if (auto r = make_room(static_cast<std::uint32_t>(nfrag), now_ns); !r) {
        return r.error();
    }
    (void)odata_bucket_.take(wire, now_ns);
    const Sqn first = next_;
    if (!fragmented) {
        auto placed = place(first, pgm::kDataHeaderBytes + apdu.size(), now_ns);
        if (!placed) {
            return placed.error();
        }
        std::byte* buf = *placed;
        if (!apdu.empty()) {
            std::memcpy(buf + pgm::kDataHeaderBytes, apdu.data(), apdu.size());
        }
        emit_odata(first, apdu.size(), nullptr, now_ns, sink, apdu.data());
    } else {
        std::size_t off = 0;
        while (off < apdu.size()) {
            const std::size_t len = std::min(max_frag_payload_, apdu.size() - off);
            const Sqn s = next_;
            auto placed = place(s, pgm::kDataHeaderBytes + pgm::kFragmentOptionBytes + len, now_ns);
            if (!placed) {
                return placed.error();  // cannot happen while the window invariant holds
            }
            std::byte* buf = *placed;
            std::memcpy(buf + pgm::kDataHeaderBytes + pgm::kFragmentOptionBytes, apdu.data() + off,
                        len);
            const pgm::FragmentInfo frag{first, static_cast<std::uint32_t>(off),
                                         static_cast<std::uint32_t>(apdu.size())};
            emit_odata(s, len, &frag, now_ns, sink);
            off += len;
        }
    }
    ++counters_.apdus_sent;
    after_data(now_ns);
    return first;
}

Result<std::span<std::byte>> Source::claim(std::size_t n, std::int64_t now_ns) noexcept {
    if (closed_) {
        return Errc::closed;
    }
    if (n > max_tsdu_) {
        return Errc::message_too_large;
    }
    if (odata_bucket_.rate != 0) {
        odata_bucket_.refill(now_ns);
        if (odata_bucket_.tokens < static_cast<double>(n + pgm::kDataHeaderBytes)) {
            ++counters_.rate_limited;
            return Errc::rate_limited;
        }
    }
    if (auto r = make_room(1, now_ns); !r) {
        return r.error();
    }
    auto placed = place(next_, pgm::kDataHeaderBytes + n, now_ns);
    if (!placed) {
        return placed.error();
    }
    claimed_ = n;
    claim_active_ = true;
    return std::span<std::byte>(*placed + pgm::kDataHeaderBytes, n);
}

Result<Sqn> Source::commit(std::size_t used, std::int64_t now_ns, PacketSink& sink) noexcept {
    if (!claim_active_ || used > claimed_) {
        return Errc::invalid_argument;
    }
    claimed_ = 0;
    claim_active_ = false;
    (void)odata_bucket_.take(used + pgm::kDataHeaderBytes, now_ns);
    const Sqn s = next_;
    emit_odata(s, used, nullptr, now_ns, sink);
    ++counters_.apdus_sent;
    after_data(now_ns);
    return s;
}

// Writes the ODATA header in front of the payload already in the slot and sends the packet.
void Source::emit_odata(Sqn s,
                        std::size_t len,
                        const pgm::FragmentInfo* frag,
                        std::int64_t now_ns,
                        PacketSink& sink,
                        const std::byte* copied_from) noexcept {
    std::byte* buf = slot_buf(s);
    Slot& sl = slot(s);
    const std::size_t hlen =
        pgm::kDataHeaderBytes + (frag != nullptr ? pgm::kFragmentOptionBytes : 0);
    if (frag == nullptr) {
        // Common case: the fixed 16-byte header from a template, then the variable fields.
        std::memcpy(buf, odata_template_.data(), pgm::kHeaderBytes);
        pgm::store_be16(buf + 14, static_cast<std::uint16_t>(len));
        pgm::store_be32(buf + 16, s.value);
        pgm::store_be32(buf + 20, trail_.value);
    } else {
        PacketSpec spec;
        spec.type = PacketType::odata;
        spec.sport = cfg_.tsi.sport;
        spec.dport = cfg_.dport;
        spec.gsi = cfg_.tsi.gsi;
        spec.tsdu_length = static_cast<std::uint16_t>(len);
        spec.sqn = s;
        spec.trail = trail_;
        spec.fragment = frag;
        (void)pgm::encode(std::span<std::byte>(buf, hlen), spec);
    }
    const std::span<const std::byte> payload(buf + hlen, len);
    if (cfg_.checksum && frag == nullptr) {
        // The header's sum from its values, not read back: a 16-byte load over the small
        // stores just made cannot be forwarded from them and stalls (a sixth of a 100-byte
        // send). The payload is summed where it was copied from, which is no longer in flight.
        std::uint32_t w = static_cast<std::uint32_t>(len) + (s.value >> 16U) + (s.value & 0xffffU)
                          + (trail_.value >> 16U) + (trail_.value & 0xffffU);
        w = (w & 0xffffU) + (w >> 16U);
        w = (w & 0xffffU) + (w >> 16U);
        const std::uint16_t head =
            pgm::csum_add(odata_template_sum_, static_cast<std::uint16_t>(w));
        const std::byte* body = copied_from != nullptr ? copied_from : buf + hlen;
        sl.packet_sum =
            pgm::csum_add(head, pgm::csum_partial(std::span<const std::byte>(body, len)));
        pgm::store_be16(buf + 6, pgm::csum_finish(sl.packet_sum));
    } else if (cfg_.checksum) {
        // One pass over header + payload (contiguous here; the checksum field is still 0).
        // The payload's own sum, needed for RDATA, is derived later from this one.
        sl.packet_sum = pgm::csum_partial(std::span<const std::byte>(buf, hlen + len));
        pgm::store_be16(buf + 6, pgm::csum_finish(sl.packet_sum));
    }
    sl.sqn = s;
    sl.sent_ns = now_ns;
    sl.last_rdata_ns = INT64_MIN / 2;
    sl.header_len = static_cast<std::uint16_t>(hlen);
    sl.tsdu_len = static_cast<std::uint16_t>(len);
    sl.has_fragment = frag != nullptr;
    sl.repair_pending = false;
    sl.rdata_count = 0;
    sl.waited_count = 0;
    if (frag != nullptr) {
        sl.fragment = *frag;
    }
    next_ = next_ + 1;
    ++counters_.odata_sent;
    counters_.bytes_sent += hlen + len;
    sink.emit(TxPacket{std::span<const std::byte>(buf, hlen), payload, Route::downstream, {}});
}

// RFC 3208 §5.1.5: heartbeat SPMs follow the last data packet at growing intervals.
void Source::after_data(std::int64_t now_ns) noexcept {
    last_data_ns_ = now_ns;
    heartbeat_index_ = 0;
    const std::int64_t first = cfg_.timers.heartbeat_spm_ns[0];
    next_heartbeat_ns_ = first > 0 ? now_ns + first : kNever;
}

void Source::send_spm(std::int64_t now_ns, PacketSink& sink) noexcept {
    PacketSpec spec;
    spec.type = PacketType::spm;
    spec.sport = cfg_.tsi.sport;
    spec.dport = cfg_.dport;
    spec.gsi = cfg_.tsi.gsi;
    spec.sqn = spm_sqn_;
    spec.trail = trail_;
    spec.lead = next_ - 1;  // empty window: lead = trail - 1 (RFC 3208 §3.3)
    spec.nla = cfg_.nla;
    spec.fin = closed_ && !reset_;
    spec.rst = reset_;
    const std::size_t n = pgm::encode(scratch_, spec);
    if (n == 0) {
        return;
    }
    if (cfg_.checksum) {
        pgm::store_checksum(std::span<std::byte>(scratch_.data(), n), 0);
    }
    ++spm_sqn_;
    ++counters_.spm_sent;
    counters_.bytes_sent += n;
    other_bytes_ += n;
    sink.emit(TxPacket{std::span<const std::byte>(scratch_.data(), n), {}, Route::downstream, {}});
    (void)now_ns;
}

void Source::on_packet(const pgm::Packet& p,
                       const Endpoint& from,
                       std::int64_t now_ns,
                       PacketSink& sink) noexcept {
    switch (p.type) {
        case PacketType::nak: handle_nak(p, from, now_ns, sink); break;
        case PacketType::nnak: ++counters_.nnak_received; break;
        case PacketType::ack: handle_ack(p, from, now_ns); break;
        case PacketType::spmr:
            // RFC 3208 §13.6: answer with an SPM, at most once per spmr_answer_ivl.
            ++counters_.spmr_received;
            answer_with_spm(now_ns, sink);
            break;
        default: break;
    }
}

// A receiver's status (flow control): ACK from our data-destination port with the status
// option. Without flow control on this side, ignored like OpenPGM ignores ACKs without PGMCC.
void Source::handle_ack(const pgm::Packet& p, const Endpoint& from, std::int64_t now_ns) noexcept {
    if (!flow_.active()) {
        return;
    }
    if (p.sport != cfg_.dport || !p.opts.has_status) {
        ++counters_.ack_invalid;
        return;
    }
    flow_.on_status(p.opts.status, from, next_, static_cast<std::uint32_t>(window_capacity()),
                    now_ns);
}

void Source::answer_with_spm(std::int64_t now_ns, PacketSink& sink) noexcept {
    if (now_ns - last_spmr_answer_ns_ >= cfg_.timers.spmr_answer_ivl_ns) {
        last_spmr_answer_ns_ = now_ns;
        send_spm(now_ns, sink);
    } else if (spmr_answer_due_ns_ == kNever) {
        spmr_answer_due_ns_ = last_spmr_answer_ns_ + cfg_.timers.spmr_answer_ivl_ns;
    }
}

void Source::on_timer(std::int64_t now_ns, PacketSink& sink) noexcept {
    if (repair_count_ != 0 && now_ns >= repair_retry_ns_) {
        flush_repairs(now_ns, sink);
    }
    if (now_ns >= flow_.next_deadline()) {
        (void)flow_.on_timer(next_, static_cast<std::uint32_t>(window_capacity()), now_ns);
    }
    bool spm_due = false;
    if (now_ns >= next_ambient_ns_) {
        spm_due = true;
        next_ambient_ns_ = now_ns + cfg_.timers.ambient_spm_ns;
    }
    if (now_ns >= next_heartbeat_ns_) {
        spm_due = true;
        ++heartbeat_index_;
        const std::int64_t ivl = heartbeat_index_ < cfg_.timers.heartbeat_spm_ns.size()
                                     ? cfg_.timers.heartbeat_spm_ns[heartbeat_index_]
                                     : 0;
        next_heartbeat_ns_ = ivl > 0 ? now_ns + ivl : kNever;
    }
    if (now_ns >= spmr_answer_due_ns_) {
        spm_due = true;
        last_spmr_answer_ns_ = now_ns;
        spmr_answer_due_ns_ = kNever;
    }
    if (spm_due) {
        send_spm(now_ns, sink);
    }
    if (fin_spms_left_ != 0) {
        --fin_spms_left_;
        send_spm(now_ns, sink);
    }
}

std::int64_t Source::next_deadline() const noexcept {
    std::int64_t d = std::min(
        {next_ambient_ns_, next_heartbeat_ns_, spmr_answer_due_ns_, flow_.next_deadline()});
    if (repair_count_ != 0) {
        d = std::min(d, repair_retry_ns_);
    }
    if (fin_spms_left_ != 0) {
        d = INT64_MIN;
    }
    return d;
}

void Source::close(std::int64_t now_ns, PacketSink& sink) noexcept {
    if (closed_) {
        return;
    }
    closed_ = true;
    send_spm(now_ns, sink);
    fin_spms_left_ = 2;  // 3 FIN SPMs in all, like pgm_close(sock, TRUE)
    after_data(now_ns);  // keep heartbeats going so late NAKers learn of the FIN
}

void Source::reset(std::int64_t now_ns, PacketSink& sink) noexcept {
    closed_ = true;
    reset_ = true;
    send_spm(now_ns, sink);
    fin_spms_left_ = 2;
    after_data(now_ns);
}

}  // namespace prizma::protocol
