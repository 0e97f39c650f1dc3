// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <prizma/context.hpp>
#include <prizma/error.hpp>
#include <prizma/options.hpp>
#include <prizma/recorder.hpp>
#include <prizma/result.hpp>
#include <prizma/stream.hpp>

/// Replaying recorded streams over TCP and joining a stream late (docs/STREAMS.md, "Recording
/// and late join").
namespace prizma {

/// How a replay connection is protected (docs/STREAMS.md, "Protecting the replay service").
/// The journal is the stream's whole content (an exchange's order flow): off loopback, the
/// service and its clients refuse plaintext unless `insecure` says otherwise.
struct ReplaySecurity {
    /// TLS 1.3 with external pre-shared keys, one derived from each key (HKDF-SHA-256): the
    /// channel's own keys (read_key_file(), the `key_file=` of the multicast channel), with
    /// their ids and rotation. A server accepts any of them; a client offers the first. Both
    /// ends prove the key; the (EC)DHE exchange gives forward secrecy.
    std::optional<AuthOptions> keys;
    /// Or TLS 1.3 with certificates (PEM files), both ways: this end's certificate chain and
    /// private key, and the CA file that the other end's certificate must chain to.
    std::string certificate_file;
    std::string private_key_file;
    std::string ca_file;
    /// Client, with certificates: the name (DNS or IP) the server's certificate must carry;
    /// empty = the address connected to.
    std::string server_name;
    /// Accept plaintext on a non-loopback address (without keys or certificates). Anyone who
    /// reaches the port reads the journal and can feed a client forged records; the server's
    /// start and the tools say so.
    bool insecure = false;
    /// Server, with TLS on Linux: hand each connection's sending keys to the kernel (the `tls`
    /// module, kTLS) after the handshake, so the kernel encrypts in send(2), without OpenSSL's
    /// record copies. Used where the kernel accepts it (module present, AES-GCM, OpenSSL built
    /// with KTLS), else OpenSSL encrypts in user space as before; ReplayServerCounters::
    /// kernel_tls counts where it was. false: never. (Clients decrypt in user space: OpenSSL
    /// 3.0 gives the kernel no TLS 1.3 receive keys.)
    bool kernel_tls = true;
};

struct ReplayServerOptions {
    /// Where to listen (an IPv4 or IPv6 address); port 0 = an ephemeral port (see
    /// ReplayServer::port()).
    std::string address = "127.0.0.1";
    std::uint16_t port = 0;
    /// The journals served: stream id → journal directory (a Recorder's).
    std::vector<std::pair<std::uint32_t, std::string>> streams;
    /// Bytes queued per client before the server stops reading its journal for it: a client
    /// that does not read only fills its own buffer (and its socket's).
    std::size_t client_buffer_bytes = std::size_t{256} << 10U;
    /// Clients served at once: connections whose TLS handshake is done (plaintext: at once).
    std::size_t max_clients = 64;
    /// Such clients at once from one client address; more are closed (`refused`). Also the
    /// bound on one address's connections still in their handshake.
    std::size_t max_clients_per_address = 8;
    /// Connections still in their TLS handshake (not authenticated), counted apart from
    /// max_clients: idle sockets cannot take an authenticated client's place. When they are
    /// all taken (or one address has max_clients_per_address of them), a new connection takes
    /// the place of the oldest that has sent nothing yet, else of the oldest
    /// (`handshakes_evicted`).
    std::size_t max_handshakes = 64;
    /// Client addresses allowed to connect, as CIDR prefixes ("10.1.2.0/24", "::1/128", or a
    /// bare address); empty = any. Others are closed at once (`refused`).
    std::vector<std::string> allow;
    ReplaySecurity security;
    /// Per-client throttle (records per second; 0 = unthrottled).
    std::uint64_t max_records_per_second = 0;
    /// A client that has not finished its handshake and sent its whole request this long after
    /// connecting gets an error frame (Errc::invalid_argument, "no whole request"; none before
    /// the handshake) and is closed: a connection that says nothing cannot hold one of the
    /// max_clients places.
    std::chrono::milliseconds request_timeout{5000};
    /// A connection whose TLS handshake is not done this long after connecting is closed
    /// (`timeouts`, `handshake_failures`): a handshake takes a few round trips.
    std::chrono::milliseconds handshake_timeout{1000};
    /// A client whose socket took no byte for this long (it stopped reading) is closed, in
    /// every state (streaming, or with its end or error frame still queued); 0 = never. Its
    /// place goes to another client.
    std::chrono::milliseconds stall_timeout{60000};
};

struct ReplayServerCounters {
    std::uint64_t clients = 0;   ///< accepted
    std::uint64_t requests = 0;  ///< valid requests served
    std::uint64_t errors = 0;    ///< bad requests answered with an error
    std::uint64_t records = 0;   ///< records sent
    std::uint64_t timeouts = 0;  ///< clients closed: no request within request_timeout, or
                                 ///< nothing read within stall_timeout
    std::uint64_t refused = 0;   ///< connections closed at once: not allowed, or over a cap
    std::uint64_t handshake_failures = 0;  ///< TLS handshakes that failed (wrong key,
                                           ///< certificate, a plaintext or replayed hello)
    std::uint64_t kernel_tls = 0;          ///< TLS connections whose sending the kernel took over
                                           ///< (ReplaySecurity::kernel_tls)
    std::uint64_t handshakes_evicted = 0;  ///< connections in their handshake closed to make
                                           ///< room for a newer one (max_handshakes)
};

/// Serves journal ranges to TCP clients, many at once, from one thread (epoll, non-blocking
/// sockets). Protocol (docs/STREAMS.md): a 32-byte request, then journal frames, ending with an
/// end frame (or an error frame, then the connection closes). start() returns once listening;
/// the destructor stops and joins the thread.
class ReplayServer {
public:
    /// Errors: Errc::invalid_argument (address, buffer or client limits), OS errors (bind,
    /// listen, epoll).
    static Result<ReplayServer, Error> start(const ReplayServerOptions& options);
    ReplayServer(ReplayServer&& other) noexcept;
    ReplayServer& operator=(ReplayServer&& other) noexcept;
    ReplayServer(const ReplayServer&) = delete;
    ReplayServer& operator=(const ReplayServer&) = delete;
    ~ReplayServer();
    /// The port it listens on.
    [[nodiscard]] std::uint16_t port() const noexcept;
    /// How its connections are protected, for logs: "TLS 1.3, pre-shared keys 7",
    /// "plaintext (loopback)", or a loud PLAINTEXT, INSECURE.
    [[nodiscard]] const std::string& protection() const noexcept;
    /// Stops serving (closes every client and the listening socket); idempotent.
    void stop() noexcept;
    /// Any thread.
    [[nodiscard]] ReplayServerCounters counters() const noexcept;

