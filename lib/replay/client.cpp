// SPDX-License-Identifier: Apache-2.0
// The replay client: a non-blocking connection with a deadline, the TLS handshake, the request,
// then journal frames, every length checked before anything is sized from it.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <prizma/replay.hpp>

#include "lib/posix/errors.hpp"
#include "lib/posix/unique_fd.hpp"
#include "lib/replay/tls.hpp"
#include "lib/replay/wire.hpp"
#include "lib/streams/recorder_format.hpp"

namespace prizma {

using posix::os_error;

struct ReplayClient::Impl {
    enum class Phase : std::uint8_t { connecting, handshake, request, frames };
    posix::UniqueFd fd;
    std::shared_ptr<replay::TlsConfig> tls;
    replay::Link link;
    Phase phase = Phase::connecting;
    bool want_write = true;  // what wait() polls for while setting up
    std::int64_t deadline_ns = 0;
    std::byte request[replay::kRequestBytes]{};
    std::size_t request_sent = 0;
    replay::FrameReader frames;
    bool done = false;
    bool failed = false;
    bool server_error = false;
    std::error_code code;
    std::string error;

    Result<bool> fail(std::error_code ec, std::string text) noexcept {
        failed = true;
        code = ec;
        try {
            error = std::move(text);
        } catch (...) {  // NOLINT(bugprone-empty-catch): the code says it
        }
        return ec;
    }
    /// Connection, handshake, request: true once frames can be read; false: not yet.
    Result<bool> set_up() noexcept;
    Result<bool> read_frames(JournalEntry& out) noexcept;
};

Result<ReplayClient, Error> ReplayClient::connect(std::string_view address,
                                                  std::uint16_t port,
                                                  const ReplayRequest& request,
                                                  const ReplayClientOptions& options) {
    auto sa = replay::socket_address(address, port);
    if (!sa) {
        return sa.error();
    }
    if (options.connect_timeout.count() <= 0) {
        return Error(Errc::invalid_argument, "replay: connect_timeout must be > 0");
    }
    auto tls = replay::TlsConfig::make(options.security, false, replay::is_loopback(address));
    if (!tls) {
        return tls.error();
    }
    auto impl = std::make_unique<Impl>();
    impl->tls = std::move(*tls);
    impl->fd.reset(::socket(sa->first.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!impl->fd.valid()) {
        return os_error("replay: socket");
    }
    const int one = 1;
    (void)::setsockopt(impl->fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(impl->fd.get(), reinterpret_cast<const sockaddr*>(&sa->first), sa->second) != 0
        && errno != EINPROGRESS) {
        return os_error("replay: connect to " + std::string(address) + " port "
                        + std::to_string(port));
    }
    auto link = replay::Link::make(*impl->tls, impl->fd.get(), false, address);
    if (!link) {
        return link.error();
    }
    impl->link = std::move(*link);
    impl->deadline_ns =
        Context::now_ns()
        + std::chrono::duration_cast<std::chrono::nanoseconds>(options.connect_timeout).count();
    replay::encode_request(impl->request, request);
    return ReplayClient(std::move(impl));
}

Result<bool> ReplayClient::Impl::set_up() noexcept {
    using Io = replay::Link::Io;
    if (phase == Phase::frames) {
        return true;
    }
    if (Context::now_ns() > deadline_ns) {
        return fail(std::make_error_code(std::errc::timed_out),
                    phase == Phase::connecting ? "replay: no connection within connect_timeout"
                                               : "replay: no TLS handshake within connect_timeout");
    }
    if (phase == Phase::connecting) {
        pollfd p{fd.get(), POLLOUT, 0};
        if (::poll(&p, 1, 0) <= 0) {
            return false;
        }
        int err = 0;
        socklen_t el = sizeof err;
        if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
            const int e = err != 0 ? err : errno;
            return fail(posix::errno_code(e), "replay: connect: " + posix::errno_text(e));
        }
        phase = Phase::handshake;
    }
    if (phase == Phase::handshake) {
        const Io io = link.handshake();
        if (io == Io::want_read || io == Io::want_write) {
            want_write = io == Io::want_write;
            return false;
        }
        if (io != Io::done) {
            return fail(std::make_error_code(std::errc::permission_denied),
                        "replay: " + link.error());
        }
        phase = Phase::request;
    }
    while (request_sent < sizeof request) {
        std::size_t n = 0;
        const Io io = link.write(request + request_sent, sizeof request - request_sent, n);
        if (io == Io::want_read || io == Io::want_write) {
            want_write = io == Io::want_write;
            return false;
        }
        if (io != Io::done) {
            return fail(std::make_error_code(std::errc::connection_reset),
                        "replay: sending the request: " + link.error());
        }
        request_sent += n;
    }
    if (link.pending() > 0) {  // TLS: the request's record not all taken by the socket yet
        if (link.flush() == Io::failed) {
            return fail(std::make_error_code(std::errc::connection_reset),
                        "replay: sending the request: " + link.error());
        }
        if (link.pending() > 0) {
            want_write = true;
            return false;
        }
    }
    phase = Phase::frames;
    want_write = false;
    return true;
}

Result<bool> ReplayClient::next(JournalEntry& out) noexcept {
    Impl& m = *impl_;
    if (m.failed) {
        return m.code;
    }
    if (m.done) {
        return false;
    }
    auto ready = m.set_up();
    if (!ready || !*ready) {
        return ready;
    }
    return m.read_frames(out);
}

Result<bool> ReplayClient::Impl::read_frames(JournalEntry& out) noexcept {
    using Io = replay::Link::Io;
    using Next = replay::FrameReader::Next;
    for (;;) {
        if (done) {
            return false;
        }
        std::uint64_t server_code = 0;
        std::string text;
        Next n = Next::malformed;
        try {
            n = frames.next(out, server_code, text);
        } catch (...) {  // NOLINT(bugprone-empty-catch): the text only; malformed stands
        }
        switch (n) {
            case Next::entry: return true;
            case Next::end: done = true; return false;
            case Next::error_frame:
                server_error = true;
                return fail(std::error_code(static_cast<int>(server_code), error_category()),
                            std::move(text));
            case Next::malformed: return fail(Errc::malformed_packet, std::move(text));
            case Next::need_more: break;
        }
        const auto room = frames.space();
        if (room.empty()) {
            return fail(Errc::malformed_packet, "replay: no memory for a frame");
        }
        std::size_t got = 0;
        const Io io = link.read(room.data(), room.size(), got);
        if (io == Io::done) {
            frames.commit(got);
            continue;
        }
        if (io == Io::want_read || io == Io::want_write) {
            return false;
        }
        return fail(std::make_error_code(std::errc::connection_reset),
                    io == Io::closed
                        ? "replay: the server closed the connection before the end"
                        : "replay: the connection failed before the end: " + link.error());
    }
}

bool ReplayClient::done() const noexcept {
    return impl_->done;
}
const std::string& ReplayClient::error_text() const noexcept {
    return impl_->error;
}
bool ReplayClient::server_error() const noexcept {
    return impl_->server_error;
}
const std::string& ReplayClient::protection() const noexcept {
    return impl_->tls->describe();
}
int ReplayClient::fd() const noexcept {
    return impl_->fd.get();
}
void ReplayClient::wait(std::chrono::milliseconds timeout) const noexcept {
    const bool setting_up = impl_->phase != Impl::Phase::frames;
    pollfd p{impl_->fd.get(),
             static_cast<short>(setting_up && impl_->want_write ? POLLOUT : POLLIN), 0};
    (void)::poll(&p, 1, static_cast<int>(timeout.count()));
}

ReplayClient::ReplayClient(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
ReplayClient::ReplayClient(ReplayClient&& other) noexcept = default;
ReplayClient& ReplayClient::operator=(ReplayClient&& other) noexcept = default;
ReplayClient::~ReplayClient() = default;

}  // namespace prizma
