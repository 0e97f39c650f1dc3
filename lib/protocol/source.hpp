// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include <prizma/result.hpp>

#include "lib/pgm/packet.hpp"
#include "lib/protocol/config.hpp"
#include "lib/protocol/flow_control.hpp"
#include "lib/protocol/sink.hpp"
#include "lib/runtime/page_buffer.hpp"

namespace prizma::protocol {

struct SourceCounters {
    std::uint64_t odata_sent = 0;
    std::uint64_t rdata_sent = 0;
    std::uint64_t bytes_sent = 0;
    std::uint64_t apdus_sent = 0;
    std::uint64_t spm_sent = 0;
    std::uint64_t ncf_sent = 0;
    std::uint64_t nak_received = 0;       ///< NAK packets accepted
    std::uint64_t nak_sqns_received = 0;  ///< sequence numbers asked for
    std::uint64_t nak_invalid = 0;        ///< wrong NLA/group/ports: dropped (docs/PROTOCOL.md §6)
    std::uint64_t nak_out_of_window = 0;  ///< sqns no longer (or not yet) in the window
    std::uint64_t nak_eliminated = 0;     ///< §5.3 repeats within max(nak_elimination,
                                          ///< nak_rdata_ivl / 2) of the sqn's RDATA
    std::uint64_t nnak_received = 0;
    std::uint64_t spmr_received = 0;
    std::uint64_t back_pressured = 0;
    std::uint64_t rate_limited = 0;
    std::uint64_t window_evictions = 0;
    std::uint64_t nak_ignored = 0;      ///< in-window sqns not repaired: a limit or budget
    std::uint64_t repairs_dropped = 0;  ///< queued repairs dropped (evicted, over budget)
    // Repair limits (docs/PROTOCOL.md, "Publisher repair limits"). nak_ignored is the sum of
    // the three *_limited counters.
    std::uint64_t rdata_queued = 0;           ///< sqns accepted for an RDATA
    std::uint64_t nak_requester_limited = 0;  ///< over the requester's share of the budget
    std::uint64_t nak_budget_limited = 0;     ///< over the source's repair budget
    std::uint64_t nak_repeat_limited = 0;     ///< the sqn had max_repairs_per_sqn RDATA
    std::uint64_t ncf_suppressed = 0;         ///< NAKs with nothing accepted, or no budget left
    std::uint64_t requesters_replaced = 0;    ///< requester table full: the oldest was forgotten
    std::uint64_t ack_invalid = 0;            ///< ACKs with wrong ports or no status option
    std::uint64_t nak_parity = 0;  ///< parity NAKs (FEC, not implemented): refused, no NCF
};

/// The sending half of a PGM transport session (RFC 3208 §5): transmit window, ODATA framing
/// and fragmentation, SPMs, NAK → NCF + RDATA, rate limits. Sans-I/O: time comes in as `now_ns`
/// and packets go out through a PacketSink. Not thread-safe: one owner thread.
class Source {
public:
    /// `why`: as validate() gives it, when the configuration is refused.
    static Result<std::unique_ptr<Source>, Error> create(const SourceConfig& cfg);

    /// Sends the 3 initial SPMs (as OpenPGM's pgm_connect does). Call once.
    void open(std::int64_t now_ns, PacketSink& sink) noexcept;

    /// Frames `apdu` as one ODATA, or as OPT_FRAGMENT ODATAs when it exceeds max_tsdu().
    /// Errors: message_too_large, back_pressured (window full within retention),
    /// rate_limited (ODATA budget short), closed.
    Result<Sqn> send(std::span<const std::byte> apdu,
                     std::int64_t now_ns,
                     PacketSink& sink) noexcept;

    /// Zero copy: reserves room for an APDU of up to `n` ≤ max_tsdu() bytes in the window and
    /// returns it; commit() sends the first `used` bytes. Nothing else may be sent between.
    Result<std::span<std::byte>> claim(std::size_t n, std::int64_t now_ns) noexcept;
    Result<Sqn> commit(std::size_t used, std::int64_t now_ns, PacketSink& sink) noexcept;
    void abort_claim() noexcept {
        claimed_ = 0;
        claim_active_ = false;
    }

    /// Handles a NAK, NNAK or SPMR addressed to this source (TSI already matched). `from`: the
    /// sender's transport address; NAKs are limited per requester host (its family and
    /// address, not its port).
    void on_packet(const pgm::Packet& p,
                   const Endpoint& from,
                   std::int64_t now_ns,
                   PacketSink& sink) noexcept;
    /// Runs due timers: SPMs, pending RDATA held back by the repair budget.
    void on_timer(std::int64_t now_ns, PacketSink& sink) noexcept;
    [[nodiscard]] std::int64_t next_deadline() const noexcept;

