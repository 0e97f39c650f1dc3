// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <prizma/counters.hpp>
#include <prizma/message.hpp>
#include <prizma/options.hpp>
#include <prizma/result.hpp>
#include <prizma/transport_registry.hpp>
#include <prizma/types.hpp>

namespace prizma {

namespace detail {
struct Channel;
}  // namespace detail

class Context;

/// Zero-copy publication: room for one message inside the transmit window. Write into data(),
/// then commit(); a Claim destroyed without commit() is aborted. Move-only; owner thread only.
class Claim {
public:
    Claim(Claim&& o) noexcept : ch_(std::exchange(o.ch_, nullptr)), buf_(o.buf_) {}
    Claim& operator=(Claim&& o) noexcept;
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    ~Claim();
    /// The claimed bytes (size = the n given to try_claim).
    [[nodiscard]] std::span<std::byte> data() const noexcept { return buf_; }
    /// Sends the first `used` bytes; returns the message's sequence number.
    Result<Sqn> commit(std::size_t used) noexcept;

private:
    friend class Publisher;
    Claim(detail::Channel* ch, std::span<std::byte> buf) noexcept : ch_(ch), buf_(buf) {}
    detail::Channel* ch_;
    std::span<std::byte> buf_;
};

/// A receiver a publisher's flow control tracks (ChannelOptions::flow; docs/PROTOCOL.md,
/// "Flow control").
struct FlowReceiverInfo {
    std::uint64_t id = 0;
    std::uint64_t tag = 0;                    ///< its group; 0 = none
    Sqn consumed{};                           ///< the next sequence number it will deliver
    std::uint32_t window = 0;                 ///< its receive window, sequence numbers
    std::uint32_t lag = 0;                    ///< sequence numbers sent and not yet consumed by it
    std::chrono::nanoseconds since_heard{0};  ///< since its last status message
    /// Counted in the send limit (false: too far behind to be admitted yet, or not tagged).
    bool counted = false;
};

/// Sends messages on one channel. A handle: valid while its Context lives. Not thread-safe:
/// call it from the Context's owner thread only.
class Publisher {
public:
    /// Copies `message` into the transmit window and queues it (fragmented when larger than one
    /// packet); it leaves at the next Context::poll() or when the send batch fills. Never blocks.
    /// Errors: Errc::back_pressured (window full within retention), Errc::rate_limited,
    /// Errc::message_too_large, Errc::closed; is_transient() tells which to retry.
    /// @code
    ///   while (auto r = pub.offer(bytes); !r && prizma::is_transient(r.error())) ctx->poll();
    /// @endcode
    Result<Sqn> offer(std::span<const std::byte> message) noexcept;
    /// Zero-copy: reserves n ≤ max_packet_payload() bytes in the window.
    Result<Claim> try_claim(std::size_t n) noexcept;
    /// Sends what offer()/commit() queued now, without polling any channel (Context::poll()
    /// also sends it, after whatever channels come first): for a latency-critical reply.
    void flush() noexcept;
    /// Sends the 3 OPT_FIN SPMs; the channel keeps answering NAKs until the Context ends.
    /// To close without cutting short the repair of the last messages, keep polling the
    /// Context until quiet(), then close() (and poll a little for the FIN SPMs to go out):
    /// @code
    ///   while (!pub.quiet()) { if (ctx.poll() == 0) ctx.wait(std::chrono::milliseconds(1)); }
    ///   pub.close();
    /// @endcode
    void close() noexcept;
    /// True once no NAK has come for two NAK rounds of the timers (plus the first two
    /// heartbeat SPMs) since the later of the last message and the last NAK, with no repair
    /// queued; or once the receivers' repair deadline has passed since the last message
    /// (docs/PROTOCOL.md §3.2). False for a removed handle.
    [[nodiscard]] bool quiet() const noexcept;
    /// With flow control (ChannelOptions::flow), quiet() also waits until every counted
    /// receiver has said it consumed the last message (bounded by linger_cap()).
    /// The longest quiet() can take after the last message (the receivers' repair deadline).
    [[nodiscard]] std::chrono::nanoseconds linger_cap() const noexcept;
    [[nodiscard]] std::size_t max_message_size() const noexcept;
    [[nodiscard]] std::size_t max_packet_payload() const noexcept;
    [[nodiscard]] Tsi tsi() const noexcept;
    /// False after Context::remove() reset this handle.
    [[nodiscard]] bool valid() const noexcept { return ch_ != nullptr; }
    [[nodiscard]] ChannelCounters counters() const noexcept;
    /// The receivers flow control tracks (empty with FlowControl::max). Allocates.
    [[nodiscard]] std::vector<FlowReceiverInfo> flow_receivers() const;
    /// The transport's own counters (verbs: rx_ring_low, sq_full, completion_errors,
    /// ah_cache_size, ...); empty for transports without any. Allocates: not for the hot path.
    [[nodiscard]] std::vector<NamedCounter> transport_counters() const;
    /// As Subscriber::transport_events().
    [[nodiscard]] std::vector<TransportEvent> transport_events();
    /// As Subscriber::transport_description().
    [[nodiscard]] std::string transport_description() const;

private:
    friend class Context;
    explicit Publisher(detail::Channel* ch) noexcept : ch_(ch) {}
    detail::Channel* ch_;
};

/// Receives messages on one channel: every source's messages once and in order, and a loss
/// event for anything that cannot be repaired. Sources with messages waiting take turns of at
/// most 64 messages each, so one source's backlog never hides another's for long. A handle,
/// valid while its Context lives; owner thread only.
class Subscriber {
public:
    /// Delivers up to `limit` messages/events to `handler(const prizma::Message&)`; returns
    /// how many. Does not touch the network: Context::poll() does. The consumed position moves
    /// before the handler runs, so an exception from it propagates and loses nothing else.
    /// @code
    ///   sub.poll(64, [](const prizma::Message& m) { if (m.kind == prizma::MessageKind::data)
    ///   use(m.payload); });
    /// @endcode
    template <typename Handler>
    std::size_t poll(std::size_t limit, Handler&& handler) {
        std::size_t n = 0;
        Message m;
        while (n < limit && next(m)) {
            ++n;
            handler(static_cast<const Message&>(m));
        }
        return n;
    }
    /// The next message or event, if any. The payload stays valid until the next call.
    bool next(Message& out) noexcept;
    /// False after Context::remove() reset this handle.
    [[nodiscard]] bool valid() const noexcept { return ch_ != nullptr; }
    [[nodiscard]] ChannelCounters counters() const noexcept;
    /// Where this subscriber can be reached, as text: on verbs "GID qpn=N" (what a unicast
    /// publisher needs: `verbs://DEV/ADDR:DPORT?qpn=N`); empty for other transports.
    [[nodiscard]] std::string local_address() const;
    /// The transport's own counters, as Publisher::transport_counters().
    [[nodiscard]] std::vector<NamedCounter> transport_counters() const;
    /// Link, fabric and device events of the channel's transport since the last call (verbs:
    /// port down/up, LID/GID/SM changes, group re-joined, fatal), at most one per kind with
    /// its count; empty for transports without any. Allocates: call it now and then.
    [[nodiscard]] std::vector<TransportEvent> transport_events();
    /// What the channel's transport chose (Transport::description(): verbs: device, GID,
    /// MTU, MLID, Q_Key, depths; udp: interface, receive buffer granted, ...); also in the
    /// stats file, which prizma-stat shows. Empty when the transport says nothing.
    [[nodiscard]] std::string transport_description() const;

private:
    friend class Context;
    explicit Subscriber(detail::Channel* ch) noexcept : ch_(ch) {}
    detail::Channel* ch_;
};

/// Owns channels (each with its transport) and drives them. One owner thread: every method,
/// and every method of its Publishers and Subscribers, must be called from it. A value type:
/// movable (handles stay valid across a move), not copyable.
///
/// Channel URIs name a transport by scheme; the built-ins (docs/URI.md has every key):
///  - `udp://GROUP:PORT?iface=ADDR&dport=N&ttl=N&tos=N&loop=0|1&rcvbuf=N&sndbuf=N&gso=0|1&
///    gro=0|1|auto` PGM over UDP as OpenPGM encapsulates it; PORT is the UDP port, dport the
///    PGM data-destination port (default 7500).
///  - `verbs://DEVICE[:PORT]/GROUP:DPORT?gid_index=N&qkey=N&qpn=N&rx_depth=N&...` PGM over an
///    RDMA UD QP (libibverbs): multicast GROUP (IPv4/IPv6), or a unicast peer address plus its
///    QP number. DEVICE may be a local IP address/[GID] instead of a device name.
///  - `mem://NAME:DPORT` an in-process network (tests, examples; one thread).
///  Every scheme also takes `key_file=PATH` and the flow keys (`flow=`, `flow_tag=`, ...), and
///  with the registry of create() `loss=P`, `tx_loss=P` and `seed=N` (seeded fault injection
///  for tests: memory::add_fault_injection). Other schemes come from the TransportRegistry
///  given to create().
class Context {
public:
    /// A Context with every built-in transport (register_builtin_transports); defined in the
    /// prizma::prizma library.
    /// @code
    ///   auto ctx = prizma::Context::create().value();
    ///   auto pub = ctx.add_publisher("udp://239.192.0.1:7600?iface=127.0.0.1").value();
    /// @endcode
    static Result<Context, Error> create();
    /// A Context with the transports of `transports` only (prizma::core and the per-transport
    /// libraries, or a transport of the user's own).
    static Result<Context, Error> create(TransportRegistry transports);
    ~Context();
    Context(Context&& other) noexcept;
    Context& operator=(Context&& other) noexcept;
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    /// A channel named by `uri`, made by the registered factory of its scheme.
    /// Errors: Errc::invalid_argument (bad URI or option: the detail names it and the accepted
    /// range), Errc::unsupported (unknown scheme; the detail lists the registered ones),
    /// std::errc::not_enough_memory (window storage), or the transport's OS error.
    Result<Publisher, Error> add_publisher(std::string_view uri,
                                           const ChannelOptions& options = {});
    Result<Subscriber, Error> add_subscriber(std::string_view uri,
                                             const ChannelOptions& options = {});
    /// A channel over a transport the caller made (no registry involved). `name` shows in
    /// errors and in prizma-stat.
    Result<Publisher, Error> add_publisher(TransportChannel channel,
                                           const ChannelOptions& options = {},
                                           std::string_view name = "custom");
    Result<Subscriber, Error> add_subscriber(TransportChannel channel,
                                             const ChannelOptions& options = {},
                                             std::string_view name = "custom");
    /// Removes a channel from the running Context: a publisher first sends its FIN SPMs
    /// (close()); the transport is closed. The handle given is reset: valid() is false, offer()
    /// and try_claim() return Errc::closed, poll() delivers nothing, counters are zero. Other
    /// copies of the handle must not be used any more. Errors: Errc::invalid_argument when the
    /// handle is not a live channel of this Context.
    Result<void, Error> remove(Publisher& publisher);
    Result<void, Error> remove(Subscriber& subscriber);

