// SPDX-License-Identifier: Apache-2.0
// The simulator (net_sim.hpp): an event loop over a virtual clock, the network model, and the
// oracle.
#include "tests/sim/net_sim.hpp"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <memory>
#include <optional>
#include <queue>
#include <span>

#include "lib/pgm/packet.hpp"
#include "lib/protocol/receiver.hpp"
#include "lib/protocol/source.hpp"
#include "lib/runtime/rng.hpp"

namespace prizma::sim {

using protocol::kMs;
using protocol::kNever;
using protocol::kSec;
using protocol::kUs;

bool Scenario::in_envelope() const noexcept {
    const std::size_t frags = (msg_bytes + 1399) / 1400;
    return std::size_t{messages} * frags <= window_sqns && per_host <= 4 && head_drop_bytes <= 1500
           && rcvbuf_bytes >= 212992 && loss <= 0.10 && upstream_loss <= 0.10 && restart_at == 0
           && late_join_ns < 0;
}

namespace {

using Bytes = std::vector<std::byte>;
using Shared = std::shared_ptr<const Bytes>;

constexpr std::int64_t kPropNs = 20 * kUs;   // one hop's delay
constexpr std::int64_t kCapNs = 600 * kSec;  // no run goes past this much simulated time

// What the kernel charges a socket buffer for one datagram (skb truesize): its bytes rounded
// up to 512 plus ~768 of overhead (a 1,000-byte PGM packet costs 2,304, so a stock 208 KiB
// buffer, doubled by the kernel, holds ~185 of them).
std::size_t truesize(std::size_t len) noexcept {
    return 768 + ((len + 511) / 512) * 512;
}

Bytes make_message(std::uint64_t i, std::size_t size) {
    Bytes m(std::max<std::size_t>(size, 8));
    std::memcpy(m.data(), &i, 8);
    for (std::size_t k = 8; k < m.size(); ++k) {
        m[k] = static_cast<std::byte>((i * 31 + k) & 0xffU);
    }
    return m;
}

Endpoint address(std::uint8_t host, std::uint16_t port) {
    Endpoint e;
    e.family = 2;
    e.port = port;
    e.addr = {10, 0, 0, host};
    return e;
}

struct Arrival {
    std::int64_t t = 0;
    std::uint64_t order = 0;  // ties: in the order sent
    int to = -1;              // receiver index; -1 = the source
    Shared bytes;
    Endpoint from{};
    friend bool operator>(const Arrival& a, const Arrival& b) {
        return a.t != b.t ? a.t > b.t : a.order > b.order;
    }
};

struct Seen {  // one event a receiver delivered
    protocol::Event::Kind kind{};
    Tsi tsi{};
    std::uint32_t sqn = 0;
    std::uint32_t count = 0;
    std::uint64_t index = 0;  // data: the message's number
    bool intact = true;
    std::int64_t at = 0;
};

struct Rx {
    std::unique_ptr<protocol::Receiver> receiver;
    Endpoint self{};
    std::deque<std::pair<Shared, Endpoint>> buffer;
    std::size_t buffer_bytes = 0;
    std::int64_t busy_until = 0;
    std::int64_t listen_from = 0;
    std::uint64_t head_dropped = 0;
    std::uint64_t kernel_drops = 0;
    std::vector<Seen> seen;
    // Per source TSI: the highest sqn any packet it took told of (data, an SPM's lead, an NCF).
    std::vector<std::pair<Tsi, std::uint32_t>> known;
    void learn(const pgm::Packet& pkt) {
        if (pkt.is_upstream()) {
            return;
        }
        const Tsi tsi = pkt.source_tsi();
        const std::uint32_t s = pkt.type == pgm::PacketType::spm ? pkt.lead.value : pkt.sqn.value;
        for (auto& [t, k] : known) {
            if (t == tsi) {
                k = static_cast<std::int32_t>(s - k) > 0 ? s : k;
                return;
            }
        }
        known.emplace_back(tsi, s);
    }
    [[nodiscard]] std::optional<std::uint32_t> known_of(const Tsi& tsi) const {
        for (const auto& [t, k] : known) {
            if (t == tsi) {
                return k;
            }
        }
        return std::nullopt;
    }
};

struct Session {  // one incarnation of the source
    Tsi tsi{};
    std::uint64_t first_msg = 0;
    std::uint64_t end_msg = 0;  // one past its last message sent
    std::vector<std::uint32_t> first_sqn;
    std::vector<std::uint32_t> frags;
    std::vector<std::int64_t> sent_ns;
};

class World final {
public:
    explicit World(const Scenario& s) : s_(s), rng_(s.seed, 0x51A1ULL) {}