    /// Sends SPMs with OPT_FIN (3, as OpenPGM) and refuses further data; repairs go on.
    void close(std::int64_t now_ns, PacketSink& sink) noexcept;
    /// Closing without cutting a receiver's tail repair short (docs/PROTOCOL.md §3.2): after
    /// its last message a source keeps serving NAKs until quiet(): no NAK for quiet_ns() since
    /// the later of its last data and its last NAK, and no repair queued; or linger_cap_ns()
    /// after its last data, whatever comes.
    [[nodiscard]] bool quiet(std::int64_t now_ns) const noexcept;
    /// Two NAK rounds (back-off and the longer of NAK_RPT_IVL and NAK_RDATA_IVL) plus the
    /// first two heartbeat SPMs (which tell receivers the lead, revealing tail loss).
    [[nodiscard]] std::int64_t quiet_ns() const noexcept;
    /// The receivers' repair deadline (Receiver::repair_limit_ns() of the same timers).
    [[nodiscard]] std::int64_t linger_cap_ns() const noexcept;
    /// Aborts the session: SPMs with OPT_RST; receivers report everything missing as lost.
    void reset(std::int64_t now_ns, PacketSink& sink) noexcept;

    [[nodiscard]] std::size_t max_tsdu() const noexcept { return max_tsdu_; }
    [[nodiscard]] std::size_t max_apdu() const noexcept { return max_apdu_; }
    [[nodiscard]] Sqn trail() const noexcept { return trail_; }
    [[nodiscard]] Sqn next_sqn() const noexcept { return next_; }
    [[nodiscard]] const SourceCounters& counters() const noexcept { return counters_; }
    /// The bytes repair credit has been earned from so far: ODATA sent, plus the held and idle
    /// time credited at the recent ODATA rate (docs/PROTOCOL.md §3.1).
    [[nodiscard]] std::uint64_t credit_basis_bytes() const noexcept { return earning_bytes(); }
    /// Flow control: the receivers tracked and the limit they give (docs/PROTOCOL.md).
    [[nodiscard]] const FlowLimiter& flow() const noexcept { return flow_; }
    [[nodiscard]] const SourceConfig& config() const noexcept { return cfg_; }
    /// Repairs waiting for the RDATA rate budget (entries of sqns that left the window
    /// included), never more than window_capacity().
    [[nodiscard]] std::size_t repairs_queued() const noexcept { return repair_count_; }
    [[nodiscard]] std::size_t window_capacity() const noexcept { return mask_ + std::size_t{1}; }
    /// Requesters in the table (at most kMaxRequesters).
    static constexpr std::size_t kMaxRequesters = 64;
    /// A requester heard within this long shares the repair budget with the one asking.
    static constexpr std::int64_t kActiveNs = 1'000'000'000;
    /// The ODATA rate meter's interval (held credit).
    static constexpr std::int64_t kMeterNs = 1'000'000'000;
    /// One idle spell earns at most this many times the bytes in the transmit window: every
    /// packet repaired four times (a receiver that lost a burst, and the repairs it lost again).
    static constexpr double kIdleWindows = 8.0;
    /// The rate limit or the retention compares the times given to send()/claim()/commit():
    /// they must be exact. Otherwise those times only schedule heartbeat SPMs.
    [[nodiscard]] bool needs_exact_time() const noexcept {
        return cfg_.odata_rate_bytes_per_sec != 0 || cfg_.txw_retention_ns > 0;
    }

private:
    struct Slot {
        Sqn sqn{};
        std::uint32_t offset = 0;  // of the packet in buffers_
        std::int64_t sent_ns = 0;
        std::int64_t last_rdata_ns = INT64_MIN / 2;
        std::uint16_t header_len = 0;
        std::uint16_t tsdu_len = 0;
        std::uint16_t packet_sum = 0;  // ODATA header + payload, checksum field zero
        bool has_fragment = false;
        bool repair_pending = false;
        std::uint8_t rdata_count = 0;  // RDATA sent for this sqn (saturates at 255)
        // RDATA admitted for a counted receiver the source waits for: their own
        // max_repairs_per_sqn, so that other receivers' NAKs cannot spend it (saturates).
        std::uint8_t waited_count = 0;
        pgm::FragmentInfo fragment{};
    };
    /// A token bucket filled by data sent, not by time: `fraction` bytes of repair per ODATA
    /// byte (docs/PROTOCOL.md, "Publisher repair limits"). Earned lazily, when spent.
    struct Credit {
        double bytes = 0;
        std::uint64_t mark = 0;  // ODATA bytes sent when last earned
        void earn(std::uint64_t odata_bytes, double fraction, double depth) noexcept;
    };
    /// One NAKing host (transport family + address, any port).
    struct Requester {
        std::array<std::uint8_t, 16> addr{};
        std::uint16_t family = 0;
        bool used = false;
        std::int64_t last_ns = 0;
        Credit credit;
    };
    /// A queued repair and the credit paid for it (0: repaired outside the budget), given
    /// back to the budget when the repair is dropped unsent.
    struct QueuedRepair {
        Sqn sqn{};
        std::uint32_t paid = 0;
    };
    enum class Pay : std::uint8_t { ok, requester, budget };
    struct Bucket {
        std::uint64_t rate = 0;  // bytes per second; 0 = unlimited
        double tokens = 0;
        double depth = 0;
        std::int64_t last_ns = 0;
        void refill(std::int64_t now_ns) noexcept;
        [[nodiscard]] bool take(std::size_t bytes, std::int64_t now_ns) noexcept;
        [[nodiscard]] std::int64_t when_available(std::size_t bytes,
                                                  std::int64_t now_ns) const noexcept;
    };