    /// One duty cycle over every channel: receive, timers, send. Returns the work done
    /// (0 = idle). Reads the clock once. Once wait() has slept, a channel whose transport
    /// follows its wakeup fd (udp://) is read only when the Context's epoll reports it: the
    /// first poll after wait() uses wait()'s events, a later one a single epoll_wait(0)
    /// (when two or more channels can be skipped) instead of an empty receive per channel.
    int poll() noexcept;
    /// Steady-clock time (ns) of the next protocol timer; INT64_MAX when none.
    [[nodiscard]] std::int64_t next_deadline_ns() const noexcept;
    /// The same as a time point (time_point::max() when none).
    [[nodiscard]] std::chrono::steady_clock::time_point next_deadline() const noexcept;
    /// Blocks until a transport is readable or the next timer is due (at most `max_wait`):
    /// arms every transport (one with datagrams already waiting returns at once), then one
    /// epoll_wait on the Context's epoll fd. The timeout is a timerfd in that epoll set
    /// (absolute, CLOCK_MONOTONIC; the kernel adds the calling thread's timer slack), moved
    /// only when this wait needs it earlier: a wait may therefore end early, at an expiry
    /// an earlier wait set, never late. (Re-arming a kernel timer at every sleep cost ~6 us
    /// per wake-up on a KVM guest.) Without a timerfd, epoll_pwait2's own timeout. Channels
    /// that can only be busy-polled (mem://) make this return at once. Call poll() after it.
    void wait(std::chrono::nanoseconds max_wait) noexcept;

