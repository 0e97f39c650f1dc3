// SPDX-License-Identifier: Apache-2.0
// The replay service over TCP on 127.0.0.1 and the late joiner (docs/STREAMS.md, "Recording and
// late join"): ranges, concurrent clients, bad requests, a stalled client, and late join over
// mem:// live + a real replay server: contiguous delivery, merge with no gap and no duplicate,
// live-buffer overflow, the replay service going away. Counts and orders only.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <prizma/prizma.hpp>

#include "lib/replay/late_join_rules.hpp"
#include "lib/replay/wire.hpp"
#include "lib/streams/recorder_format.hpp"
#include "tests/support/catch.hpp"
#include "tests/support/counters.hpp"
#include "tests/support/full_size.hpp"
#include "tests/support/journal.hpp"

namespace {

namespace fs = std::filesystem;
using prizma::test::append;

/// A fresh directory for one test, removed with its contents.
struct TempDir : prizma::test::TempDir {
    TempDir() : prizma::test::TempDir("prizma-replay") {}
};

std::vector<std::byte> body(std::uint64_t i, std::size_t size = 100) {
    return prizma::test::record_body(i, size);
}

bool payload_ok(std::uint64_t seq, std::span<const std::byte> p) {
    return prizma::test::record_body_ok(seq, p);
}

using prizma::test::make_journal;

prizma::ReplayServer serve(const std::string& dir, std::uint16_t port = 0, std::uint64_t rate = 0) {
    prizma::ReplayServerOptions o;
    o.port = port;
    o.streams = {{42, dir}};
    o.max_records_per_second = rate;
    auto s = prizma::ReplayServer::start(o);
    REQUIRE(s.has_value());
    return std::move(*s);
}

prizma::ReplayClient connect(std::uint16_t port,
                             std::uint64_t from,
                             std::uint64_t to,
                             std::uint32_t stream = 42) {
    prizma::ReplayRequest rq;
    rq.stream_id = stream;
    rq.from = from;
    rq.to = to;
    auto c = prizma::ReplayClient::connect("127.0.0.1", port, rq);
    REQUIRE(c.has_value());
    return std::move(*c);
}

/// Reads one step of a client; appends record sequences; false once done.
bool step(prizma::ReplayClient& c, std::vector<std::uint64_t>& seqs, std::uint64_t& bad) {
    prizma::JournalEntry e;
    for (int k = 0; k < 256; ++k) {
        auto r = c.next(e);
        REQUIRE(r.has_value());
        if (!*r) {
            if (!c.done()) {
                c.wait(std::chrono::milliseconds(10));
            }
            return !c.done();
        }
        seqs.push_back(e.sequence);
        bad += payload_ok(e.sequence, e.payload()) ? 0U : 1U;
    }
    return true;
}

bool contiguous(const std::vector<std::uint64_t>& s, std::uint64_t first, std::uint64_t n) {
    if (s.size() != n) {
        return false;
    }
    for (std::uint64_t i = 0; i < n; ++i) {
        if (s[i] != first + i) {
            return false;
        }
    }
    return true;
}

/// Sends `bytes` on a plain TCP connection to the replay server and reads until it closes.
std::string raw_exchange(std::uint16_t port, const std::string& bytes) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0);
    REQUIRE(::send(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
    std::string reply;
    char buf[512];
    for (ssize_t n = 0; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
        reply.append(buf, static_cast<std::size_t>(n));
    }
    (void)::close(fd);
    return reply;
}

/// The error a request gets.
std::error_code refused(prizma::ReplayClient& c, std::string& text) {
    prizma::JournalEntry e;
    for (int k = 0; k < 1000; ++k) {
        auto r = c.next(e);
        if (!r) {
            text = c.error_text();
            return r.error();
        }
        c.wait(std::chrono::milliseconds(10));
    }
    return {};
}

}  // namespace

