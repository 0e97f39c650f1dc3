// SPDX-License-Identifier: Apache-2.0
#include "lib/pubsub/session.hpp"

#include <algorithm>
#include <cstring>

namespace prizma::pubsub {

Result<std::unique_ptr<Session>, Error> Session::create(Transport& transport,
                                                        const SessionConfig& cfg) {
    if (!cfg.source && !cfg.receiver) {
        return Errc::invalid_argument;
    }
    if (cfg.rx_batch == 0 || cfg.tx_batch == 0 || transport.caps().max_datagram == 0) {
        return Errc::invalid_argument;
    }
    std::unique_ptr<Session> s(new Session(transport, cfg));
    if (cfg.source) {
        auto sc = *cfg.source;
        if (sc.max_tpdu > s->max_datagram_) {
            return Error(Errc::invalid_argument,
                         "max_tpdu: at most the transport's largest datagram");
        }
        auto src = protocol::Source::create(sc);
        if (!src) {
            return src.error();
        }
        s->source_ = std::move(*src);
    }
    if (cfg.receiver) {
        auto rcv = protocol::Receiver::create(*cfg.receiver);
        if (!rcv) {
            return rcv.error();
        }
        s->receiver_ = std::move(*rcv);
    }
    return s;
}

Session::Session(Transport& t, const SessionConfig& cfg) : transport_(t), cfg_(cfg) {
    max_datagram_ = t.caps().max_datagram;
    const std::size_t batch =
        std::min(cfg.tx_batch, std::max<std::size_t>(1, t.caps().max_tx_batch));
    cfg_.tx_batch = batch;
    if (cfg.receiver) {
        cfg_.upstream_poll_ns = 0;  // a receiver polls on every call: data is what it waits for
    }
    rx_.resize(cfg.rx_batch);
    tx_.resize(batch);
    tx_bytes_.resize(batch * max_datagram_);
    if (cfg.auth) {
        auth_scratch_.resize(std::max<std::size_t>(max_datagram_, 65536));
    }
}

Session::~Session() = default;

void Session::emit(const TxPacket& packet) noexcept {
    const std::size_t len = packet.header.size() + packet.payload.size();
    if (len > max_datagram_) {
        ++counters_.tx_dropped;
        return;
    }
    if (tx_count_ == tx_.size()) {
        flush();
        if (tx_count_ == tx_.size()) {
            ++counters_.tx_dropped;  // transport stuck: PGM repair will cover it
            return;
        }
    }
    // Packed back to back (each fits: at most tx_.size() packets of max_datagram_ each), so
    // a run of packets is one contiguous range the transport can hand over as one iovec.
    std::byte* buf = tx_bytes_.data() + tx_used_;
    std::size_t out_len = len;
    if (cfg_.auth) {
        // Signed in place: header, auth option, payload. The source's packets leave room for
        // the option (max_tpdu); the receiver's (NAK, SPMR) are small.
        const std::size_t room = tx_bytes_.size() - tx_used_;
        out_len = cfg_.auth->sign(packet.header, packet.payload,
                                  std::span<std::byte>(buf, std::min(room, max_datagram_)),
                                  Authenticator::wall_now_ms());
        if (out_len == 0) {
            ++counters_.tx_dropped;
            return;
        }
    } else {
        std::memcpy(buf, packet.header.data(), packet.header.size());
        if (!packet.payload.empty()) {
            std::memcpy(buf + packet.header.size(), packet.payload.data(), packet.payload.size());
        }
    }
    tx_used_ += out_len;
    // Field by field: a whole TxPacket built on the stack and copied in stalled on store
    // forwarding (a tenth of a 100-byte message's send cost); `to` only matters for unicast.
    TxPacket& out = tx_[tx_count_];
    out.header = std::span<const std::byte>(buf, out_len);
    out.payload = {};
    out.route = packet.route;
    if (packet.route == Route::unicast) {
        out.to = packet.to;
        if (cfg_.unicast_port != 0) {
            out.to.port = cfg_.unicast_port;
        }
    }
    ++tx_count_;
}

void Session::flush() noexcept {
    if (tx_count_ == 0) {
        return;
    }
    auto r = transport_.send_batch(std::span<const TxPacket>(tx_.data(), tx_count_));
    ++counters_.tx_batches;
    if (!r) {
        ++counters_.tx_errors;
        if (!is_transient(r.error())) {
            counters_.tx_dropped += tx_count_;
            tx_count_ = 0;
            tx_used_ = 0;
        }
        return;
    }
    const std::size_t sent = *r;
    for (std::size_t i = 0; i < sent; ++i) {
        counters_.tx_bytes += tx_[i].header.size();
    }
    counters_.tx_packets += sent;
    if (sent < tx_count_) {
        ++counters_.tx_short;
        // Keep the rest in order for the next flush; their bytes (one packed range) move
        // to the front with them.
        const std::byte* from = tx_[sent].header.data();
        const auto keep = static_cast<std::size_t>(tx_bytes_.data() + tx_used_ - from);
        std::memmove(tx_bytes_.data(), from, keep);
        for (std::size_t i = sent; i < tx_count_; ++i) {
            const auto off = static_cast<std::size_t>(tx_[i].header.data() - from);
            tx_[i - sent] =
                TxPacket{std::span<const std::byte>(tx_bytes_.data() + off, tx_[i].header.size()),
                         {},
                         tx_[i].route,
                         tx_[i].to};
        }
        tx_used_ = keep;
    } else {
        tx_used_ = 0;
    }
    tx_count_ -= sent;
}

void Session::dispatch(const RxPacket& rx, std::int64_t now_ns) noexcept {
    ++counters_.rx_packets;
    counters_.rx_bytes += rx.data.size();
    // One Packet reused: parse() sets or resets every field, and a fresh one per packet was
    // 136 bytes zeroed with `rep stos` (half of dispatch's own time).
    pgm::Packet& pkt = rx_pkt_;
    const auto st = pgm::parse(rx.data, pkt, cfg_.parse);
    if (st != pgm::ParseStatus::ok) {
        ++counters_.malformed[static_cast<std::size_t>(st)];
        return;
    }
    if (cfg_.auth
        && cfg_.auth->verify(pkt, auth_scratch_, Authenticator::wall_now_ms())
               != Authenticator::Verdict::ok) {
        ++counters_.auth_refused;
        return;
    }
    // No Tsi temporary: built from three small stores and copied as one 8-byte word, it
    // stalled on store forwarding (a twelfth of the receiver's time).
    const bool ours = source_ && pkt.source_tsi() == source_->config().tsi;
    if (pkt.is_upstream()) {
        if (ours) {
            source_->on_packet(pkt, rx.from, now_ns, *this);
        } else if (receiver_) {
            receiver_->on_packet(pkt, rx.from, now_ns, *this);  // another receiver's NAK/SPMR
        } else {
            ++counters_.unknown_upstream;
        }
        return;
    }
    if (ours) {
        ++counters_.own_dropped;  // multicast loops back to the sender (docs/ARCHITECTURE.md)
        return;
    }
    if (receiver_) {
        receiver_->on_packet(pkt, rx.from, now_ns, *this, rx.rx_time_ns);
    }
}

int Session::do_work(std::int64_t now_ns, bool rx) noexcept {
    int work = 0;
    if (tx_count_ != 0) {  // what was offered since the last call leaves before rx is polled
        work += static_cast<int>(tx_count_);
        flush();
    }
    if (rx && now_ns >= next_rx_poll_ns_) {
        auto r = transport_.poll_rx(rx_);
        if (!r) {
            ++counters_.rx_errors;
        } else if (*r != 0) {
            for (std::size_t i = 0; i < *r; ++i) {
                dispatch(rx_[i], now_ns);
            }
            transport_.release_rx(*r);
            work += static_cast<int>(*r);
        } else if (cfg_.upstream_poll_ns > 0) {
            next_rx_poll_ns_ = now_ns + cfg_.upstream_poll_ns;
        }
    }
    if (source_ && now_ns >= source_->next_deadline()) {
        source_->on_timer(now_ns, *this);
        ++work;
    }
    if (receiver_ && now_ns >= receiver_->next_deadline()) {
        receiver_->on_timer(now_ns, *this);
        ++work;
    }
    if (tx_count_ != 0) {
        work += static_cast<int>(tx_count_);
        flush();
    }
    return work;
}

Result<Sqn> Session::publish(std::span<const std::byte> apdu, std::int64_t now_ns) noexcept {
    if (!source_) {
        return Errc::unsupported;
    }
    auto r = source_->send(apdu, now_ns, *this);
    flush();
    return r;
}

std::int64_t Session::next_deadline() const noexcept {
    std::int64_t d = protocol::kNever;
    if (source_) {
        d = std::min(d, source_->next_deadline());
    }
    if (receiver_) {
        d = std::min(d, receiver_->next_deadline());
    }
    return d;
}

}  // namespace prizma::pubsub
