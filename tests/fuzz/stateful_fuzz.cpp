// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: a Source and a Receiver (sans-I/O, manual clock) driven by a little
// program, the fuzz input. The first bytes pick a small configuration (windows of 16-512
// sqns, max_peers 3, lan timers) so that windows wrap; then each step is an opcode byte and
// its fields:
//   clock     advance the clock (µs or 100 ms units), run the timers, jump to the next deadline
//   publish   send an APDU (send() or claim()/commit(); up to 5 fragments), close or reset
//   network   the source's packets wait in a downstream queue and the receiver's NAKs/SPMRs in
//             an upstream one: deliver, drop, duplicate or swap their heads
//   forge     a packet of any type (SPM/ODATA/RDATA/NCF/NAK/NNAK/SPMR) for the source's TSI or
//             two others, sqn/trail/lead relative to a running base (small, 16-bit, 2^31 or raw
//             offsets), payload, OPT_FRAGMENT/FIN/RST/NAK list, from one of 3 senders
//   poll      take the receiver's events
// At the end the network turns lossless and quiet for 40 simulated seconds.
// Input: config bytes b0 (bit 0 from_trail join, 1 storage for 2 sources, 2-4 = 7 passive,
// 5-6 initial sqn, 7 RDATA rate limit), b1 (bits 0-1 txw, 2-3 rxw, 4-5 max_recover, 6
// preallocated peers, 7 repair budget 10%), seed, [u32 initial sqn], u32 x2 forged bases; then
// steps, op & 15: 0/1 advance µs/100 ms, 2 timers, 3 next deadline, 4 publish (op & 0x10:
// claim/commit), 5-6 deliver 1 + op >> 4 downstream, 7 drop, 8 duplicate/swap, 9 deliver
// upstream, 10 drop upstream, 11-13 forge, 14 poll, 15 publish small (0xff: close/reset).
// PRIZMA_FUZZ_TRACE=1 prints every step, packet and event (to read a reproducer).
//
// After every step the invariants are checked; a violation aborts (libFuzzer reports it):
//   * events per TSI: joined first, then data/loss in sqn order, contiguous and never going
//     back (exactly contiguous where a data event's span is known), nothing after left
//   * the source's TSI, while no forged packet could have been taken for it (the receiver
//     pinned the source's address at its first SPM): every data event is a published APDU
//     byte for byte, no sqn past the source's next one, no payload conflict, and after the
//     quiet end every sqn up to the source's next one was delivered or reported lost
//   * counters never go back; loss_events/apdus_delivered/peers_left match the events;
//     nak_ignored is the sum of its three causes; the source's RDATA+NCF bytes stay within its
//     repair budget; storage_used() <= budget; peer_count() <= max_peers
//   * after on_timer(now), next_deadline() > now (the Source within 3 runs: its FIN SPMs)
//   * the forged sources, silent longer than the peer expiry at the quiet end, have left
//   * every packet either side sends parses with a valid checksum; RDATA repeats its ODATA
//     byte for byte and only for sqns in the transmit window
//   * a forged parity packet (ODATA, RDATA, NAK or NCF with the parity bit) moves no counter
//     but its own and takes no storage: FEC is not implemented, parity is never data
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "lib/pgm/checksum.hpp"
#include "lib/pgm/packet.hpp"
#include "lib/protocol/receiver.hpp"
#include "lib/protocol/source.hpp"

