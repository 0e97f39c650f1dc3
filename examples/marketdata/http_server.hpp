// SPDX-License-Identifier: Apache-2.0
// The gateway's HTTP side (Boost.Beast): one io_context per loop, each with its own
// SO_REUSEPORT acceptor; sessions for plain requests, WebSocket and SSE push.
#pragma once

#include <memory>
#include <string>

#include "gateway.hpp"

#include <boost/asio/io_context.hpp>

namespace md::gw {

/// Binds ADDR:PORT on `ioc` (SO_REUSEPORT, so every loop binds the same port) and accepts
/// connections into sessions on that loop; `metrics` is the loop's. Returns the error text,
/// empty on success.
std::string listen(boost::asio::io_context& ioc,
                   Shared& shared,
                   LoopMetrics& metrics,
                   const std::string& addr_port);

/// Fails (the error text) when ADDR:PORT is in use by any other socket, such as another
/// md-gateway's listeners: SO_REUSEPORT would let this process join that group and share its
/// connections. Call once before the loops' listen(); empty when the address is free.
std::string check_address_free(const std::string& addr_port);

/// The page at `/`, its script (/app.js), style (/app.css) and icon (/favicon.svg).
const std::string& index_html();
const std::string& app_js();
const std::string& app_css();
const std::string& favicon_svg();

}  // namespace md::gw