    Outcome run();

private:
    class SinkOf final : public protocol::PacketSink {
    public:
        SinkOf(World& w, int who) : w_(w), who_(who) {}
        void emit(const TxPacket& p) noexcept override { w_.emit(who_, p); }

    private:
        World& w_;
        int who_;
    };

    double uniform() { return static_cast<double>(rng_() >> 11U) * 0x1.0p-53; }
    void emit(int who, const TxPacket& p);
    void deliver_to_rx(int r, const Shared& b, const Endpoint& from, std::int64_t depart);
    void start_source(std::int64_t now);
    void publish_due(std::int64_t now);
    void poll_events(int r, std::int64_t now);
    [[nodiscard]] bool all_done() const;
    Outcome judge() const;

    Scenario s_;
    runtime::Rng rng_;
    std::int64_t now_ = 0;
    std::uint64_t order_ = 0;
    std::priority_queue<Arrival, std::vector<Arrival>, std::greater<>> net_;
    std::unique_ptr<protocol::Source> src_;
    Endpoint src_addr_ = address(1, 40000);
    std::int64_t link_free_ns_ = 0;
    std::vector<Rx> rxs_;
    std::vector<Session> sessions_;
    std::uint64_t next_msg_ = 0;
    std::int64_t next_pub_ns_ = kNever;
    std::int64_t burst_end_ns_ = 0;
    std::int64_t closed_ns_ = kNever;  // the source sent its FIN
    std::int64_t gone_ns_ = kNever;    // the source process ends
    std::uint16_t next_sport_ = 1000;
    protocol::SourceCounters totals_{};  // of sources gone
};

void World::emit(int who, const TxPacket& p) {
    auto bytes = std::make_shared<Bytes>(p.header.begin(), p.header.end());
    bytes->insert(bytes->end(), p.payload.begin(), p.payload.end());
    const Shared b = std::move(bytes);
    if (who < 0) {  // the source: everything goes to the group, through its link
        const std::int64_t start = std::max(now_, link_free_ns_);
        const auto ser =
            static_cast<std::int64_t>(static_cast<double>(b->size()) * 1e9 / s_.link_bytes_per_sec);
        link_free_ns_ = start + ser;
        for (int r = 0; r < static_cast<int>(rxs_.size()); ++r) {
            deliver_to_rx(r, b, src_addr_, link_free_ns_);
        }
        return;
    }
    // A receiver: NAKs, status and unicast SPMRs to the source; a multicast SPMR to the others.
    if (p.route == Route::unicast) {
        if (uniform() < s_.upstream_loss) {
            return;
        }
        net_.push(
            Arrival{now_ + kPropNs, order_++, -1, b, rxs_[static_cast<std::size_t>(who)].self});
        return;
    }
    for (int r = 0; r < static_cast<int>(rxs_.size()); ++r) {
        if (r != who) {
            deliver_to_rx(r, b, rxs_[static_cast<std::size_t>(who)].self, now_);
        }
    }
}

void World::deliver_to_rx(int r, const Shared& b, const Endpoint& from, std::int64_t depart) {
    if (uniform() < s_.loss) {
        return;
    }
    const int copies = uniform() < s_.dup ? 2 : 1;
    for (int c = 0; c < copies; ++c) {
        std::int64_t t = depart + kPropNs;
        if (uniform() < s_.reorder) {
            t += static_cast<std::int64_t>(uniform() * static_cast<double>(s_.reorder_ns));
        }
        net_.push(Arrival{t, order_++, r, b, from});
    }
}

void World::start_source(std::int64_t now) {
    if (src_) {
        const auto& c = src_->counters();
        totals_.odata_sent += c.odata_sent;
        totals_.rdata_sent += c.rdata_sent;
        totals_.nak_requester_limited += c.nak_requester_limited;
        totals_.nak_budget_limited += c.nak_budget_limited;
        totals_.nak_repeat_limited += c.nak_repeat_limited;
    }
    protocol::SourceConfig c;
    c.tsi.gsi = Gsi{{0x10, 0x20, 0x30, 0x40, 0x50, static_cast<std::uint8_t>(sessions_.size())}};
    c.tsi.sport = next_sport_++;
    c.dport = 7500;
    c.nla = pgm::Nla::ipv4(10, 0, 0, 1);
    c.group = pgm::Nla::ipv4(239, 1, 1, 1);
    c.txw_sqns = s_.window_sqns;
    c.max_tpdu = 1472;
    c.max_fragments = std::min<std::size_t>(c.max_fragments, std::max(1U, s_.window_sqns));
    c.rdata_rate_bytes_per_sec = 64'000'000;  // ChannelOptions' defaults
    c.timers = protocol::preset(s_.preset);
    // As on udp://, where OpenPGM receivers may listen (context.cpp).
    const auto wan = protocol::preset(protocol::Preset::wan);
    c.close_quiet_ns = std::max(protocol::quiet_ns(c.timers), protocol::quiet_ns(wan));
    c.close_cap_ns = std::max(protocol::repair_limit_ns(c.timers), protocol::repair_limit_ns(wan));
    auto made = protocol::Source::create(c);
    src_ = std::move(*made);
    Session ses;
    ses.tsi = c.tsi;
    ses.first_msg = next_msg_;
    ses.end_msg = next_msg_;
    sessions_.push_back(std::move(ses));
    SinkOf sink(*this, -1);
    src_->open(now, sink);
    next_pub_ns_ = now + kMs;  // the application starts sending a moment after the SPMs
}

void World::publish_due(std::int64_t now) {
    SinkOf sink(*this, -1);
    while (next_msg_ < s_.messages && now >= next_pub_ns_) {
        const Bytes m = make_message(next_msg_, s_.msg_bytes);
        auto r = src_->send(m, now, sink);
        if (!r) {
            next_pub_ns_ = now + 10 * kUs;  // back-pressure: the application retries
            return;
        }
        auto& ses = sessions_.back();
        ses.first_sqn.push_back(r->value);
        ses.frags.push_back(src_->next_sqn().value - r->value);
        ses.sent_ns.push_back(now);
        ses.end_msg = ++next_msg_;
        burst_end_ns_ = std::max(link_free_ns_, now);
        if (s_.restart_at != 0 && next_msg_ == s_.restart_at && sessions_.size() == 1) {
            start_source(now + 50 * kMs);  // killed: no FIN; a new process a moment later
            next_pub_ns_ = now + 50 * kMs + kMs;
            return;
        }
        if (s_.pace_msgs_per_sec > 0) {
            next_pub_ns_ += static_cast<std::int64_t>(1e9 / s_.pace_msgs_per_sec);
        }
    }
    if (next_msg_ == s_.messages) {
        next_pub_ns_ = kNever;
    }
}

void World::poll_events(int r, std::int64_t now) {
    Rx& rx = rxs_[static_cast<std::size_t>(r)];
    rx.receiver->poll(SIZE_MAX, [&](const protocol::Event& e) {
        Seen s;
        s.kind = e.kind;
        s.tsi = e.tsi;
        s.sqn = e.sqn.value;
        s.count = e.count;
        s.at = now;
        if (e.kind == protocol::Event::Kind::data) {
            if (e.payload.size() >= 8) {
                std::memcpy(&s.index, e.payload.data(), 8);
                const Bytes want = make_message(s.index, s_.msg_bytes);
                s.intact = want.size() == e.payload.size()
                           && std::equal(want.begin(), want.end(), e.payload.begin());
            } else {
                s.intact = false;
            }
        }
        rx.seen.push_back(s);
    });
}

bool World::all_done() const {
    if (next_msg_ < s_.messages) {
        return false;
    }
    for (const Rx& rx : rxs_) {
        for (const Session& ses : sessions_) {
            if (ses.end_msg == ses.first_msg) {
                continue;
            }
            // Done with a session: its `left` event (FIN taken, nothing missing) came.
            bool left = false;
            for (const Seen& e : rx.seen) {
                left |= e.kind == protocol::Event::Kind::left && e.tsi == ses.tsi;
            }
            if (!left) {
                return false;
            }
        }
    }
    return true;
}

Outcome World::run() {
    const std::uint32_t n_rx = s_.hosts * s_.per_host;
    rxs_.resize(n_rx);
    for (std::uint32_t i = 0; i < n_rx; ++i) {
        protocol::ReceiverConfig c;
        c.dport = 7500;
        c.group = pgm::Nla::ipv4(239, 1, 1, 1);
        c.rxw_sqns = s_.window_sqns;
        c.max_tpdu = 1472;
        c.seed = s_.seed * 977 + i;
        c.timers = protocol::preset(s_.preset);
        c.join = s_.recover_history ? protocol::JoinPolicy::from_trail
                                    : protocol::JoinPolicy::first_packet;
        c.max_recover_sqns = std::min(1024U, s_.window_sqns - 1);
        auto made = protocol::Receiver::create(c);
        rxs_[i].receiver = std::move(*made);
        rxs_[i].self = address(static_cast<std::uint8_t>(10 + i / s_.per_host),
                               static_cast<std::uint16_t>(50000 + i));
    }
    if (s_.late_join_ns >= 0 && n_rx != 0) {
        rxs_[0].listen_from = s_.late_join_ns;
    }
    const std::int64_t t0 = 10 * kMs;  // receivers listen first
    now_ = t0;
    start_source(t0);
    // The drain: each receiver's share of its host's cores.
    const double share = std::max(1.0, static_cast<double>(s_.per_host) / s_.host_cores);
    const auto cost_ns = static_cast<std::int64_t>(share * 1e9 / s_.rx_pps);
    for (std::uint64_t steps = 0;; ++steps) {
        if (steps > 200'000'000) {
            Outcome o = judge();
            o.ok = false;
            o.why = "the simulation did not settle (200 M steps)";
            return o;
        }
        std::int64_t t = kNever;
        if (!net_.empty()) {
            t = std::min(t, net_.top().t);
        }
        if (src_ && now_ < gone_ns_) {
            t = std::min({t, src_->next_deadline(), next_pub_ns_, gone_ns_});
        }
        for (const Rx& rx : rxs_) {
            t = std::min(t, rx.receiver->next_deadline());
            if (!rx.buffer.empty()) {
                t = std::min(t, std::max(rx.busy_until, now_));
            }
        }
        if (closed_ns_ == kNever && next_msg_ == s_.messages) {
            t = std::min(t, now_ + 5 * kMs);  // the publisher checks quiet() now and then
        }
        if (t == kNever || t > kCapNs) {
            break;
        }
        now_ = std::max(now_, t);
        while (!net_.empty() && net_.top().t <= now_) {
            Arrival a = net_.top();
            net_.pop();
            if (a.to < 0) {
                if (src_ && now_ < gone_ns_) {
                    pgm::Packet pkt;
                    if (pgm::parse(*a.bytes, pkt) == pgm::ParseStatus::ok
                        && pkt.source_tsi() == sessions_.back().tsi) {
                        SinkOf sink(*this, -1);
                        src_->on_packet(pkt, a.from, now_, sink);
                    }
                }
                continue;
            }
            Rx& rx = rxs_[static_cast<std::size_t>(a.to)];
            if (now_ < rx.listen_from) {
                continue;  // not listening yet
            }
            if (a.to == 0 && rx.head_dropped < s_.head_drop_bytes) {
                rx.head_dropped += a.bytes->size();  // iptables -m quota ... -j DROP
                continue;
            }
            if (rx.buffer_bytes >= 2 * s_.rcvbuf_bytes) {
                ++rx.kernel_drops;
                if (std::getenv("SIM_DEBUG") != nullptr) {
                    static std::uint64_t by_type[16];
                    static std::uint64_t n;
                    ++by_type[static_cast<unsigned>((*a.bytes)[4]) & 15U];
                    if (++n % 200000 == 0) {
                        std::fprintf(stderr, "drops: spm %lu odata %lu rdata %lu ncf %lu nak %lu\n",
                                     by_type[0], by_type[4], by_type[5], by_type[10], by_type[8]);
                    }
                }
                continue;
            }
            rx.buffer_bytes += truesize(a.bytes->size());
            rx.buffer.emplace_back(std::move(a.bytes), a.from);
        }
        if (src_ && now_ < gone_ns_) {
            SinkOf sink(*this, -1);
            if (now_ >= src_->next_deadline()) {
                src_->on_timer(now_, sink);
            }
            publish_due(now_);
            if (closed_ns_ == kNever && next_msg_ == s_.messages && src_->quiet(now_)) {
                src_->close(now_, sink);  // as prizma-send: close once quiet, then exit
                closed_ns_ = now_;
                gone_ns_ = now_ + 100 * kMs;
            }
        }
        for (int r = 0; r < static_cast<int>(rxs_.size()); ++r) {
            Rx& rx = rxs_[static_cast<std::size_t>(r)];
            SinkOf sink(*this, r);
            bool worked = false;
            if (!rx.buffer.empty() && rx.busy_until <= now_) {
                auto [bytes, from] = std::move(rx.buffer.front());
                rx.buffer.pop_front();
                rx.buffer_bytes -= truesize(bytes->size());
                rx.busy_until = now_ + cost_ns;
                pgm::Packet pkt;
                if (pgm::parse(*bytes, pkt) == pgm::ParseStatus::ok) {
                    rx.learn(pkt);
                    rx.receiver->on_packet(pkt, from, now_, sink);
                }
                worked = true;
            }
            if (now_ >= rx.receiver->next_deadline()) {
                rx.receiver->on_timer(now_, sink);
                worked = true;
            }
            if (worked) {
                poll_events(r, now_);
            }
        }
        if (all_done()) {
            break;
        }
    }
    return judge();
}

// The oracle. For each receiver and each source incarnation: data in strictly increasing
// message order, intact; every message not delivered inside a loss event that came before any
// later message, or before the start its `joined` event names; nothing left unaccounted.
Outcome World::judge() const {
    Outcome out;
    if (src_) {
        const auto& c = src_->counters();
        out.odata_sent = totals_.odata_sent + c.odata_sent;
        out.rdata_sent = totals_.rdata_sent + c.rdata_sent;
        out.requester_limited = totals_.nak_requester_limited + c.nak_requester_limited;
        out.budget_limited = totals_.nak_budget_limited + c.nak_budget_limited;
        out.repeat_limited = totals_.nak_repeat_limited + c.nak_repeat_limited;
    }
    out.burst_end_ns = burst_end_ns_;
    auto fail = [&](std::string why) {
        if (out.ok) {
            out.ok = false;
            out.why = std::move(why);
        }
    };
    for (std::size_t r = 0; r < rxs_.size(); ++r) {
        const Rx& rx = rxs_[r];
        ReceiverOutcome ro;
        ro.kernel_drops = rx.kernel_drops;
        ro.naks = rx.receiver->counters().nak_sent;
        ro.loss_events = rx.receiver->counters().loss_events;
        const std::string who = "receiver " + std::to_string(r);
        for (const Session& ses : sessions_) {
            const std::size_t n = ses.end_msg - ses.first_msg;
            if (n == 0) {
                continue;
            }
            // Where the receiver says it started (its `joined` event), or none.
            // What no packet it took told of cannot be known: a session it heard nothing of, and
            // the messages past the last sqn it heard of when the source died without a FIN.
            const auto known = rx.known_of(ses.tsi);
            const bool finished = &ses == &sessions_.back() && closed_ns_ != kNever;
            std::optional<std::uint32_t> start;
            std::vector<std::uint8_t> state(n, 0);  // 0 unseen, 1 delivered, 2 lost, 3 before
            auto covered = [&](std::size_t i, const Seen& e) {
                const std::uint32_t a = ses.first_sqn[i];
                const std::uint32_t b = a + ses.frags[i];  // one past
                const std::uint32_t la = e.sqn;
                const std::uint32_t lb = e.sqn + e.count;
                return static_cast<std::int32_t>(la - b) < 0
                       && static_cast<std::int32_t>(a - lb) < 0;
            };
            std::size_t expect = 0;  // every message before it is accounted for
            std::uint64_t last = 0;
            bool any = false;
            for (const Seen& e : rx.seen) {
                if (e.tsi != ses.tsi) {
                    continue;
                }
                if (e.kind == protocol::Event::Kind::joined) {
                    start = e.sqn;
                } else if (e.kind == protocol::Event::Kind::loss) {
                    for (std::size_t i = 0; i < n; ++i) {
                        if (state[i] == 0 && covered(i, e)) {
                            state[i] = 2;
                            ro.done_ns = std::max(ro.done_ns, e.at);
                        }
                    }
                } else if (e.kind == protocol::Event::Kind::data) {
                    if (!e.intact) {
                        fail(who + ": message " + std::to_string(e.index) + " corrupt");
                    }
                    if (e.index < ses.first_msg || e.index >= ses.end_msg) {
                        fail(who + ": message " + std::to_string(e.index)
                             + " from another session");
                        continue;
                    }
                    if (any && e.index <= last) {
                        fail(who + ": message " + std::to_string(e.index) + " after "
                             + std::to_string(last) + " (duplicate or out of order)");
                        continue;
                    }
                    any = true;
                    last = e.index;
                    const std::size_t i = e.index - ses.first_msg;
                    state[i] = 1;
                    ro.done_ns = std::max(ro.done_ns, e.at);
                    for (; expect < i; ++expect) {
                        if (state[expect] == 0 && start
                            && static_cast<std::int32_t>(ses.first_sqn[expect] + ses.frags[expect]
                                                         - 1 - *start)
                                   < 0) {
                            state[expect] = 3;
                        }
                        if (state[expect] == 0) {
                            ++ro.silent;
                            state[expect] = 4;  // counted once
                            fail(who + ": message " + std::to_string(ses.first_msg + expect)
                                 + " skipped silently (next delivered: " + std::to_string(e.index)
                                 + ")");
                        }
                    }
                    expect = i + 1;
                }
            }
            for (std::size_t i = 0; i < n; ++i) {
                if (state[i] == 0 && start
                    && static_cast<std::int32_t>(ses.first_sqn[i] + ses.frags[i] - 1 - *start)
                           < 0) {
                    state[i] = 3;
                }
                if (state[i] == 0
                    && (!known
                        || (!finished
                            && static_cast<std::int32_t>(ses.first_sqn[i] - *known) > 0))) {
                    state[i] = 5;
                }
                switch (state[i]) {
                    case 1: ++ro.delivered; break;
                    case 5: ++ro.unknowable; break;
                    case 2: ++ro.reported_lost; break;
                    case 3: ++ro.before_start; break;
                    case 0:
                        ++ro.silent;
                        fail(who + ": message " + std::to_string(ses.first_msg + i)
                             + " never delivered nor reported lost");
                        break;
                    default: break;
                }
            }
        }
        const bool listened = r != 0 || (s_.late_join_ns < 0);
        if (s_.in_envelope() && listened
            && (ro.reported_lost != 0 || ro.before_start != 0 || ro.unknowable != 0)) {
            fail(who + ": " + std::to_string(ro.reported_lost + ro.before_start)
                 + " messages lost inside the envelope (" + std::to_string(ro.reported_lost)
                 + " in loss events, " + std::to_string(ro.before_start) + " before its start)");
        }
        out.repaired_ns = std::max(out.repaired_ns, ro.done_ns);
        out.receivers.push_back(ro);
    }
    return out;
}

}  // namespace

Outcome run(const Scenario& s) {
    World w(s);
    return w.run();
}

Scenario draw(std::uint64_t seed, bool wide) {
    runtime::Rng rng(seed, 0xD7A3ULL);
    auto pick = [&](auto const& list) {
        return list[rng() % std::size(list)];
    };
    auto unit = [&] {
        return static_cast<double>(rng() >> 11U) * 0x1.0p-53;
    };
    Scenario s;
    s.seed = seed;
    static constexpr std::size_t kSizes[] = {64, 300, 1000, 1400, 4000, 8000};
    s.msg_bytes = pick(kSizes);
    static constexpr std::uint32_t kWindows[] = {1024, 4096, 16384, 65536};
    s.window_sqns = wide ? pick(kWindows) : pick(std::array<std::uint32_t, 2>{1024, 4096});
    const auto frags = static_cast<std::uint32_t>((s.msg_bytes + 1399) / 1400);
    // Up to a window of packets (half of one in the quick tier): a burst "inside the window".
    const std::uint32_t most = std::max(1U, s.window_sqns / (wide ? 1 : 2) / frags);
    s.messages = 1 + static_cast<std::uint32_t>(rng() % most);
    s.hosts = 1 + static_cast<std::uint32_t>(rng() % 2);
    s.per_host = 1 + static_cast<std::uint32_t>(rng() % 4);
    static constexpr std::size_t kBufs[] = {212992, 425984, 4194304};
    s.rcvbuf_bytes = pick(kBufs);
    static constexpr double kRates[] = {3e5, 1e6, 3e6};
    s.rx_pps = pick(kRates);
    s.link_bytes_per_sec = pick(std::array<double, 3>{2.5e8, 1e9, 4e9});
    s.pace_msgs_per_sec = rng() % 3 == 0 ? pick(std::array<double, 3>{1e4, 1e5, 1e6}) : 0;
    s.loss = rng() % 2 == 0 ? 0 : unit() * 0.10;
    s.upstream_loss = rng() % 3 == 0 ? unit() * 0.05 : 0;
    s.dup = rng() % 4 == 0 ? unit() * 0.05 : 0;
    s.reorder = rng() % 4 == 0 ? unit() * 0.05 : 0;
    // Outside the envelope now and then: the guarantee is then "lost, never silently".
    const auto edge = rng() % 8;
    if (edge == 0) {
        s.head_drop_bytes = static_cast<std::uint32_t>(rng() % 8000);
    } else if (edge == 1) {
        s.late_join_ns = static_cast<std::int64_t>(rng() % 20) * kMs;
    } else if (edge == 2 && s.messages > 2) {
        s.restart_at = 1 + static_cast<std::uint32_t>(rng() % (s.messages - 1));
    } else if (edge == 3) {
        s.loss = 0.10 + unit() * 0.3;
    }
    return s;
}

std::string repro(const Scenario& s) {
    char buf[640];
    std::snprintf(
        buf, sizeof buf,
        "prizma_sim --seed %" PRIu64
        " --msg-bytes %zu --messages %u --window %u "
        "--hosts %u --per-host %u --rcvbuf %zu --rx-pps %g --link %g --pace %g "
        "--loss %g --up-loss %g --dup %g --reorder %g --head-drop %u --late-join-ns %" PRId64
        " --restart-at %u%s",
        s.seed, s.msg_bytes, s.messages, s.window_sqns, s.hosts, s.per_host, s.rcvbuf_bytes,
        s.rx_pps, s.link_bytes_per_sec, s.pace_msgs_per_sec, s.loss, s.upstream_loss, s.dup,
        s.reorder, s.head_drop_bytes, s.late_join_ns, s.restart_at,
        s.recover_history ? " --recover-history" : "");
    return buf;
}

bool parse_args(const std::vector<std::string>& args, Scenario& s, std::string& error) {
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& k = args[i];
        if (k == "--recover-history") {
            s.recover_history = true;
            continue;
        }
        if (i + 1 >= args.size()) {
            error = k + ": a value is missing";
            return false;
        }
        const std::string& v = args[++i];
        char* end = nullptr;
        const double d = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || *end != '\0' || !std::isfinite(d) || d < -1) {
            error = k + " " + v + ": not a number";
            return false;
        }
        const auto u = static_cast<std::uint64_t>(std::max(d, 0.0));
        if (k == "--seed") {
            s.seed = u;
        } else if (k == "--msg-bytes") {
            s.msg_bytes = u;
        } else if (k == "--messages") {
            s.messages = static_cast<std::uint32_t>(u);
        } else if (k == "--window") {
            s.window_sqns = static_cast<std::uint32_t>(u);
        } else if (k == "--hosts") {
            s.hosts = static_cast<std::uint32_t>(u);
        } else if (k == "--per-host") {
            s.per_host = static_cast<std::uint32_t>(u);
        } else if (k == "--rcvbuf") {
            s.rcvbuf_bytes = u;
        } else if (k == "--rx-pps") {
            s.rx_pps = d;
        } else if (k == "--link") {
            s.link_bytes_per_sec = d;
        } else if (k == "--pace") {
            s.pace_msgs_per_sec = d;
        } else if (k == "--loss") {
            s.loss = d;
        } else if (k == "--up-loss") {
            s.upstream_loss = d;
        } else if (k == "--dup") {
            s.dup = d;
        } else if (k == "--reorder") {
            s.reorder = d;
        } else if (k == "--head-drop") {
            s.head_drop_bytes = static_cast<std::uint32_t>(u);
        } else if (k == "--late-join-ns") {
            s.late_join_ns = static_cast<std::int64_t>(d);
        } else if (k == "--restart-at") {
            s.restart_at = static_cast<std::uint32_t>(u);
        } else {
            error = k + ": unknown option";
            return false;
        }
    }
    if (s.msg_bytes == 0 || s.msg_bytes > 64 * 1024 || s.messages == 0 || s.window_sqns < 2
        || s.hosts == 0 || s.per_host == 0 || s.per_host > 64 || s.rx_pps <= 0
        || s.link_bytes_per_sec <= 0) {
        error = "a value out of range (sizes, counts and rates must be positive)";
        return false;
    }
    return true;
}

}  // namespace prizma::sim