namespace {

using prizma::Endpoint;
using prizma::Gsi;
using prizma::Tsi;
using prizma::TxPacket;
using prizma::pgm::distance;
using prizma::pgm::Nla;
using prizma::pgm::PacketSpec;
using prizma::pgm::PacketType;
using prizma::pgm::precedes;
using prizma::pgm::precedes_or_equal;
using prizma::pgm::Sqn;
using prizma::protocol::Event;
using prizma::protocol::kMs;
using prizma::protocol::kSec;
using prizma::protocol::kUs;
using prizma::protocol::Receiver;
using prizma::protocol::ReceiverCounters;
using prizma::protocol::Source;
using prizma::protocol::SourceCounters;

bool env_flag(const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}
const bool kTrace = env_flag("PRIZMA_FUZZ_TRACE");
// These invariants were broken by the library until the stateful fuzzer found them; each has
// its regression input in corpus_stateful/known_* and they are always checked now
// (PRIZMA_FUZZ_LENIENT=1 skips them, to look for anything else in an old build):
//   * no data or loss event for a TSI after its `left` event
//   * a source that expires or is evicted with an incomplete fragmented APDU at the head of
//     its window leaves, with a loss event
//   * two resyncs of a source before the application polls are reported as one loss event
//     from the first one's start
//   * after a source's reset(), every sqn up to its next one is delivered or reported lost
// (known_nak_retries_unbatched breaks no invariant: with PRIZMA_FUZZ_TRACE=1 it shows a gap's
// NAK retries going out one sqn per NAK, one timer run each; left as it is: batching them
// made honest repair under loss worse, see the hostile tests.)
const bool kStrict = !env_flag("PRIZMA_FUZZ_LENIENT");

void trace_packet(const char* what, const prizma::pgm::Packet& p, std::int64_t now_ns) {
    if (!kTrace) {
        return;
    }
    std::fprintf(stderr,
                 "%10.6f %-12s type=%u gsi0=%02x sport=%u dport=%u sqn=%u trail=%u lead=%u "
                 "tsdu=%zu frag=%d(%u,%u,%u) fin=%d rst=%d list=%u\n",
                 static_cast<double>(now_ns) / 1e9, what, static_cast<unsigned>(p.type),
                 p.gsi.bytes[0], p.sport, p.dport, p.sqn.value, p.trail.value, p.lead.value,
                 p.payload.size(), p.opts.has_fragment ? 1 : 0, p.opts.fragment.first_sqn.value,
                 p.opts.fragment.offset, p.opts.fragment.apdu_length, p.opts.fin ? 1 : 0,
                 p.opts.rst ? 1 : 0, static_cast<unsigned>(p.opts.nak_list_count));
}

[[noreturn]] void violated(const char* what, int line) {
    std::fprintf(stderr, "stateful_fuzz: invariant violated (line %d): %s\n", line, what);
    std::abort();
}
#define CHECK(cond, what)               \
    do {                                \
        if (!(cond)) {                  \
            violated((what), __LINE__); \
        }                               \
    } while (0)

constexpr std::uint16_t kDport = 7500;
constexpr std::size_t kMaxTpdu = 300;  // TSDU 276, fragments of 256 bytes
constexpr std::size_t kMaxSteps = 3000;
constexpr std::size_t kQueueCap = 2048;
constexpr std::int64_t kQuietNs = 40 * kSec;  // > peer expiry (30 s): forged sources leave

Endpoint ipv4(std::uint8_t last, std::uint16_t port) {
    Endpoint e;
    e.family = 2;
    e.port = port;
    e.addr = {10, 0, 0, last};
    return e;
}

// The source's address; the attacker's senders: the source's address spoofed (another port),
// and two other hosts; the receiver's address (its NAKs reach the source from there).
const Endpoint kSourceEp = ipv4(1, 7501);
const std::array<Endpoint, 3> kForgeEps{ipv4(1, 40000), ipv4(2, 40000), ipv4(3, 40000)};
const Endpoint kReceiverEp = ipv4(9, 7500);
const Nla kSourceNla = Nla::ipv4(10, 0, 0, 1);
const Nla kOtherNla = Nla::ipv4(10, 0, 0, 66);
const Nla kGroup = Nla::ipv4(239, 1, 1, 1);
const Gsi kGsi{{0x10, 0x20, 0x30, 0x40, 0x50, 0x60}};
// The source's TSI, one with another GSI, one with another port.
const std::array<Tsi, 3> kTsis{
    Tsi{kGsi, 1000}, Tsi{Gsi{{0x66, 0x20, 0x30, 0x40, 0x50, 0x60}}, 1000}, Tsi{kGsi, 1001}};

class Input {
public:
    explicit Input(std::span<const std::uint8_t> d) : d_(d) {}
    [[nodiscard]] bool empty() const { return pos_ >= d_.size(); }
    std::uint8_t u8() { return pos_ < d_.size() ? d_[pos_++] : 0; }
    std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (u8() << 8U)); }
    std::uint32_t u32() { return u16() | (static_cast<std::uint32_t>(u16()) << 16U); }
    // An sqn near `base`: a small, a 16-bit, a ~2^31 offset, or any number.
    Sqn rel(Sqn base) {
        const std::uint8_t m = u8();
        switch (m >> 6U) {
            case 0: return base + static_cast<std::uint32_t>(static_cast<int>(m & 63U) - 32);
            case 1: return base + static_cast<std::uint32_t>(static_cast<std::int16_t>(u16()));
            case 2: return base + (0x80000000U + static_cast<std::uint32_t>((m & 63U) - 32));
            default: return Sqn{u32()};
        }
    }

private:
    std::span<const std::uint8_t> d_;
    std::size_t pos_ = 0;
};

std::vector<std::byte> gather(const TxPacket& p) {
    std::vector<std::byte> b(p.header.begin(), p.header.end());
    b.insert(b.end(), p.payload.begin(), p.payload.end());
    return b;
}

bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

bool parses(std::span<const std::byte> b, prizma::pgm::Packet& out) {
    return prizma::pgm::parse(b, out) == prizma::pgm::ParseStatus::ok;
}

struct Published {
    std::vector<std::byte> apdu;
    std::uint32_t fragments = 1;
};

// What the source sent of one sqn (ODATA): RDATA must repeat it.
struct Sent {
    std::vector<std::byte> tsdu;
    bool has_fragment = false;
    prizma::pgm::FragmentInfo fragment{};
};

// The event stream of one TSI as the application sees it.
struct Track {
    bool joined = false;
    bool left = false;
    bool have_pos = false;
    Sqn lo{};  // the next event starts within [lo, hi]
    Sqn hi{};
};

template <typename Counters>
void check_monotonic(const Counters& now, Counters& before, const char* what) {
    static_assert(sizeof(Counters) % sizeof(std::uint64_t) == 0);
    constexpr std::size_t n = sizeof(Counters) / sizeof(std::uint64_t);
    std::array<std::uint64_t, n> a{};
    std::array<std::uint64_t, n> b{};
    std::memcpy(a.data(), &now, sizeof(Counters));
    std::memcpy(b.data(), &before, sizeof(Counters));
    for (std::size_t i = 0; i < n; ++i) {
        CHECK(a[i] >= b[i], what);
    }
    before = now;
}

class Harness;

