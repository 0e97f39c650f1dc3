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
#include <prizma/transport.hpp>

#include "lib/pgm/packet.hpp"
#include "lib/protocol/receiver.hpp"
#include "lib/protocol/sink.hpp"
#include "lib/protocol/source.hpp"
#include "lib/pubsub/auth.hpp"

namespace prizma::pubsub {

using pgm::Sqn;

struct SessionConfig {
    std::optional<protocol::SourceConfig> source;
    std::optional<protocol::ReceiverConfig> receiver;
    pgm::ParseConfig parse{};
    std::size_t rx_batch = 64;
    std::size_t tx_batch = 64;
    /// When set, unicast packets (NAK, SPMR) go to this port of the peer's address: over UDP,
    /// OpenPGM sources listen on the channel's port only, whatever port their SPMs came from.
    std::uint16_t unicast_port = 0;
    /// Source-only sessions: after a poll that found nothing, the transport is not polled
    /// again for this long (0 = every do_work). Upstream traffic is NAKs and SPMRs only.
    std::int64_t upstream_poll_ns = 0;
    /// Packet authentication: every packet sent is signed, every one received verified.
    std::optional<Authenticator> auth;
};

struct SessionCounters {
    std::uint64_t rx_packets = 0;
    std::uint64_t rx_bytes = 0;
    std::uint64_t tx_packets = 0;
    std::uint64_t tx_bytes = 0;
    std::uint64_t tx_batches = 0;
    std::uint64_t tx_short = 0;    ///< send_batch accepted fewer than offered
    std::uint64_t tx_dropped = 0;  ///< could not be queued (transport stuck); PGM repairs
    std::uint64_t tx_errors = 0;
    std::uint64_t rx_errors = 0;
    std::uint64_t own_dropped = 0;  ///< our own multicast heard back
    std::uint64_t unknown_upstream = 0;
    std::uint64_t auth_refused = 0;  ///< no valid MAC: missing, unknown key, stale, bad tag
    std::array<std::uint64_t, 8> malformed{};  ///< by pgm::ParseStatus
    [[nodiscard]] std::uint64_t malformed_total() const noexcept {
        std::uint64_t n = 0;
        for (auto v : malformed) {
            n += v;
        }
        return n;
    }
};

/// Glue between one Transport and the sans-I/O protocol core: receives a batch, parses and
/// routes each packet (own TSI dropped, upstream to the Source, downstream to the Receiver),
/// runs timers, and sends what the core emitted as batches. One owner thread.
class Session final : public protocol::PacketSink {
public:
    /// Errors: the source's or receiver's configuration refused (the detail names the field
    /// and its bounds, see protocol::validate), or Errc::invalid_argument.
    static Result<std::unique_ptr<Session>, Error> create(Transport& transport,
                                                          const SessionConfig& cfg);
    ~Session() override;
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
    Session(Session&&) = delete;
    Session& operator=(Session&&) = delete;

    /// One duty cycle: rx (unless `rx` is false: the caller knows nothing arrived), timers,
    /// tx flush. Returns the amount of work done (0 = idle).
    int do_work(std::int64_t now_ns, bool rx = true) noexcept;
    /// Publishes one APDU and flushes it to the transport.
    Result<Sqn> publish(std::span<const std::byte> apdu, std::int64_t now_ns) noexcept;
    [[nodiscard]] std::int64_t next_deadline() const noexcept;
    void flush() noexcept;
    /// Nothing is queued, or a full batch is (the next packet flushes it): a batch begins.
    [[nodiscard]] bool tx_batch_start() const noexcept {
        return tx_count_ == 0 || tx_count_ == tx_.size();
    }

    void emit(const TxPacket& packet) noexcept override;
    void forget(const Endpoint& peer) noexcept override { transport_.forget(peer); }

    [[nodiscard]] protocol::Source* source() noexcept { return source_.get(); }
    [[nodiscard]] protocol::Receiver* receiver() noexcept { return receiver_.get(); }
    [[nodiscard]] const SessionCounters& counters() const noexcept { return counters_; }
    [[nodiscard]] Transport& transport() noexcept { return transport_; }

private:
    Session(Transport& t, const SessionConfig& cfg);
    void dispatch(const RxPacket& rx, std::int64_t now_ns) noexcept;

    Transport& transport_;
    SessionConfig cfg_;
    std::unique_ptr<protocol::Source> source_;
    std::unique_ptr<protocol::Receiver> receiver_;
    std::size_t max_datagram_ = 0;
    std::vector<RxPacket> rx_;
    pgm::Packet rx_pkt_{};  // the packet being dispatched
    std::vector<std::byte> tx_bytes_;
    std::vector<TxPacket> tx_;
    std::size_t tx_count_ = 0;
    std::size_t tx_used_ = 0;  // bytes of tx_bytes_ the queued packets take, from its start
    std::int64_t next_rx_poll_ns_ = INT64_MIN;  // upstream_poll_ns: quiet until then
    std::vector<std::byte> auth_scratch_;       // a received packet's copy, for its MAC
    SessionCounters counters_;
};

}  // namespace prizma::pubsub
