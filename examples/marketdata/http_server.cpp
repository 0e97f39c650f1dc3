// SPDX-License-Identifier: Apache-2.0
#include "http_server.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "md/query.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

namespace md::gw {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using Request = http::request<http::empty_body>;
using Response = http::response<http::string_body>;

namespace {

using Clock = std::chrono::steady_clock;

/// The conflation slot of a push client: the feed thread stores the latest message, the
/// client's loop takes it when no write is in flight.
class Conflator {
public:
    /// Feed thread: true when the loop must be woken to write.
    bool offer(std::shared_ptr<const std::string> msg, FeedMetrics& m) {
        const std::lock_guard lock(mu_);
        if (pending_) {
            ++m.push_conflated;
        }
        pending_ = std::move(msg);
        return !std::exchange(scheduled_, true);
    }
    /// Loop thread: the message to write next, if any.
    std::shared_ptr<const std::string> take() {
        const std::lock_guard lock(mu_);
        scheduled_ = false;
        return std::exchange(pending_, nullptr);
    }

private:
    std::mutex mu_;
    std::shared_ptr<const std::string> pending_;
    bool scheduled_ = false;
};

std::string snapshot_message(const Shared& s, const PushQuery& q) {
    std::vector<Bar> bars;
    (void)s.bars.last(q.code, q.period, 1, bars);
    std::string msg = R"({"period":")";
    msg += period_name(q.period);
    msg += R"(","bar":)";
    if (bars.empty()) {
        msg += "null";
    } else {
        append_bar(msg, q.code, bars.front());
    }
    msg += '}';
    return msg;
}

class WsSession final : public PushClient, public std::enable_shared_from_this<WsSession> {
public:
    WsSession(tcp::socket&& sock, Shared& s, PushQuery q)
        : ws_(std::move(sock)), s_(s), q_(q), key_(PushHub::key(q.code, q.period)) {}
    ~WsSession() override {
        s_.hub.remove(key_, this);
        --s_.feed.ws_clients;
    }
    WsSession(const WsSession&) = delete;
    WsSession& operator=(const WsSession&) = delete;
    WsSession(WsSession&&) = delete;
    WsSession& operator=(WsSession&&) = delete;

    void start(const Request& req) {
        ++s_.feed.ws_clients;
        ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
        ws_.async_accept(req, [self = shared_from_this()](beast::error_code ec) {
            if (!ec) {
                self->s_.hub.add(self->key_, self);
                self->push(
                    std::make_shared<const std::string>(snapshot_message(self->s_, self->q_)));
                self->read();
            }
        });
    }
    void push(std::shared_ptr<const std::string> msg) override {
        if (slot_.offer(std::move(msg), s_.feed)) {
            asio::post(ws_.get_executor(), [w = weak_from_this()] {
                if (auto self = w.lock()) {
                    self->write();
                }
            });
        }
    }

private:
    void read() {
        ws_.async_read(rbuf_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
            if (ec) {
                self->closed_ = true;
                return;
            }
            self->rbuf_.clear();
            self->read();
        });
    }
    void write() {
        if (writing_ || closed_) {
            return;
        }
        cur_ = slot_.take();
        if (!cur_) {
            return;
        }
        writing_ = true;
        ws_.text(true);
        ws_.async_write(asio::buffer(*cur_),
                        [self = shared_from_this()](beast::error_code ec, std::size_t) {
                            self->writing_ = false;
                            if (ec) {
                                self->closed_ = true;
                                return;
                            }
                            self->write();
                        });
    }

    websocket::stream<beast::tcp_stream> ws_;
    Shared& s_;
    PushQuery q_;
    std::uint64_t key_;
    Conflator slot_;
    beast::flat_buffer rbuf_;
    std::shared_ptr<const std::string> cur_;
    bool writing_ = false;
    bool closed_ = false;
};

class SseSession final : public PushClient, public std::enable_shared_from_this<SseSession> {
public:
    SseSession(beast::tcp_stream&& stream, Shared& s, PushQuery q)
        : stream_(std::move(stream)), s_(s), q_(q), key_(PushHub::key(q.code, q.period)) {}
    ~SseSession() override {
        s_.hub.remove(key_, this);
        --s_.feed.sse_clients;
    }
    SseSession(const SseSession&) = delete;
    SseSession& operator=(const SseSession&) = delete;
    SseSession(SseSession&&) = delete;
    SseSession& operator=(SseSession&&) = delete;

