// SPDX-License-Identifier: Apache-2.0
// The replay service exposed to a network (docs/STREAMS.md, "Protecting the replay service"):
// TLS 1.3 with keys derived from the channel's key file, or certificates both ways; wrong keys,
// wrong certificates, plaintext and a recorded handshake replayed are refused and counted;
// plaintext off loopback needs `insecure`; the allow-list and the per-address cap; deadlines in
// every server state; a non-blocking connect with a deadline; IPv6; and a late joiner that
// trusts no server (a lying server's frames end its attempt, the honest alternate completes
// the join with every record once).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <prizma/prizma.hpp>

#include "lib/replay/wire.hpp"
#include "lib/streams/recorder_format.hpp"
#include "tests/support/catch.hpp"
#include "tests/support/counters.hpp"
#include "tests/support/journal.hpp"

namespace {

using prizma::test::append;
using Clock = std::chrono::steady_clock;

struct TempDir : prizma::test::TempDir {
    TempDir() : prizma::test::TempDir("prizma-replay-sec") {}
};

std::vector<std::byte> body(std::uint64_t i, std::size_t size = 100) {
    return prizma::test::record_body(i, size);
}

bool payload_ok(std::uint64_t seq, std::span<const std::byte> p) {
    return prizma::test::record_body_ok(seq, p);
}

using prizma::test::make_journal;

prizma::AuthOptions keys(std::uint32_t id, std::uint8_t fill) {
    prizma::AuthOptions a;
    prizma::AuthKey k;
    k.id = id;
    k.bytes.fill(fill);
    a.keys.push_back(k);
    return a;
}

/// What one client got: records in order, or the error it ended with.
struct Outcome {
    std::uint64_t records = 0;
    std::uint64_t bad = 0;
    bool done = false;
    std::optional<std::error_code> error;
    std::string text;
};

Outcome drain(prizma::ReplayClient& c, std::chrono::milliseconds budget = std::chrono::seconds(5)) {
    Outcome o;
    prizma::JournalEntry e;
    const auto until = Clock::now() + budget;
    while (Clock::now() < until) {
        auto r = c.next(e);
        if (!r) {
            o.error = r.error();
            o.text = c.error_text();
            return o;
        }
        if (*r) {
            o.bad += e.sequence == o.records && payload_ok(e.sequence, e.payload()) ? 0U : 1U;
            ++o.records;
            continue;
        }
        if (c.done()) {
            o.done = true;
            return o;
        }
        c.wait(std::chrono::milliseconds(10));
    }
    return o;
}

Outcome fetch(std::uint16_t port,
              const prizma::ReplaySecurity& sec,
              const std::string& address = "127.0.0.1") {
    prizma::ReplayRequest rq;
    rq.stream_id = 42;
    prizma::ReplayClientOptions co;
    co.security = sec;
    auto c = prizma::ReplayClient::connect(address, port, rq, co);
    REQUIRE(c.has_value());
    return drain(*c);
}

prizma::ReplayServer serve(const std::string& dir, const prizma::ReplaySecurity& sec) {
    prizma::ReplayServerOptions o;
    o.streams = {{42, dir}};
    o.security = sec;
    auto s = prizma::ReplayServer::start(o);
    REQUIRE(s.has_value());
    return std::move(*s);
}

/// A TCP listener on 127.0.0.1, an ephemeral port; `at` gets its address.
int listen_loopback(int backlog, sockaddr_in& at) {
    const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(lfd >= 0);
    at = sockaddr_in{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(lfd, reinterpret_cast<const sockaddr*>(&at), sizeof at) == 0);
    REQUIRE(::listen(lfd, backlog) == 0);
    socklen_t sl = sizeof at;
    REQUIRE(::getsockname(lfd, reinterpret_cast<sockaddr*>(&at), &sl) == 0);
    return lfd;
}

/// A plain TCP connection to 127.0.0.1 (or from `source`).
int tcp_connect(std::uint16_t port, const char* source = nullptr) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    if (source != nullptr) {
        REQUIRE(::inet_pton(AF_INET, source, &sa.sin_addr) == 1);
        REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0);
    }
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0);
    return fd;
}

/// Reads until the peer closes (or 3 s): what it sent.
std::string read_all(int fd) {
    std::string got;
    char buf[4096];
    const auto until = Clock::now() + std::chrono::seconds(3);
    while (Clock::now() < until) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 50) != 1) {
            continue;
        }
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
            break;
        }
        got.append(buf, static_cast<std::size_t>(n));
    }
    return got;
}