struct SourceSink final : prizma::protocol::PacketSink {
    Harness* h = nullptr;
    void emit(const TxPacket& p) noexcept override;
};

struct ReceiverSink final : prizma::protocol::PacketSink {
    Harness* h = nullptr;
    void emit(const TxPacket& p) noexcept override;
};

class Harness {
public:
    explicit Harness(Input& in) : in_(in) {
        src_sink_.h = this;
        rx_sink_.h = this;
        configure();
    }

    void run() {
        src_->open(now_, src_sink_);
        check_state();
        for (std::size_t step = 0; step < kMaxSteps && !in_.empty(); ++step) {
            one_step();
            check_state();
        }
        quiet_end();
    }

    void on_source_packet(const TxPacket& tx);
    void on_receiver_packet(const TxPacket& tx);

private:
    void configure();
    void one_step();
    void run_timers();
    void publish(std::size_t len, bool zero_copy);
    void deliver_down();
    void deliver_up();
    void forge();
    void poll(std::size_t limit);
    void on_event(const Event& ev);
    void check_state();
    void quiet_end();
    [[nodiscard]] bool source_tsi(const prizma::pgm::Packet& p) const {
        return p.source_tsi() == kTsis[0];
    }

    Input& in_;
    std::int64_t now_ = 1 * kSec;
    std::unique_ptr<Receiver> rx_;
    std::unique_ptr<Source> src_;
    prizma::protocol::ReceiverConfig rc_;
    std::size_t rx_budget_ = 0;
    SourceSink src_sink_;
    ReceiverSink rx_sink_;
    std::deque<std::vector<std::byte>> down_;  // source -> receiver
    std::deque<std::vector<std::byte>> up_;    // receiver -> source (unicast NAK, SPMR)
    std::unordered_map<std::uint32_t, Published> published_;  // by first sqn
    std::unordered_map<std::uint32_t, Sent> sent_;            // ODATA by sqn
    std::array<Track, 3> tracks_{};
    std::array<Sqn, 3> base_{};      // forged data sqns are relative to it (TSI 0: source's next)
    std::array<Sqn, 3> spm_base_{};  // forged SPM sqns likewise (TSI 0: source's next SPM sqn)
    Sqn src_spm_next_{};
    // A forged packet for the source's TSI may have been taken: from the source's own address,
    // or while the receiver had not pinned the source (its first SPM) or not heard a new SPM
    // from it within an ambient interval. Then its content and completeness are not checked.
    bool tainted_ = false;
    bool real_spm_seen_ = false;
    std::int64_t real_spm_ns_ = 0;
    Sqn real_spm_max_{};
    bool closed_ = false;
    bool reset_ = false;
    std::array<bool, 3> fragments_{};  // a packet with OPT_FRAGMENT was forged for the TSI
    std::int64_t real_heard_ns_ = 0;   // the source's last packet handed to the receiver
    bool may_expire0_ = false;         // the source's TSI may have expired or been evicted
    // Bytes the source spent of its repair budget, and what earns it.
    std::uint64_t repair_bytes_ = 0;
    std::uint64_t odata_bytes_ = 0;
    double repair_fraction_ = 1.0;
    double repair_burst_ = 0;
    // Events seen, against the counters.
    std::uint64_t data_events_ = 0;
    std::uint64_t loss_events_ = 0;
    std::uint64_t left_events_ = 0;
    std::uint64_t joined_events_ = 0;
    std::uint64_t lost_reported_ = 0;
    std::uint64_t resyncs_polled_ = 0;  // the receiver's resyncs when events were last taken
    ReceiverCounters rx_before_{};
    SourceCounters src_before_{};
    std::uint32_t msg_index_ = 0;
};

void SourceSink::emit(const TxPacket& p) noexcept {
    h->on_source_packet(p);
}

void ReceiverSink::emit(const TxPacket& p) noexcept {
    h->on_receiver_packet(p);
}

