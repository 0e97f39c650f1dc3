// SPDX-License-Identifier: Apache-2.0
// The push sessions of /ws (WebSocket) and /sse (server-sent events): each holds a client's
// share of the limits and its conflation slots, and writes what the feed thread offers on its
// own loop, bounded by the push write timeout.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "http_internal.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/websocket.hpp>

namespace md::gw {

namespace websocket = beast::websocket;

namespace {

/// The conflation slots of a push client: the feed thread stores the latest bar message, the
/// latest state change and the latest heartbeat, each in a slot of its own (a heartbeat never
/// replaces a state change); the client's loop takes them (state, heartbeat, bar) when no write
/// is in flight. What a client can have queued in the gateway is thus bounded by
/// construction: these three and the one being written.
class Conflator {
public:
    enum class Kind : std::uint8_t { bar, state, heartbeat };
    /// Feed thread: true when the loop must be woken to write.
    bool offer(std::shared_ptr<const std::string> msg, FeedMetrics& m, Kind kind) {
        const std::lock_guard lock(mu_);
        auto& slot = slots_.at(static_cast<std::size_t>(kind));
        if (slot && kind == Kind::bar) {
            ++m.push_conflated;
        }
        slot = std::move(msg);
        return !std::exchange(scheduled_, true);
    }
    /// Loop thread: the message to write next, if any.
    std::shared_ptr<const std::string> take() {
        const std::lock_guard lock(mu_);
        for (const Kind k : {Kind::state, Kind::heartbeat}) {
            if (auto& slot = slots_.at(static_cast<std::size_t>(k))) {
                return std::exchange(slot, nullptr);
            }
        }
        scheduled_ = false;
        return std::exchange(slots_.at(static_cast<std::size_t>(Kind::bar)), nullptr);
    }

private:
    std::mutex mu_;
    std::array<std::shared_ptr<const std::string>, 3> slots_;
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

/// A push session's share of the limits: one of --max-connections and one of --max-push
/// (reserved by reserve_push() before the session is made), and its kind's gauge.
class PushSlot {
public:
    PushSlot(FeedMetrics& f, std::atomic<std::uint64_t>& kind) : f_(f), kind_(kind) {
        ++f_.connections;
        ++kind_;
    }
    ~PushSlot() {
        --kind_;
        --f_.push_clients;
        --f_.connections;
    }
    PushSlot(const PushSlot&) = delete;
    PushSlot& operator=(const PushSlot&) = delete;
    PushSlot(PushSlot&&) = delete;
    PushSlot& operator=(PushSlot&&) = delete;

private:
    FeedMetrics& f_;
    std::atomic<std::uint64_t>& kind_;
};

/// At most this much per client message (the clients of /ws send nothing but control frames):
/// Beast's default of 16 MiB let 16 clients with unfinished messages hold 233 MB.
constexpr std::size_t kWsReadMax = 4096;
/// The kernel's send buffer of a push socket: what a client that stops reading can hold up.
constexpr int kPushSndBuf = 64 * 1024;

/// What the WebSocket and the SSE session share: the hub registration, the limits, the
/// conflation slots and the bounded write. `Session` (CRTP) has write(), which takes the next
/// message from slot_ and sends it, and socket(), the TCP socket under its stream.
template <typename Session>
class PushSession : public PushClient, public std::enable_shared_from_this<Session> {
public:
    ~PushSession() override { s_.hub.remove(key_, this); }
    PushSession(const PushSession&) = delete;
    PushSession& operator=(const PushSession&) = delete;
    PushSession(PushSession&&) = delete;
    PushSession& operator=(PushSession&&) = delete;
    void push(std::shared_ptr<const std::string> msg) override {
        offer(std::move(msg), Conflator::Kind::bar);
    }
    void control(std::shared_ptr<const std::string> msg) override {
        // State messages start {"type":"state", heartbeats {"type":"heartbeat".
        const bool state = msg->starts_with(R"({"type":"state")");
        offer(std::move(msg), state ? Conflator::Kind::state : Conflator::Kind::heartbeat);
    }

protected:
    PushSession(const asio::any_io_executor& ex,
                Shared& s,
                PushQuery q,
                std::atomic<std::uint64_t>& kind)
        : timer_(ex),
          s_(s),
          q_(q),
          key_(PushHub::key(q.code, q.period)),
          slot_guard_(s.feed, kind) {}

    /// Starts a write of cur_: a client that stops reading (its window full) would hold it
    /// for ever, so the push write timeout closes the socket under it.
    void begin_write() {
        writing_ = true;
        timer_.expires_after(seconds(s_.cfg.push_write_timeout_s));
        timer_.async_wait([w = this->weak_from_this()](beast::error_code ec) {
            if (auto self = w.lock(); !ec && self && self->writing_) {
                ++self->s_.feed.push_write_timeouts;
                self->socket().close(ec);
            }
        });
    }
    /// Ends a write begun by begin_write(); false when it failed (the session is closed).
    bool end_write(beast::error_code ec) {
        writing_ = false;
        timer_.cancel();
        closed_ = closed_ || static_cast<bool>(ec);
        return !ec;
    }
    /// Nothing to write now: a write in flight, or the client gone.
    [[nodiscard]] bool busy() const noexcept { return writing_ || closed_; }

