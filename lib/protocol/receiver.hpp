// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <prizma/result.hpp>
#include <prizma/types.hpp>

#include "lib/pgm/packet.hpp"
#include "lib/protocol/config.hpp"
#include "lib/protocol/sink.hpp"
#include "lib/runtime/rng.hpp"

namespace prizma::protocol {

/// One source's share of the receiver counters (one source = one TSI).
struct PeerCounters {
    Tsi tsi{};
    std::uint64_t odata_received = 0;
    std::uint64_t rdata_received = 0;
    std::uint64_t duplicates = 0;
    std::uint64_t repaired = 0;
    std::uint64_t ncf_received = 0;
    std::uint64_t nak_sent = 0;
    std::uint64_t nak_sqns_sent = 0;
    std::uint64_t loss_events = 0;
    std::uint64_t lost_sqns = 0;
    std::uint64_t apdus_delivered = 0;
    std::uint64_t parity_dropped = 0;  ///< its parity data packets, dropped
    /// What its latest SPM's OPT_PARITY_PRM announces (0 without one): the transmission group
    /// size, and pgm::kParityPrmProactive | kParityPrmOnDemand.
    std::uint64_t fec_group_size = 0;
    std::uint64_t fec_modes = 0;
};

struct ReceiverCounters {
    std::uint64_t odata_received = 0;
    std::uint64_t rdata_received = 0;
    std::uint64_t bytes_received = 0;
    std::uint64_t duplicates = 0;
    std::uint64_t apdus_delivered = 0;
    std::uint64_t bytes_delivered = 0;
    std::uint64_t nak_sent = 0;        ///< NAK packets
    std::uint64_t nak_sqns_sent = 0;   ///< sequence numbers asked for (incl. NAK lists)
    std::uint64_t nak_suppressed = 0;  ///< §6.3 back-offs ended by another's NAK/NCF
    std::uint64_t ncf_received = 0;
    std::uint64_t spm_received = 0;
    std::uint64_t spmr_sent = 0;
    std::uint64_t spmr_suppressed = 0;
    std::uint64_t repaired = 0;  ///< missing sequence numbers later filled
    std::uint64_t loss_events = 0;
    std::uint64_t lost_sqns = 0;
    std::uint64_t outside_window = 0;  ///< data beyond the receive window, dropped (NAKed later)
    std::uint64_t oversize = 0;        ///< TSDU larger than max_tpdu allows
    std::uint64_t bad_fragment = 0;    ///< inconsistent OPT_FRAGMENT: APDU reported lost
    std::uint64_t foreign_dport = 0;   ///< another session's packets
    std::uint64_t peers_joined = 0;
    std::uint64_t peers_left = 0;
    std::uint64_t peers_refused = 0;     ///< new sources refused (table or memory full)
    std::uint64_t peers_evicted = 0;     ///< sources dropped to make room for a new one
    std::uint64_t refused = 0;           ///< packets moving state too far / from another sender
    std::uint64_t conflicts = 0;         ///< a sqn seen again with different bytes
    std::uint64_t resyncs = 0;           ///< windows moved by confirmed far SPMs (range lost)
    std::uint64_t repins = 0;            ///< sources whose sender moved (confirmed SPMs)
    std::uint64_t alloc_failures = 0;    ///< source storage the system refused (source refused)
    std::uint64_t repair_timeouts = 0;   ///< sqns lost at their absolute repair deadline
    std::uint64_t reassembly_steps = 0;  ///< fragments checked by reassembly (work bound)
    std::uint64_t status_sent = 0;       ///< flow-control status messages (ACKs) sent
    /// FEC (RFC 3208 §11.8), which prizma does not implement: parity ODATA/RDATA are never
    /// delivered (their sequence numbers are the group's, their bytes a code), and parity
    /// NAKs and NCFs never suppress, confirm or move anything.
    std::uint64_t parity_dropped = 0;  ///< parity data packets dropped
    std::uint64_t parity_refused = 0;  ///< parity NAKs (another receiver's) and NCFs ignored
    std::uint64_t fec_spms = 0;        ///< SPMs announcing FEC (OPT_PARITY_PRM)
};

/// What Receiver::poll hands to the application.
struct Event {
    enum class Kind : std::uint8_t {
        data,    ///< one APDU: sqn = its first sequence number, payload = the APDU
        loss,    ///< unrecoverable: sequence numbers [sqn, sqn + count) will never arrive
        joined,  ///< a new source (TSI) was heard
        left,    ///< the source closed (OPT_FIN), reset (OPT_RST) or expired
    };
    Kind kind = Kind::data;
    Tsi tsi{};
    Sqn sqn{};
    std::uint32_t count = 0;
    std::span<const std::byte> payload;
    std::int64_t rx_ns = 0;  ///< data: when its (last) packet was received; 0 otherwise
};

/// The receiving half of PGM (RFC 3208 §6): a receive window per source (TSI), gap detection,
/// the §6.3 NAK state machine with suppression, reassembly, SPMR, late join, peer expiry, and
/// loss reporting. Delivers each APDU at most once and in order per source; anything it cannot
/// recover becomes a loss event. Sans-I/O, one owner thread.
class Receiver {
public:
    /// `why`: as validate() gives it, when the configuration is refused.
    static Result<std::unique_ptr<Receiver>, Error> create(const ReceiverConfig& cfg);
    ~Receiver();
    Receiver(const Receiver&) = delete;
    Receiver& operator=(const Receiver&) = delete;
    Receiver(Receiver&&) = delete;
    Receiver& operator=(Receiver&&) = delete;

