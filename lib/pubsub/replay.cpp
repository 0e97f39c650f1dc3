// SPDX-License-Identifier: Apache-2.0
// The replay service (one epoll thread, non-blocking sockets, a bounded buffer per client), its
// client, and the late joiner that merges a replay into live (docs/STREAMS.md, "Recording and
// late join").
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <optional>
#include <thread>

#include <prizma/replay.hpp>

#include "lib/posix/errors.hpp"
#include "lib/posix/unique_fd.hpp"
#include "lib/pubsub/recorder_format.hpp"

namespace prizma {
namespace {

constexpr std::size_t kRequestBytes = 32;
constexpr std::uint32_t kMagic = 0x50525A52;  // "PRZR"
constexpr std::uint8_t kProtocolVersion = 1;

Error os_error(const std::string& what, int err = errno) {
    return {posix::errno_code(err), what + ": " + posix::errno_text(err)};
}

void encode_request(std::byte* out, const ReplayRequest& r) noexcept {
    pgm::store_be32(out, kMagic);
    out[4] = std::byte{kProtocolVersion};
    out[5] = std::byte{r.follow ? std::uint8_t{1} : std::uint8_t{0}};
    out[6] = out[7] = std::byte{0};
    pgm::store_be32(out + 8, r.stream_id);
    pgm::store_be32(out + 12, 0);
    pgm::store_be64(out + 16, r.from);
    pgm::store_be64(out + 24, r.to);
}

bool decode_request(const std::byte* in, ReplayRequest& r) noexcept {
    if (pgm::load_be32(in) != kMagic || in[4] != std::byte{kProtocolVersion}
        || (std::to_integer<unsigned>(in[5]) & ~1U) != 0 || in[6] != std::byte{0}
        || in[7] != std::byte{0} || pgm::load_be32(in + 12) != 0) {
        return false;
    }
    r.follow = in[5] == std::byte{1};
    r.stream_id = pgm::load_be32(in + 8);
    r.from = pgm::load_be64(in + 16);
    r.to = pgm::load_be64(in + 24);
    return true;
}

Result<sockaddr_in, Error> ipv4(std::string_view address, std::uint16_t port) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    const std::string a(address);
    if (::inet_pton(AF_INET, a.c_str(), &sa.sin_addr) != 1) {
        return Error(Errc::invalid_argument, "replay: not an IPv4 address: '" + a + "'");
    }
    return sa;
}

}  // namespace

// ---- ReplayServer -------------------------------------------------------------------------

namespace {

std::int64_t to_ns(std::chrono::milliseconds d) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

struct Client {
    posix::UniqueFd fd;
    std::byte request[kRequestBytes]{};
    std::size_t request_len = 0;
    ReplayRequest req;
    std::optional<JournalReader> reader;
    std::vector<std::byte> out;  // frames to send: [sent, out.size())
    std::size_t sent = 0;
    bool closing = false;  // end or error queued: close once sent
    bool blocked = false;  // the socket is full (EPOLLOUT armed)
    double tokens = 0;
    std::int64_t refill_ns = 0;
    std::int64_t accepted_ns = 0;  // when it connected (request_timeout)
    std::int64_t moved_ns = 0;     // when its socket last took bytes (stall_timeout)
};

}  // namespace

struct ReplayServer::Impl {
    ReplayServerOptions opt;
    posix::UniqueFd listener;
    posix::UniqueFd ep;
    std::uint16_t port = 0;
    std::vector<std::unique_ptr<Client>> clients;
    std::atomic<std::uint64_t> c_clients{0};
    std::atomic<std::uint64_t> c_requests{0};
    std::atomic<std::uint64_t> c_errors{0};
    std::atomic<std::uint64_t> c_records{0};
    std::atomic<std::uint64_t> c_timeouts{0};
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
    void accept_clients();
    void read_request(Client& c);
    void start_replay(Client& c);
    bool fill(Client& c, std::int64_t now);
    bool send_out(Client& c) const;
    bool expired(Client& c, std::int64_t now);
    void run(const std::stop_token& st);
};

void ReplayServer::Impl::accept_clients() {
    for (;;) {
        const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            return;
        }
        auto c = std::make_unique<Client>();
        c->fd.reset(fd);
        if (clients.size() >= opt.max_clients) {
            continue;  // closed at once: the client sees the connection reset
        }
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
    }
}