    struct Impl;

private:
    explicit ReplayServer(std::unique_ptr<Impl> impl) noexcept;
    std::unique_ptr<Impl> impl_;
};

struct ReplayRequest {
    std::uint32_t stream_id = 0;
    std::uint64_t from = 0;
    /// One past the last sequence wanted; max = up to the end (or forever when following).
    std::uint64_t to = std::numeric_limits<std::uint64_t>::max();
    /// Keep streaming what the recorder writes after the current end.
    bool follow = false;
};

struct ReplayClientOptions {
    ReplaySecurity security;
    /// The connection and the TLS handshake must be done within this long, or next() fails
    /// with std::errc::timed_out.
    std::chrono::milliseconds connect_timeout{2000};
};

/// One replay: connect() starts a non-blocking connection (IPv4 or IPv6); next() finishes it
/// (the TLS handshake, the request) and reads entries. Nothing blocks. Owner thread only.
class ReplayClient {
public:
    /// Errors: Errc::invalid_argument (address, security: plaintext to a non-loopback address
    /// without `insecure`), OS errors of socket()/connect() that are known at once.
    static Result<ReplayClient, Error> connect(std::string_view address,
                                               std::uint16_t port,
                                               const ReplayRequest& request,
                                               const ReplayClientOptions& options = {});
    ReplayClient(ReplayClient&& other) noexcept;
    ReplayClient& operator=(ReplayClient&& other) noexcept;
    ReplayClient(const ReplayClient&) = delete;
    ReplayClient& operator=(const ReplayClient&) = delete;
    ~ReplayClient();

    /// The next entry (record span valid until the next call); false: none yet, or done().
    /// Errors: the server's error (its code: Errc::invalid_argument for a bad request or range,
    /// Errc::unsupported for an unknown stream; error_text() says what; server_error() is
    /// true), or std::errc::connection_reset when the server went away before the end, the
    /// connect error (e.g. std::errc::connection_refused), std::errc::timed_out (no connection
    /// and handshake within connect_timeout), std::errc::permission_denied (the TLS handshake
    /// failed: wrong key or certificate, a plaintext server), or
    /// Errc::malformed_packet for a frame that cannot be one (a length past 16 MiB, a bad
    /// header): nothing is allocated from a length before it is checked.
    Result<bool> next(JournalEntry& out) noexcept;
    /// The end frame came: the range is complete.
    [[nodiscard]] bool done() const noexcept;
    /// What failed, after next() returned an error.
    [[nodiscard]] const std::string& error_text() const noexcept;
    /// The error came from the server (an error frame), not from the connection.
    [[nodiscard]] bool server_error() const noexcept;
    /// How the connection is protected (as ReplayServer::protection()).
    [[nodiscard]] const std::string& protection() const noexcept;
    /// Waits up to `timeout` for data, or for the connection to be writable while it is set up
    /// (poll(2)).
    void wait(std::chrono::milliseconds timeout) const noexcept;
    [[nodiscard]] int fd() const noexcept;