void Harness::configure() {
    const std::uint8_t b0 = in_.u8();
    const std::uint8_t b1 = in_.u8();
    const std::uint8_t seed = in_.u8();
    prizma::protocol::SourceConfig sc;
    sc.tsi = kTsis[0];
    sc.dport = kDport;
    sc.nla = kSourceNla;
    sc.group = kGroup;
    sc.txw_sqns = 16U << (b1 & 3U);  // 16 .. 128
    sc.max_tpdu = kMaxTpdu;
    sc.timers = prizma::protocol::preset(prizma::protocol::Preset::lan);
    switch ((b0 >> 5U) & 3U) {
        case 0: sc.initial_sqn = Sqn{0}; break;
        case 1: sc.initial_sqn = Sqn{0xffffffc0U}; break;  // wraps soon
        case 2: sc.initial_sqn = Sqn{0x7fffffc0U}; break;
        default: sc.initial_sqn = Sqn{in_.u32()}; break;
    }
    if ((b0 & 0x80U) != 0) {
        sc.rdata_rate_bytes_per_sec = 200'000;
        sc.max_repairs_per_sqn = 2;
    }
    if ((b1 & 0x80U) != 0) {
        sc.repair_budget_percent = 10;
        sc.requester_budget_percent = 5;
    }
    repair_fraction_ = static_cast<double>(sc.repair_budget_percent) / 100.0;
    repair_burst_ = 64.0 * static_cast<double>(kMaxTpdu);
    auto src = Source::create(sc);
    CHECK(src.has_value(), "Source::create refused the configuration");
    src_ = std::move(*src);

    rc_.dport = kDport;
    rc_.group = kGroup;
    rc_.rxw_sqns = 64U << ((b1 >> 2U) & 3U);  // 64 .. 512
    rc_.max_tpdu = kMaxTpdu;
    rc_.max_peers = 3;
    rc_.preallocated_peers = 1U + ((b1 >> 6U) & 1U);
    rc_.join = (b0 & 1U) != 0 ? prizma::protocol::JoinPolicy::from_trail
                              : prizma::protocol::JoinPolicy::first_packet;
    rc_.max_recover_sqns = std::min(8U << ((b1 >> 4U) & 3U), rc_.rxw_sqns - 1);  // 8 .. 63
    rc_.passive = ((b0 >> 2U) & 7U) == 7U;
    rc_.seed = seed;
    rc_.timers = prizma::protocol::preset(prizma::protocol::Preset::lan);
    auto rx = Receiver::create(rc_);
    CHECK(rx.has_value(), "Receiver::create refused the configuration");
    rx_ = std::move(*rx);
    if ((b0 & 2U) != 0) {  // storage for 2 sources: the third is refused or evicts one
        rc_.storage_budget_bytes = 2 * rx_->peer_bytes();
        auto tight = Receiver::create(rc_);
        CHECK(tight.has_value(), "Receiver::create refused the configuration");
        rx_ = std::move(*tight);
    }
    rx_budget_ =
        rc_.storage_budget_bytes != 0
            ? std::max(rc_.storage_budget_bytes, rc_.preallocated_peers * rx_->peer_bytes())
            : std::max<std::size_t>(rc_.preallocated_peers, 4) * rx_->peer_bytes();
    base_ = {src_->next_sqn(), Sqn{in_.u32()}, Sqn{0xfffffff0U}};
    spm_base_ = {Sqn{}, Sqn{in_.u32()}, Sqn{0}};
    src_spm_next_ = Sqn{0};
}

void Harness::on_source_packet(const TxPacket& tx) {
    std::vector<std::byte> b = gather(tx);
    prizma::pgm::Packet p;
    CHECK(parses(b, p), "a packet the source sent does not parse (or its checksum is wrong)");
    CHECK(tx.route == prizma::Route::downstream, "the source sent a unicast packet");
    CHECK(p.source_tsi() == kTsis[0], "the source sent another TSI");
    const std::size_t wire = b.size();
    switch (p.type) {
        case PacketType::odata: {
            CHECK(precedes(p.sqn, src_->next_sqn()) && precedes_or_equal(src_->trail(), p.sqn),
                  "ODATA outside the transmit window");
            CHECK(p.trail == src_->trail(), "ODATA trail is not the source's trail");
            sent_[p.sqn.value] = Sent{std::vector<std::byte>(p.payload.begin(), p.payload.end()),
                                      p.opts.has_fragment, p.opts.fragment};
            odata_bytes_ += wire;
            break;
        }
        case PacketType::rdata: {
            CHECK(precedes(p.sqn, src_->next_sqn()) && precedes_or_equal(src_->trail(), p.sqn),
                  "RDATA outside the transmit window");
            const auto it = sent_.find(p.sqn.value);
            CHECK(it != sent_.end(), "RDATA of a sqn never sent");
            const Sent& s = it->second;
            CHECK(same_bytes(s.tsdu, p.payload), "RDATA payload differs from its ODATA");
            CHECK(s.has_fragment == p.opts.has_fragment
                      && (!s.has_fragment
                          || (s.fragment.first_sqn == p.opts.fragment.first_sqn
                              && s.fragment.offset == p.opts.fragment.offset
                              && s.fragment.apdu_length == p.opts.fragment.apdu_length)),
                  "RDATA OPT_FRAGMENT differs from its ODATA");
            CHECK(p.trail == src_->trail(), "RDATA trail is not the source's trail");
            repair_bytes_ += wire;
            break;
        }
        case PacketType::ncf: repair_bytes_ += wire; break;
        case PacketType::spm:
            CHECK(p.sqn == src_spm_next_, "SPM sequence numbers not consecutive");
            CHECK(p.trail == src_->trail() && p.lead == src_->next_sqn() - 1,
                  "SPM trail/lead are not the window's");
            CHECK(p.nla == kSourceNla, "SPM with another NLA");
            src_spm_next_ = p.sqn + 1;
            break;
        default: CHECK(false, "the source sent an upstream packet");
    }
    // Budget: RDATA + NCF bytes within the initial credit plus the share earned by ODATA (the
    // source counts header + TSDU: the same bytes) and by the idle time after it, which is
    // credited at most at the rate of the data before, for one repair limit per idle spell.
    const auto basis = src_->credit_basis_bytes();
    CHECK(basis >= odata_bytes_, "the credit basis lost ODATA bytes");
    CHECK(static_cast<double>(repair_bytes_)
              <= repair_burst_ + repair_fraction_ * static_cast<double>(basis) + 1.0,
          "the source spent more on repairs than its repair budget");
    if (down_.size() == kQueueCap) {
        down_.pop_front();
    }
    down_.push_back(std::move(b));
}