    void start() {
        ++s_.feed.sse_clients;
        stream_.expires_never();
        head_ =
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            "Connection: close\r\n\r\n";
        head_ += "data: ";
        head_ += snapshot_message(s_, q_);
        head_ += "\n\n";
        writing_ = true;
        asio::async_write(stream_, asio::buffer(head_),
                          [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              self->writing_ = false;
                              if (ec) {
                                  self->closed_ = true;
                                  return;
                              }
                              self->s_.hub.add(self->key_, self);
                              self->read();
                              self->write();
                          });
    }
    void push(std::shared_ptr<const std::string> msg) override {
        if (slot_.offer(std::move(msg), s_.feed)) {
            asio::post(stream_.get_executor(), [w = weak_from_this()] {
                if (auto self = w.lock()) {
                    self->write();
                }
            });
        }
    }

private:
    void read() {  // only to see the client go
        stream_.async_read_some(asio::buffer(rbuf_),
                                [self = shared_from_this()](beast::error_code ec, std::size_t) {
                                    if (ec) {
                                        self->closed_ = true;
                                        self->stream_.socket().close(ec);
                                        return;
                                    }
                                    self->read();
                                });
    }
    void write() {
        if (writing_ || closed_) {
            return;
        }
        const auto msg = slot_.take();
        if (!msg) {
            return;
        }
        out_ = "data: ";
        out_ += *msg;
        out_ += "\n\n";
        writing_ = true;
        asio::async_write(stream_, asio::buffer(out_),
                          [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              self->writing_ = false;
                              if (ec) {
                                  self->closed_ = true;
                                  return;
                              }
                              self->write();
                          });
    }

    beast::tcp_stream stream_;
    Shared& s_;
    PushQuery q_;
    std::uint64_t key_;
    Conflator slot_;
    std::array<char, 512> rbuf_{};
    std::string head_;
    std::string out_;
    bool writing_ = false;
    bool closed_ = false;
};

/// Everything a plain request can be answered with.
class Router {
public:
    explicit Router(Shared& s) : s_(s) {}
    /// Fills `res` (status, body, content type); returns false when the request is a push
    /// subscription instead (`push` and `ws` then say which).
    void route(const Request& req, const Target& t, Response& res, LoopMetrics& m) const;

private:
    void bars_v1(const Target& t, std::string_view target, Response& res) const;
    void bars_v2(const Request& req, const Target& t, Response& res, LoopMetrics& m) const;
    void web_js(Response& res) const;
    Shared& s_;
};

void set_error(Response& res, http::status st, std::string_view message) {
    res.result(st);
    res.set(http::field::content_type, "application/json");
    std::string body = R"({"error":)";
    append_json_string(body, message);
    body += "}\n";
    res.body() = std::move(body);
}

/// A loop's cache of reference-API answers by target, each valid while its code's change
/// counter stays the same (the answer was made after the counter was read, so a hit is never
/// older than the code's bars). Bounded: emptied when it holds kMaxCached answers.
struct CachedAnswer {
    std::uint64_t version = 0;
    std::string body;
};
constexpr std::size_t kMaxCached = 4096;

void Router::bars_v1(const Target& t, std::string_view target, Response& res) const {
    std::string error;
    const auto q = parse_bar_query(t, error);
    if (!q) {
        set_error(res, http::status::bad_request, error);
        return;
    }
    thread_local std::unordered_map<std::string, CachedAnswer> cache;
    const std::uint64_t version = s_.bars.version(q->code);
    if (const auto it = cache.find(std::string(target));
        it != cache.end() && version != 0 && it->second.version == version) {
        res.result(http::status::ok);
        res.set(http::field::content_type, "application/json");
        res.body() = it->second.body;
        return;
    }
    thread_local std::vector<Bar> bars;
    bars.clear();
    std::size_t n = 0;
    if (!s_.bars.range(q->code, q->period, q->start, q->end, s_.cfg.max_bars, bars, &n)) {
        set_error(res, http::status::not_found, "unknown code " + code_text(q->code));
        return;
    }
    if (n > s_.cfg.max_bars) {
        set_error(res, http::status::bad_request,
                  "range holds " + std::to_string(n) + " bars; at most "
                      + std::to_string(s_.cfg.max_bars)
                      + " per request: narrow start..end (or use /v2/bars?last=N)");
        return;
    }
    res.result(http::status::ok);
    res.set(http::field::content_type, "application/json");
    std::string& body = res.body();
    body.reserve(64 + bars.size() * 180);
    append_bars(body, q->code, bars);
    body += '\n';
    if (version != 0) {
        if (cache.size() >= kMaxCached) {
            cache.clear();
        }
        cache[std::string(target)] = CachedAnswer{version, body};
    }
}

