// SPDX-License-Identifier: Apache-2.0
// The HTTP sessions (Beast's parser, the idle deadline, the Host and Origin checks, the
// loop's cache of whole /getStockData answers and their one-write fast path, the upgrade to
// push), the listeners (SO_REUSEPORT, --max-connections) and the claim of ADDR:PORT among
// md-gateways. The router is in http_router.cpp, the push sessions in push_session.cpp.
#include "http_server.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <optional>
#include <unordered_map>

#include "http_internal.hpp"

#include <boost/asio/write.hpp>
#include <boost/beast/websocket.hpp>

namespace md::gw {

namespace websocket = beast::websocket;

namespace {

/// The reference API's answers, whole (status line, headers and body in one buffer, written
/// with one send), per loop: no lock. Keyed by the query, not the target's text: a target is
/// looked up as it came (one hash), and when that misses it is parsed and looked up by its
/// canonical form (`/getStockData?code=&period=&start=&end=`), so the %-encoded, reordered or
/// otherwise spelled variants of one query share one entry. An entry holds its code's change
/// counter and the value it had before the bars were read, so a hit (one lookup, one atomic
/// load) is never older than the code's bars. Bounded by bytes (--cache-mib per loop): entries
/// are dropped (in the map's order) until a new one fits.
class WireCache {
public:
    std::shared_ptr<const std::string> get(const Shared& s,
                                           LoopMetrics& m,
                                           std::string_view target);

private:
    struct Entry {
        const std::atomic<std::uint64_t>* version = nullptr;
        std::uint64_t seen = 0;
        std::shared_ptr<const std::string> wire;
    };
    struct Hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view v) const noexcept {
            return std::hash<std::string_view>{}(v);
        }
    };
    std::shared_ptr<const std::string> make(const Shared& s, const BarQuery& q);
    void insert(const Shared& s, LoopMetrics& m, std::string key, Entry e);

    std::unordered_map<std::string, Entry, Hash, std::equal_to<>> map_;
    std::size_t bytes_ = 0;
    std::vector<Bar> bars_;
};

std::string canonical_target(const BarQuery& q) {
    std::string k = "/getStockData?code=";
    append_code(k, q.code);
    k += "&period=";
    k += period_name(q.period);
    k += "&start=";
    k += std::to_string(q.start);
    k += "&end=";
    k += std::to_string(q.end);
    return k;
}

std::shared_ptr<const std::string> WireCache::get(const Shared& s,
                                                  LoopMetrics& m,
                                                  std::string_view target) {
    if (const auto it = map_.find(target);
        it != map_.end()
        && it->second.version->load(std::memory_order_acquire) == it->second.seen) {
        return it->second.wire;
    }
    std::string error;
    const auto t = parse_target(target, error);
    if (!t || t->path != "/getStockData") {
        return nullptr;
    }
    const auto q = parse_bar_query(*t, error, s.cfg.compat_reference);
    const auto* counter = q ? s.bars.version_counter(q->code) : nullptr;
    if (counter == nullptr) {
        return nullptr;
    }
    std::string key = canonical_target(*q);
    if (key != target) {
        if (const auto it = map_.find(key);
            it != map_.end() && counter->load(std::memory_order_acquire) == it->second.seen) {
            return it->second.wire;
        }
    }
    const std::uint64_t seen = counter->load(std::memory_order_acquire);
    auto wire = make(s, *q);
    if (wire) {
        insert(s, m, std::move(key), Entry{counter, seen, wire});
    }
    return wire;
}

std::shared_ptr<const std::string> WireCache::make(const Shared& s, const BarQuery& q) {
    bars_.clear();
    std::size_t n = 0;
    if (!s.bars.range(q.code, q.period, q.start, q.end, s.cfg.max_bars, bars_, &n)
        || n > s.cfg.max_bars) {
        return nullptr;
    }
    std::string body;
    body.reserve(64 + bars_.size() * 180);
    append_bars(body, q.code, bars_);
    body += '\n';
    auto wire = std::make_shared<std::string>();
    wire->reserve(body.size() + 256);
    wire->append(
        "HTTP/1.1 200 OK\r\nServer: md-gateway\r\nContent-Type: application/json\r\n"
        "X-Content-Type-Options: nosniff\r\nContent-Security-Policy: ");
    wire->append(kCspNone);
    wire->append("\r\nContent-Length: ");
    wire->append(std::to_string(body.size()));
    wire->append("\r\n\r\n");
    wire->append(body);
    return wire;
}