    /// Any downstream packet (SPM, ODATA, RDATA, NCF) or another receiver's NAK/SPMR.
    /// `rx_ns`: when the packet was received (the transport's timestamp), 0 = now_ns; data
    /// events carry it.
    void on_packet(const pgm::Packet& p,
                   const Endpoint& from,
                   std::int64_t now_ns,
                   PacketSink& sink,
                   std::int64_t rx_ns = 0) noexcept;
    void on_timer(std::int64_t now_ns, PacketSink& sink) noexcept;
    [[nodiscard]] std::int64_t next_deadline() const noexcept;
    /// Flow control: tells every source this receiver leaves (a status with the leaving
    /// flag), so that none waits for it. Call once, when the channel is removed.
    void leave(PacketSink& sink) noexcept;

    /// Takes the next event, in order per source; false when none is ready. The payload span
    /// stays valid until the next call of any Receiver method.
    bool next_event(Event& out) noexcept;

    /// Delivers up to `limit` events to `handler(const Event&)`; returns how many. State is
    /// advanced before the handler runs, so an exception from it leaves the receiver consistent.
    template <typename Handler>
    std::size_t poll(std::size_t limit, Handler&& handler) {
        std::size_t n = 0;
        Event ev;
        while (n < limit && next_event(ev)) {
            ++n;
            handler(static_cast<const Event&>(ev));
        }
        return n;
    }

    [[nodiscard]] const ReceiverCounters& counters() const noexcept { return counters_; }
    [[nodiscard]] std::size_t peer_count() const noexcept;
    /// Writes the counters of up to out.size() live sources (join order); returns how many.
    std::size_t source_counters(std::span<PeerCounters> out) const noexcept;
    [[nodiscard]] const ReceiverConfig& config() const noexcept { return cfg_; }
    /// A missing sqn is repaired or reported lost within this long of being found missing
    /// (plus one NAK interval), whatever other hosts' NAKs and NCFs do: the natural retry
    /// chain (back-off, then every NAK and NCF retry) of the timers.
    [[nodiscard]] std::int64_t repair_limit_ns() const noexcept { return repair_limit_ns_; }
    /// After a source's FIN, what is still missing is repaired or reported within this long.
    [[nodiscard]] std::int64_t fin_limit_ns() const noexcept { return fin_limit_ns_; }
    /// Bytes of one source's storage (window slots, payload ring, allocation records).
    [[nodiscard]] std::size_t peer_bytes() const noexcept { return peer_bytes_; }
    /// The most missing sqns one data packet may open (a sixteenth of the window, at least 1024, at
    /// most the window).
    [[nodiscard]] std::uint32_t max_gap() const noexcept { return max_gap_; }
    /// Bytes of source storage held now (at most the budget).
    [[nodiscard]] std::size_t storage_used() const noexcept { return storage_used_; }

