// SPDX-License-Identifier: Apache-2.0
// What the HTTP server's parts share, private to them: http_server.cpp (sessions, the loop's
// cache of whole answers, listeners), http_router.cpp (the plain requests' answers) and
// push_session.cpp (the WebSocket and SSE push sessions).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "gateway.hpp"
#include "md/query.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace md::gw {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Request = http::request<http::empty_body>;
using Response = http::response<http::string_body>;

using Clock = std::chrono::steady_clock;

inline Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

/// The headers every answer carries (the page's CSP is its own, below).
inline constexpr std::string_view kCspNone = "default-src 'none'; frame-ancestors 'none'";
inline constexpr std::string_view kCspPage =
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Takes one of --max-push; false (nothing taken) when all are in use.
bool reserve_push(Shared& s);

/// /ws: the push session of an upgraded connection, which answers the handshake in `req`.
void start_ws_session(tcp::socket&& sock, Shared& s, PushQuery q, const Request& req);
/// /sse: the push session of a connection, which writes the answer's head and the snapshot.
void start_sse_session(beast::tcp_stream&& stream, Shared& s, PushQuery q);

/// The whole 200 answer to a /getStockData target from the loop's cache (made when missing
/// or out of date), or nullptr when the target is not a valid query of a known code with at
/// most --max-bars bars (the caller answers the error).
std::shared_ptr<const std::string> cached_answer(const Shared& s,
                                                 LoopMetrics& m,
                                                 std::string_view target);

/// Everything a plain request can be answered with.
class Router {
public:
    explicit Router(Shared& s) : s_(s) {}
    /// Fills `res` (status, body, content type).
    void route(const Request& req, const Target& t, Response& res, LoopMetrics& m) const;

private:
    void bars_v1(const Target& t, std::string_view target, Response& res, LoopMetrics& m) const;
    void bars_v2(const Request& req, const Target& t, Response& res, LoopMetrics& m) const;
    void web_js(Response& res) const;
    Shared& s_;
};

/// An error answer: `st` with {"error": message}.
void set_error(Response& res, http::status st, std::string_view message);

}  // namespace md::gw