void Harness::on_receiver_packet(const TxPacket& tx) {
    std::vector<std::byte> b = gather(tx);
    prizma::pgm::Packet p;
    CHECK(parses(b, p), "a packet the receiver sent does not parse (or its checksum is wrong)");
    CHECK(p.type == PacketType::nak || p.type == PacketType::spmr,
          "the receiver sent something other than NAK or SPMR");
    CHECK(p.sport == kDport, "receiver's upstream packet not from its data port");
    bool known = false;
    for (const Tsi& t : kTsis) {
        known = known || p.source_tsi() == t;
    }
    CHECK(known, "the receiver sent upstream to a TSI it never heard of");
    if (p.type == PacketType::nak) {
        CHECK(tx.route == prizma::Route::unicast, "NAK not unicast");
        CHECK(!rc_.passive, "a passive receiver sent a NAK");
    }
    if (tx.route != prizma::Route::unicast || !source_tsi(p)) {
        return;  // the multicast SPMR copy, or for a forged source: nobody answers
    }
    if (up_.size() == kQueueCap) {
        up_.pop_front();
    }
    up_.push_back(std::move(b));
}

void Harness::run_timers() {
    rx_->on_timer(now_, rx_sink_);
    CHECK(rx_->next_deadline() > now_, "receiver next_deadline() not after now after on_timer");
    for (int i = 0;; ++i) {
        src_->on_timer(now_, src_sink_);
        if (src_->next_deadline() > now_) {
            break;
        }
        CHECK(i < 3, "source next_deadline() stays due after on_timer");
    }
}

void Harness::publish(std::size_t len, bool zero_copy) {
    std::vector<std::byte> m(len);
    for (std::size_t k = 0; k < len; ++k) {
        m[k] = static_cast<std::byte>((msg_index_ * 31U + k * 7U) & 0xffU);
    }
    ++msg_index_;
    const Sqn first = src_->next_sqn();
    if (zero_copy) {
        auto span = src_->claim(len, now_);
        if (!span) {
            return;
        }
        if (len != 0) {
            std::memcpy(span->data(), m.data(), len);
        }
        auto r = src_->commit(len, now_, src_sink_);
        CHECK(r && *r == first, "commit after a claim failed");
    } else {
        auto r = src_->send(m, now_, src_sink_);
        if (!r) {
            return;
        }
        CHECK(*r == first, "send() returned another sqn than next_sqn()");
    }
    const auto frags = static_cast<std::uint32_t>(distance(first, src_->next_sqn()));
    CHECK(frags >= 1 && frags <= 16, "an APDU took no or too many sqns");
    published_[first.value] = Published{std::move(m), frags};
}

void Harness::deliver_down() {
    if (down_.empty()) {
        return;
    }
    const std::vector<std::byte> b = std::move(down_.front());
    down_.pop_front();
    prizma::pgm::Packet p;
    CHECK(parses(b, p), "queued packet no longer parses");
    const std::uint64_t refused = rx_->counters().refused;
    const std::uint64_t spms = rx_->counters().spm_received;
    const std::uint64_t conflicts = rx_->counters().conflicts;
    Endpoint from = kSourceEp;
    from.port = static_cast<std::uint16_t>(7501 + (p.type == PacketType::spm ? 1 : 0));
    trace_packet("down", p, now_);
    rx_->on_packet(p, from, now_, rx_sink_);
    real_heard_ns_ = now_;
    // Taken (not refused, and not dropped for a source still leaving): the pin is fresh.
    if (p.type == PacketType::spm && rx_->counters().refused == refused
        && rx_->counters().spm_received == spms + 1
        && (!real_spm_seen_ || precedes(real_spm_max_, p.sqn))) {
        real_spm_seen_ = true;
        real_spm_ns_ = now_;
        real_spm_max_ = p.sqn;
    }
    CHECK(tainted_ || rx_->counters().conflicts == conflicts,
          "the source's own packet counted as a conflict");
}

void Harness::deliver_up() {
    if (up_.empty()) {
        return;
    }
    const std::vector<std::byte> b = std::move(up_.front());
    up_.pop_front();
    prizma::pgm::Packet p;
    CHECK(parses(b, p), "queued packet no longer parses");
    trace_packet("up", p, now_);
    src_->on_packet(p, kReceiverEp, now_, src_sink_);
}