void WireCache::insert(const Shared& s, LoopMetrics& m, std::string key, Entry e) {
    const std::size_t cap = s.cfg.cache_mib * 1024 * 1024;
    const auto cost = [](const std::string& k, const Entry& v) {
        return k.size() + v.wire->size() + 64;
    };
    if (const auto it = map_.find(key); it != map_.end()) {
        bytes_ -= cost(it->first, it->second);
        map_.erase(it);
    }
    const std::size_t need = cost(key, e);
    if (need > cap) {
        return;  // served, not kept
    }
    while (bytes_ + need > cap && !map_.empty()) {
        bytes_ -= cost(map_.begin()->first, map_.begin()->second);
        map_.erase(map_.begin());
    }
    bytes_ += need;
    map_.emplace(std::move(key), std::move(e));
    m.cache_bytes.store(bytes_, std::memory_order_relaxed);
    m.cache_entries.store(map_.size(), std::memory_order_relaxed);
}

WireCache& loop_cache() {
    thread_local WireCache cache;
    return cache;
}

}  // namespace

std::shared_ptr<const std::string> cached_answer(const Shared& s,
                                                 LoopMetrics& m,
                                                 std::string_view target) {
    return loop_cache().get(s, m, target);
}

namespace {

/// Most bytes of a request's head (request line and headers).
constexpr std::size_t kMaxHead = 8192;

bool iequals(std::string_view a, std::string_view b) noexcept {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return (x | 0x20) == (y | 0x20);  // letters and '-' (0x2d | 0x20 == 0x2d)
           });
}

/// Is `host` (a Host header: name or address, then maybe :port) one this gateway answers to?
/// IP literals and single-label names (localhost, an intranet host) always: a DNS-rebinding
/// page reaches us under its own public name, which has a dot; other names only when given
/// with --allow-host. No Host (HTTP/1.0): yes.
bool host_allowed(std::string_view host, const std::vector<std::string>& allowed) noexcept {
    if (host.empty()) {
        return true;
    }
    if (host.front() == '[') {  // [IPv6]:port
        return host.find(']') != std::string_view::npos;
    }
    std::string_view name = host.substr(0, host.rfind(':'));
    if (std::all_of(name.begin(), name.end(),
                    [](char c) { return (c >= '0' && c <= '9') || c == '.'; })
        || name.find('.') == std::string_view::npos) {
        return true;
    }
    return std::any_of(allowed.begin(), allowed.end(),
                       [name](const std::string& a) { return iequals(name, a); });
}

class HttpSession;

/// May a page from `origin` subscribe? No Origin (not a browser): yes; the same origin as the
/// Host the request was sent to: yes; one of --allow-origin (or "*"): yes.
bool origin_allowed(std::string_view origin,
                    std::string_view host,
                    const std::vector<std::string>& allowed) noexcept {
    if (origin.empty()) {
        return true;
    }
    for (const std::string& a : allowed) {
        if (a == "*" || iequals(origin, a)) {
            return true;
        }
    }
    const std::size_t p = origin.find("://");
    return p != std::string_view::npos && !host.empty() && iequals(origin.substr(p + 3), host);
}

class HttpSession : public std::enable_shared_from_this<HttpSession> {
public:
    HttpSession(tcp::socket&& sock, Shared& s, LoopMetrics& m)
        : stream_(std::move(sock)), s_(s), m_(m), router_(s) {
        ++s_.feed.connections;
        beast::error_code ec;
        stream_.socket().non_blocking(true, ec);  // a cached answer is written at once
    }
    ~HttpSession() { --s_.feed.connections; }
    HttpSession(const HttpSession&) = delete;
    HttpSession& operator=(const HttpSession&) = delete;
    HttpSession(HttpSession&&) = delete;
    HttpSession& operator=(HttpSession&&) = delete;