template <typename Pred>
bool eventually(Pred p, std::chrono::milliseconds budget = std::chrono::seconds(5)) {
    const auto until = Clock::now() + budget;
    while (!p()) {
        if (Clock::now() > until) {
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
}

/// A test PKI made with the openssl tool: a CA, a server certificate for 127.0.0.1 and a
/// client certificate under it, and a second CA with its own client certificate.
struct Pki {
    TempDir dir;
    bool ok = false;
    std::string at(const char* f) const { return dir.path + "/" + f; }
    Pki() {
        const std::string script = dir.path + "/make.sh";
        std::ofstream(script) << R"(set -e
cd "$1"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { key "$1.key"; openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=$1"; }
leaf() {  # name ca san
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$1"
  printf 'subjectAltName=%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 2 \
      -extfile "$1.ext" -out "$1.pem" 2>/dev/null
}
ca ca1; ca ca2
leaf server ca1 IP:127.0.0.1
leaf other_server ca1 IP:10.9.9.9
leaf client ca1 DNS:client
leaf rogue ca2 DNS:client
)";
        ok = std::system(("sh " + script + " " + dir.path + " >/dev/null 2>&1").c_str()) == 0;
    }
    prizma::ReplaySecurity as(const char* who, const char* ca) const {
        prizma::ReplaySecurity s;
        s.certificate_file = at((std::string(who) + ".pem").c_str());
        s.private_key_file = at((std::string(who) + ".key").c_str());
        s.ca_file = at((std::string(ca) + ".pem").c_str());
        return s;
    }
};

/// A port on 127.0.0.1 that was free a moment ago (for a child process to listen on).
std::uint16_t free_port() {
    sockaddr_in sa{};
    const int lfd = listen_loopback(1, sa);
    ::close(lfd);
    return ntohs(sa.sin_port);
}

/// A real `openssl` tool process (s_server, s_client): its stdin a pipe this end holds open
/// (s_server and s_client end their connection at EOF on stdin), its stdout and stderr in a
/// file. Killed and reaped on destruction.
struct OpensslPeer {
    pid_t pid = -1;
    int stdin_fd = -1;
    std::string log;
    OpensslPeer(const std::vector<std::string>& args, std::string log_file)
        : log(std::move(log_file)) {
        int p[2];
        REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
        posix_spawn_file_actions_t fa;
        REQUIRE(::posix_spawn_file_actions_init(&fa) == 0);
        (void)::posix_spawn_file_actions_adddup2(&fa, p[0], 0);
        (void)::posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                                 0600);
        (void)::posix_spawn_file_actions_adddup2(&fa, 1, 2);
        std::vector<std::string> full{"openssl"};
        full.insert(full.end(), args.begin(), args.end());
        std::vector<char*> argv;
        for (auto& a : full) {
            argv.push_back(a.data());
        }
        argv.push_back(nullptr);
        const int rc = ::posix_spawnp(&pid, "openssl", &fa, nullptr, argv.data(), environ);
        (void)::posix_spawn_file_actions_destroy(&fa);
        ::close(p[0]);
        stdin_fd = p[1];
        if (rc != 0) {
            pid = -1;
        }
    }
    ~OpensslPeer() {
        if (pid > 0) {
            (void)::kill(pid, SIGKILL);
            int status = 0;
            (void)::waitpid(pid, &status, 0);
        }
        ::close(stdin_fd);
    }
    OpensslPeer(const OpensslPeer&) = delete;
    OpensslPeer& operator=(const OpensslPeer&) = delete;
    [[nodiscard]] std::string output() const {
        // read(2), not istreambuf_iterator: g++ 12 -O2 under TSan sees a null dereference
        // in the latter (-Wnull-dereference).
        std::string out;
        const int fd = ::open(log.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            return out;
        }
        char buf[4096];
        for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) {
            out.append(buf, static_cast<std::size_t>(n));
        }
        ::close(fd);
        return out;
    }
    /// Still running (not exited).
    [[nodiscard]] bool running() const {
        int status = 0;
        return pid > 0 && ::waitpid(pid, &status, WNOHANG) == 0;
    }
};

/// `openssl s_server -tls1_3` on 127.0.0.1 with a self-signed certificate and no PSK: a server
/// that answers a keyed client's hello by authenticating with its certificate instead.
struct CertificateServer {
    TempDir dir;
    std::uint16_t port = free_port();
    std::optional<OpensslPeer> peer;
    bool ok = false;
    CertificateServer() {
        const std::string cert = dir.path + "/cert.pem";
        const std::string key = dir.path + "/key.pem";
        const std::string make =
            "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
            "-nodes -days 2 -subj /CN=127.0.0.1 -addext "
            "subjectAltName=IP:127.0.0.1 -keyout "
            + key + " -out " + cert + " >/dev/null 2>&1";
        if (std::system(make.c_str()) != 0) {
            return;
        }
        peer.emplace(std::vector<std::string>{"s_server", "-tls1_3", "-accept",
                                              "127.0.0.1:" + std::to_string(port), "-cert", cert,
                                              "-key", key},
                     dir.path + "/s_server.log");
        // Listening once it says ACCEPT.
        ok = peer->pid > 0 && eventually([&] {
                 return !peer->running() || peer->output().find("ACCEPT") != std::string::npos;
             })
             && peer->running();
    }
};

}  // namespace

TEST_CASE("replay tls: keys from the channel's key file, wrong keys and plaintext refused",
          "[unit][replay][security]") {
    const TempDir dir;
    make_journal(dir.path, 3000);
    prizma::ReplaySecurity sec;
    sec.keys = keys(7, 0x11);
    auto server = serve(dir.path, sec);
    CHECK(server.protection().find("pre-shared keys 7") != std::string::npos);

    const Outcome good = fetch(server.port(), sec);
    CHECK(good.done);
    CHECK(good.records == 3000);
    CHECK(good.bad == 0);

    prizma::ReplaySecurity wrong;
    wrong.keys = keys(7, 0x22);  // the same id, another key
    const Outcome w = fetch(server.port(), wrong);
    CHECK(w.error.has_value());
    CHECK(w.records == 0);
    CHECK(eventually([&] { return server.counters().handshake_failures == 1; }));

    prizma::ReplaySecurity unknown;
    unknown.keys = keys(8, 0x11);  // an id the server does not hold
    const Outcome u = fetch(server.port(), unknown);
    CHECK(u.error.has_value());
    CHECK(u.records == 0);
    CHECK(eventually([&] { return server.counters().handshake_failures == 2; }));

    // A plaintext client (loopback: it is allowed to try) gets no journal byte.
    const Outcome p = fetch(server.port(), {});
    CHECK(p.error.has_value());
    CHECK(p.records == 0);
    CHECK(eventually([&] { return server.counters().handshake_failures == 3; }));
    CHECK(server.counters().requests == 1);

    // Rotation: a server holding the new and the old key serves clients of either.
    prizma::ReplaySecurity both;
    both.keys = keys(9, 0x33);
    both.keys->keys.push_back(keys(7, 0x11).keys.front());
    auto rotated = serve(dir.path, both);
    CHECK(fetch(rotated.port(), sec).records == 3000);
    prizma::ReplaySecurity fresh;
    fresh.keys = keys(9, 0x33);
    CHECK(fetch(rotated.port(), fresh).records == 3000);
}