void Harness::forge() {
    static constexpr std::array<PacketType, 8> kTypes{
        PacketType::spm, PacketType::odata, PacketType::rdata, PacketType::ncf,
        PacketType::nak, PacketType::nnak,  PacketType::spmr,  PacketType::odata};
    const std::uint8_t b0 = in_.u8();
    const std::uint8_t fl = in_.u8();
    const PacketType type = kTypes[b0 & 7U];
    const std::size_t t = ((b0 >> 3U) & 3U) % 3U;
    const std::size_t ep = ((b0 >> 5U) & 3U) % 3U;
    const bool advance = (b0 & 0x80U) != 0;
    if (t == 0) {
        base_[0] = src_->next_sqn();
        spm_base_[0] = src_spm_next_;
    }
    PacketSpec spec;
    spec.type = type;
    spec.gsi = kTsis[t].gsi;
    const bool upstream =
        type == PacketType::nak || type == PacketType::nnak || type == PacketType::spmr;
    const std::uint16_t dport = (fl & 0x10U) != 0 ? std::uint16_t{7501} : kDport;
    spec.sport = upstream ? dport : kTsis[t].sport;
    spec.dport = upstream ? kTsis[t].sport : dport;
    spec.fin = (fl & 1U) != 0;
    spec.rst = (fl & 2U) != 0;
    spec.parity = (fl & 8U) != 0;  // FEC parity: never data, never a selective NAK or NCF
    spec.nla = (fl & 0x20U) != 0 ? kOtherNla : kSourceNla;
    spec.group = (fl & 0x40U) != 0 ? Nla::ipv4(239, 9, 9, 9) : kGroup;
    prizma::pgm::FragmentInfo frag{};
    std::array<Sqn, prizma::pgm::kMaxNakList> list{};
    std::vector<std::byte> payload;
    switch (type) {
        case PacketType::spm:
            spec.sqn = in_.rel(spm_base_[t]);
            spec.trail = in_.rel(base_[t]);
            spec.lead = in_.rel(base_[t]);
            if (advance) {
                spm_base_[t] = spec.sqn + 1;
            }
            break;
        case PacketType::odata:
        case PacketType::rdata: {
            spec.sqn = in_.rel(base_[t]);
            spec.trail = in_.rel(spec.sqn);
            std::size_t len = in_.u8();
            if ((fl & 0x80U) != 0) {
                len += 100;  // up to 355: beyond the receiver's largest TSDU
            }
            payload.resize(len);
            const std::uint8_t fill = in_.u8();
            for (std::size_t k = 0; k < len; ++k) {
                payload[k] = static_cast<std::byte>((fill + k) & 0xffU);
            }
            spec.tsdu_length = static_cast<std::uint16_t>(len);
            if ((fl & 4U) != 0) {
                const std::uint8_t f = in_.u8();
                frag.first_sqn = spec.sqn - (f & 15U);
                if ((f & 0x10U) != 0) {  // consistent: fragments of len bytes each
                    frag.offset = static_cast<std::uint32_t>((f & 15U) * len);
                    frag.apdu_length =
                        static_cast<std::uint32_t>(frag.offset + len + in_.u8() * 4U);
                } else {
                    frag.offset = in_.u16();
                    frag.apdu_length = in_.u16();
                }
                spec.fragment = &frag;
            }
            if (advance) {
                base_[t] = spec.sqn + 1;
            }
            break;
        }
        case PacketType::ncf:
        case PacketType::nak:
        case PacketType::nnak: {
            spec.sqn = in_.rel(base_[t]);
            if ((fl & 0x80U) != 0) {
                const std::size_t n = in_.u8() % (list.size() + 1);
                const std::uint8_t step = in_.u8();
                for (std::size_t i = 0; i < n; ++i) {
                    list[i] = spec.sqn + static_cast<std::uint32_t>((i + 1) * (step & 7U))
                              + (step >= 0xf0U ? in_.u16() : 0U);
                }
                spec.nak_list = std::span<const Sqn>(list.data(), n);
            }
            break;
        }
        default: break;  // SPMR: the header only
    }
    std::array<std::byte, 512> buf{};
    const std::size_t hlen = prizma::pgm::encode(buf, spec);
    if (hlen == 0 || hlen + payload.size() > buf.size()) {
        return;
    }
    prizma::pgm::store_checksum(std::span<std::byte>(buf.data(), hlen),
                                prizma::pgm::csum_partial(payload));
    if (!payload.empty()) {
        std::memcpy(buf.data() + hlen, payload.data(), payload.size());
    }
    const std::span<const std::byte> wire(buf.data(), hlen + payload.size());
    prizma::pgm::Packet p;
    if (!parses(wire, p)) {
        return;  // what parse() refuses (fragment fields that cannot be) never gets further
    }
    CHECK(p.type == type && p.sqn == spec.sqn, "parse() does not read what encode() wrote");
    if (spec.fragment != nullptr) {
        fragments_[t] = true;
    }
    const bool parity = p.is_parity() && type != PacketType::spm && type != PacketType::spmr
                        && type != PacketType::nnak;
    if (t == 0 && !upstream && !parity) {
        // The receiver pinned the source's address at its first SPM and hears it: packets
        // from other hosts are refused. The spoofed address cannot be told apart.
        const bool pinned_alive = real_spm_seen_ && now_ - real_spm_ns_ < rc_.timers.ambient_spm_ns;
        if (ep == 0 || !pinned_alive) {
            tainted_ = true;
        }
    }
    trace_packet(ep == 0 ? "forge ep0" : ep == 1 ? "forge ep1" : "forge ep2", p, now_);
    const auto rx_before = rx_->counters();
    const auto src_before = src_->counters();
    const std::size_t storage_before = rx_->storage_used();
    if (upstream && source_tsi(p)) {
        src_->on_packet(p, kForgeEps[ep], now_, src_sink_);
    }
    rx_->on_packet(p, kForgeEps[ep], now_, rx_sink_);
    if (parity) {
        // A parity packet moves nothing but its own counters (and the checks before them).
        auto rx_after = rx_->counters();
        rx_after.parity_dropped = rx_before.parity_dropped;
        rx_after.parity_refused = rx_before.parity_refused;
        rx_after.foreign_dport = rx_before.foreign_dport;
        CHECK(std::memcmp(&rx_after, &rx_before, sizeof rx_after) == 0,
              "a parity packet moved the receiver's state");
        CHECK(rx_->storage_used() == storage_before, "a parity packet took receiver storage");
        auto src_after = src_->counters();
        src_after.nak_parity = src_before.nak_parity;
        src_after.nak_invalid = src_before.nak_invalid;
        CHECK(std::memcmp(&src_after, &src_before, sizeof src_after) == 0,
              "a parity NAK moved the source's state");
    }
}