    /// Reads the next request with Beast's parser. The idle timeout runs from here to the
    /// answer's last byte (the stream's deadline, as in Beast's advanced server): half-open
    /// and byte-a-second clients, and clients that never read their answer, are closed.
    ///
    /// A hand-written recognizer of /getStockData requests used to read in front of Beast
    /// (raw read_some, its own idle sweep). Measured against this path in one run
    /// (bench/http_parser.sh of commit "md-gateway: --http-parser beast", issue 33: one loop,
    /// wrk -t1 -c100, medians of interleaved rounds) it was worth +11.9% and +7.1% req/s in
    /// two runs (176,733 vs 157,920; 182,619 vs 170,561): under the 10% it had to earn.
    void read() {
        stream_.expires_after(seconds(s_.cfg.idle_timeout_s));
        read_beast();
    }

private:
    static bool closing(const beast::error_code& ec) {
        return ec == http::error::end_of_stream || ec == beast::error::timeout
               || ec == asio::error::connection_reset || ec == asio::error::eof;
    }
    void shut() {
        beast::error_code ec;
        stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    }
    /// Writes a cached answer: at once when the socket takes it all (the usual case), else
    /// through the loop.
    void write_wire(std::shared_ptr<const std::string> wire) {
        beast::error_code ec;
        const std::size_t n = stream_.socket().write_some(asio::buffer(*wire), ec);
        if (!ec && n == wire->size()) {
            count(200);
            read();
            return;
        }
        if (ec && ec != asio::error::would_block) {
            count(200);
            shut();
            return;
        }
        wire_ = std::move(wire);
        const std::size_t done = ec ? 0 : n;
        // Through the stream: its deadline (Beast's path) covers a client that does not read.
        asio::async_write(stream_, asio::buffer(*wire_) + done,
                          [self = shared_from_this()](beast::error_code wec, std::size_t) {
                              self->count(200);
                              self->wire_.reset();
                              if (wec) {
                                  self->shut();
                                  return;
                              }
                              self->read();
                          });
    }
    void read_beast() {
        parser_.emplace();
        parser_->header_limit(kMaxHead);
        parser_->body_limit(0);
        http::async_read(
            stream_, buf_, *parser_,
            [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
    }
    void on_read(beast::error_code ec) {
        if (closing(ec)) {
            stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
            return;
        }
        t0_ = Clock::now();
        res_ = {};
        res_.version(11);
        if (ec) {  // a malformed request: answered, then the connection closes
            set_error(res_, http::status::bad_request, "malformed HTTP request: " + ec.message());
            res_.keep_alive(false);
            write();
            return;
        }
        Request req = parser_->release();
        if (req.method() == http::verb::get && req.version() == 11 && req.keep_alive()
            && host_allowed(req[http::field::host], s_.cfg.allow_hosts)
            && req.target().starts_with("/getStockData?")) {
            // The reference API's hot query: the whole cached answer, one write.
            if (auto wire = loop_cache().get(s_, m_, req.target())) {
                write_wire(std::move(wire));
                return;
            }
        }
        std::string error;
        const auto t = parse_target(req.target(), error);
        if (const auto host = req[http::field::host]; !host_allowed(host, s_.cfg.allow_hosts)) {
            ++s_.feed.forbidden_host;
            std::string msg = "host '";
            msg += host.substr(0, 100);
            msg += "' not served here (IP addresses, localhost and --allow-host names are)";
            set_error(res_, http::status::misdirected_request, msg);
        } else if (t && (t->path == "/ws" || t->path == "/sse")) {
            if (upgrade(req, *t)) {
                return;
            }
        } else if (!t) {
            set_error(res_, http::status::bad_request, error);
        } else {
            router_.route(req, *t, res_, m_);
        }
        res_.keep_alive(req.keep_alive());
        res_.prepare_payload();
        if (req.method() == http::verb::head) {
            res_.body().clear();  // Content-Length stays the GET answer's
        }
        write();
    }
    /// /ws and /sse: true when the connection became a push session.
    bool upgrade(Request& req, const Target& t) {
        std::string error;
        const auto q = parse_push_query(t, error);
        if (!q) {
            set_error(res_, http::status::bad_request, error);
            return false;
        }
        if (!s_.bars.known(q->code)) {
            set_error(res_, http::status::not_found, "unknown code " + code_text(q->code));
            return false;
        }
        if (t.path == "/ws" && !websocket::is_upgrade(req)) {
            set_error(res_, http::status::bad_request, "/ws needs a WebSocket upgrade");
            return false;
        }
        if (!origin_allowed(req[http::field::origin], req[http::field::host],
                            s_.cfg.allow_origins)) {
            ++s_.feed.forbidden_origin;
            std::string msg = "origin '";
            msg += req[http::field::origin].substr(0, 100);
            msg += "' may not subscribe (same origin, or --allow-origin)";
            set_error(res_, http::status::forbidden, msg);
            return false;
        }
        if (!reserve_push(s_)) {
            ++s_.feed.push_refused;
            set_error(res_, http::status::service_unavailable,
                      "too many push clients: at most " + std::to_string(s_.cfg.max_push)
                          + " (--max-push)");
            res_.set(http::field::retry_after, "5");
            return false;
        }
        count(200);
        stream_.expires_never();  // push sessions have their own timeouts
        stream_.socket().non_blocking(false, error_);
        if (t.path == "/ws") {
            start_ws_session(stream_.release_socket(), s_, *q, req);
            return true;
        }
        start_sse_session(std::move(stream_), s_, *q);
        return true;
    }
    void write() {
        if (!res_.has_content_length()) {
            res_.prepare_payload();
        }
        if (res_.result() == http::status::not_modified) {
            res_.content_length(boost::none);
        }
        res_.set(http::field::server, "md-gateway");
        res_.set("X-Content-Type-Options", "nosniff");
        if (res_.find("Content-Security-Policy") == res_.end()) {
            res_.set("Content-Security-Policy", kCspNone);
        }
        res_.set("X-Frame-Options", "DENY");
        res_.set("Referrer-Policy", "no-referrer");
        http::async_write(
            stream_, res_,
            [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_write(ec); });
    }
    void count(unsigned status) {
        ++m_.by_class.at(std::min<std::size_t>(status / 100, 5));
        const double secs = std::chrono::duration<double>(Clock::now() - t0_).count();
        ++m_.latency.at(latency_bucket(secs));
        m_.latency_sum_ns += static_cast<std::uint64_t>(secs * 1e9);
    }
    void on_write(beast::error_code ec) {
        count(res_.result_int());
        if (ec || !res_.keep_alive()) {
            stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
            return;
        }
        read();
    }

    beast::tcp_stream stream_;
    beast::flat_buffer buf_;
    std::shared_ptr<const std::string> wire_;  // a cached answer being written
    std::optional<http::request_parser<http::empty_body>> parser_;
    Response res_;
    Shared& s_;
    LoopMetrics& m_;
    Router router_;
    Clock::time_point t0_;
    beast::error_code error_;  // of calls whose failure changes nothing
};

class Listener : public std::enable_shared_from_this<Listener> {
public:
    Listener(asio::io_context& ioc, Shared& s, LoopMetrics& m) : acc_(ioc), s_(s), m_(m) {}
    std::string open(const tcp::endpoint& ep) {
        beast::error_code ec;
        acc_.open(ep.protocol(), ec);
        if (ec) {
            return ec.message();
        }
        acc_.set_option(asio::socket_base::reuse_address(true), ec);
        using ReusePort = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;
        acc_.set_option(ReusePort(true), ec);
        acc_.bind(ep, ec);
        if (!ec) {
            acc_.listen(4096, ec);
        }
        if (ec) {
            return ec.message();
        }
        return {};
    }
    void accept() {
        acc_.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket sock) {
            if (ec == asio::error::operation_aborted) {
                return;
            }
            if (!ec) {
                if (self->s_.feed.connections.load() >= self->s_.cfg.max_connections) {
                    ++self->s_.feed.connections_refused;
                    sock.close(ec);
                } else {
                    sock.set_option(tcp::no_delay(true), ec);
                    std::make_shared<HttpSession>(std::move(sock), self->s_, self->m_)->read();
                }
            }
            self->accept();
        });
    }

private:
    tcp::acceptor acc_;
    Shared& s_;
    LoopMetrics& m_;
};

}  // namespace