    asio::steady_timer timer_;
    Shared& s_;
    PushQuery q_;
    std::uint64_t key_;
    PushSlot slot_guard_;
    Conflator slot_;
    std::shared_ptr<const std::string> cur_;
    bool writing_ = false;
    bool closed_ = false;

private:
    void offer(std::shared_ptr<const std::string> msg, Conflator::Kind kind) {
        if (slot_.offer(std::move(msg), s_.feed, kind)) {
            asio::post(timer_.get_executor(), [w = this->weak_from_this()] {
                if (auto self = w.lock()) {
                    self->write();
                }
            });
        }
    }
};

class WsSession final : public PushSession<WsSession> {
public:
    WsSession(tcp::socket&& sock, Shared& s, PushQuery q)
        : PushSession(sock.get_executor(), s, q, s.feed.ws_clients), ws_(std::move(sock)) {}

    void start(const Request& req) {
        beast::error_code ec;
        socket().set_option(asio::socket_base::send_buffer_size(kPushSndBuf), ec);
        ws_.read_message_max(kWsReadMax);
        websocket::stream_base::timeout t{};
        t.handshake_timeout = std::chrono::seconds(10);
        // No frame from the client for this long closes it; a ping goes out at half of it,
        // so an honest idle client (which answers pings) stays.
        t.idle_timeout = seconds(s_.cfg.idle_timeout_s);
        t.keep_alive_pings = true;
        ws_.set_option(t);
        ws_.set_option(websocket::stream_base::decorator([](websocket::response_type& res) {
            res.set(http::field::server, "md-gateway");
            res.set("X-Content-Type-Options", "nosniff");
        }));
        ws_.async_accept(req, [self = shared_from_this()](beast::error_code aec) {
            if (!aec) {
                self->s_.hub.add(self->key_, self);
                // The snapshot first, then the feed's state, then updates.
                self->control(
                    std::make_shared<const std::string>(state_message(self->s_, "state")));
                self->send(
                    std::make_shared<const std::string>(snapshot_message(self->s_, self->q_)));
                self->read();
            }
        });
    }

private:
    friend class PushSession<WsSession>;

    tcp::socket& socket() { return beast::get_lowest_layer(ws_).socket(); }
    void read() {
        ws_.async_read(rbuf_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
            if (ec) {  // closed, idle too long, or a message over kWsReadMax
                self->closed_ = true;
                return;
            }
            self->rbuf_.clear();
            self->read();
        });
    }
    void write() {
        if (busy()) {
            return;
        }
        if (auto msg = slot_.take()) {
            send(std::move(msg));
        }
    }
    void send(std::shared_ptr<const std::string> msg) {
        cur_ = std::move(msg);
        begin_write();
        ws_.text(true);
        ws_.async_write(asio::buffer(*cur_),
                        [self = shared_from_this()](beast::error_code ec, std::size_t) {
                            if (self->end_write(ec)) {
                                self->write();
                            }
                        });
    }

    websocket::stream<beast::tcp_stream> ws_;
    beast::flat_buffer rbuf_;
};

class SseSession final : public PushSession<SseSession> {
public:
    SseSession(beast::tcp_stream&& stream, Shared& s, PushQuery q)
        : PushSession(stream.get_executor(), s, q, s.feed.sse_clients),
          stream_(std::move(stream)) {}

    void start() {
        stream_.expires_never();
        beast::error_code ec;
        socket().set_option(asio::socket_base::send_buffer_size(kPushSndBuf), ec);
        std::string head =
            "HTTP/1.1 200 OK\r\nServer: md-gateway\r\nContent-Type: text/event-stream\r\n"
            "Cache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\n"
            "Content-Security-Policy: ";
        head += kCspNone;
        head += "\r\nConnection: close\r\n\r\ndata: ";
        head += snapshot_message(s_, q_);
        head += "\n\ndata: ";
        head += state_message(s_, "state");
        head += "\n\n";
        cur_ = std::make_shared<const std::string>(std::move(head));
        send([](SseSession& self) {
            self.s_.hub.add(self.key_, self.shared_from_this());
            self.read();
        });
    }

private:
    friend class PushSession<SseSession>;

    tcp::socket& socket() { return stream_.socket(); }
    void read() {  // only to see the client go (what it sends is dropped, 512 bytes at a time)
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
        if (busy()) {
            return;
        }
        const auto msg = slot_.take();
        if (!msg) {
            return;
        }
        auto out = std::make_shared<std::string>("data: ");
        *out += *msg;
        *out += "\n\n";
        cur_ = std::move(out);
        send([](SseSession&) {});
    }
    /// Writes cur_ (bounded by the write timeout), then `then` and the next message.
    template <typename Then>
    void send(Then then) {
        begin_write();
        asio::async_write(stream_, asio::buffer(*cur_),
                          [self = shared_from_this(), then](beast::error_code ec, std::size_t) {
                              if (self->end_write(ec)) {
                                  then(*self);
                                  self->write();
                              }
                          });
    }

    beast::tcp_stream stream_;
    std::array<char, 512> rbuf_{};
};

}  // namespace

bool reserve_push(Shared& s) {
    if (s.feed.push_clients.fetch_add(1) >= s.cfg.max_push) {
        --s.feed.push_clients;
        return false;
    }
    return true;
}

void start_ws_session(tcp::socket&& sock, Shared& s, PushQuery q, const Request& req) {
    std::make_shared<WsSession>(std::move(sock), s, q)->start(req);
}

void start_sse_session(beast::tcp_stream&& stream, Shared& s, PushQuery q) {
    std::make_shared<SseSession>(std::move(stream), s, q)->start();
}

}  // namespace md::gw