    struct Impl;

private:
    explicit ReplayClient(std::unique_ptr<Impl> impl) noexcept;
    std::unique_ptr<Impl> impl_;
};

struct ReplayEndpoint {
    std::string address;
    std::uint16_t port = 0;
};

struct LateJoinOptions {
    /// The live stream (stream_id, buffer_records, gap_timeout, history); start_sequence is
    /// ignored: live is read from the first record heard.
    StreamOptions stream;
    std::string replay_address = "127.0.0.1";
    std::uint16_t replay_port = 0;
    /// Other replay services of the same stream, tried in turn after replay_address when an
    /// attempt fails (unreachable, or a server whose frames could not be right).
    std::vector<ReplayEndpoint> alternates;
    /// How to reach them (keys or certificates; connect_timeout).
    ReplayClientOptions client;
    /// The first sequence wanted: 0, or the application's own last persisted + 1.
    std::uint64_t from = 0;
    /// Live events held while the replay catches up. When full, the oldest is dropped (the
    /// replay will bring it) and the merge point moves on with the live edge.
    std::size_t live_buffer_records = 65536;
    /// How long to keep reconnecting to the replay service once it goes away. Only progress
    /// (an event replayed) starts the time anew: a service that accepts and drops connections
    /// without sending anything fails the join after this long, like one that is down.
    std::chrono::nanoseconds recorder_timeout = std::chrono::seconds(5);
    std::chrono::nanoseconds retry_interval = std::chrono::milliseconds(50);
};

struct LateJoinCounters {
    std::uint64_t replayed = 0;          ///< records delivered from the replay
    std::uint64_t live = 0;              ///< records delivered from the live stream
    std::uint64_t buffer_overflows = 0;  ///< live events dropped from a full buffer
    std::uint64_t reconnects = 0;        ///< replay connections after the first
    /// Attempts ended because the server's frames could not be right (not continuing at the
    /// next sequence, a loss or record past the live edge + live_buffer_records, an epoch
    /// that is not live's): the position did not move; last_refusal() says why.
    std::uint64_t refused_frames = 0;
    /// Attempts ended because the server did not authenticate as configured: a failed TLS
    /// handshake (another key or certificate, a plaintext server), or, with keys, a server that
    /// did not use the pre-shared key (one that presented a certificate instead).
    std::uint64_t handshake_refusals = 0;
    std::uint64_t merge_sequence = 0;  ///< the first sequence delivered from live
    bool merged = false;
};

/// A subscriber that starts mid-stream: reads live first (buffering, bounded), replays from the
/// recorder from `from`, and switches to live once the replay reaches the buffered live edge:
/// every sequence once, in order, with no gap (first live record = last replayed + 1). It
/// trusts no replay server: frames must continue exactly at its next sequence and stay within
/// what live has shown (plus live_buffer_records), and epochs must be live's; anything else
/// ends that attempt without moving the position. Owner thread of the subscribers' Context
/// only; next() never blocks (the connection is non-blocking, with a deadline).
class LateJoin {
public:
    static Result<LateJoin, Error> create(const LateJoinOptions& options);
    LateJoin(LateJoin&& other) noexcept;
    LateJoin& operator=(LateJoin&& other) noexcept;
    LateJoin(const LateJoin&) = delete;
    LateJoin& operator=(const LateJoin&) = delete;
    ~LateJoin();

    /// A live channel of the stream (as StreamSubscriber::add).
    Result<void, Error> add(Subscriber& subscriber);
    /// The next event (payload valid until the next call); false: nothing now. Errors (final):
    /// the replay service refused the request (its code; error_text() says why), or it stayed
    /// unreachable for recorder_timeout (std::errc::timed_out).
    Result<bool> next(StreamEvent& out) noexcept;
    /// The next sequence to deliver.
    [[nodiscard]] std::uint64_t next_sequence() const noexcept;
    [[nodiscard]] const LateJoinCounters& counters() const noexcept;
    [[nodiscard]] const std::string& error_text() const noexcept;
    /// Why the last attempt ended (empty while none has): a connection error or a refused
    /// frame.
    [[nodiscard]] const std::string& last_refusal() const noexcept;

    struct Impl;

private:
    explicit LateJoin(std::unique_ptr<Impl> impl) noexcept;
    std::unique_ptr<Impl> impl_;
};

}  // namespace prizma