    explicit Source(const SourceConfig& cfg);  // throws std::bad_alloc (window storage)
    [[nodiscard]] std::uint32_t in_window() const noexcept { return next_.value - trail_.value; }
    [[nodiscard]] bool contains(Sqn s) const noexcept;
    Slot& slot(Sqn s) noexcept { return slots_[s.value & mask_]; }
    std::byte* slot_buf(Sqn s) noexcept { return buffers_.data() + slot(s).offset; }
    Result<void> make_room(std::uint32_t n, std::int64_t now_ns) noexcept;
    Result<void> evict(std::uint32_t n, std::int64_t now_ns) noexcept;
    Result<std::byte*> place(Sqn s, std::size_t bytes, std::int64_t now_ns) noexcept;
    /// `copied_from`: the APDU the payload was just copied from (unfragmented sends), summed
    /// there instead of in the slot; nullptr sums the slot (claim/commit, fragments).
    void emit_odata(Sqn s,
                    std::size_t len,
                    const pgm::FragmentInfo* frag,
                    std::int64_t now_ns,
                    PacketSink& sink,
                    const std::byte* copied_from = nullptr) noexcept;
    void after_data(std::int64_t now_ns) noexcept;
    void send_spm(std::int64_t now_ns, PacketSink& sink) noexcept;
    void answer_with_spm(std::int64_t now_ns, PacketSink& sink) noexcept;
    void handle_ack(const pgm::Packet& p, const Endpoint& from, std::int64_t now_ns) noexcept;
    void handle_nak(const pgm::Packet& p,
                    const Endpoint& from,
                    std::int64_t now_ns,
                    PacketSink& sink) noexcept;
    /// Accepts in-window `s` for an RDATA unless a limit says no (counted).
    bool admit(Sqn s, Requester& rq, std::int64_t now_ns) noexcept;
    void push_repair(Sqn s, std::uint32_t paid) noexcept;
    void drop_stale_repairs() noexcept;
    void drop_repair(const QueuedRepair& q) noexcept;
    void flush_repairs(std::int64_t now_ns, PacketSink& sink) noexcept;
    void send_ncf(const pgm::Packet& p,
                  std::span<const Sqn> sqns,
                  Requester& rq,
                  PacketSink& sink) noexcept;
    [[nodiscard]] std::uint64_t odata_bytes() const noexcept {
        return counters_.bytes_sent - other_bytes_;
    }
    [[nodiscard]] std::size_t window_bytes() const noexcept;
    /// ODATA bytes sent plus the bytes credited while flow control held the source back:
    /// what repair credit is earned from.
    [[nodiscard]] std::uint64_t earning_bytes() const noexcept {
        return odata_bytes() + static_cast<std::uint64_t>(held_bytes_ + idle_bytes_);
    }
    /// The ODATA rate of the last one to two seconds, up to `end_ns` (bytes per ns).
    [[nodiscard]] double recent_rate(std::int64_t end_ns) const noexcept;
    /// Credits the idle time since the last count (docs/PROTOCOL.md §3.1, "Idle credit").
    void count_idle(std::int64_t now_ns) noexcept;
    /// What the current idle spell has earned so far (0 outside one).
    [[nodiscard]] double idle_spell_credit() const noexcept {
        return idle_spell_ns_ == last_data_ns_ ? idle_spell_bytes_ : 0.0;
    }
    /// Flow control refused a send (`true`) or let one through (`false`).
    void note_held(bool held, std::int64_t now_ns) noexcept;
    /// Credits the time held since the last count at the rate measured before the hold.
    void count_held(std::int64_t now_ns) noexcept;
    Requester* find_requester(const Endpoint& from) noexcept;
    Requester& requester(const Endpoint& from, std::int64_t now_ns) noexcept;
    void earn(Requester& rq, std::int64_t now_ns) noexcept;
    /// Requesters heard within kActiveNs (at least 1: the one asking).
    [[nodiscard]] std::size_t active_requesters(std::int64_t now_ns) const noexcept;
    /// Takes `bytes` from the requester's and the source's credit, or from neither.
    Pay pay(Requester& rq, std::size_t bytes) noexcept;