void Harness::on_event(const Event& ev) {
    std::size_t t = 3;
    for (std::size_t i = 0; i < kTsis.size(); ++i) {
        if (ev.tsi == kTsis[i]) {
            t = i;
        }
    }
    CHECK(t < 3, "an event for a TSI nobody sent");
    Track& tr = tracks_[t];
    if (kTrace) {
        std::fprintf(stderr, "%10.6f EVENT tsi=%zu kind=%d sqn=%u count=%u bytes=%zu\n",
                     static_cast<double>(now_) / 1e9, t, static_cast<int>(ev.kind), ev.sqn.value,
                     ev.count, ev.payload.size());
    }
    const bool exact = t == 0 && !tainted_;
    switch (ev.kind) {
        case Event::Kind::joined:
            CHECK(!tr.joined || tr.left, "joined twice without left");
            tr = Track{};
            tr.joined = true;
            ++joined_events_;
            return;
        case Event::Kind::left:
            CHECK(tr.joined && !tr.left, "left without joined, or twice");
            tr.left = true;
            ++left_events_;
            return;
        case Event::Kind::data:
        case Event::Kind::loss: break;
    }
    CHECK(tr.joined, "data or loss before joined");
    CHECK(!tr.left || !kStrict, "data or loss after left");
    // Known: two resyncs between polls report only the second one's range.
    const bool resynced_twice =
        ev.kind == Event::Kind::loss && rx_->counters().resyncs >= resyncs_polled_ + 2;
    if (tr.have_pos && (kStrict || !resynced_twice)) {
        CHECK(precedes_or_equal(tr.lo, ev.sqn) && precedes_or_equal(ev.sqn, tr.hi),
              "events not contiguous: a gap, an overlap or going back");
    }
    tr.have_pos = true;
    if (ev.kind == Event::Kind::loss) {
        ++loss_events_;
        lost_reported_ += ev.count;
        CHECK(ev.count >= 1 && ev.payload.empty(), "loss event without sqns");
        tr.lo = tr.hi = ev.sqn + ev.count;
        if (exact) {
            CHECK(precedes_or_equal(tr.lo, src_->next_sqn()),
                  "loss reported of sqns the source has not sent");
        }
        return;
    }
    ++data_events_;
    CHECK(ev.payload.size() <= prizma::pgm::kMaxApduBytes, "APDU larger than 64 KiB");
    if (!exact) {
        tr.lo = ev.sqn + 1;
        tr.hi = ev.sqn + rx_->config().rxw_sqns * 2;
        return;
    }
    const auto it = published_.find(ev.sqn.value);
    CHECK(it != published_.end(), "data at a sqn where the source started no APDU");
    const Published& m = it->second;
    CHECK(same_bytes(m.apdu, ev.payload), "delivered APDU differs from the published one");
    tr.lo = tr.hi = ev.sqn + m.fragments;
}

void Harness::poll(std::size_t limit) {
    Event ev;
    for (std::size_t i = 0; i < limit && rx_->next_event(ev); ++i) {
        on_event(ev);
    }
    resyncs_polled_ = rx_->counters().resyncs;
}

void Harness::check_state() {
    // Silent this long, the source may have expired (on_timer) or been evicted for a new one.
    if (now_ - real_heard_ns_
        >= std::min(rc_.timers.peer_expiry_ns, 2 * rc_.timers.ambient_spm_ns)) {
        may_expire0_ = true;
    }
    const ReceiverCounters& rc = rx_->counters();
    check_monotonic(rc, rx_before_, "a receiver counter went back");
    check_monotonic(src_->counters(), src_before_, "a source counter went back");
    CHECK(rx_->peer_count() <= rc_.max_peers, "more sources than max_peers");
    CHECK(rx_->storage_used() <= rx_budget_, "receiver storage over its budget");
    CHECK(rc.loss_events == loss_events_, "loss_events differs from the loss events given");
    CHECK(rc.apdus_delivered == data_events_, "apdus_delivered differs from the data events");
    CHECK(rc.peers_left == left_events_, "peers_left differs from the left events");
    CHECK(rc.peers_joined >= joined_events_, "more joined events than peers_joined");
    CHECK(rc.lost_sqns >= lost_reported_, "more sqns reported lost than lost_sqns");
    const SourceCounters& sc = src_->counters();
    CHECK(
        sc.nak_ignored == sc.nak_requester_limited + sc.nak_budget_limited + sc.nak_repeat_limited,
        "nak_ignored is not the sum of its causes");
    CHECK(sc.rdata_sent <= sc.rdata_queued, "more RDATA sent than queued");
    CHECK(src_->repairs_queued() <= src_->window_capacity(), "repair queue over the window");
    CHECK(static_cast<std::uint32_t>(distance(src_->trail(), src_->next_sqn()))
              <= src_->window_capacity(),
          "transmit window over its capacity");
    std::array<prizma::protocol::PeerCounters, 4> pcs{};
    const std::size_t n = rx_->source_counters(pcs);
    std::uint64_t odata = 0;
    std::uint64_t lost = 0;
    for (std::size_t i = 0; i < n; ++i) {
        odata += pcs[i].odata_received;
        lost += pcs[i].lost_sqns;
    }
    CHECK(odata <= rc.odata_received && lost <= rc.lost_sqns, "a source's counters over the total");
}

