// SPDX-License-Identifier: Apache-2.0
// The replay service: one epoll thread, non-blocking sockets, a bounded buffer per client, a
// deadline in every state, TLS or loopback-only plaintext (docs/STREAMS.md, "Recording and
// late join" and "Protecting the replay service").
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <optional>
#include <thread>
#include <utility>

#include <prizma/replay.hpp>

#include "lib/posix/errors.hpp"
#include "lib/posix/unique_fd.hpp"
#include "lib/replay/tls.hpp"
#include "lib/replay/wire.hpp"
#include "lib/streams/recorder_format.hpp"

namespace prizma {
using posix::os_error;
using replay::kRequestBytes;

// ---- ReplayServer -------------------------------------------------------------------------

namespace {

std::int64_t to_ns(std::chrono::milliseconds d) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

struct Client {
    posix::UniqueFd fd;
    replay::Link link;
    replay::PeerAddress peer;
    std::byte request[kRequestBytes]{};
    std::size_t request_len = 0;
    ReplayRequest req;
    std::optional<JournalReader> reader;
    std::vector<std::byte> out;  // frames to send: [sent, out.size())
    std::size_t sent = 0;
    bool handshaken = false;  // TLS done (at once for plaintext)
    bool closing = false;     // end or error queued: close once sent
    bool gone = false;        // reset, failed or closed by the peer: drop now
    bool blocked = false;     // the socket is full (EPOLLOUT armed)
    double tokens = 0;
    std::int64_t refill_ns = 0;
    std::int64_t accepted_ns = 0;  // when it connected (request_timeout)
    std::int64_t moved_ns = 0;     // when its socket last took bytes (stall_timeout)
};

}  // namespace

struct ReplayServer::Impl {
    ReplayServerOptions opt;
    std::shared_ptr<replay::TlsConfig> tls;
    std::vector<replay::Prefix> allow;
    posix::UniqueFd listener;
    posix::UniqueFd ep;
    std::uint16_t port = 0;
    std::vector<std::unique_ptr<Client>> clients;
    std::atomic<std::uint64_t> c_clients{0};
    std::atomic<std::uint64_t> c_requests{0};
    std::atomic<std::uint64_t> c_errors{0};
    std::atomic<std::uint64_t> c_records{0};
    std::atomic<std::uint64_t> c_timeouts{0};
    std::atomic<std::uint64_t> c_refused{0};
    std::atomic<std::uint64_t> c_handshake_failures{0};
    std::atomic<std::uint64_t> c_kernel_tls{0};
    std::atomic<std::uint64_t> c_handshakes_evicted{0};
    std::jthread thread;