TEST_CASE("replay tls: a recorded handshake and request replayed are refused",
          "[unit][replay][security][process]") {
    const TempDir dir;
    make_journal(dir.path, 500);
    prizma::ReplaySecurity sec;
    sec.keys = keys(7, 0x11);
    auto server = serve(dir.path, sec);
    // A relay between an honest client and the server records what the client sends.
    sockaddr_in sa{};
    const int lfd = listen_loopback(1, sa);
    std::string recorded;
    std::thread relay([&] {
        const int c = ::accept(lfd, nullptr, nullptr);
        const int s = tcp_connect(server.port());
        char buf[65536];
        for (bool open = true; open;) {
            pollfd p[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
            if (::poll(p, 2, 3000) <= 0) {
                break;
            }
            for (int k = 0; k < 2; ++k) {
                if ((p[k].revents & (POLLIN | POLLHUP)) == 0) {
                    continue;
                }
                const ssize_t n = ::recv(p[k].fd, buf, sizeof buf, 0);
                if (n <= 0) {
                    open = false;
                    break;
                }
                if (k == 0) {
                    recorded.append(buf, static_cast<std::size_t>(n));
                }
                (void)::send(k == 0 ? s : c, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL);
            }
        }
        ::close(c);
        ::close(s);
    });
    const Outcome honest = fetch(ntohs(sa.sin_port), sec);
    relay.join();
    ::close(lfd);
    CHECK(honest.records == 500);
    REQUIRE(recorded.size() > 32);
    const auto before = server.counters();
    // The same bytes again, on a new connection: the server's fresh key share makes the
    // recorded Finished wrong.
    const int fd = tcp_connect(server.port());
    REQUIRE(::send(fd, recorded.data(), recorded.size(), MSG_NOSIGNAL) > 0);
    const std::string reply = read_all(fd);
    ::close(fd);
    CHECK(eventually(
        [&] { return server.counters().handshake_failures == before.handshake_failures + 1; }));
    CHECK(server.counters().requests == before.requests);
    CHECK(server.counters().records == before.records);
    CHECK(reply.size() < 4096);  // a ServerHello and an alert at most, no journal
}

namespace {

// The kernel can do TLS (its tls module loads): the ULP on an unconnected socket then says
// ENOTCONN. The Soft-RoCE VM's Debian kernel has it; many a host does not.
bool kernel_has_tls() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool yes =
        fd >= 0 && ::setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", 3) != 0 && errno == ENOTCONN;
    ::close(fd);
    return yes;
}

}  // namespace

TEST_CASE("replay tls: kernel TLS where the kernel has it, user space when off or absent",
          "[unit][replay][security]") {
    const bool kernel = kernel_has_tls();
    INFO("kernel tls module: " << (kernel ? "yes" : "no"));
    const TempDir dir;
    make_journal(dir.path, 20000);
    for (const bool on : {true, false}) {
        INFO("server kernel_tls = " << on);
        prizma::ReplaySecurity sec;
        sec.keys = keys(7, 0x11);
        sec.kernel_tls = on;
        auto server = serve(dir.path, sec);
        CHECK((server.protection().find("kernel TLS") != std::string::npos) == (on && kernel));
        // A client asking the same, and one asking the other: each end decides for itself.
        const Outcome same = fetch(server.port(), sec);
        CHECK(same.done);
        CHECK(same.records == 20000);
        CHECK(same.bad == 0);
        prizma::ReplaySecurity other = sec;
        other.kernel_tls = !on;
        const Outcome mixed = fetch(server.port(), other);
        CHECK(mixed.done);
        CHECK(mixed.records == 20000);
        CHECK(mixed.bad == 0);
        CHECK(server.counters().kernel_tls == (on && kernel ? 2U : 0U));
    }
    // Plaintext (loopback) never involves it.
    auto plain = serve(dir.path, {});
    CHECK(fetch(plain.port(), {}).records == 20000);
    CHECK(plain.counters().kernel_tls == 0);
}