void Harness::one_step() {
    const std::uint8_t op = in_.u8();
    if (kTrace) {
        std::fprintf(stderr, "%10.6f step op=0x%02x\n", static_cast<double>(now_) / 1e9, op);
    }
    switch (op & 15U) {
        case 0: now_ += static_cast<std::int64_t>(in_.u16()) * kUs; break;
        case 1: now_ += static_cast<std::int64_t>(in_.u8()) * 100 * kMs; break;
        case 2: run_timers(); break;
        case 3: {  // to the next deadline (within 5 s), then the timers
            const std::int64_t d = std::min(rx_->next_deadline(), src_->next_deadline());
            if (d > now_ && d - now_ <= 5 * kSec) {
                now_ = d;
            }
            run_timers();
            break;
        }
        case 4: publish(in_.u16() % 1200U, (op & 0x10U) != 0); break;
        case 5:
        case 6:
            for (std::size_t n = 1 + (op >> 4U); n != 0; --n) {
                deliver_down();
            }
            break;
        case 7:
            if (!down_.empty()) {
                down_.pop_front();
            }
            break;
        case 8:  // duplicate or swap the head
            if (down_.size() >= 2 && (op & 0x10U) != 0) {
                std::swap(down_[0], down_[1]);
            } else if (!down_.empty() && down_.size() < kQueueCap) {
                down_.push_back(down_.front());
            }
            break;
        case 9:
            for (std::size_t n = 1 + (op >> 4U); n != 0; --n) {
                deliver_up();
            }
            break;
        case 10:
            if (!up_.empty()) {
                up_.pop_front();
            }
            break;
        case 11:
        case 12:
        case 13: forge(); break;
        case 14: poll(1 + (op >> 4U)); break;
        default:
            if (op == 0xff && !closed_) {
                closed_ = true;
                if (in_.u8() < 16) {
                    reset_ = true;
                    src_->reset(now_, src_sink_);
                } else {
                    src_->close(now_, src_sink_);
                }
            } else {
                publish(in_.u8(), false);  // small messages: cheap to ask for
            }
            break;
    }
}

// A lossless, quiet network for kQuietNs: every queued packet delivered, the timers run at
// their deadlines, every event taken. Then the source's TSI must be whole. (Timer runs are
// many when a wide gap is retried: each missing sqn's retry has a back-off of its own.)
void Harness::quiet_end() {
    const std::int64_t end = now_ + kQuietNs;
    for (int i = 0; i < 200000 && now_ < end; ++i) {
        for (int rounds = 0; !down_.empty() || !up_.empty(); ++rounds) {
            CHECK(rounds < 1000, "packets ping-pong between source and receiver");
            while (!down_.empty()) {
                deliver_down();
            }
            while (!up_.empty()) {
                deliver_up();
            }
        }
        poll(1U << 20U);
        check_state();
        const std::int64_t d = std::min(rx_->next_deadline(), src_->next_deadline());
        if (kTrace) {
            std::fprintf(stderr, "%10.6f quiet: receiver deadline %lld, source deadline %lld\n",
                         static_cast<double>(now_) / 1e9,
                         static_cast<long long>(rx_->next_deadline() - now_),
                         static_cast<long long>(src_->next_deadline() - now_));
        }
        now_ = std::max(now_ + 1, std::min(d, end));
        run_timers();
    }
    poll(1U << 20U);
    check_state();
    if (kTrace) {
        const ReceiverCounters& c = rx_->counters();
        std::fprintf(stderr, "quiet: %llu NAKs for %llu sqns, %llu lost, %zu sources\n",
                     static_cast<unsigned long long>(c.nak_sent),
                     static_cast<unsigned long long>(c.nak_sqns_sent),
                     static_cast<unsigned long long>(c.lost_sqns), rx_->peer_count());
    }
    CHECK(now_ >= end, "the quiet end did not settle: too many timer runs");
    // The forged sources fell silent at least kQuietNs ago, longer than the peer expiry: each
    // has left (its window drained, every gap reported), and its storage is free.
    for (std::size_t t = 1; t < tracks_.size(); ++t) {
        CHECK(!tracks_[t].joined || tracks_[t].left || (fragments_[t] && !kStrict),
              "a source silent for longer than the peer expiry never left");
    }
    const Track& tr = tracks_[0];
    if (kTrace) {
        std::fprintf(stderr,
                     "quiet end: tainted=%d joined=%d left=%d pos=%d next event at %u, source next "
                     "%u; data %llu loss %llu (%llu sqns)\n",
                     tainted_ ? 1 : 0, tr.joined ? 1 : 0, tr.left ? 1 : 0, tr.have_pos ? 1 : 0,
                     tr.lo.value, src_->next_sqn().value,
                     static_cast<unsigned long long>(data_events_),
                     static_cast<unsigned long long>(loss_events_),
                     static_cast<unsigned long long>(lost_reported_));
    }
    const bool known = (reset_ || (may_expire0_ && !tr.left)) && !kStrict;
    if (tainted_ || !tr.joined || !tr.have_pos || (tr.left && !closed_) || known) {
        return;
    }
    CHECK(tr.lo == src_->next_sqn(),
          "after the quiet end, the source's sqns are neither all delivered nor reported lost");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    Input in(std::span<const std::uint8_t>(data, size));
    Harness h(in);
    h.run();
    return 0;
}
