// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <prizma/counters.hpp>
#include <prizma/result.hpp>
#include <prizma/types.hpp>

namespace prizma {

/// Where the first packet in `bytes` ends (0 = not a whole packet): the framing of the layer
/// above, which a transport needs only to cut apart datagrams that reached it merged (UDP
/// receive-side GRO). Transports never interpret packets otherwise.
using FrameLength = std::size_t (*)(std::span<const std::byte> bytes) noexcept;

/// What a transport can do; constant for the transport's lifetime.
struct TransportCaps {
    std::size_t max_datagram = 0;  ///< largest PGM packet (bytes) one datagram carries
    std::size_t max_tx_batch = 0;  ///< most packets one send_batch() call accepts
    std::size_t headroom = 0;      ///< bytes in front of each received datagram (40 = UD GRH)
    /// An empty poll_rx() costs a system call: a publisher, which only hears repair
    /// requests, then polls it less often while it is quiet (every 10 us at most).
    bool poll_is_syscall = false;
    /// Largest PGM packet it can receive, when more than it sends (0: max_datagram): a verbs
    /// channel with `mtu=` below its port's MTU still receives what peers send at the port's.
    /// Receivers size their windows from it.
    std::size_t max_rx_datagram = 0;
    [[nodiscard]] std::size_t rx_datagram() const noexcept {
        return max_rx_datagram != 0 ? max_rx_datagram : max_datagram;
    }
};

/// Where a packet goes.
enum class Route : std::uint8_t {
    downstream,  ///< to the channel's group (ODATA, RDATA, SPM, NCF, multicast SPMR)
    unicast,     ///< to `TxPacket::to` (NAK, unicast SPMR)
};

/// One datagram to send: header + payload, gathered without a copy (iovec pair / two SGEs).
struct TxPacket {
    std::span<const std::byte> header;
    std::span<const std::byte> payload;
    Route route = Route::downstream;
    Endpoint to{};  ///< meaningful for Route::unicast
};

/// One received datagram, in transport-owned memory.
struct RxPacket {
    std::span<const std::byte> data;  ///< the PGM packet (headroom already skipped)
    Endpoint from{};                  ///< sender's transport address
    std::int64_t rx_time_ns = 0;      ///< receive timestamp if known, else 0
};

/// A datagram transport. Non-blocking. Every method is called from one thread (the owner
/// thread of the Context that uses it); none is thread-safe.
/// Something a transport's link or fabric did (verbs: port down and up, LID/GID/P_Key or
/// subnet manager changes, a multicast group re-joined, a fatal device error), for the
/// application to log or act on (Publisher/Subscriber::transport_events()).
struct TransportEvent {
    enum class Kind : std::uint8_t {
        link_down,        ///< the port went down: nothing is sent or received until it is up
        link_up,          ///< the port is active again
        address_changed,  ///< the port's LID, GID table or P_Key table changed
        fabric_changed,   ///< a new subnet manager, or it asked clients to re-register
        group_rejoined,   ///< the multicast group was joined again (after one of the above)
        rejoin_failed,    ///< joining the group again failed (retried with back-off)
        fatal,            ///< the device failed: the channel's sends and receives now fail
        /// the queue pair failed (a send error, or it went to the error state) and was
        /// brought back, or replaced by a new one: what was in flight is lost (PGM repairs it)
        qp_recovered,
    };
    Kind kind = Kind::link_down;
    std::uint64_t count = 1;  ///< how many of these since the last call
};

/// A text for logs: "link_down", "group_rejoined", ...
std::string_view to_string(TransportEvent::Kind kind) noexcept;

class Transport {
public:
    Transport() = default;
    Transport(const Transport&) = delete;
    Transport& operator=(const Transport&) = delete;
    Transport(Transport&&) = delete;
    Transport& operator=(Transport&&) = delete;
    virtual ~Transport() = default;

    /// Short scheme name, e.g. "udp", "verbs", "mem".
    [[nodiscard]] virtual std::string_view name() const noexcept = 0;
    [[nodiscard]] virtual TransportCaps caps() const noexcept = 0;
    /// Queues up to packets.size() datagrams; returns how many were accepted. Fewer than
    /// requested means the device queue is full (retry later), not an error. The spans need
    /// to stay valid only for the duration of the call.
    [[nodiscard]] virtual Result<std::size_t> send_batch(
        std::span<const TxPacket> packets) noexcept = 0;
    /// Fills `out` with arrived datagrams; never blocks. The data spans stay valid until
    /// release_rx() is called; poll_rx() must not be called again before that.
    [[nodiscard]] virtual Result<std::size_t> poll_rx(std::span<RxPacket> out) noexcept = 0;
    /// Returns the buffers of the `count` datagrams handed out by the last poll_rx().
    virtual void release_rx(std::size_t count) noexcept = 0;
    /// An fd that becomes readable when poll_rx() would make progress (after arm_wakeup());
    /// -1 when the transport can only be busy-polled.
    [[nodiscard]] virtual int wakeup_fd() const noexcept = 0;
    /// Prepares wakeup_fd() for a blocking wait. true: armed, nothing pending, safe to sleep;
    /// false: datagrams are already waiting (call poll_rx() instead of sleeping).
    [[nodiscard]] virtual Result<bool> arm_wakeup() noexcept = 0;
    /// true when a poll_rx() now may be skipped while wakeup_fd() is not readable: the fd
    /// is armed, level-triggered (readable for as long as datagrams wait) and nothing is held
    /// in user space. A Context that sleeps then reads only the channels its epoll reports
    /// (one epoll_wait instead of an empty receive per channel). Default: never skipped.
    [[nodiscard]] virtual bool rx_follows_wakeup() const noexcept { return false; }
    /// The protocol no longer needs to reach `peer` (its session expired): drop any per-peer
    /// state such as a cached address handle.
    virtual void forget(const Endpoint& peer) noexcept { (void)peer; }
    /// This transport's own address (verbs: GID + QP number), for tools and for unicast
    /// set-ups where the peer must be told where to send; family 0 when not meaningful.
    [[nodiscard]] virtual Endpoint local_endpoint() const noexcept { return {}; }
    /// local_endpoint() as text for people and for the peer who must be told where to send
    /// (verbs: "GID qpn=N"); empty when not meaningful. Allocates: not for the hot path.
    [[nodiscard]] virtual std::string local_address_text() const { return {}; }
    /// What the transport chose for this channel, on one line for people (verbs: device,
    /// port, GID index and address, netdev, MTU, MLID, Q_Key, the depths and inline size as
    /// clamped, and what was adjusted; udp: interface, TTL, the receive buffer granted, GSO
    /// and GRO). Empty when there is nothing to say. Allocates: not for the hot path.
    [[nodiscard]] virtual std::string description() const { return {}; }
    /// Writes up to out.size() transport-specific counters into `out` and returns how many
    /// this transport has (which may be more than out.size()). Names are static strings.
    virtual std::size_t named_counters(std::span<NamedCounter> out) const noexcept {
        (void)out;
        return 0;
    }
    /// Takes up to out.size() events that happened since the last call (at most one per
    /// kind, with its count); returns how many were written. Never blocks; owner thread.
    virtual std::size_t take_events(std::span<TransportEvent> out) noexcept {
        (void)out;
        return 0;
    }
};

}  // namespace prizma