void Router::bars_v2(const Request& req, const Target& t, Response& res, LoopMetrics& m) const {
    std::string error;
    const auto q = parse_v2_query(t, s_.cfg.max_bars, error);
    if (!q) {
        set_error(res, http::status::bad_request, error);
        return;
    }
    // The ETag: the codes' change counters and the target (an unchanged code's answer to the
    // same target is the same); any change of a code's bars changes it.
    std::uint64_t h = std::hash<std::string_view>{}(req.target());
    for (const Code c : q->codes) {
        if (!s_.bars.known(c)) {
            set_error(res, http::status::not_found, "unknown code " + code_text(c));
            return;
        }
        h = (h ^ (s_.bars.version(c) + 0x9e3779b97f4a7c15ULL + (h << 6U) + (h >> 2U)))
            * 0x100000001b3ULL;
    }
    const std::string etag = "\"" + std::to_string(h) + "\"";
    res.set(http::field::etag, etag);
    if (const auto inm = req.find(http::field::if_none_match);
        inm != req.end() && inm->value() == etag) {
        res.result(http::status::not_modified);
        ++m.not_modified;
        return;
    }
    std::string& body = res.body();
    body += '{';
    std::vector<Bar> bars;
    for (std::size_t i = 0; i < q->codes.size(); ++i) {
        bars.clear();
        std::size_t n = 0;
        if (q->last > 0) {
            (void)s_.bars.last(q->codes[i], q->period, q->last, bars);
        } else {
            (void)s_.bars.range(q->codes[i], q->period, q->start, q->end, s_.cfg.max_bars, bars,
                                &n);
            if (n > s_.cfg.max_bars) {
                res.body().clear();
                set_error(res, http::status::bad_request,
                          "range holds " + std::to_string(n) + " bars of " + code_text(q->codes[i])
                              + "; at most " + std::to_string(s_.cfg.max_bars) + " per code");
                return;
            }
        }
        body += i > 0 ? ",\"" : "\"";
        append_code(body, q->codes[i]);
        body += "\":";
        append_bars(body, q->codes[i], bars);
    }
    body += "}\n";
    res.result(http::status::ok);
    res.set(http::field::content_type, "application/json");
}

void Router::web_js(Response& res) const {
    if (s_.web_js.empty()) {
        set_error(res, http::status::not_found,
                  "no chart library: start md-gateway with --web DIR "
                  "(scripts/fetch-web-assets.sh fetches it)");
        return;
    }
    res.result(http::status::ok);
    res.set(http::field::content_type, "application/javascript");
    res.set(http::field::cache_control, "max-age=86400");
    res.body() = s_.web_js;
}

void Router::route(const Request& req, const Target& t, Response& res, LoopMetrics& m) const {
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
        set_error(res, http::status::method_not_allowed, "only GET and HEAD");
        res.set(http::field::allow, "GET, HEAD");
        return;
    }
    if (t.path == "/getStockData") {
        bars_v1(t, req.target(), res);
    } else if (t.path == "/v2/bars") {
        bars_v2(req, t, res, m);
    } else if (t.path == "/healthz") {
        res.result(http::status::ok);
        res.set(http::field::content_type, "application/json");
        res.body() = health_text(s_) + "\n";
    } else if (t.path == "/metrics") {
        res.result(http::status::ok);
        res.set(http::field::content_type, "text/plain; version=0.0.4");
        res.body() = metrics_text(s_);
    } else if (t.path == "/") {
        res.result(http::status::ok);
        res.set(http::field::content_type, "text/html; charset=utf-8");
        res.body() = index_html();
    } else if (t.path == "/lightweight-charts.js") {
        web_js(res);
    } else {
        set_error(res, http::status::not_found,
                  "no such path: /getStockData, /v2/bars, /ws, /sse, /healthz, /metrics, /");
    }
}

/// The fast path of the reference API. A loop's cache of whole answers to /getStockData
/// targets: status line, headers and body in one buffer, written with one send. An entry
/// holds its code's change counter and the value it had before the bars were read, so a hit
/// (one hash lookup, one atomic load) is never older than the code's bars. Bounded: emptied
/// when it holds kMaxCached answers. One per loop thread: no lock.
class WireCache {
public:
    /// The whole 200 answer to `target`, or nullptr when it is not one (an error, which
    /// Beast's path then answers with its message).
    std::shared_ptr<const std::string> get(const Shared& s, std::string_view target);

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
    std::unordered_map<std::string, Entry, Hash, std::equal_to<>> map_;
    std::vector<Bar> bars_;
};