void ReplayServer::Impl::start_replay(Client& c) {
    ReplayRequest& r = c.req;
    if (!decode_request(c.request, r)) {
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

void ReplayServer::Impl::read_request(Client& c) {
    std::byte buf[4096];
    for (;;) {
        const ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            c.closing = true;  // gone (or reset): drop it
            c.out.clear();
            c.sent = 0;
            return;
        }
        if (n < 0) {
            return;
        }
        const std::size_t take =
            std::min(kRequestBytes - c.request_len, static_cast<std::size_t>(n));
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
    if (!c.reader || c.closing || c.out.size() - c.sent >= opt.client_buffer_bytes) {
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

// Sends what is queued; false when the client is finished or gone.
bool ReplayServer::Impl::send_out(Client& c) const {
    while (c.sent < c.out.size()) {
        const ssize_t n =
            ::send(c.fd.get(), c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) {
                break;
            }
            return false;
        }
        c.sent += static_cast<std::size_t>(n);
        c.moved_ns = Context::now_ns();
    }
    if (c.sent == c.out.size()) {
        c.out.clear();
        c.sent = 0;
    } else if (c.sent > opt.client_buffer_bytes) {
        c.out.erase(c.out.begin(), c.out.begin() + static_cast<std::ptrdiff_t>(c.sent));
        c.sent = 0;
    }
    const bool full = !c.out.empty();
    if (full != c.blocked) {
        epoll_event ev{};
        ev.events = full ? EPOLLIN | EPOLLOUT : EPOLLIN;
        ev.data.ptr = &c;
        (void)::epoll_ctl(ep.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
        c.blocked = full;
    }
    return !(c.closing && c.out.empty());
}

// The timeouts: true when the client is to be dropped at once (it stopped reading); a client
// without a whole request gets an error frame and closes once it is sent.
bool ReplayServer::Impl::expired(Client& c, std::int64_t now) {
    if (c.closing) {
        return false;
    }
    if (c.request_len < kRequestBytes && now - c.accepted_ns > to_ns(opt.request_timeout)) {
        fail(c, Errc::invalid_argument,
             "replay: no whole request within " + std::to_string(opt.request_timeout.count())
                 + " ms of connecting");
        c_timeouts.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    if (opt.stall_timeout.count() > 0 && c.blocked && now - c.moved_ns > to_ns(opt.stall_timeout)) {
        c_timeouts.fetch_add(1, std::memory_order_relaxed);
        return true;
    }
    return false;
}

void ReplayServer::Impl::run(const std::stop_token& st) {
    epoll_event events[64];
    int timeout_ms = 0;
    while (!st.stop_requested()) {
        const int n = ::epoll_wait(ep.get(), events, 64, timeout_ms);
        for (int i = 0; i < n; ++i) {
            if (events[i].data.ptr == nullptr) {
                accept_clients();
            } else if ((events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0) {
                read_request(*static_cast<Client*>(events[i].data.ptr));
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
        // Idle: block; following a journal's end or throttled: look again in a millisecond.
        timeout_ms = progress ? 0 : waiting ? 1 : 50;
    }
}

Result<ReplayServer, Error> ReplayServer::start(const ReplayServerOptions& options) {
    auto sa = ipv4(options.address, options.port);
    if (!sa) {
        return sa.error();
    }
    if (options.client_buffer_bytes < 4096 || options.max_clients == 0) {
        return Error(Errc::invalid_argument,
                     "replay: client_buffer_bytes must be >= 4096 and max_clients > 0");
    }
    if (options.request_timeout.count() <= 0 || options.stall_timeout.count() < 0) {
        return Error(Errc::invalid_argument,
                     "replay: request_timeout must be > 0 and stall_timeout >= 0 (0: never)");
    }
    auto impl = std::make_unique<Impl>();
    impl->opt = options;
    impl->listener.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    const int one = 1;
    if (!impl->listener.valid()
        || ::setsockopt(impl->listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0
        || ::bind(impl->listener.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof *sa) != 0
        || ::listen(impl->listener.get(), 64) != 0) {
        return os_error("replay: listen on " + options.address);
    }
    sockaddr_in bound{};
    socklen_t bl = sizeof bound;
    (void)::getsockname(impl->listener.get(), reinterpret_cast<sockaddr*>(&bound), &bl);
    impl->port = ntohs(bound.sin_port);
    impl->ep.reset(::epoll_create1(EPOLL_CLOEXEC));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;
    if (!impl->ep.valid()
        || ::epoll_ctl(impl->ep.get(), EPOLL_CTL_ADD, impl->listener.get(), &ev) != 0) {
        return os_error("replay: epoll");
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
    return c;
}

// ---- ReplayClient -------------------------------------------------------------------------

struct ReplayClient::Impl {
    posix::UniqueFd fd;
    std::vector<std::byte> buf;
    std::size_t begin = 0;
    std::size_t len = 0;
    bool done = false;
    bool failed = false;
    std::string error;
};

Result<ReplayClient, Error> ReplayClient::connect(std::string_view address,
                                                  std::uint16_t port,
                                                  const ReplayRequest& request) {
    auto sa = ipv4(address, port);
    if (!sa) {
        return sa.error();
    }
    auto impl = std::make_unique<Impl>();
    impl->fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!impl->fd.valid()
        || ::connect(impl->fd.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof *sa) != 0) {
        return os_error("replay: connect to " + std::string(address) + ":" + std::to_string(port));
    }
    std::byte req[kRequestBytes];
    encode_request(req, request);
    if (::send(impl->fd.get(), req, sizeof req, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof req)
        || ::fcntl(impl->fd.get(), F_SETFL, O_NONBLOCK) != 0) {
        return os_error("replay: send request");
    }
    impl->buf.resize(std::size_t{1} << 20U);
    return ReplayClient(std::move(impl));
}

Result<bool> ReplayClient::next(JournalEntry& out) noexcept {
    Impl& m = *impl_;
    for (;;) {
        if (m.done || m.failed) {
            if (m.failed) {
                return std::make_error_code(std::errc::connection_reset);
            }
            return false;
        }
        journal::Frame f;
        const auto avail = std::span<const std::byte>(m.buf).subspan(m.begin, m.len - m.begin);
        const auto p = journal::parse(avail, f);
        if (p == journal::Parse::bad) {
            m.failed = true;
            m.error = "replay: malformed frame from the server";
            return Errc::malformed_packet;
        }
        if (p == journal::Parse::ok) {
            m.begin += f.size();
            if (f.kind == journal::kEnd) {
                m.done = true;
                return false;
            }
            if (f.kind == journal::kError) {
                m.failed = true;
                m.error.assign(reinterpret_cast<const char*>(f.body.data()), f.body.size());
                return std::error_code(static_cast<int>(f.sequence), error_category());
            }
            out.kind = f.kind == journal::kRecord ? StreamEventKind::record
                       : f.kind == journal::kLoss ? StreamEventKind::loss
                                                  : StreamEventKind::reset;
            out.sequence = f.sequence;
            out.count = f.kind == journal::kLoss ? f.count : f.kind == journal::kRecord ? 1U : 0U;
            out.epoch = f.kind == journal::kLoss ? 0 : static_cast<std::uint32_t>(f.count);
            out.record = f.kind == journal::kRecord ? f.body : std::span<const std::byte>{};
            return true;
        }
        // Need more: compact, grow for a large frame, read.
        std::memmove(m.buf.data(), m.buf.data() + m.begin, m.len - m.begin);
        m.len -= m.begin;
        m.begin = 0;
        if (m.len >= 4) {
            // The length is the server's word: refused past the largest frame before any
            // memory is sized from it (a length of 2^32 - 1 asked for 4 GiB).
            const std::size_t body = pgm::load_be32(m.buf.data());
            if (body > journal::kMaxBody) {
                m.failed = true;
                m.error = "replay: the server announced a frame of " + std::to_string(body)
                          + " bytes (at most " + std::to_string(journal::kMaxBody) + ")";
                return Errc::malformed_packet;
            }
            if (journal::kFrameHeader + body > m.buf.size()) {
                m.buf.resize(journal::kFrameHeader + body);
            }
        }
        const ssize_t n = ::recv(m.fd.get(), m.buf.data() + m.len, m.buf.size() - m.len, 0);
        if (n > 0) {
            m.len += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            return false;
        }
        m.failed = true;
        m.error = "replay: the server closed the connection before the end";
        return std::make_error_code(std::errc::connection_reset);
    }
}

bool ReplayClient::done() const noexcept {
    return impl_->done;
}
const std::string& ReplayClient::error_text() const noexcept {
    return impl_->error;
}
int ReplayClient::fd() const noexcept {
    return impl_->fd.get();
}
void ReplayClient::wait(std::chrono::milliseconds timeout) const noexcept {
    pollfd p{impl_->fd.get(), POLLIN, 0};
    (void)::poll(&p, 1, static_cast<int>(timeout.count()));
}

ReplayClient::ReplayClient(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
ReplayClient::ReplayClient(ReplayClient&& other) noexcept = default;
ReplayClient& ReplayClient::operator=(ReplayClient&& other) noexcept = default;
ReplayClient::~ReplayClient() = default;

}  // namespace prizma