namespace {

/// ADDR:PORT as an endpoint; the error text in `error` when it is not one.
std::optional<tcp::endpoint> parse_endpoint(const std::string& addr_port, std::string& error) {
    const std::size_t colon = addr_port.rfind(':');
    if (colon == std::string::npos) {
        error = "--http " + addr_port + ": ADDR:PORT";
        return std::nullopt;
    }
    beast::error_code ec;
    const auto addr = asio::ip::make_address(addr_port.substr(0, colon), ec);
    unsigned port = 0;
    const std::string ps = addr_port.substr(colon + 1);
    const auto [end, pec] = std::from_chars(ps.data(), ps.data() + ps.size(), port);
    if (ec || pec != std::errc{} || end != ps.data() + ps.size() || port > 65535) {
        error = "--http " + addr_port + ": ADDR:PORT with an IP address and a port number";
        return std::nullopt;
    }
    return tcp::endpoint{addr, static_cast<unsigned short>(port)};
}

}  // namespace

namespace {

/// Binds the abstract Unix-socket name @NAME (of this network namespace, as the port is): the
/// fd, or -1 with errno. Atomic: of two binds of one name exactly one succeeds; the kernel
/// drops the name when the process ends, however it ends.
int bind_abstract(const std::string& name) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    const std::size_t n = std::min(name.size(), sizeof sa.sun_path - 1);
    std::memcpy(sa.sun_path + 1, name.data(), n);  // sun_path[0] == 0: the abstract namespace
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&sa), len) != 0) {
        const int err = errno;
        ::close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

/// Whether some process holds an abstract name "md-gateway/tcp/PORT/ADDR" for PORT other than
/// the wildcard's (/proc/net/unix lists abstract names with a leading '@').
bool specific_claim_exists(unsigned short port) {
    std::ifstream in("/proc/net/unix");
    const std::string prefix = "@md-gateway/tcp/" + std::to_string(port) + "/";
    std::string line;
    while (std::getline(in, line)) {
        const auto at = line.find(prefix);
        if (at != std::string::npos && line.compare(at + prefix.size(), 1, "*") != 0) {
            return true;
        }
    }
    return false;
}

/// Claims ADDR:PORT among md-gateways for the life of this process: binds the abstract name
/// "md-gateway/tcp/PORT/ADDR" ("PORT/*" for a wildcard address). Binding is atomic, so of two
/// gateways started at the same moment on one address exactly one gets it, which the listen
/// probe alone cannot promise (both may probe before either listens). A wildcard and a
/// specific address of one port overlap too (SO_REUSEPORT would let both serve): each claims
/// its own name first, then looks for the other's (the wildcard in /proc/net/unix, the
/// specific one by trying the wildcard's name for a moment), so of two started at once at
/// least one sees the other and refuses. false when another gateway holds it.
bool claim_among_gateways(const tcp::endpoint& ep, std::string& error) {
    const bool any = ep.address().is_unspecified();
    const std::string base = "md-gateway/tcp/" + std::to_string(ep.port()) + "/";
    const std::string name = base + (any ? std::string("*") : ep.address().to_string());
    const int fd = bind_abstract(name);
    if (fd < 0) {
        error = errno == EADDRINUSE
                    ? std::string("the address is in use (another md-gateway holds it)")
                    : std::string("bind(@") + name + "): " + std::strerror(errno);
        return false;
    }
    bool overlap = false;
    if (any) {
        overlap = specific_claim_exists(ep.port());
    } else if (const int probe = bind_abstract(base + "*"); probe >= 0) {
        ::close(probe);  // no wildcard gateway on this port: let one go on
    } else {
        overlap = errno == EADDRINUSE;
    }
    if (overlap) {
        ::close(fd);
        error = any ? "another md-gateway listens on one of this port's addresses"
                    : "another md-gateway listens on every address of this port (0.0.0.0/::)";
        return false;
    }
    return true;  // fd stays open (and bound) until the process ends
}

}  // namespace