    /// SPMs that must agree before a source's window moves further than a window at once,
    /// or its sender (address, NLA) changes.
    static constexpr std::uint8_t kConfirmSpms = 3;
    /// The furthest one SPM may move the SPM sequence number without confirmation.
    static constexpr std::uint32_t kMaxSpmJump = 1U << 16U;
    /// SPMRs a receiver sends for a source it has no SPM from (doubling intervals).
    static constexpr std::uint8_t kMaxSpmrs = 4;
    /// Fragments of one APDU at most (prizma publishers send at most 4096).
    static constexpr std::uint32_t kMaxApduFragments = 4096;

private:
    struct Peer;
    explicit Receiver(const ReceiverConfig& cfg);
    [[nodiscard]] std::unique_ptr<Peer> new_peer(bool prefault) const;
    Peer* find_or_add(const Gsi& gsi, std::uint16_t sport, std::int64_t now_ns) noexcept;
    Peer* claim_entry(const Tsi& tsi, std::int64_t now_ns) noexcept;
    void evict_one(std::int64_t now_ns) noexcept;
    void expire(Peer& p) noexcept;
    void free_storage(const Peer* p) noexcept;
    bool spm_confirmed(Peer& p,
                       const pgm::Packet& pkt,
                       const Endpoint& who,
                       std::int64_t now_ns) noexcept;
    [[nodiscard]] bool is_far(const Peer& p, const pgm::Packet& pkt) const noexcept;
    void resync(Peer& p, Sqn begin) noexcept;
    void lose_tail(Peer& p, Sqn last, std::int64_t now_ns) noexcept;
    void unpark(Peer& p, std::int64_t now_ns) noexcept;
    void park(Peer& p, Sqn s) const noexcept;
    void unpark_paced(Peer& p, std::int64_t now_ns) const noexcept;
    void refill_tokens(Peer& p, std::int64_t now_ns) const noexcept;
    [[nodiscard]] bool progressing(const Peer& p, std::int64_t now_ns) const noexcept;
    void spmr_timer(Peer& p, std::int64_t now_ns, PacketSink& sink) noexcept;
    void ask_lead(Peer& p, std::int64_t now_ns) const noexcept;
    bool admit_data(Peer& p, const pgm::Packet& pkt, std::int64_t now_ns) noexcept;
    void check_conflict(Peer& p, Sqn s, const pgm::Packet& pkt) noexcept;
    Peer* find(const Gsi& gsi, std::uint16_t sport) noexcept;
    void on_data(Peer& p, const pgm::Packet& pkt, std::int64_t now_ns, std::int64_t rx_ns) noexcept;
    void on_spm(Peer& p,
                const pgm::Packet& pkt,
                const Endpoint& from,
                std::int64_t now_ns) noexcept;
    void on_ncf(Peer& p, const pgm::Packet& pkt, std::int64_t now_ns) noexcept;
    void on_peer_nak(Peer& p, const pgm::Packet& pkt, std::int64_t now_ns) noexcept;
    void start(Peer& p, Sqn first, std::optional<Sqn> trail) const noexcept;
    void mark_missing(Peer& p, Sqn last, std::int64_t now_ns) noexcept;
    static void note_trail(Peer& p, Sqn trail) noexcept;
    enum class Assembly : std::uint8_t { delivered, waiting, broken };
    bool loss_event(Peer& p, Sqn s, Event& out) noexcept;
    Assembly reassemble(Peer& p, Sqn s, Event& out) noexcept;
    bool left_event(Peer& p, Event& out) noexcept;
    /// Counts `n` in a receiver total and in the source's own twin of it, together.
    void bump(Peer& p,
              std::uint64_t ReceiverCounters::*total,
              std::uint64_t PeerCounters::*own,
              std::uint64_t n = 1) noexcept;
    void apply_trail(Peer& p, std::int64_t now_ns) noexcept;
    void lose(Peer& p, Sqn s) noexcept;
    void lose_all_missing(Peer& p) noexcept;
    void run_naks(Peer& p, std::int64_t now_ns, PacketSink& sink) noexcept;
    void send_nak(Peer& p, std::span<const Sqn> sqns, PacketSink& sink) noexcept;
    void send_spmr(Peer& p, PacketSink& sink) noexcept;
    void send_status(Peer& p, bool leaving, PacketSink& sink) noexcept;
    bool peer_event(Peer& p, Event& out) noexcept;
    std::int64_t backoff(std::int64_t now_ns) noexcept;

    ReceiverConfig cfg_;
    std::uint32_t capacity_ = 0;
    std::size_t stride_ = 0;  // largest TSDU
    std::vector<std::unique_ptr<Peer>> peers_;
    std::vector<Peer*> live_;                          // peers in use, in join order
    std::size_t rr_ = 0;                               // round-robin start for delivery
    std::uint32_t run_ = 0;                            // events delivered from live_[rr_] in a row
    static constexpr std::uint32_t kDeliveryRun = 64;  // then another peer's turn
    std::vector<std::byte> reassembly_;
    std::vector<std::byte> scratch_;
    std::vector<std::uint32_t> due_;  // run_naks: slots whose NAK timer expired
    unsigned wheel_shift_ = 10;       // NAK timer wheel tick = 2^shift ns (from the timers)
    runtime::Rng rng_{0, 0};          // NAK back-offs: seeded from Config::seed
    // Key of the payload fingerprints (conflict detection): SipHash-2-4's 16 bytes, random.
    std::array<unsigned char, 16> print_key_{};
    std::int64_t repair_limit_ns_ = 0;
    static constexpr std::uint32_t kDefaultNakBurst = 512;  // ReceiverConfig::nak_burst_sqns 0
    std::uint32_t nak_burst_ = kDefaultNakBurst;            // NAK pacing
    std::int64_t fin_limit_ns_ = 0;
    std::uint32_t max_gap_ = 0;      // most missing sqns one data packet may open
    std::uint32_t status_step_ = 1;  // flow control: a status per this many sqns consumed
    std::size_t peer_bytes_ = 0;
    std::size_t storage_budget_ = 0;
    std::size_t storage_used_ = 0;
    ReceiverCounters counters_;
};

}  // namespace prizma::protocol