TEST_CASE("replay tls: clients that reset after their hello leave the server serving",
          "[unit][replay][security][process]") {
    // With kernel TLS the server writes its handshake through OpenSSL's socket BIO (write(2)):
    // a peer gone must not raise SIGPIPE. Hellos taken from a real client, then a reset.
    const TempDir dir;
    make_journal(dir.path, 300);
    prizma::ReplaySecurity sec;
    sec.keys = keys(7, 0x11);
    auto server = serve(dir.path, sec);
    for (int i = 0; i < 20; ++i) {
        sockaddr_in sa{};
        const int lfd = listen_loopback(1, sa);
        prizma::ReplayRequest rq;
        rq.stream_id = 42;
        prizma::ReplayClientOptions co;
        co.security = sec;
        co.connect_timeout = std::chrono::milliseconds(200);
        auto c = prizma::ReplayClient::connect("127.0.0.1", ntohs(sa.sin_port), rq, co);
        REQUIRE(c.has_value());
        const int accepted = ::accept(lfd, nullptr, nullptr);
        REQUIRE(accepted >= 0);
        prizma::JournalEntry e;
        std::string hello;
        for (int k = 0; k < 100 && hello.empty(); ++k) {
            (void)c->next(e);  // drives the client's handshake: its hello goes out
            char buf[4096];
            pollfd p{accepted, POLLIN, 0};
            if (::poll(&p, 1, 10) > 0) {
                const ssize_t n = ::recv(accepted, buf, sizeof buf, MSG_DONTWAIT);
                hello.assign(buf, static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
            }
        }
        ::close(accepted);
        ::close(lfd);
        REQUIRE(!hello.empty());
        const int fd = tcp_connect(server.port());
        REQUIRE(::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) > 0);
        const linger reset{1, 0};
        (void)::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
        if (i % 2 == 1) {  // half of them after the server's first flight has arrived
            pollfd p{fd, POLLIN, 0};
            (void)::poll(&p, 1, 1000);
        }
        ::close(fd);
    }
    const Outcome honest = fetch(server.port(), sec);
    CHECK(honest.done);
    CHECK(honest.records == 300);
}

TEST_CASE("replay tls: certificates both ways, a wrong one refused", "[unit][replay][security]") {
    const Pki pki;
    if (!pki.ok) {
        PRIZMA_SKIP("the openssl tool could not make the test certificates");
    }
    const TempDir dir;
    make_journal(dir.path, 1000);
    auto server = serve(dir.path, pki.as("server", "ca1"));
    CHECK(server.protection().find("certificates") != std::string::npos);

    const Outcome good = fetch(server.port(), pki.as("client", "ca1"));
    CHECK(good.records == 1000);
    CHECK(good.done);

    // A client certificate from another CA.
    const Outcome rogue = fetch(server.port(), pki.as("rogue", "ca2"));
    CHECK(rogue.error.has_value());
    CHECK(rogue.records == 0);
    CHECK(eventually([&] { return server.counters().handshake_failures == 1; }));

    // A client that trusts only ca2 refuses the server.
    auto distrust = pki.as("client", "ca1");
    distrust.ca_file = pki.at("ca2.pem");
    const Outcome d = fetch(server.port(), distrust);
    CHECK(d.error == std::make_error_code(std::errc::permission_denied));
    CHECK(d.text.find("certificate") != std::string::npos);

    // A server whose certificate names another address is refused by the client.
    auto other = serve(dir.path, pki.as("other_server", "ca1"));
    const Outcome o = fetch(other.port(), pki.as("client", "ca1"));
    CHECK(o.error == std::make_error_code(std::errc::permission_denied));
    CHECK(o.records == 0);
    // ... unless the client names the address the certificate carries.
    auto named = pki.as("client", "ca1");
    named.server_name = "10.9.9.9";
    CHECK(fetch(other.port(), named).records == 1000);

    // Keys and certificates at once is a configuration error.
    auto both = pki.as("server", "ca1");
    both.keys = keys(1, 1);
    prizma::ReplayServerOptions so;
    so.streams = {{42, dir.path}};
    so.security = both;
    CHECK_FALSE(prizma::ReplayServer::start(so).has_value());
}

TEST_CASE("replay: plaintext only on loopback unless insecure",
          "[unit][replay][security][process]") {
    const TempDir dir;
    make_journal(dir.path, 10);
    prizma::ReplayServerOptions o;
    o.streams = {{42, dir.path}};
    o.address = "0.0.0.0";
    auto refused = prizma::ReplayServer::start(o);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().code() == prizma::Errc::invalid_argument);
    CHECK(refused.error().message().find("plaintext") != std::string::npos);
    o.security.insecure = true;
    auto loud = prizma::ReplayServer::start(o);
    REQUIRE(loud.has_value());
    CHECK(loud->protection().find("INSECURE") != std::string::npos);

    prizma::ReplayRequest rq;
    rq.stream_id = 42;
    auto c = prizma::ReplayClient::connect("192.0.2.1", 9, rq);  // TEST-NET-1, not loopback
    REQUIRE_FALSE(c.has_value());
    CHECK(c.error().message().find("plaintext") != std::string::npos);
    prizma::LateJoinOptions lj;
    lj.stream.stream_id = 42;
    lj.replay_address = "192.0.2.1";
    lj.replay_port = 9;
    CHECK_FALSE(prizma::LateJoin::create(lj).has_value());
}

TEST_CASE("replay: the allow-list and the per-address cap refuse, honest clients are served",
          "[unit][replay][security]") {
    const TempDir dir;
    make_journal(dir.path, 200);
    prizma::ReplayServerOptions o;
    o.streams = {{42, dir.path}};
    o.allow = {"10.0.0.0/8"};
    auto outside = prizma::ReplayServer::start(o);
    REQUIRE(outside.has_value());
    const Outcome r = fetch(outside->port(), {});
    CHECK(r.records == 0);
    CHECK(r.error.has_value());
    CHECK(eventually([&] { return outside->counters().refused == 1; }));
    CHECK(outside->counters().requests == 0);

    o.allow = {"127.0.0.1/32", "::1"};
    o.max_clients_per_address = 2;
    auto capped = prizma::ReplayServer::start(o);
    REQUIRE(capped.has_value());
    o.allow = {"10.0.0.0/33"};
    CHECK_FALSE(prizma::ReplayServer::start(o).has_value());
    // Two silent connections hold 127.0.0.1's places; a third from it is refused...
    const int a = tcp_connect(capped->port());
    const int b = tcp_connect(capped->port());
    REQUIRE(eventually([&] { return capped->counters().clients == 2; }));
    const Outcome third = fetch(capped->port(), {});
    CHECK(third.records == 0);
    CHECK(eventually([&] { return capped->counters().refused == 1; }));
    // ... and one leaving frees a place for an honest client.
    ::close(a);
    REQUIRE(eventually([&] {
        const Outcome again = fetch(capped->port(), {});
        return again.records == 200;
    }));
    ::close(b);
}

