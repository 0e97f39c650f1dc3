// SPDX-License-Identifier: Apache-2.0
// The answers to plain requests (everything but /ws, /sse and the cached /getStockData fast
// path): the reference API, /v2/bars, /healthz, /metrics and the page.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "http_internal.hpp"
#include "http_server.hpp"

#include <nlohmann/json.hpp>

namespace md::gw {

void set_error(Response& res, http::status st, std::string_view message) {
    res.result(st);
    res.set(http::field::content_type, "application/json");
    // The message may quote the request (a parameter's name): escaped, bad UTF-8 replaced.
    const nlohmann::json doc = {{"error", message}};
    res.body() = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

void Router::bars_v1(const Target& t,
                     std::string_view target,
                     Response& res,
                     LoopMetrics& m) const {
    if (const auto wire = cached_answer(s_, m, target)) {
        res.result(http::status::ok);
        res.set(http::field::content_type, "application/json");
        res.body() = wire->substr(wire->find("\r\n\r\n") + 4);
        return;
    }
    // Not an answer: say why.
    std::string error;
    const auto q = parse_bar_query(t, error, s_.cfg.compat_reference);
    if (!q) {
        set_error(res, http::status::bad_request, error);
        return;
    }
    std::vector<Bar> bars;
    std::size_t n = 0;
    if (!s_.bars.range(q->code, q->period, q->start, q->end, s_.cfg.max_bars, bars, &n)) {
        if (s_.cfg.compat_reference) {  // the reference answers [] for a code it does not know
            res.result(http::status::ok);
            res.set(http::field::content_type, "application/json");
            res.body() = "[]\n";
            return;
        }
        set_error(res, http::status::not_found, "unknown code " + code_text(q->code));
        return;
    }
    set_error(res, http::status::bad_request,
              "range holds " + std::to_string(n) + " bars; at most "
                  + std::to_string(s_.cfg.max_bars)
                  + " per request: narrow start..end (or use /v2/bars?last=N)");
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
    const std::size_t max_bytes = s_.cfg.max_answer_kib * 1024;
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
        if (body.size() > max_bytes) {  // 100 codes x 5000 bars would be ~65 MB
            res.body().clear();
            res.body().shrink_to_fit();
            ++s_.feed.answers_too_large;
            set_error(res, http::status::bad_request,
                      "the answer would exceed " + std::to_string(s_.cfg.max_answer_kib)
                          + " KiB (--max-answer-kib): ask for fewer codes or bars");
            return;
        }
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

namespace {

void static_page(Response& res, std::string_view type, const std::string& body) {
    res.result(http::status::ok);
    res.set(http::field::content_type, type);
    res.body() = body;
}

}  // namespace

void Router::route(const Request& req, const Target& t, Response& res, LoopMetrics& m) const {
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
        set_error(res, http::status::method_not_allowed, "only GET and HEAD");
        res.set(http::field::allow, "GET, HEAD");
        return;
    }
    if (t.path == "/getStockData") {
        bars_v1(t, req.target(), res, m);
    } else if (t.path == "/v2/bars") {
        bars_v2(req, t, res, m);
    } else if (t.path == "/healthz") {
        const auto [code, body] = health(s_);
        res.result(static_cast<http::status>(code));
        res.set(http::field::content_type, "application/json");
        res.set(http::field::cache_control, "no-store");
        res.body() = body + "\n";
    } else if (t.path == "/metrics") {
        res.result(http::status::ok);
        res.set(http::field::content_type, "text/plain; version=0.0.4");
        res.body() = metrics_text(s_);
    } else if (t.path == "/") {
        static_page(res, "text/html; charset=utf-8", index_html());
        res.set("Content-Security-Policy", kCspPage);
    } else if (t.path == "/app.js") {
        static_page(res, "application/javascript", app_js());
    } else if (t.path == "/app.css") {
        static_page(res, "text/css", app_css());
    } else if (t.path == "/favicon.svg" || t.path == "/favicon.ico") {
        static_page(res, "image/svg+xml", favicon_svg());
        res.set(http::field::cache_control, "max-age=86400");
    } else if (t.path == "/lightweight-charts.js") {
        web_js(res);
    } else {
        set_error(res, http::status::not_found,
                  "no such path: /getStockData, /v2/bars, /ws, /sse, /healthz, /metrics, /");
    }
}

}  // namespace md::gw