    /// For a Context inside someone else's event loop (epoll, Boost.Asio, libuv): an fd that
    /// becomes readable when a channel has datagrams. Before blocking on it, call
    /// prepare_wait(); sleep only when it returns true, and no longer than next_deadline().
    /// After waking (or at the deadline), call poll(). Once wait() has been used, the fd may
    /// also wake its loop once at the timer wait() set; poll() quiets it. The fd stays the same for
    /// the Context's life; -1 if it could not be made (then busy-poll).
    /// @code
    ///   if (ctx.prepare_wait()) wait_readable(ctx.wakeup_fd(), ctx.next_deadline());
    ///   ctx.poll();
    /// @endcode
    [[nodiscard]] int wakeup_fd() const noexcept;
    /// Arms every transport's wakeup. false: do not sleep (datagrams are already waiting, or a
    /// channel can only be busy-polled).
    [[nodiscard]] bool prepare_wait() noexcept;

    /// Sum of every channel's counters.
    [[nodiscard]] ChannelCounters counters() const noexcept;
    /// The shared-memory file `prizma-stat` reads this Context's counters from (updated by
    /// poll() ten times a second, removed with the Context): $PRIZMA_STATS_DIR, default
    /// /dev/shm/prizma-<uid>, `<pid>-<n>.stats`. Empty when PRIZMA_STATS=0 or it could not be
    /// made (e.g. the directory is refused: not a directory of this user's alone).
    [[nodiscard]] std::string_view stats_file() const noexcept;
    /// Why there is no stats file, when it could not be made ("stats directory
    /// /dev/shm/prizma-1000: ..."); empty when there is one or PRIZMA_STATS=0.
    [[nodiscard]] std::string_view stats_error() const noexcept;
    /// The transports this Context can make channels with.
    [[nodiscard]] const TransportRegistry& transports() const noexcept;
    /// The steady clock used by the protocol, in ns.
    static std::int64_t now_ns() noexcept;

    /// Owner thread (one per Context: every method of it, its Publishers, Subscribers and
    /// Claims). The first thread to call one becomes the owner; adopt_owner_thread() makes the
    /// calling thread the owner (hand-over, e.g. to a runner thread, once the previous owner
    /// has stopped touching the Context; AgentRunner does this), release_owner_thread() leaves
    /// it unbound. Builds with PRIZMA_OWNER_CHECKS (CMake option; on in Debug and in the CI's
    /// sanitizer build) abort with the entry point's name when another thread calls in;
    /// otherwise nothing is checked.
    void adopt_owner_thread() noexcept;
    void release_owner_thread() noexcept;
    [[nodiscard]] static bool owner_checks_enabled() noexcept;

private:
    struct Impl;
    explicit Context(std::unique_ptr<Impl> impl) noexcept;
    std::unique_ptr<Impl> impl_;
};

}  // namespace prizma