std::shared_ptr<const std::string> WireCache::get(const Shared& s, std::string_view target) {
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
    const auto q = parse_bar_query(*t, error);
    const auto* counter = q ? s.bars.version_counter(q->code) : nullptr;
    if (counter == nullptr) {
        return nullptr;
    }
    const std::uint64_t seen = counter->load(std::memory_order_acquire);
    bars_.clear();
    std::size_t n = 0;
    if (!s.bars.range(q->code, q->period, q->start, q->end, s.cfg.max_bars, bars_, &n)
        || n > s.cfg.max_bars) {
        return nullptr;
    }
    std::string body;
    body.reserve(64 + bars_.size() * 180);
    append_bars(body, q->code, bars_);
    body += '\n';
    auto wire = std::make_shared<std::string>();
    wire->reserve(body.size() + 128);
    wire->append(
        "HTTP/1.1 200 OK\r\nServer: md-gateway\r\nContent-Type: application/json\r\n"
        "Content-Length: ");
    wire->append(std::to_string(body.size()));
    wire->append("\r\n\r\n");
    wire->append(body);
    if (map_.size() >= kMaxCached) {
        map_.clear();
    }
    map_.insert_or_assign(std::string(target), Entry{counter, seen, wire});
    return wire;
}

WireCache& loop_cache() {
    thread_local WireCache cache;
    return cache;
}

/// What the front of a connection's input holds.
enum class Front {
    incomplete,  // the start of a request the fast path may answer: read more
    fast,        // a whole GET /getStockData on keep-alive HTTP/1.1, no body
    other,       // anything else: Beast's parser
};

constexpr std::size_t kMaxHead = 8192;

bool iequals(std::string_view a, std::string_view b) noexcept {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return (x | 0x20) == (y | 0x20);  // letters and '-' (0x2d | 0x20 == 0x2d)
           });
}

/// Headers that take a request off the fast path (connection handling, bodies, upgrades).
bool fast_headers(std::string_view headers) noexcept {
    while (!headers.empty()) {
        const std::size_t eol = headers.find("\r\n");
        const std::string_view line = headers.substr(0, eol);
        headers = eol == std::string_view::npos ? std::string_view{} : headers.substr(eol + 2);
        const std::size_t colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0 || line[0] == ' ' || line[0] == '\t') {
            return false;
        }
        const std::string_view name = line.substr(0, colon);
        for (const std::string_view no :
             {"connection", "content-length", "transfer-encoding", "upgrade", "expect"}) {
            if (iequals(name, no)) {
                return false;
            }
        }
    }
    return true;
}

/// Classifies `in`; for Front::fast, `target` and the request's length `len`.
Front classify(std::string_view in, std::string_view& target, std::size_t& len) noexcept {
    constexpr std::string_view kGet = "GET /getStockData?";
    if (in.substr(0, std::min(in.size(), kGet.size())) != kGet.substr(0, in.size())) {
        return Front::other;
    }
    const std::size_t end = in.find("\r\n\r\n");
    if (end == std::string_view::npos) {
        return in.size() < kMaxHead ? Front::incomplete : Front::other;
    }
    const std::size_t eol = in.find("\r\n");
    const std::string_view line = in.substr(0, eol);
    constexpr std::string_view kVersion = " HTTP/1.1";
    if (!line.ends_with(kVersion)) {
        return Front::other;
    }
    target = line.substr(4, line.size() - 4 - kVersion.size());
    if (target.find(' ') != std::string_view::npos
        || !fast_headers(in.substr(eol + 2, end - eol))) {
        return Front::other;
    }
    len = end + 4;
    return Front::fast;
}

class HttpSession;

/// A loop's HTTP sessions, for the idle-timeout sweep: each session has a deadline (set when
/// it starts reading a request), and a loop timer closes the ones past it. Cheaper than a
/// timer per socket operation; loop thread only.
struct SessionSet {
    std::unordered_set<HttpSession*> sessions;
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
public:
    HttpSession(tcp::socket&& sock, Shared& s, LoopMetrics& m, std::shared_ptr<SessionSet> set)
        : stream_(std::move(sock)), s_(s), m_(m), router_(s), set_(std::move(set)) {
        ++s_.feed.connections;
        set_->sessions.insert(this);
        beast::error_code ec;
        stream_.socket().non_blocking(true, ec);  // the fast path reads and writes directly
    }
    ~HttpSession() {
        set_->sessions.erase(this);
        --s_.feed.connections;
    }
    /// Closes the connection when its request (read and answer) is past the idle timeout:
    /// half-open and byte-a-second clients, and clients that never read their answer.
    void sweep(Clock::time_point now) {
        if (now > deadline_) {
            deadline_ = Clock::time_point::max();
            beast::error_code ec;
            stream_.socket().close(ec);  // the pending operation ends with an error
        }
    }
    HttpSession(const HttpSession&) = delete;
    HttpSession& operator=(const HttpSession&) = delete;
    HttpSession(HttpSession&&) = delete;
    HttpSession& operator=(HttpSession&&) = delete;