    SourceConfig cfg_;
    std::size_t max_tsdu_ = 0;
    std::size_t max_frag_payload_ = 0;
    std::size_t max_apdu_ = 0;
    std::uint32_t mask_ = 0;
    std::vector<Slot> slots_;
    runtime::PageBuffer buffers_;             // packets packed in send order (cache-friendly)
    std::size_t head_off_ = 0;                // where the next packet goes in buffers_
    std::vector<QueuedRepair> repair_queue_;  // ring, capacity = window capacity
    std::size_t repair_head_ = 0;
    std::size_t repair_count_ = 0;
    std::vector<std::byte> scratch_;  // SPM / NCF / RDATA headers
    std::array<std::byte, pgm::kDataHeaderBytes> odata_template_{};
    std::uint16_t odata_template_sum_ = 0;  ///< checksum of its fixed 16 bytes
    Sqn trail_{};
    Sqn next_{};
    Sqn spm_sqn_{};
    std::size_t claimed_ = 0;
    bool claim_active_ = false;
    bool closed_ = false;
    bool reset_ = false;
    std::uint8_t fin_spms_left_ = 0;
    std::int64_t next_ambient_ns_ = kNever;
    std::int64_t next_heartbeat_ns_ = kNever;
    std::size_t heartbeat_index_ = 0;
    std::int64_t last_spmr_answer_ns_ = INT64_MIN / 2;
    std::int64_t spmr_answer_due_ns_ = kNever;
    std::int64_t repair_retry_ns_ = kNever;
    std::int64_t gate_spm_ns_ = 0;   // flow control: the next SPM while the group gate is shut
    std::int64_t last_data_ns_ = 0;  // quiet(): the last ODATA sent
    std::int64_t last_nak_ns_ = INT64_MIN / 2;  // quiet(): the last valid NAK heard
    Bucket odata_bucket_;
    Bucket rdata_bucket_;
    // Repair limits: fractions of ODATA bytes, the least credit saved, the repeat interval
    // of one sqn's RDATA, and how long credit earned is saved.
    double repair_fraction_ = 0;
    double requester_fraction_ = 0;
    double min_credit_ = 0;
    std::int64_t repeat_ivl_ns_ = 0;
    std::uint64_t other_bytes_ = 0;  // bytes_sent that were not ODATA (SPM, NCF, RDATA)
    // Held credit (docs/PROTOCOL.md §3.1): while flow control holds the source back it earns
    // repair credit at the ODATA rate it had before, so a receiver it waits for is repaired
    // although no new data flows. The rate is measured over the last one to two seconds.
    bool held_ = false;
    std::int64_t held_count_ns_ = 0;  // held time credited up to here
    double held_rate_ = 0;            // ODATA bytes per ns before the hold
    double held_bytes_ = 0;
    // Idle credit (docs/PROTOCOL.md §3.1): a source that fell quiet after its data earns at its
    // recent ODATA rate from idle_grace_ns_ after its last data, for the receivers' repair
    // limit, so that a receiver that lost a burst is repaired from the window.
    std::int64_t idle_grace_ns_ = 0;
    std::int64_t idle_counted_ns_ = 0;  // idle time credited up to here
    double idle_bytes_ = 0;
    std::int64_t idle_spell_ns_ = -1;  // the last data of the idle spell being credited
    double idle_spell_bytes_ = 0;      // credited in it (at most kIdleWindows windows)
    std::int64_t meter_ns_ = -1;  // the rate meter's current interval (-1: none yet): start, bytes
    std::uint64_t meter_bytes_ = 0;
    std::int64_t meter_prev_ns_ = 0;  // ... and the interval before it: length, bytes
    std::uint64_t meter_prev_bytes_ = 0;
    Credit repair_credit_;
    std::array<Requester, kMaxRequesters> requesters_{};
    FlowLimiter flow_;
    SourceCounters counters_;
};

}  // namespace prizma::protocol