TEST_CASE("replay: a client that never reads its end frame loses its place",
          "[unit][replay][security][process]") {
    // Each asks for the whole journal (more than its socket and queue hold) and reads nothing:
    // the end frame gets queued, and stall_timeout must still apply.
    const TempDir dir;
    make_journal(dir.path, 60000, 200);
    prizma::ReplayServerOptions o;
    o.streams = {{42, dir.path}};
    o.max_clients = 2;
    o.client_buffer_bytes = std::size_t{16} << 20U;  // the whole range queues: end frame too
    o.stall_timeout = std::chrono::milliseconds(300);
    auto server = prizma::ReplayServer::start(o);
    REQUIRE(server.has_value());
    std::vector<int> hogs;
    for (int k = 0; k < 2; ++k) {
        const int fd = tcp_connect(server->port());
        const int small = 4096;
        (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        std::byte req[32]{};
        prizma::pgm::store_be32(req, prizma::replay::kMagic);
        req[4] = std::byte{prizma::replay::kProtocolVersion};
        prizma::pgm::store_be32(req + 8, 42);
        prizma::pgm::store_be64(req + 24, 60000);
        REQUIRE(::send(fd, req, sizeof req, 0) == 32);
        hogs.push_back(fd);
    }
    REQUIRE(eventually([&] { return server->counters().requests == 2; }));
    CHECK(eventually([&] { return server->counters().timeouts == 2; }));
    const Outcome honest = fetch(server->port(), {});
    CHECK(honest.records == 60000);
    for (const int fd : hogs) {
        ::close(fd);
    }
}

TEST_CASE("replay client: connect never blocks and has a deadline",
          "[unit][replay][security][process]") {
    // A listener whose accept queue is full (backlog 0, never accepted): new SYNs go
    // unanswered, so a blocking connect would hang.
    sockaddr_in sa{};
    const int lfd = listen_loopback(0, sa);
    const std::uint16_t port = ntohs(sa.sin_port);
    std::vector<int> fill;
    for (int k = 0; k < 4; ++k) {  // fill the queue (non-blocking: some stay in SYN_SENT)
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        (void)::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
        fill.push_back(fd);
    }
    prizma::LateJoinOptions o;
    o.stream.stream_id = 42;
    o.replay_port = port;
    o.recorder_timeout = std::chrono::milliseconds(1500);
    o.client.connect_timeout = std::chrono::milliseconds(300);
    auto j = prizma::LateJoin::create(o);
    REQUIRE(j.has_value());
    prizma::StreamEvent e;
    prizma::Result<bool> r = false;
    Clock::duration longest{};
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < until) {
        const auto t0 = Clock::now();
        r = j->next(e);
        longest = std::max(longest, Clock::now() - t0);
        if (!r) {
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (const int fd : fill) {
        ::close(fd);
    }
    ::close(lfd);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error() == std::errc::timed_out);
    CHECK(j->last_refusal().find("connect_timeout") != std::string::npos);
    // No call waited on the network: far below connect_timeout.
    CHECK(longest < std::chrono::milliseconds(100));
}

TEST_CASE("replay: IPv6 service and client", "[unit][replay][security][process]") {
    const TempDir dir;
    make_journal(dir.path, 100);
    prizma::ReplayServerOptions o;
    o.streams = {{42, dir.path}};
    o.address = "::1";
    auto server = prizma::ReplayServer::start(o);
    if (!server) {
        PRIZMA_SKIP("no IPv6 loopback here: " + server.error().message());
    }
    CHECK(server->protection() == "plaintext (loopback)");
    const Outcome r = fetch(server->port(), {}, "::1");
    CHECK(r.records == 100);
    CHECK(r.done);
}

namespace {

/// A replay server that lies: it takes the request and answers with `frame(from)`, then holds
/// the connection open. Counts its connections.
struct LyingServer {
    int lfd = -1;
    std::uint16_t port = 0;
    std::atomic<bool> stop{false};
    std::atomic<int> served{0};
    std::thread thread;
    explicit LyingServer(std::function<std::vector<std::byte>(std::uint64_t)> frame) {
        sockaddr_in sa{};
        lfd = listen_loopback(16, sa);
        port = ntohs(sa.sin_port);
        thread = std::thread([this, frame = std::move(frame)] {
            std::vector<int> open;
            while (!stop.load()) {
                pollfd p{lfd, POLLIN, 0};
                if (::poll(&p, 1, 20) != 1) {
                    continue;
                }
                const int c = ::accept(lfd, nullptr, nullptr);
                std::byte req[32];
                if (c < 0 || ::recv(c, req, sizeof req, MSG_WAITALL) != 32) {
                    continue;
                }
                const auto bytes = frame(prizma::pgm::load_be64(req + 16));
                (void)::send(c, bytes.data(), bytes.size(), MSG_NOSIGNAL);
                open.push_back(c);
                ++served;
            }
            for (const int c : open) {
                ::close(c);
            }
        });
    }
    ~LyingServer() {
        stop = true;
        thread.join();
        ::close(lfd);
    }
    LyingServer(const LyingServer&) = delete;
    LyingServer& operator=(const LyingServer&) = delete;
};

std::vector<std::byte> frame_of(std::uint8_t kind, std::uint64_t seq, std::uint64_t count) {
    std::vector<std::byte> f(prizma::journal::kFrameHeader);
    prizma::journal::write_header(f.data(), 0, kind, seq, count, {});
    return f;
}

/// A well-formed record frame: record `seq` of stream 42, epoch 1, as the journal holds it
/// (its header, checksum and payload all right), only not the one that was due.
std::vector<std::byte> record_frame(std::uint64_t seq) {
    const auto payload = body(seq);
    std::vector<std::byte> rec(prizma::RecordHeader::kBytes + payload.size());
    prizma::RecordHeader::write(rec, 42, 1, seq, payload);
    std::copy(payload.begin(), payload.end(), rec.begin() + prizma::RecordHeader::kBytes);
    std::vector<std::byte> f(prizma::journal::kFrameHeader);
    const std::size_t head = std::min<std::size_t>(rec.size(), 28);
    prizma::journal::write_header(f.data(), static_cast<std::uint32_t>(rec.size()),
                                  prizma::journal::kRecord, seq, 1,
                                  std::span<const std::byte>(rec.data(), head));
    f.insert(f.end(), rec.begin(), rec.end());
    return f;
}

/// Live from `first` on mem://, a journal of [0, first) behind an honest server, a joiner from
/// 0 whose first server lies.
struct TrustRig {
    TempDir dir;
    prizma::Context ctx = prizma::Context::create().value();
    prizma::Publisher pub;
    prizma::StreamPublisher out;
    prizma::Subscriber sub;
    std::vector<std::uint64_t> delivered;
    std::uint64_t bad = 0;
    TrustRig(const std::string& name, std::uint64_t first)
        : pub(ctx.add_publisher("mem://" + name + ":7500").value()),
          out(prizma::StreamPublisher::create(pub, 42, 1, first).value()),
          sub(ctx.add_subscriber("mem://" + name + ":7500").value()) {
        make_journal(dir.path, first);
    }
    prizma::Result<bool> run(prizma::LateJoin& j, std::uint64_t n, std::chrono::seconds budget) {
        const auto until = Clock::now() + budget;
        prizma::StreamEvent e;
        while (Clock::now() < until) {
            if (out.next_sequence() < n) {
                const auto b = body(out.next_sequence());
                (void)out.offer(b);
            }
            (void)ctx.poll();
            for (int k = 0; k < 256; ++k) {
                auto r = j.next(e);
                if (!r) {
                    return r;
                }
                if (!*r) {
                    break;
                }
                if (e.kind == prizma::StreamEventKind::record) {
                    delivered.push_back(e.sequence);
                    bad += payload_ok(e.sequence, e.payload) ? 0U : 1U;
                }
            }
            if (j.next_sequence() >= n) {
                return true;
            }
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        return false;
    }
};

}  // namespace

TEST_CASE("late join: a lying replay server never moves the position, the next server is used",
          "[unit][replay][security][late_join]") {
    constexpr std::uint64_t kFirst = 3000;
    constexpr std::uint64_t kN = 4000;
    const auto lie = GENERATE(as<std::string>{}, "loss to 2^64-1", "loss ahead", "foreign epoch",
                              "record ahead");
    CAPTURE(lie);
    LyingServer liar([&](std::uint64_t from) {
        if (lie == "record ahead") {
            return record_frame(from + 10);  // as if [from, from + 10) had been seen
        }
        if (lie == "loss to 2^64-1") {
            return frame_of(prizma::journal::kLoss, from, UINT64_MAX - from);
        }
        if (lie == "loss ahead") {
            return frame_of(prizma::journal::kLoss, from + 10, 5);  // skips [from, from + 10)
        }
        return frame_of(prizma::journal::kReset, from, 99);  // live is at epoch 1
    });
    TrustRig rig("lj-trust", kFirst);
    auto honest = serve(rig.dir.path, {});
    prizma::LateJoinOptions o;
    o.stream.stream_id = 42;
    o.replay_port = liar.port;
    o.alternates = {{"127.0.0.1", honest.port()}};
    o.retry_interval = std::chrono::milliseconds(10);
    o.recorder_timeout = std::chrono::seconds(10);
    auto j = prizma::LateJoin::create(o);
    REQUIRE(j.has_value());
    REQUIRE(j->add(rig.sub).has_value());
    auto r = rig.run(*j, kN, std::chrono::seconds(20));
    REQUIRE(r.has_value());
    CHECK(*r);
    CHECK(liar.served.load() >= 1);
    CHECK(j->counters().refused_frames >= 1);
    CHECK(!j->last_refusal().empty());
    CHECK(rig.bad == 0);
    REQUIRE(rig.delivered.size() == kN);  // every record once, in order, none skipped
    bool in_order = true;
    for (std::uint64_t i = 0; i < kN; ++i) {
        in_order = in_order && rig.delivered[i] == i;
    }
    CHECK(in_order);
}

TEST_CASE("late join: with only a lying server the join fails in time, naming why",
          "[unit][replay][security][late_join]") {
    LyingServer liar([](std::uint64_t from) {
        return frame_of(prizma::journal::kLoss, from, UINT64_MAX - from);
    });
    TrustRig rig("lj-liar", 100);
    prizma::LateJoinOptions o;
    o.stream.stream_id = 42;
    o.replay_port = liar.port;
    o.retry_interval = std::chrono::milliseconds(10);
    o.recorder_timeout = std::chrono::milliseconds(500);
    auto j = prizma::LateJoin::create(o);
    REQUIRE(j.has_value());
    REQUIRE(j->add(rig.sub).has_value());
    auto r = rig.run(*j, 200, std::chrono::seconds(10));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error() == std::errc::timed_out);
    CHECK(j->error_text().find("loss") != std::string::npos);
    CHECK(j->next_sequence() == 0);  // never moved
    CHECK(rig.delivered.empty());
    CHECK(j->counters().refused_frames >= 2);
}

TEST_CASE("late join: keyed, over TLS, at 5% multicast loss: every record once",
          "[unit][replay][security][late_join]") {
    // The live copy loses 5% of its packets (PGM repairs them); the journal behind a keyed
    // server holds [0, 4000); the joiner, holding the key, replays and merges into live.
    constexpr std::uint64_t kFirst = 4000;
    constexpr std::uint64_t kN = 8000;
    const TempDir dir;
    make_journal(dir.path, kFirst);
    auto ctx = prizma::Context::create().value();
    auto pub = ctx.add_publisher("mem://lj-tls:7500?tx_loss=0.05&seed=5").value();
    auto out = prizma::StreamPublisher::create(pub, 42, 1, kFirst).value();
    auto sub = ctx.add_subscriber("mem://lj-tls:7500").value();
    prizma::ReplaySecurity sec;
    sec.keys = keys(3, 0x5a);
    auto server = serve(dir.path, sec);
    prizma::LateJoinOptions o;
    o.stream.stream_id = 42;
    o.replay_port = server.port();
    o.client.security = sec;
    o.recorder_timeout = std::chrono::seconds(10);
    auto j = prizma::LateJoin::create(o).value();
    REQUIRE(j.add(sub).has_value());
    std::vector<std::uint64_t> got;
    std::uint64_t bad = 0;
    std::uint64_t other = 0;
    prizma::StreamEvent e;
    const auto until = Clock::now() + std::chrono::seconds(30);
    while (j.next_sequence() < kN && Clock::now() < until) {
        for (int k = 0; k < 16 && out.next_sequence() < kN; ++k) {
            const auto b = body(out.next_sequence());
            if (!out.offer(b)) {
                break;
            }
        }
        (void)ctx.poll();
        for (;;) {
            auto r = j.next(e);
            REQUIRE(r.has_value());
            if (!*r) {
                break;
            }
            if (e.kind == prizma::StreamEventKind::record) {
                got.push_back(e.sequence);
                bad += payload_ok(e.sequence, e.payload) ? 0U : 1U;
            } else {
                ++other;
            }
        }
    }
    CHECK(prizma::test::transport_counter(pub, "fault_dropped") > 0);
    CHECK(bad == 0);
    CHECK(other == 0);
    REQUIRE(got.size() == kN);
    bool in_order = true;
    for (std::uint64_t i = 0; i < kN; ++i) {
        in_order = in_order && got[i] == i;
    }
    CHECK(in_order);
    CHECK(j.counters().merged);
    CHECK(j.counters().replayed >= kFirst);
    CHECK(server.counters().handshake_failures == 0);
}

TEST_CASE("replay tls: a keyed client refuses a server that authenticates with a certificate",
          "[unit][replay][security][process]") {
    // TLS 1.3 lets a server ignore the offered PSK and present any certificate instead: a real
    // `openssl s_server` with a self-signed certificate and no PSK does exactly that.
    const CertificateServer imposter;
    if (!imposter.ok) {
        PRIZMA_SKIP("openssl s_server could not be started here");
    }
    prizma::ReplaySecurity sec;
    sec.keys = keys(7, 0x11);
    prizma::ReplayRequest rq;
    rq.stream_id = 42;
    prizma::ReplayClientOptions co;
    co.security = sec;
    auto c = prizma::ReplayClient::connect("127.0.0.1", imposter.port, rq, co);
    REQUIRE(c.has_value());
    const Outcome o = drain(*c, std::chrono::seconds(4));
    CHECK(o.records == 0);
    REQUIRE(o.error.has_value());
    CHECK(*o.error == std::make_error_code(std::errc::permission_denied));
    CHECK(o.text.find("certificate") != std::string::npos);
    // The request (stream, range) never reached it: s_server prints what it reads.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(imposter.peer->output().find("PRZR") == std::string::npos);
}

TEST_CASE("late join: a keyed joiner counts a certificate server as refused and uses the next one",
          "[unit][replay][security][late_join][process]") {
    constexpr std::uint64_t kFirst = 2000;
    constexpr std::uint64_t kN = 3000;
    const CertificateServer imposter;
    if (!imposter.ok) {
        PRIZMA_SKIP("openssl s_server could not be started here");
    }
    TrustRig rig("lj-certsrv", kFirst);
    prizma::ReplaySecurity sec;
    sec.keys = keys(7, 0x11);
    auto honest = serve(rig.dir.path, sec);
    prizma::LateJoinOptions o;
    o.stream.stream_id = 42;
    o.replay_port = imposter.port;
    o.alternates = {{"127.0.0.1", honest.port()}};
    o.client.security = sec;
    o.retry_interval = std::chrono::milliseconds(10);
    o.recorder_timeout = std::chrono::seconds(10);
    auto j = prizma::LateJoin::create(o);
    REQUIRE(j.has_value());
    REQUIRE(j->add(rig.sub).has_value());
    auto r = rig.run(*j, kN, std::chrono::seconds(15));
    REQUIRE(r.has_value());
    CHECK(*r);
    CHECK(j->counters().handshake_refusals >= 1);
    CHECK(rig.bad == 0);
    REQUIRE(rig.delivered.size() == kN);
    bool in_order = true;
    for (std::uint64_t i = 0; i < kN; ++i) {
        in_order = in_order && rig.delivered[i] == i;
    }
    CHECK(in_order);
    CHECK(honest.counters().requests >= 1);
}

TEST_CASE("replay tls: with certificates a client that presents none is refused (s_client)",
          "[unit][replay][security][process]") {
    const Pki pki;
    if (!pki.ok) {
        PRIZMA_SKIP("the openssl tool could not make the test certificates");
    }
    const TempDir dir;
    make_journal(dir.path, 50);
    auto server = serve(dir.path, pki.as("server", "ca1"));
    prizma::ReplayRequest rq;
    rq.stream_id = 42;
    std::byte request[prizma::replay::kRequestBytes];
    prizma::replay::encode_request(request, rq);
    // A real `openssl s_client`, trusting the server's CA, with (control) or without -cert; it
    // sends the request it reads on stdin once its side of the handshake is done.
    const auto ask = [&](bool with_certificate) {
        std::vector<std::string> args{
            "s_client", "-tls1_3",         "-connect", "127.0.0.1:" + std::to_string(server.port()),
            "-CAfile",  pki.at("ca1.pem"), "-ign_eof"};
        if (with_certificate) {
            args.insert(args.end(), {"-cert", pki.at("client.pem"), "-key", pki.at("client.key")});
        }
        OpensslPeer client(args, dir.path + (with_certificate ? "/with.log" : "/without.log"));
        REQUIRE(client.pid > 0);
        REQUIRE(::write(client.stdin_fd, request, sizeof request) == sizeof request);
        return eventually([&] { return !client.running(); }, std::chrono::seconds(3));
    };
    const auto before = server.counters();
    (void)ask(false);
    CHECK(eventually(
        [&] { return server.counters().handshake_failures == before.handshake_failures + 1; }));
    CHECK(server.counters().requests == before.requests);
    CHECK(server.counters().records == before.records);
    // The control: the same client with its certificate is served the whole range.
    (void)ask(true);
    CHECK(eventually([&] { return server.counters().records == before.records + 50; }));
    CHECK(server.counters().requests == before.requests + 1);
    CHECK(server.counters().handshake_failures == before.handshake_failures + 1);
}

namespace {

/// Idle TCP connections to 127.0.0.1:port from 127.0.0.1 .. 127.0.0.`addresses`, `per_address`
/// each, never sending a byte; each one the server closes is opened again at once (on its own
/// thread), so the flood stands for as long as the object lives.
struct IdleFlood {
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> closed_by_server{0};
    std::atomic<std::uint64_t> connected{0};
    std::thread thread;
    IdleFlood(std::uint16_t port, int addresses, int per_address) {
        thread = std::thread([this, port, addresses, per_address] {
            const auto n = static_cast<std::size_t>(addresses * per_address);
            std::vector<pollfd> fds(n, pollfd{-1, POLLIN, 0});
            while (!stop.load()) {
                for (std::size_t k = 0; k < n; ++k) {
                    if (fds[k].fd >= 0) {
                        continue;
                    }
                    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                    sockaddr_in sa{};
                    sa.sin_family = AF_INET;
                    sa.sin_addr.s_addr = htonl(
                        INADDR_LOOPBACK
                        + static_cast<std::uint32_t>(k % static_cast<std::size_t>(addresses)));
                    (void)::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
                    sa.sin_port = htons(port);
                    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                    (void)::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
                    fds[k].fd = fd;
                    ++connected;
                }
                if (::poll(fds.data(), fds.size(), 1) <= 0) {
                    continue;
                }
                for (auto& p : fds) {
                    if (p.fd >= 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
                        char b;
                        if (::recv(p.fd, &b, 1, MSG_DONTWAIT) <= 0) {  // EOF or reset
                            ::close(p.fd);
                            p.fd = -1;
                            ++closed_by_server;
                        }
                    }
                }
            }
            for (const auto& p : fds) {
                if (p.fd >= 0) {
                    ::close(p.fd);
                }
            }
        });
    }
    ~IdleFlood() {
        stop = true;
        thread.join();
    }
    IdleFlood(const IdleFlood&) = delete;
    IdleFlood& operator=(const IdleFlood&) = delete;
};

}  // namespace

TEST_CASE("replay tls: idle sockets in their handshake do not refuse an honest keyed client",
          "[unit][replay][security][process]") {
    const TempDir dir;
    make_journal(dir.path, 2000);
    prizma::ReplayServerOptions so;
    so.streams = {{42, dir.path}};
    so.security.keys = keys(7, 0x11);
    so.handshake_timeout = std::chrono::milliseconds(300);
    auto server = prizma::ReplayServer::start(so);
    REQUIRE(server.has_value());
    // 12 addresses x 8 (the per-address cap) idle sockets: more than max_clients (64) and
    // max_handshakes (64), 127.0.0.1 (the honest client's own address) among them, each
    // reopened as soon as the server closes it.
    IdleFlood flood(server->port(), 12, 8);
    REQUIRE(eventually([&] { return flood.connected.load() >= 96; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    // Served during the flood, three times, each the whole range.
    for (int k = 0; k < 3; ++k) {
        const Outcome honest = fetch(server->port(), so.security);
        CHECK(honest.done);
        CHECK(honest.records == 2000);
        CHECK(honest.bad == 0);
    }
    // The flood is held: no idle socket keeps a place past handshake_timeout, none gets a
    // request served, and the honest clients' handshakes all completed.
    const std::uint64_t closed = flood.closed_by_server.load();
    CHECK(eventually([&] { return flood.closed_by_server.load() >= closed + 96; },
                     std::chrono::seconds(3)));
    const auto c = server->counters();
    CHECK(c.requests == 3);
    CHECK(c.handshakes_evicted + c.timeouts + c.refused > 96);
    CHECK(c.handshake_failures >= c.timeouts);
}