    /// Reads the next request (the idle timeout runs from here to its answer's last byte).
    void read() {
        deadline_ = Clock::now()
                    + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double>(s_.cfg.idle_timeout_s));
        if (buf_.size() == 0) {
            read_more();
            return;
        }
        // Pipelined requests: one at a time through the loop, so that a client sending many
        // cannot recurse.
        asio::post(stream_.get_executor(), [self = shared_from_this()] { self->next(); });
    }

private:
    static bool closing(const beast::error_code& ec) {
        return ec == http::error::end_of_stream || ec == beast::error::timeout
               || ec == asio::error::connection_reset || ec == asio::error::eof;
    }
    /// The fast path when the input starts with a request it answers, Beast's parser else.
    void next() {
        const auto data = buf_.cdata();
        const std::string_view in(static_cast<const char*>(data.data()), data.size());
        std::string_view target;
        std::size_t len = 0;
        switch (classify(in, target, len)) {
            case Front::incomplete: read_more(); return;
            case Front::fast:
                if (auto wire = loop_cache().get(s_, target)) {
                    t0_ = Clock::now();
                    buf_.consume(len);
                    write_wire(std::move(wire));
                    return;
                }
                break;  // an error: Beast's path answers it
            case Front::other: break;
        }
        read_beast();
    }
    /// Waits until the socket is readable, then reads what is there: right after an answer
    /// the next request is rarely there yet, and Asio's speculative read would cost a
    /// recv() that finds nothing.
    void read_more() {
        stream_.socket().async_wait(
            tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
                if (!ec) {
                    const std::size_t n =
                        self->stream_.socket().read_some(self->buf_.prepare(4096), ec);
                    if (ec == asio::error::would_block) {
                        self->read_more();
                        return;
                    }
                    self->buf_.commit(n);
                }
                if (ec) {
                    self->shut();
                    return;
                }
                self->next();
            });
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
        asio::async_write(stream_.socket(), asio::buffer(*wire_) + done,
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
        std::string error;
        const auto t = parse_target(req.target(), error);
        if (t && (t->path == "/ws" || t->path == "/sse")) {
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
        count(200);
        deadline_ = Clock::time_point::max();  // push sessions have their own timeouts
        stream_.socket().non_blocking(false, error_);
        if (t.path == "/ws") {
            if (!websocket::is_upgrade(req)) {
                set_error(res_, http::status::bad_request, "/ws needs a WebSocket upgrade");
                return false;
            }
            std::make_shared<WsSession>(stream_.release_socket(), s_, *q)->start(req);
            return true;
        }
        std::make_shared<SseSession>(std::move(stream_), s_, *q)->start();
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
    std::shared_ptr<const std::string> wire_;  // the fast path's answer being written
    std::optional<http::request_parser<http::empty_body>> parser_;
    Response res_;
    Shared& s_;
    LoopMetrics& m_;
    Router router_;
    std::shared_ptr<SessionSet> set_;
    Clock::time_point t0_;
    Clock::time_point deadline_ = Clock::time_point::max();
    beast::error_code error_;  // of calls whose failure changes nothing
};

class Listener : public std::enable_shared_from_this<Listener> {
public:
    Listener(asio::io_context& ioc, Shared& s, LoopMetrics& m)
        : acc_(ioc), sweep_(ioc), s_(s), m_(m), set_(std::make_shared<SessionSet>()) {}
    /// Every 250 ms: closes the sessions past their deadline.
    void sweep() {
        sweep_.expires_after(std::chrono::milliseconds(250));
        sweep_.async_wait([self = shared_from_this()](beast::error_code ec) {
            if (ec) {
                return;
            }
            const auto now = Clock::now();
            for (HttpSession* h : self->set_->sessions) {
                h->sweep(now);
            }
            self->sweep();
        });
    }
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
                    std::make_shared<HttpSession>(std::move(sock), self->s_, self->m_, self->set_)
                        ->read();
                }
            }
            self->accept();
        });
    }

private:
    tcp::acceptor acc_;
    asio::steady_timer sweep_;
    Shared& s_;
    LoopMetrics& m_;
    std::shared_ptr<SessionSet> set_;
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

std::string check_address_free(const std::string& addr_port) {
    std::string error;
    const auto ep = parse_endpoint(addr_port, error);
    if (!ep) {
        return error;
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
    l->sweep();
    return {};
}

}  // namespace md::gw