TEST_CASE("replay: a range, and two clients at once", "[unit][replay]") {
    const TempDir dir;
    make_journal(dir.path, 5000);
    auto server = serve(dir.path);
    auto a = connect(server.port(), 100, 600);
    auto b = connect(server.port(), 0, UINT64_MAX);  // up to the end
    std::vector<std::uint64_t> sa;
    std::vector<std::uint64_t> sb;
    std::uint64_t bad = 0;
    bool more_a = true;
    bool more_b = true;
    while (more_a || more_b) {
        more_a = more_a && step(a, sa, bad);
        more_b = more_b && step(b, sb, bad);
    }
    CHECK(bad == 0);
    CHECK(contiguous(sa, 100, 500));
    CHECK(contiguous(sb, 0, 5000));
    CHECK(server.counters().requests == 2);
}

TEST_CASE("replay: bad requests get clear errors and do not disturb other clients",
          "[unit][replay][process]") {
    const TempDir dir;
    make_journal(dir.path, 2000);
    auto server = serve(dir.path);
    auto good = connect(server.port(), 0, 2000);
    std::vector<std::uint64_t> seqs;
    std::uint64_t bad = 0;
    (void)step(good, seqs, bad);  // started before the bad ones

    // Garbage on the port: an error frame (kind 0x81) naming it, then the connection closes.
    const std::string reply =
        raw_exchange(server.port(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n and more garbage");
    REQUIRE(reply.size() > 32);
    CHECK(static_cast<unsigned char>(reply[4]) == 0x81);
    CHECK(reply.find("malformed request") != std::string::npos);

    std::string text;
    auto beyond = connect(server.port(), 1990, 2010);
    CHECK(refused(beyond, text) == prizma::Errc::invalid_argument);
    CHECK(text.find("beyond the journal's end") != std::string::npos);
    auto past = connect(server.port(), 2005, UINT64_MAX);
    CHECK(refused(past, text) == prizma::Errc::invalid_argument);
    CHECK(text.find("past the journal's end") != std::string::npos);
    auto unknown = connect(server.port(), 0, 10, 7);
    CHECK(refused(unknown, text) == prizma::Errc::unsupported);
    CHECK(text.find("unknown stream 7") != std::string::npos);
    CHECK(server.counters().errors == 4);

    while (step(good, seqs, bad)) {
    }
    CHECK(bad == 0);
    CHECK(contiguous(seqs, 0, 2000));
}

TEST_CASE("replay: a peer of protocol version 1 is refused by name, both ways",
          "[unit][replay][process]") {
    // A version-1 client's request, well formed but for the version: the server answers an
    // error frame naming both versions.
    const TempDir dir;
    make_journal(dir.path, 10);
    auto server = serve(dir.path);
    std::string v1(32, '\0');
    v1.replace(0, 4, "PRZR");
    v1[4] = '\x01';
    v1[11] = '\x01';                            // stream 1
    v1.replace(24, 8, std::string(8, '\xff'));  // to the end
    const std::string reply = raw_exchange(server.port(), v1);
    REQUIRE(reply.size() > 32);
    CHECK(static_cast<unsigned char>(reply[4]) == 0x81);
    CHECK(static_cast<unsigned char>(reply[5]) == prizma::journal::kFormat);
    CHECK(reply.find("protocol version 1 (journal frames before XXH3)") != std::string::npos);
    CHECK(reply.find("this server speaks version 2") != std::string::npos);
    CHECK(server.counters().errors == 1);
    CHECK(server.counters().requests == 0);

    // A version-1 server's frames (format 1: byte 5 zero) to this client: named, not garbage.
    prizma::replay::FrameReader reader;
    std::byte frame[prizma::journal::kFrameHeader]{};
    frame[4] = std::byte{0x81};  // its error frame
    const auto space = reader.space();
    REQUIRE(space.size() >= sizeof frame);
    std::memcpy(space.data(), frame, sizeof frame);
    reader.commit(sizeof frame);
    prizma::JournalEntry e;
    std::uint64_t code = 0;
    std::string error;
    CHECK(reader.next(e, code, error) == prizma::replay::FrameReader::Next::malformed);
    INFO(error);
    CHECK(error.find("frames of format 1 (replay protocol version 1") != std::string::npos);
    CHECK(error.find("upgrade the server") != std::string::npos);
}

TEST_CASE("replay: a client that stops reading does not stall another", "[unit][replay][process]") {
    const TempDir dir;
    make_journal(dir.path, 24000, 1000);  // ~25 MB: far more than the socket buffers hold
    auto server = serve(dir.path);
    auto stalled = connect(server.port(), 0, UINT64_MAX);  // never read
    auto other = connect(server.port(), 0, UINT64_MAX);
    std::vector<std::uint64_t> seqs;
    std::uint64_t bad = 0;
    while (step(other, seqs, bad)) {
    }
    CHECK(bad == 0);
    CHECK(contiguous(seqs, 0, 24000));
    CHECK(server.counters().records < 2 * 24000);  // the stalled one got only a buffer's worth
}

TEST_CASE("replay: a silent connection and a client that stops reading lose their places",
          "[unit][replay][process]") {
    const TempDir dir;
    make_journal(dir.path, 24000, 1000);  // ~25 MB: more than a stalled socket takes
    prizma::ReplayServerOptions o;
    o.streams = {{42, dir.path}};
    o.max_clients = 2;
    o.request_timeout = std::chrono::milliseconds(200);
    o.stall_timeout = std::chrono::milliseconds(300);
    auto server = prizma::ReplayServer::start(o);
    REQUIRE(server.has_value());
    // Half a request, then silence: an error frame naming the timeout, then the close.
    const std::string reply = raw_exchange(server->port(), "PRZ");
    REQUIRE(reply.size() > 32);
    CHECK(static_cast<unsigned char>(reply[4]) == 0x81);
    CHECK(reply.find("no whole request within 200 ms") != std::string::npos);
    // A client that never reads holds one of the two places until the stall timeout; then a
    // new client gets the place and its whole range.
    auto stalled = connect(server->port(), 0, UINT64_MAX);
    auto other = connect(server->port(), 0, 100);
    std::vector<std::uint64_t> seqs;
    std::uint64_t bad = 0;
    while (step(other, seqs, bad)) {
    }
    CHECK(contiguous(seqs, 0, 100));
    for (int k = 0; k < 300 && server->counters().timeouts < 2; ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(server->counters().timeouts == 2);  // the silent one and the stalled one
    auto late = connect(server->port(), 500, 1500);
    seqs.clear();
    while (step(late, seqs, bad)) {
    }
    CHECK(bad == 0);
    CHECK(contiguous(seqs, 500, 1000));
    prizma::JournalEntry e;
    bool closed = false;  // the stalled client finds its connection closed mid-range
    for (int k = 0; k < 100000 && !closed; ++k) {
        auto r = stalled.next(e);
        closed = !r || (!*r && stalled.done());
        if (r && !*r && !closed) {
            stalled.wait(std::chrono::milliseconds(10));
        }
    }
    CHECK(closed);
}

// request_timeout is for the request; once it is whole, only stall_timeout (while the client
// does not read what is queued for it) can cut the connection. A follow client waiting at the
// journal's end reads nothing because nothing comes: it stays, however long.
TEST_CASE("replay: a follow client idle past request_timeout and stall_timeout stays connected",
          "[unit][replay][process]") {
    const TempDir dir;
    make_journal(dir.path, 100);
    prizma::ReplayServerOptions o;
    o.streams = {{42, dir.path}};
    o.request_timeout = std::chrono::milliseconds(200);
    o.stall_timeout = std::chrono::milliseconds(300);
    auto server = prizma::ReplayServer::start(o);
    REQUIRE(server.has_value());
    prizma::ReplayRequest rq;
    rq.stream_id = 42;
    rq.from = 0;
    rq.follow = true;
    auto c = prizma::ReplayClient::connect("127.0.0.1", server->port(), rq);
    REQUIRE(c.has_value());
    std::vector<std::uint64_t> seqs;
    prizma::JournalEntry e;
    for (int k = 0; k < 1000 && seqs.size() < 100; ++k) {
        auto r = c->next(e);
        REQUIRE(r.has_value());
        if (*r) {
            seqs.push_back(e.sequence);
        } else {
            c->wait(std::chrono::milliseconds(10));
        }
    }
    CHECK(contiguous(seqs, 0, 100));
    // Idle at the end for five request_timeouts (over three stall_timeouts).
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
    while (std::chrono::steady_clock::now() < until) {
        auto r = c->next(e);
        REQUIRE(r.has_value());  // no error frame ("no whole request"), no close
        CHECK_FALSE(*r);
        c->wait(std::chrono::milliseconds(10));
    }
    CHECK_FALSE(c->done());
    CHECK(server->counters().timeouts == 0);
    // The rule is still there for a request that is not whole.
    const std::string reply = raw_exchange(server->port(), "PRZ");
    CHECK(reply.find("no whole request within 200 ms") != std::string::npos);
    CHECK(server->counters().timeouts == 1);
    CHECK_FALSE(c->done());
}

namespace {

/// mem:// live stream recorded to a journal served over TCP, with a late joiner.
struct LateJoinRig {
    TempDir dir;
    std::string uri;
    prizma::Context ctx = prizma::Context::create().value();
    prizma::Publisher pub;
    prizma::StreamPublisher out;
    prizma::Subscriber rec_sub;
    prizma::StreamSubscriber rec_stream;
    prizma::Recorder recorder;
    std::optional<prizma::ReplayServer> server;
    std::optional<prizma::Subscriber> join_sub;
    std::optional<prizma::LateJoin> join;
    std::vector<std::uint64_t> delivered;
    std::uint64_t bad = 0;
    std::uint64_t other_events = 0;

    static prizma::StreamOptions stream_options() {
        prizma::StreamOptions o;
        o.stream_id = 42;
        o.start_sequence = 0;
        return o;
    }
    explicit LateJoinRig(const std::string& name)
        : uri("mem://" + name + ":7500"),
          pub(ctx.add_publisher("mem://" + name + ":7500").value()),
          out(prizma::StreamPublisher::create(pub, 42, 1).value()),
          rec_sub(ctx.add_subscriber("mem://" + name + ":7500").value()),
          rec_stream(prizma::StreamSubscriber::create(stream_options()).value()),
          recorder(prizma::Recorder::open({dir.path, 42, std::size_t{1} << 20U}).value()) {
        REQUIRE(rec_stream.add(rec_sub).has_value());
    }
    void start_join(std::uint64_t from, std::size_t live_buffer, std::uint16_t port) {
        join_sub.emplace(ctx.add_subscriber(uri).value());
        prizma::LateJoinOptions o;
        o.stream.stream_id = 42;
        o.replay_port = port;
        o.from = from;
        o.live_buffer_records = live_buffer;
        o.recorder_timeout = std::chrono::seconds(10);
        auto j = prizma::LateJoin::create(o);
        REQUIRE(j.has_value());
        REQUIRE(j->add(*join_sub).has_value());
        join.emplace(std::move(*j));
    }
    /// One round: publish up to `burst` records (until n), move the network, record, read the
    /// late joiner. Returns false once the joiner has delivered [.., n).
    bool round(std::uint64_t n, int burst) {
        for (int k = 0; k < burst && out.next_sequence() < n; ++k) {
            const auto b = body(out.next_sequence());
            const auto r = out.offer(b);
            REQUIRE((r.has_value() || prizma::is_transient(r.error())));
        }
        (void)ctx.poll();
        rec_stream.poll(1024, [&](const prizma::StreamEvent& e) {
            append(recorder, e, rec_stream.last_record());
        });
        if (!join) {
            return true;
        }
        prizma::StreamEvent e;
        for (int k = 0; k < 512; ++k) {
            auto r = join->next(e);
            REQUIRE(r.has_value());
            if (!*r) {
                break;
            }
            if (e.kind == prizma::StreamEventKind::record) {
                delivered.push_back(e.sequence);
                bad += payload_ok(e.sequence, e.payload) ? 0U : 1U;
            } else {
                ++other_events;
            }
        }
        return join->next_sequence() < n;
    }
};

}  // namespace

TEST_CASE("late join: mid-stream join replays then merges into live, no gap, no duplicate",
          "[unit][replay][late_join]") {
    LateJoinRig rig("lj");
    auto server = serve(rig.dir.path);
    // long: the joiner starts after 10 M records, and live goes on while it catches up.
    const std::uint64_t join_at = prizma::test::sized(15000, 10'000'000);
    const std::uint64_t kN = join_at + prizma::test::sized(25000, 1'000'000);
    while (rig.out.next_sequence() < join_at) {
        (void)rig.round(kN, 32);
    }
    rig.start_join(0, 65536, server.port());
    while (rig.round(kN, 32)) {
    }
    const auto& c = rig.join->counters();
    CHECK(rig.bad == 0);
    CHECK(rig.other_events == 0);
    CHECK(contiguous(rig.delivered, 0, kN));
    CHECK(c.merged);
    CHECK(c.replayed >= join_at);
    CHECK(c.live > 0);
    CHECK(c.replayed + c.live == kN);
    CHECK(c.merge_sequence == c.replayed);  // first live record = last replayed + 1
    CHECK(rig.recorder.next_sequence() == kN);
}

TEST_CASE("late join: a stall of the live stream at the merge point is delivered",
          "[unit][replay][late_join][process]") {
    // Live loses its last record and nothing comes after it: the live reader reports a stall
    // at that position. The joiner merges at or before it and must pass the stall on (the
    // consumer asks the archiver for the rest); dropping it as "already replayed" left the
    // consumer waiting for ever (found by bench/execlog.sh: execlog-fix at record 1,232,507
    // of 2,111,645).
    // The journal holds records [0, 20) only: as a recorder's would, it never runs ahead of
    // live (with more in it, a replay that connects before live has delivered anything runs
    // past the live tail, and the stall is rightly stale).
    const TempDir dir;
    make_journal(dir.path, 20);
    auto server = serve(dir.path);
    prizma::ChannelOptions passive;
    passive.passive = true;  // no repair: PGM declares the lost tail lost
    auto ctx = prizma::Context::create().value();
    auto sub = ctx.add_subscriber("mem://lj-stall:7500", passive);
    auto pub = ctx.add_publisher("mem://lj-stall:7500?tx_loss=0.05&seed=11");
    REQUIRE((sub && pub));
    auto out = prizma::StreamPublisher::create(*pub, 42, 1).value();
    prizma::LateJoinOptions o;
    o.stream.stream_id = 42;
    o.stream.gap_timeout = std::chrono::milliseconds(100);
    o.replay_port = server.port();
    o.from = 0;
    o.live_buffer_records = 4096;
    auto join = prizma::LateJoin::create(o).value();
    REQUIRE(join.add(*sub).has_value());
    const auto dropped = [&] {
        return prizma::test::transport_counter(*pub, "fault_dropped");
    };
    std::vector<std::uint64_t> stalls;
    std::uint64_t covered = 0;  // every sequence below it came as a record or in a loss
    std::uint64_t out_of_order = 0;
    std::uint64_t bad = 0;
    const auto pump = [&](std::int64_t ns) {
        const std::int64_t until = prizma::Context::now_ns() + ns;
        do {
            (void)ctx.poll();
            prizma::StreamEvent e;
            for (int k = 0; k < 512; ++k) {
                auto r = join.next(e);
                REQUIRE(r.has_value());
                if (!*r) {
                    break;
                }
                if (e.kind == prizma::StreamEventKind::stall) {
                    stalls.push_back(e.sequence);
                } else if (e.kind == prizma::StreamEventKind::record) {
                    out_of_order += e.sequence == covered ? 0U : 1U;
                    covered = e.sequence + 1;
                    bad += payload_ok(e.sequence, e.payload) ? 0U : 1U;
                } else if (e.kind == prizma::StreamEventKind::loss) {
                    out_of_order += e.sequence == covered ? 0U : 1U;
                    covered = e.sequence + e.count;
                }
            }
        } while (prizma::Context::now_ns() < until);
    };
    std::uint64_t last = 0;  // the record dropped on its way out (after at least 20)
    for (;;) {
        const std::uint64_t before = dropped();
        last = out.next_sequence();
        REQUIRE(out.offer(body(last)).has_value());
        pump(0);
        if (last >= 20 && dropped() > before) {
            break;
        }
        REQUIRE(last < 100'000);
    }
    for (int i = 0; i < 300 && stalls.empty(); ++i) {
        pump(10'000'000);
    }
    CHECK(join.counters().merged);
    REQUIRE(stalls.size() == 1);
    CHECK(stalls[0] == last);
    CHECK(join.next_sequence() == last);
    CHECK(covered == last);  // everything before it, from the replay or live
    CHECK(out_of_order == 0);
    CHECK(bad == 0);
}

TEST_CASE("late join: a slow replay that overflows the live buffer still merges without a gap",
          "[unit][replay][late_join][process]") {
    LateJoinRig rig("lj");
    auto server = serve(rig.dir.path, 0, 50000);  // a throttled replay: 50 k records/s
    constexpr std::uint64_t kN = 30000;
    while (rig.out.next_sequence() < 5000) {
        (void)rig.round(kN, 32);
    }
    rig.start_join(1000, 512, server.port());  // resumes after its own record 999
    while (rig.round(kN, 32)) {
    }
    const auto& c = rig.join->counters();
    CHECK(rig.bad == 0);
    CHECK(contiguous(rig.delivered, 1000, kN - 1000));
    CHECK(c.buffer_overflows > 0);
    CHECK(c.merged);
    CHECK(c.merge_sequence == 1000 + c.replayed);
}

TEST_CASE("late join: the replay service goes away, comes back, the replay resumes",
          "[unit][replay][late_join]") {
    LateJoinRig rig("lj");
    std::optional<prizma::ReplayServer> server;
    server.emplace(serve(rig.dir.path, 0, 20000));
    const std::uint16_t port = server->port();
    constexpr std::uint64_t kN = 12000;
    while (rig.out.next_sequence() < kN) {
        (void)rig.round(kN, 64);  // the whole stream first: the joiner must replay it
    }
    rig.start_join(0, 1024, port);
    while (rig.delivered.size() < 2000) {
        REQUIRE(rig.round(kN, 0));
    }
    server.reset();  // gone mid-replay
    for (int k = 0; k < 20; ++k) {
        (void)rig.round(kN, 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    server.emplace(serve(rig.dir.path, port));
    while (rig.round(kN, 0)) {
    }
    CHECK(rig.bad == 0);
    CHECK(contiguous(rig.delivered, 0, kN));
    CHECK(rig.join->counters().reconnects >= 1);
}

TEST_CASE("late join: a replay service that stays away fails with a clear error",
          "[unit][replay][late_join][process]") {
    const TempDir dir;
    make_journal(dir.path, 10);
    std::uint16_t port = 0;
    {
        auto server = serve(dir.path);
        port = server.port();
    }
    prizma::LateJoinOptions o;
    o.stream.stream_id = 42;
    o.replay_port = port;
    o.recorder_timeout = std::chrono::milliseconds(200);
    o.retry_interval = std::chrono::milliseconds(20);
    auto j = prizma::LateJoin::create(o);
    REQUIRE(j.has_value());
    prizma::StreamEvent e;
    prizma::Result<bool> r = false;
    for (;;) {
        r = j->next(e);
        if (!r) {
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    CHECK(r.error() == std::errc::timed_out);
    CHECK(j->error_text().find("unreachable") != std::string::npos);
}

// A replay service that accepts every connection and drops it without a byte (crash-looping,
// or hostile) must not keep a late joiner retrying for ever: only progress (a replayed event)
// re-arms recorder_timeout.
TEST_CASE("late join: a service that drops every connection without progress fails in time",
          "[unit][replay][late_join][process]") {
    const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(lfd >= 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(lfd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0);
    REQUIRE(::listen(lfd, 64) == 0);
    socklen_t len = sizeof sa;
    REQUIRE(::getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
    std::atomic<bool> stop{false};
    std::atomic<int> accepted{0};
    std::thread dropper([&] {
        while (!stop.load()) {
            pollfd p{lfd, POLLIN, 0};
            if (::poll(&p, 1, 20) == 1) {
                const int c = ::accept(lfd, nullptr, nullptr);
                if (c >= 0) {
                    ++accepted;
                    (void)::close(c);
                }
            }
        }
    });
    prizma::LateJoinOptions o;
    o.stream.stream_id = 42;
    o.replay_port = ntohs(sa.sin_port);
    o.recorder_timeout = std::chrono::milliseconds(200);
    o.retry_interval = std::chrono::milliseconds(10);
    auto j = prizma::LateJoin::create(o);
    REQUIRE(j.has_value());
    prizma::StreamEvent e;
    prizma::Result<bool> r = false;
    // Bounded: 10 s is 50 timeouts; without the bound it retries as long as the service lives.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
        r = j->next(e);
        if (!r) {
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    stop = true;
    dropper.join();
    (void)::close(lfd);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error() == std::errc::timed_out);
    CHECK(j->error_text().find("no progress") != std::string::npos);
    CHECK(accepted.load() >= 2);  // it did connect, again and again, before it gave up
}

TEST_CASE("replay client: a frame length past the largest frame is an error, not 4 GiB",
          "[unit][replay]") {
    // A fake server: takes the request, then announces a frame of 2^32 - 1 bytes (only the
    // length: the client used to size its buffer from it before checking).
    const int ls = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(ls >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(ls, 1) == 0);
    socklen_t alen = sizeof a;
    REQUIRE(::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &alen) == 0);
    std::thread server([ls] {
        const int c = ::accept(ls, nullptr, nullptr);
        char req[256];
        (void)::recv(c, req, sizeof req, 0);
        const unsigned char len[4] = {0xff, 0xff, 0xff, 0xff};
        (void)::send(c, len, sizeof len, MSG_NOSIGNAL);
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        ::close(c);
    });
    auto client = prizma::ReplayClient::connect("127.0.0.1", ntohs(a.sin_port), {});
    REQUIRE(client.has_value());
    prizma::JournalEntry e;
    std::optional<std::error_code> err;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!err && std::chrono::steady_clock::now() < until) {
        auto r = client->next(e);
        if (!r) {
            err = r.error();
        } else {
            client->wait(std::chrono::milliseconds(10));
        }
    }
    server.join();
    ::close(ls);
    REQUIRE(err.has_value());
    CHECK(*err == prizma::Errc::malformed_packet);
    CHECK(client->error_text().find("4294967295") != std::string::npos);
}

TEST_CASE("late join: an event is stale when it ends at the position, news one past it",
          "[unit][replay][late_join][boundary]") {
    using prizma::StreamEventKind;
    using prizma::detail::event_end;
    using prizma::detail::event_stale;
    const auto ev = [](StreamEventKind k, std::uint64_t seq, std::uint64_t count = 0) {
        prizma::StreamEvent e;
        e.kind = k;
        e.epoch = 1;
        e.sequence = seq;
        e.count = count;
        return e;
    };
    constexpr std::uint64_t kNext = 100;
    // A record covers [seq, seq + 1): 99 ends at 100 (delivered), 100 ends at 101 (news).
    CHECK(event_end(ev(StreamEventKind::record, 99)) == 100);
    CHECK(event_stale(ev(StreamEventKind::record, 99), kNext));
    CHECK_FALSE(event_stale(ev(StreamEventKind::record, 100), kNext));
    // A loss covers [seq, seq + count): 90 + 10 ends at 100, 90 + 11 at 101.
    CHECK(event_end(ev(StreamEventKind::loss, 90, 10)) == 100);
    CHECK(event_end(ev(StreamEventKind::loss, 90, 11)) == 101);
    CHECK(event_stale(ev(StreamEventKind::loss, 90, 10), kNext));
    CHECK_FALSE(event_stale(ev(StreamEventKind::loss, 90, 11), kNext));
    CHECK_FALSE(event_stale(ev(StreamEventKind::loss, 100, 1), kNext));
    // A stall at the position is news (what comes next was lost), one before it is not.
    CHECK(event_end(ev(StreamEventKind::stall, 100)) == 100);
    CHECK_FALSE(event_stale(ev(StreamEventKind::stall, 100), kNext));
    CHECK(event_stale(ev(StreamEventKind::stall, 99), kNext));
    CHECK_FALSE(event_stale(ev(StreamEventKind::stall, 101), kNext));
    // Resets and divergences always pass, wherever they are.
    CHECK_FALSE(event_stale(ev(StreamEventKind::reset, 0), kNext));
    CHECK_FALSE(event_stale(ev(StreamEventKind::divergence, 5), kNext));
    CHECK(event_end(ev(StreamEventKind::reset, 7)) == 7);
}