std::string check_address_free(const std::string& addr_port) {
    std::string error;
    const auto ep = parse_endpoint(addr_port, error);
    if (!ep) {
        return error;
    }
    if (ep->port() != 0 && !claim_among_gateways(*ep, error)) {
        return "cannot listen on " + addr_port + ": " + error + "; refusing to share it";
    }
    // Bound without SO_REUSEPORT: refused (EADDRINUSE) when any socket listens on the address,
    // including another md-gateway's SO_REUSEPORT group, which would otherwise take this one
    // in and share the connections with it. SO_REUSEADDR: our own earlier connections in
    // TIME_WAIT do not count.
    asio::io_context ioc;
    tcp::acceptor probe(ioc);
    beast::error_code ec;
    probe.open(ep->protocol(), ec);
    if (!ec) {
        probe.set_option(asio::socket_base::reuse_address(true), ec);
        probe.bind(*ep, ec);
    }
    if (ec == asio::error::address_in_use) {
        return "cannot listen on " + addr_port
               + ": the address is in use (another md-gateway or another program listens "
                 "there); refusing to share it";
    }
    if (ec) {
        return "cannot listen on " + addr_port + ": " + ec.message();
    }
    return {};
}

std::string listen(asio::io_context& ioc,
                   Shared& shared,
                   LoopMetrics& metrics,
                   const std::string& addr_port) {
    std::string error;
    const auto ep = parse_endpoint(addr_port, error);
    if (!ep) {
        return error;
    }
    auto l = std::make_shared<Listener>(ioc, shared, metrics);
    if (std::string err = l->open(*ep); !err.empty()) {
        return "cannot listen on " + addr_port + ": " + err;
    }
    l->accept();
    return {};
}

}  // namespace md::gw