    static void queue_frame(Client& c,
                            std::uint8_t kind,
                            std::uint64_t seq,
                            std::uint64_t count,
                            std::span<const std::byte> body) {
        const std::size_t at = c.out.size();
        c.out.resize(at + journal::kFrameHeader + body.size());
        journal::write_header(c.out.data() + at, static_cast<std::uint32_t>(body.size()), kind, seq,
                              count, body.first(std::min(body.size(), RecordHeader::kBytes)));
        if (!body.empty()) {
            std::memcpy(c.out.data() + at + journal::kFrameHeader, body.data(), body.size());
        }
    }
    void fail(Client& c, Errc code, const std::string& text) {
        const auto* p = reinterpret_cast<const std::byte*>(text.data());
        queue_frame(c, journal::kError, static_cast<std::uint64_t>(code), 0, {p, text.size()});
        c.closing = true;
        c_errors.fetch_add(1, std::memory_order_relaxed);
    }
    [[nodiscard]] bool allowed(const replay::PeerAddress& a) const noexcept;
    /// Live clients (not `self`) in their handshake (`handshaken` false) or past it: all of
    /// them, and those from `a`.
    [[nodiscard]] std::pair<std::size_t, std::size_t> tally(const replay::PeerAddress& a,
                                                            bool handshaken,
                                                            const Client* self) const noexcept;
    [[nodiscard]] bool under_caps(const replay::PeerAddress& a, const Client* self) const noexcept;
    void make_room(const replay::PeerAddress& a);
    void accept_clients();
    void on_event(Client& c);
    void read_request(Client& c);
    void start_replay(Client& c);
    bool fill(Client& c, std::int64_t now);
    bool send_out(Client& c) const;
    void watch(Client& c, bool out) const;
    bool expired(Client& c, std::int64_t now);
    void run(const std::stop_token& st);
};

bool ReplayServer::Impl::allowed(const replay::PeerAddress& a) const noexcept {
    return allow.empty()
           || std::any_of(allow.begin(), allow.end(), [&](const auto& p) { return p.contains(a); });
}

std::pair<std::size_t, std::size_t> ReplayServer::Impl::tally(const replay::PeerAddress& a,
                                                              bool handshaken,
                                                              const Client* self) const noexcept {
    std::size_t all = 0;
    std::size_t same = 0;
    for (const auto& c : clients) {
        if (c.get() != self && c->handshaken == handshaken && !c->gone) {
            ++all;
            same += c->peer == a ? 1U : 0U;
        }
    }
    return {all, same};
}

// Room for one more authenticated client (other than `self`): under max_clients, and under
// max_clients_per_address for its address. Connections still in their handshake do not count.
bool ReplayServer::Impl::under_caps(const replay::PeerAddress& a,
                                    const Client* self) const noexcept {
    const auto [all, same] = tally(a, true, self);
    return all < opt.max_clients && same < opt.max_clients_per_address;
}

// A new connection from `a` is about to start its handshake: when the connections in their
// handshake are at max_handshakes, or `a`'s at max_clients_per_address, the oldest of them
// (of `a`'s, when it is `a` that is full) that has sent nothing yet gives up its place, else
// the oldest. So idle sockets cannot keep an honest client from its handshake; a flood of
// connections that do send only shortens how long each has (handshake_timeout bounds it).
void ReplayServer::Impl::make_room(const replay::PeerAddress& a) {
    const auto [all, same] = tally(a, false, nullptr);
    const bool own = same >= opt.max_clients_per_address;
    if (!own && all < opt.max_handshakes) {
        return;
    }
    Client* victim = nullptr;
    for (const auto& c : clients) {
        if (c->handshaken || c->gone || (own && !(c->peer == a))) {
            continue;
        }
        const bool silent = c->link.received() == 0;
        const bool victim_silent = victim != nullptr && victim->link.received() == 0;
        if (victim == nullptr || (silent && !victim_silent)
            || (silent == victim_silent && c->accepted_ns < victim->accepted_ns)) {
            victim = c.get();
        }
    }
    if (victim != nullptr) {
        victim->gone = true;  // closed in the next round
        c_handshakes_evicted.fetch_add(1, std::memory_order_relaxed);
    }
}

void ReplayServer::Impl::accept_clients() {
    for (;;) {
        sockaddr_storage from{};
        socklen_t fl = sizeof from;
        const int fd = ::accept4(listener.get(), reinterpret_cast<sockaddr*>(&from), &fl,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            return;
        }
        auto c = std::make_unique<Client>();
        c->fd.reset(fd);
        c->peer = replay::peer_address(from);
        if (!allowed(c->peer) || !under_caps(c->peer, nullptr)) {
            c_refused.fetch_add(1, std::memory_order_relaxed);
            continue;  // closed at once: the client sees the connection reset
        }
        if (tls->protection() != replay::Protection::plaintext) {
            make_room(c->peer);
        }
        auto link = replay::Link::make(*tls, fd, true, {});
        if (!link) {
            continue;
        }
        c->link = std::move(*link);
        const int one = 1;
        (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.ptr = c.get();
        if (::epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
            continue;
        }
        c->out.reserve(opt.client_buffer_bytes + 65536);
        c->refill_ns = Context::now_ns();
        c->accepted_ns = c->refill_ns;
        c->moved_ns = c->refill_ns;
        clients.push_back(std::move(c));
        c_clients.fetch_add(1, std::memory_order_relaxed);
        on_event(*clients.back());  // a TLS hello may be there already
    }
}

void ReplayServer::Impl::start_replay(Client& c) {
    ReplayRequest& r = c.req;
    if (const unsigned v = replay::request_version(c.request);
        v != 0 && v != replay::kProtocolVersion) {
        fail(c, Errc::unsupported, replay::version_refusal(v));
        return;
    }
    if (!replay::decode_request(c.request, r)) {
        fail(c, Errc::invalid_argument, "replay: malformed request (not a prizma replay request)");
        return;
    }
    const auto s = std::find_if(opt.streams.begin(), opt.streams.end(),
                                [&](const auto& e) { return e.first == r.stream_id; });
    if (s == opt.streams.end()) {
        fail(c, Errc::unsupported, "replay: unknown stream " + std::to_string(r.stream_id));
        return;
    }
    if (r.to < r.from) {
        fail(c, Errc::invalid_argument, "replay: range ends before it starts");
        return;
    }
    auto rd = JournalReader::open(s->second, r.from);
    if (!rd) {
        fail(c, Errc::invalid_argument, "replay: " + rd.error().message());
        return;
    }
    const std::uint64_t end = rd->end_sequence();
    if (!r.follow && r.to != std::numeric_limits<std::uint64_t>::max() && r.to > end) {
        fail(c, Errc::invalid_argument,
             "replay: range [" + std::to_string(r.from) + ", " + std::to_string(r.to)
                 + ") is beyond the journal's end, " + std::to_string(end));
        return;
    }
    if (!r.follow && r.to == std::numeric_limits<std::uint64_t>::max()) {
        r.to = end;  // up to the end as of the request
    }
    c.reader.emplace(std::move(*rd));
    c_requests.fetch_add(1, std::memory_order_relaxed);
}

// Readable or writable: the handshake first, then the request.
void ReplayServer::Impl::on_event(Client& c) {
    if (c.gone) {
        return;
    }
    if (!c.handshaken) {
        switch (c.link.handshake()) {
            case replay::Link::Io::done:
                if (!under_caps(c.peer, &c)) {
                    c_refused.fetch_add(1, std::memory_order_relaxed);
                    c.gone = true;  // authenticated, but every place is taken
                    return;
                }
                c.handshaken = true;
                if (c.link.kernel_tx()) {
                    c_kernel_tls.fetch_add(1, std::memory_order_relaxed);
                }
                break;
            case replay::Link::Io::want_read: watch(c, false); return;
            case replay::Link::Io::want_write: watch(c, true); return;
            default:
                c_handshake_failures.fetch_add(1, std::memory_order_relaxed);
                c.gone = true;
                return;
        }
        watch(c, false);
    }
    read_request(c);
}

void ReplayServer::Impl::read_request(Client& c) {
    std::byte buf[4096];
    for (;;) {
        std::size_t n = 0;
        const auto io = c.link.read(buf, sizeof buf, n);
        if (io == replay::Link::Io::want_read || io == replay::Link::Io::want_write) {
            return;
        }
        if (io != replay::Link::Io::done) {
            c.gone = true;  // gone (or reset): drop it
            return;
        }
        const std::size_t take = std::min(kRequestBytes - c.request_len, n);
        std::memcpy(c.request + c.request_len, buf, take);
        const bool was_complete = c.request_len == kRequestBytes;
        c.request_len += take;
        if (!was_complete && c.request_len == kRequestBytes && !c.closing) {
            start_replay(c);
        }
        // Bytes after the request are ignored (the protocol has one request per connection).
    }
}

// Moves journal entries into the client's buffer, up to its bound and its throttle. Returns
// true when it queued something.
bool ReplayServer::Impl::fill(Client& c, std::int64_t now) {
    if (!c.reader || c.closing || c.gone || c.out.size() - c.sent >= opt.client_buffer_bytes) {
        return false;
    }
    if (opt.max_records_per_second > 0) {
        const auto rate = static_cast<double>(opt.max_records_per_second);
        c.tokens = std::min(std::max(rate / 100.0, 1.0),
                            c.tokens + rate * static_cast<double>(now - c.refill_ns) * 1e-9);
        c.refill_ns = now;
    }
    bool any = false;
    JournalEntry e;
    while (c.out.size() - c.sent < opt.client_buffer_bytes) {
        if (opt.max_records_per_second > 0 && c.tokens < 1.0) {
            break;
        }
        if (c.reader->position() >= c.req.to) {
            queue_frame(c, journal::kEnd, c.req.to, 0, {});
            c.closing = true;
            return true;
        }
        auto r = c.reader->next(e);
        if (!r || !*r) {
            if (!r) {
                fail(c, Errc::malformed_packet, "replay: journal read failed");
            }
            break;
        }
        const std::uint8_t kind = e.kind == StreamEventKind::record ? journal::kRecord
                                  : e.kind == StreamEventKind::loss ? journal::kLoss
                                                                    : journal::kReset;
        const std::uint64_t count = e.kind == StreamEventKind::loss ? e.count : e.epoch;
        const std::uint64_t clipped =
            e.kind == StreamEventKind::loss ? std::min(count, c.req.to - e.sequence) : count;
        queue_frame(c, kind, e.sequence, clipped, e.record);
        any = true;
        if (e.kind == StreamEventKind::record) {
            c.tokens -= 1.0;
            c_records.fetch_add(1, std::memory_order_relaxed);
        }
    }
    return any;
}

void ReplayServer::Impl::watch(Client& c, bool out) const {
    if (out != c.blocked) {
        epoll_event ev{};
        ev.events = out ? EPOLLIN | EPOLLOUT : EPOLLIN;
        ev.data.ptr = &c;
        (void)::epoll_ctl(ep.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
        c.blocked = out;
    }
}

// Sends what is queued; false when the client is finished or gone.
bool ReplayServer::Impl::send_out(Client& c) const {
    if (c.gone) {
        return false;
    }
    if (!c.handshaken) {
        return true;
    }
    // Ciphertext gathered by TLS and not taken by the socket yet goes first.
    const std::size_t before = c.link.pending();
    if (before > 0) {
        if (c.link.flush() == replay::Link::Io::failed) {
            return false;
        }
        c.moved_ns = c.link.pending() < before ? Context::now_ns() : c.moved_ns;
    }
    bool full = c.link.pending() > 0;
    while (!full && c.sent < c.out.size()) {
        std::size_t n = 0;
        const auto io = c.link.write(c.out.data() + c.sent, c.out.size() - c.sent, n);
        if (io == replay::Link::Io::want_write || io == replay::Link::Io::want_read) {
            full = true;
            break;
        }
        if (io != replay::Link::Io::done) {
            return false;
        }
        c.sent += n;
        c.moved_ns = Context::now_ns();
        full = c.link.pending() > 0;
    }
    if (c.sent == c.out.size()) {
        c.out.clear();
        c.sent = 0;
    } else if (c.sent > opt.client_buffer_bytes) {
        c.out.erase(c.out.begin(), c.out.begin() + static_cast<std::ptrdiff_t>(c.sent));
        c.sent = 0;
    }
    watch(c, full);
    return !(c.closing && c.out.empty() && c.link.pending() == 0);
}

// The deadlines, in every state: true when the client is to be dropped at once. A client that
// has not finished its handshake within request_timeout is dropped; one without a whole
// request gets an error frame, which must then be read within stall_timeout like any frame.
bool ReplayServer::Impl::expired(Client& c, std::int64_t now) {
    if (c.gone) {
        return true;
    }
    const bool late = now - c.accepted_ns > to_ns(opt.request_timeout);
    if (!c.handshaken && (late || now - c.accepted_ns > to_ns(opt.handshake_timeout))) {
        c_timeouts.fetch_add(1, std::memory_order_relaxed);
        c_handshake_failures.fetch_add(1, std::memory_order_relaxed);
        return true;
    }
    if (!c.closing && c.request_len < kRequestBytes && late) {
        fail(c, Errc::invalid_argument,
             "replay: no whole request within " + std::to_string(opt.request_timeout.count())
                 + " ms of connecting");
        c_timeouts.fetch_add(1, std::memory_order_relaxed);
        c.moved_ns = now;  // the error frame gets its own stall_timeout
        return false;
    }
    if (opt.stall_timeout.count() > 0 && c.blocked && now - c.moved_ns > to_ns(opt.stall_timeout)) {
        c_timeouts.fetch_add(1, std::memory_order_relaxed);
        return true;
    }
    return false;
}

void ReplayServer::Impl::run(const std::stop_token& st) {
    // With kernel TLS, OpenSSL's socket BIO writes the handshake and alerts with write(2): a
    // peer gone must not raise SIGPIPE in the application. Blocked on this thread only (a
    // socket's SIGPIPE goes to the thread that wrote), it stays pending and harmless.
    sigset_t pipe;
    (void)::sigemptyset(&pipe);
    (void)::sigaddset(&pipe, SIGPIPE);
    (void)::pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    epoll_event events[64];
    int timeout_ms = 0;
    while (!st.stop_requested()) {
        const int n = ::epoll_wait(ep.get(), events, 64, timeout_ms);
        for (int i = 0; i < n; ++i) {
            if (events[i].data.ptr == nullptr) {
                accept_clients();
            } else if ((events[i].events & (EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP)) != 0) {
                on_event(*static_cast<Client*>(events[i].data.ptr));
            }
        }
        // One round over every client: each gets at most one buffer's worth per round, so a
        // slow or stalled client never holds up another.
        const std::int64_t now = Context::now_ns();
        bool progress = false;
        bool waiting = false;
        for (std::size_t k = 0; k < clients.size();) {
            Client& c = *clients[k];
            progress = fill(c, now) || progress;
            if (expired(c, now) || !send_out(c)) {
                (void)::epoll_ctl(ep.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
                clients[k] = std::move(clients.back());
                clients.pop_back();
                continue;
            }
            waiting = waiting || (c.reader && !c.blocked);
            ++k;
        }
        // Idle: block (the deadlines are looked at every 50 ms); following a journal's end or
        // throttled: look again in a millisecond.
        timeout_ms = progress ? 0 : waiting ? 1 : 50;
    }
}

Result<ReplayServer, Error> ReplayServer::start(const ReplayServerOptions& options) {
    auto sa = replay::socket_address(options.address, options.port);
    if (!sa) {
        return sa.error();
    }
    if (options.client_buffer_bytes < 4096 || options.max_clients == 0
        || options.max_clients_per_address == 0 || options.max_handshakes == 0) {
        return Error(Errc::invalid_argument,
                     "replay: client_buffer_bytes must be >= 4096, max_clients, "
                     "max_clients_per_address and max_handshakes > 0");
    }
    if (options.request_timeout.count() <= 0 || options.handshake_timeout.count() <= 0
        || options.stall_timeout.count() < 0) {
        return Error(Errc::invalid_argument,
                     "replay: request_timeout and handshake_timeout must be > 0 and "
                     "stall_timeout >= 0 (0: never)");
    }
    auto allow = replay::parse_allow_list(options.allow);
    if (!allow) {
        return allow.error();
    }
    auto tls =
        replay::TlsConfig::make(options.security, true, replay::is_loopback(options.address));
    if (!tls) {
        return tls.error();
    }
    auto impl = std::make_unique<Impl>();
    impl->opt = options;
    impl->allow = std::move(*allow);
    impl->tls = std::move(*tls);
    impl->listener.reset(
        ::socket(sa->first.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    const int one = 1;
    if (!impl->listener.valid()
        || ::setsockopt(impl->listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0
        || ::bind(impl->listener.get(), reinterpret_cast<const sockaddr*>(&sa->first), sa->second)
               != 0
        || ::listen(impl->listener.get(), 64) != 0) {
        return os_error("replay: listen on " + options.address);
    }
    sockaddr_storage bound{};
    socklen_t bl = sizeof bound;
    (void)::getsockname(impl->listener.get(), reinterpret_cast<sockaddr*>(&bound), &bl);
    impl->port =
        ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                                          : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
    impl->ep.reset(::epoll_create1(EPOLL_CLOEXEC));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;
    if (!impl->ep.valid()
        || ::epoll_ctl(impl->ep.get(), EPOLL_CTL_ADD, impl->listener.get(), &ev) != 0) {
        return os_error("replay: epoll");
    }
    if (impl->tls->protection() == replay::Protection::plaintext
        && !replay::is_loopback(options.address)) {
        (void)std::fprintf(stderr, "prizma: replay service on %s port %u: %s\n",
                           options.address.c_str(), static_cast<unsigned>(impl->port),
                           impl->tls->describe().c_str());
    }
    Impl* p = impl.get();
    impl->thread = std::jthread([p](const std::stop_token& st) { p->run(st); });
    return ReplayServer(std::move(impl));
}

ReplayServer::ReplayServer(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
ReplayServer::ReplayServer(ReplayServer&& other) noexcept = default;
ReplayServer& ReplayServer::operator=(ReplayServer&& other) noexcept = default;
ReplayServer::~ReplayServer() {
    stop();
}

std::uint16_t ReplayServer::port() const noexcept {
    return impl_->port;
}

const std::string& ReplayServer::protection() const noexcept {
    return impl_->tls->describe();
}

void ReplayServer::stop() noexcept {
    if (impl_ && impl_->thread.joinable()) {
        impl_->thread.request_stop();
        impl_->thread.join();
        impl_->clients.clear();
        impl_->listener.reset();
    }
}

ReplayServerCounters ReplayServer::counters() const noexcept {
    ReplayServerCounters c;
    c.clients = impl_->c_clients.load(std::memory_order_relaxed);
    c.requests = impl_->c_requests.load(std::memory_order_relaxed);
    c.errors = impl_->c_errors.load(std::memory_order_relaxed);
    c.records = impl_->c_records.load(std::memory_order_relaxed);
    c.timeouts = impl_->c_timeouts.load(std::memory_order_relaxed);
    c.refused = impl_->c_refused.load(std::memory_order_relaxed);
    c.handshake_failures = impl_->c_handshake_failures.load(std::memory_order_relaxed);
    c.kernel_tls = impl_->c_kernel_tls.load(std::memory_order_relaxed);
    c.handshakes_evicted = impl_->c_handshakes_evicted.load(std::memory_order_relaxed);
    return c;
}

}  // namespace prizma
