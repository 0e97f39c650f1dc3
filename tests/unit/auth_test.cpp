// SPDX-License-Identifier: Apache-2.0
// Packet authentication: the key file, the auth option on the wire, and channels of prizma
// peers that share a key (mem and udp) against a sender without it, a tampered packet, a
// replay and a key rotation.
#include "lib/pubsub/auth.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <prizma/context.hpp>

#include "lib/pgm/checksum.hpp"
#include "tests/support/catch.hpp"
#include "tests/support/sim.hpp"
#include "tests/support/temp_dir.hpp"

using namespace prizma;  // NOLINT(google-build-using-namespace): test file
using pgm::PacketType;
using protocol::kMs;
using Kind = protocol::Event::Kind;

namespace {

constexpr const char* kHex1 = "00112233445566778899aabbccddeeff";
constexpr const char* kHex2 = "ffeeddccbbaa99887766554433221100";

/// A fresh name in this test program's own temporary directory (removed at its end).
std::string temp_path(const std::string& name) {
    static const prizma::test::TempDir dir("prizma-auth");
    static unsigned n = 0;
    return dir.path + "/" + name + "-" + std::to_string(n++);
}

std::string write_key_file(const std::string& text, mode_t mode = 0600) {
    const std::string path = temp_path("prizma-key");
    {
        std::ofstream f(path);
        f << text;
    }
    REQUIRE(::chmod(path.c_str(), mode) == 0);
    return path;
}

AuthOptions keys(std::vector<std::pair<std::uint32_t, std::uint8_t>> ids_and_fill) {
    AuthOptions o;
    for (auto [id, fill] : ids_and_fill) {
        AuthKey k;
        k.id = id;
        k.bytes.fill(fill);
        o.keys.push_back(k);
    }
    return o;
}

pubsub::Authenticator make_auth(const AuthOptions& o) {
    auto a = pubsub::Authenticator::create(o);
    REQUIRE(a);
    return *a;
}

std::vector<std::byte> packet_of(const pgm::PacketSpec& spec,
                                 std::span<const std::byte> payload = {}) {
    std::vector<std::byte> b(pgm::encoded_size(spec));
    REQUIRE(pgm::encode(b, spec) == b.size());
    const std::size_t h = b.size();
    b.insert(b.end(), payload.begin(), payload.end());
    pgm::store_checksum(std::span<std::byte>(b.data(), h), pgm::csum_partial(payload));
    return b;
}

// Signs a packet (split into header and payload as the core emits it) and parses the result.
std::vector<std::byte> signed_packet(const pubsub::Authenticator& a,
                                     const pgm::PacketSpec& spec,
                                     std::span<const std::byte> payload,
                                     std::uint64_t wall_ms) {
    const auto plain = packet_of(spec, payload);
    const std::size_t hlen = plain.size() - payload.size();
    std::vector<std::byte> out(plain.size() + pgm::kAuthOverheadBytes);
    const std::size_t n =
        a.sign(std::span<const std::byte>(plain.data(), hlen), payload, out, wall_ms);
    const bool had_options = spec.fragment != nullptr || !spec.nak_list.empty() || spec.fin;
    REQUIRE(n == plain.size() + (had_options ? pgm::kAuthOptionBytes : pgm::kAuthOverheadBytes));
    out.resize(n);
    return out;
}

pgm::Packet parse(const std::vector<std::byte>& b) {
    pgm::Packet p;
    REQUIRE(pgm::parse(b, p) == pgm::ParseStatus::ok);  // checksum verified too
    return p;
}

}  // namespace

// A packet's time may be max_clock_skew away from ours, either way, and not a millisecond more.
TEST_CASE("auth boundary: a packet exactly max_clock_skew old or ahead is taken, 1 ms more is not",
          "[unit][auth][boundary]") {
    using V = pubsub::Authenticator::Verdict;
    auto o = keys({{1, 0x11}});
    o.max_clock_skew = std::chrono::seconds(2);
    const auto a = make_auth(o);
    constexpr std::uint64_t kSkewMs = 2000;
    const std::uint64_t now = 1'700'000'000'000ULL;  // any wall time: verify() takes it as given
    std::vector<std::byte> scratch(70000);
    const auto c = testing::source_config();
    pgm::PacketSpec s;
    s.type = PacketType::odata;
    s.sport = c.tsi.sport;
    s.dport = c.dport;
    s.gsi = c.tsi.gsi;
    s.sqn = Sqn{5};
    const auto msg = testing::make_message(5, 100);
    s.tsdu_length = 100;
    const auto at = [&](std::uint64_t sent) {
        return a.verify(parse(signed_packet(a, s, msg, sent)), scratch, now);
    };
    CHECK(at(now) == V::ok);
    CHECK(at(now - kSkewMs) == V::ok);
    CHECK(at(now - kSkewMs - 1) == V::stale);
    CHECK(at(now + kSkewMs) == V::ok);
    CHECK(at(now + kSkewMs + 1) == V::stale);
}

TEST_CASE("auth: a key file is read only when it is the caller's alone", "[unit][auth]") {
    const std::string good =
        write_key_file(std::string("# rotation: 7 signs\n7 ") + kHex1 + "\n8 " + kHex2 + "\n");
    auto k = read_key_file(good);
    REQUIRE(k);
    REQUIRE(k->keys.size() == 2);
    CHECK(k->keys[0].id == 7);
    CHECK(k->keys[0].bytes[1] == 0x11);
    CHECK(k->keys[1].id == 8);
    CHECK(k->keys[1].bytes[0] == 0xff);
    // Readable by the group or others: refused, and the error never quotes the key.
    const std::string open = write_key_file(std::string("7 ") + kHex1 + "\n", 0644);
    auto r = read_key_file(open);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().detail(), Catch::Contains("0600"));
    CHECK_THAT(r.error().detail(), !Catch::Contains("00112233"));
    // A symbolic link to a good file: refused (O_NOFOLLOW).
    const std::string link = temp_path("prizma-key-link");
    REQUIRE(::symlink(good.c_str(), link.c_str()) == 0);
    CHECK_FALSE(read_key_file(link));
    // Malformed: a short key, a bad id; the line is named, its text is not.
    const std::string bad = write_key_file(std::string("7 0011\n"));
    auto rb = read_key_file(bad);
    REQUIRE_FALSE(rb);
    CHECK_THAT(rb.error().detail(), Catch::Contains("line 1"));
    CHECK_FALSE(read_key_file(write_key_file(std::string("x ") + kHex1 + "\n")));
    CHECK_FALSE(read_key_file(write_key_file("# nothing\n")));
    if (::geteuid() == 0) {  // root can make a file of another user's
        const std::string theirs = write_key_file(std::string("7 ") + kHex1 + "\n");
        REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
        CHECK_FALSE(read_key_file(theirs));
        std::filesystem::remove(theirs);
    }
    for (const auto& p : {good, open, link, bad}) {
        std::filesystem::remove(p);
    }
}

TEST_CASE("auth: the option rides on every packet type and parses back", "[unit][auth]") {
    const auto a = make_auth(keys({{42, 0x5a}}));
    const std::uint64_t now = pubsub::Authenticator::wall_now_ms();
    std::vector<std::byte> scratch(70000);
    const auto c = testing::source_config();
    const std::array<std::byte, 5> payload{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4},
                                           std::byte{5}};
    const pgm::FragmentInfo frag{Sqn{10}, 0, 5};
    const std::array<Sqn, 2> list{Sqn{11}, Sqn{12}};
    std::vector<pgm::PacketSpec> specs;
    for (const auto t : {PacketType::spm, PacketType::odata, PacketType::rdata, PacketType::nak,
                         PacketType::ncf, PacketType::nnak, PacketType::spmr}) {
        pgm::PacketSpec s;
        s.type = t;
        s.sport = c.tsi.sport;
        s.dport = c.dport;
        s.gsi = c.tsi.gsi;
        s.sqn = Sqn{10};
        s.nla = c.nla;
        s.group = c.group;
        specs.push_back(s);
    }
    specs[1].fragment = &frag;  // ODATA with options already
    specs[3].nak_list = list;   // NAK with a list
    specs[0].fin = true;        // SPM with OPT_FIN
    for (auto& s : specs) {
        INFO("type " << int(s.type));
        const bool data = s.type == PacketType::odata || s.type == PacketType::rdata;
        s.tsdu_length = data ? 5 : 0;
        const auto pl = data ? std::span<const std::byte>(payload) : std::span<const std::byte>();
        const auto b = signed_packet(a, s, pl, now);
        const auto p = parse(b);
        CHECK(p.opts.has_auth);
        CHECK(p.opts.auth_key_id == 42);
        CHECK(p.opts.auth_time_ms == now);
        CHECK(p.type == s.type);
        CHECK(p.sqn == (s.type == PacketType::spmr ? Sqn{0} : Sqn{10}));
        CHECK(p.opts.fin == s.fin);
        CHECK(p.opts.has_fragment == (s.fragment != nullptr));
        CHECK(p.requested_count() == (s.nak_list.empty() ? 1U : 3U));
        CHECK(std::equal(p.payload.begin(), p.payload.end(), pl.begin(), pl.end()));
        CHECK(a.verify(p, scratch, now) == pubsub::Authenticator::Verdict::ok);
    }
}

TEST_CASE("auth: a changed byte, another key, an old packet or none at all is refused",
          "[unit][auth]") {
    using V = pubsub::Authenticator::Verdict;
    const auto a = make_auth(keys({{1, 0x11}}));
    const auto other = make_auth(keys({{1, 0x22}}));
    const auto unknown = make_auth(keys({{9, 0x11}}));
    const std::uint64_t now = pubsub::Authenticator::wall_now_ms();
    std::vector<std::byte> scratch(70000);
    const auto c = testing::source_config();
    pgm::PacketSpec s;
    s.type = PacketType::odata;
    s.sport = c.tsi.sport;
    s.dport = c.dport;
    s.gsi = c.tsi.gsi;
    s.sqn = Sqn{5};
    const auto msg = testing::make_message(5, 100);
    s.tsdu_length = 100;
    auto b = signed_packet(a, s, msg, now);
    CHECK(a.verify(parse(b), scratch, now) == V::ok);
    // Every single byte flipped (checksum made valid again, as an attacker would): refused.
    for (std::size_t i = 0; i < b.size(); ++i) {
        if (i == 6 || i == 7) {
            continue;  // the checksum field itself
        }
        auto t = b;
        t[i] ^= std::byte{0x01};
        pgm::store_checksum(t, 0);
        pgm::Packet p;
        if (pgm::parse(t, p) != pgm::ParseStatus::ok) {
            continue;  // the codec refused it first
        }
        INFO("byte " << i);
        CHECK(a.verify(p, scratch, now) != V::ok);
    }
    CHECK(a.verify(parse(signed_packet(other, s, msg, now)), scratch, now) == V::bad_tag);
    CHECK(a.verify(parse(signed_packet(unknown, s, msg, now)), scratch, now) == V::unknown_key);
    // A replay from an hour ago (sequence numbers wrap in about an hour at 1 M msgs/s).
    CHECK(a.verify(parse(signed_packet(a, s, msg, now - 3'600'000)), scratch, now) == V::stale);
    CHECK(a.verify(parse(signed_packet(a, s, msg, now - 29'000)), scratch, now) == V::ok);
    CHECK(a.verify(parse(signed_packet(a, s, msg, now + 31'000)), scratch, now) == V::stale);
    CHECK(a.verify(parse(packet_of(s, msg)), scratch, now) == V::missing);
}

TEST_CASE("auth: peers with the key repair loss, a sender without it changes nothing",
          "[unit][auth]") {
    testing::Sim sim;
    const auto k = make_auth(keys({{1, 0x33}}));
    pubsub::SessionConfig rc;
    rc.receiver = testing::receiver_config(3);
    rc.auth = k;
    memory::LossyTransport::Config loss;
    loss.seed = 4;
    loss.drop = 0.05;
    auto& rcv = sim.add(rc, &loss);
    pubsub::SessionConfig sc;
    sc.source = testing::source_config();
    sc.source->max_tpdu -= pgm::kAuthOverheadBytes;
    sc.auth = k;
    auto& src = sim.add(sc);
    // An intruder: the same TSI, no key (its SPM and data would otherwise be taken).
    pubsub::SessionConfig ic;
    ic.source = testing::source_config();
    auto& intruder = sim.add(ic);
    sim.pump();
    for (std::uint64_t i = 0; i < 2000; ++i) {
        REQUIRE(src.session->publish(testing::make_message(i, 200), sim.now).has_value());
        if (i % 10 == 0) {
            REQUIRE(intruder.session->publish(testing::make_message(999999, 200), sim.now));
        }
        sim.run_for(50'000, 10'000);
    }
    sim.run_for(500 * kMs, 100'000);
    const auto d = rcv.data();
    REQUIRE(d.size() == 2000);
    for (std::uint64_t i = 0; i < 2000; ++i) {
        REQUIRE(d[i] == testing::make_message(i, 200));
    }
    CHECK(rcv.count(Kind::loss) == 0);
    CHECK(rcv.receiver().counters().repaired > 0);  // NAK, NCF, RDATA all signed
    CHECK(rcv.session->counters().auth_refused >= 200);
    CHECK(src.source().counters().nak_received > 0);  // the receivers' signed NAKs taken
}

// Unused key slots hold id 0 and zero bytes: a packet naming any id that is not configured is
// unknown whatever its key bytes (the unused slots' all-zero key included), and every
// configured id still verifies with its own key, not another configured one's.
TEST_CASE("auth: a key id that is not configured is refused whatever the key bytes",
          "[unit][auth]") {
    using V = pubsub::Authenticator::Verdict;
    const auto a = make_auth(keys({{1, 0x11}, {3, 0x33}}));  // slots 3 and 4 unused
    const std::uint64_t now = pubsub::Authenticator::wall_now_ms();
    std::vector<std::byte> scratch(70000);
    const auto c = testing::source_config();
    pgm::PacketSpec s;
    s.type = PacketType::odata;
    s.sport = c.tsi.sport;
    s.dport = c.dport;
    s.gsi = c.tsi.gsi;
    s.sqn = Sqn{7};
    const auto msg = testing::make_message(7, 64);
    s.tsdu_length = 64;
    const auto verdict = [&](std::uint32_t id, std::uint8_t fill) {
        return a.verify(parse(signed_packet(make_auth(keys({{id, fill}})), s, msg, now)), scratch,
                        now);
    };
    for (const std::uint32_t id : {0U, 2U, 4U, 5U, 0xffffffffU}) {
        INFO("key id " << id);
        CHECK(verdict(id, 0x00) == V::unknown_key);
        CHECK(verdict(id, 0x11) == V::unknown_key);
        CHECK(verdict(id, 0x33) == V::unknown_key);
    }
    CHECK(verdict(1, 0x11) == V::ok);
    CHECK(verdict(3, 0x33) == V::ok);
    CHECK(verdict(1, 0x33) == V::bad_tag);
    CHECK(verdict(3, 0x11) == V::bad_tag);
    CHECK(verdict(1, 0x00) == V::bad_tag);
}

TEST_CASE("auth: key rotation: receivers holding both keys take either", "[unit][auth]") {
    testing::Sim sim;
    pubsub::SessionConfig rc;
    rc.receiver = testing::receiver_config(3);
    rc.auth = make_auth(keys({{1, 0x01}, {2, 0x02}}));
    auto& rcv = sim.add(rc);
    pubsub::SessionConfig sc;
    sc.source = testing::source_config();
    sc.source->max_tpdu -= pgm::kAuthOverheadBytes;
    sc.auth = make_auth(keys({{2, 0x02}}));  // already on the new key
    auto& src = sim.add(sc);
    sim.pump();
    for (std::uint64_t i = 0; i < 10; ++i) {
        REQUIRE(src.session->publish(testing::make_message(i, 100), sim.now).has_value());
    }
    sim.run_for(10 * kMs, 100'000);
    CHECK(rcv.data().size() == 10);
    CHECK(rcv.session->counters().auth_refused == 0);
}

TEST_CASE("auth: channels over mem and udp with key_file= and ChannelOptions",
          "[unit][auth][process]") {
    const std::string file = write_key_file(std::string("5 ") + kHex1 + "\n");
    const std::string wrong = write_key_file(std::string("5 ") + kHex2 + "\n");
    auto ctx = Context::create();
    REQUIRE(ctx);
    for (const std::string& base :
         {std::string("mem://authnet:7400"),
          std::string("udp://239.192.83.") + std::to_string(10 + ::getpid() % 200) + ":"
              + std::to_string(20000 + ::getpid() % 20000) + "?iface=127.0.0.1"}) {
        INFO(base);
        const char sep = base.find('?') == std::string::npos ? '?' : '&';
        const std::string with_key = base + sep + "key_file=" + file;
        const std::string with_wrong = base + sep + "key_file=" + wrong;
        auto good = ctx->add_subscriber(with_key);
        REQUIRE(good);
        ChannelOptions by_options;
        by_options.auth = keys({{5, 0}});
        for (std::size_t i = 0; i < 16; ++i) {
            by_options.auth->keys[0].bytes[i] = static_cast<std::uint8_t>(0x00 + 0x11 * i);
        }
        auto also_good = ctx->add_subscriber(base, by_options);  // the same key, in code
        REQUIRE(also_good);
        auto bad = ctx->add_subscriber(with_wrong);
        REQUIRE(bad);
        auto pub = ctx->add_publisher(with_key);
        REQUIRE(pub);
        CHECK(pub->max_message_size() > 0);
        std::size_t got_good = 0;
        std::size_t got_also = 0;
        std::size_t got_bad = 0;
        for (int i = 0; i < 200 && (got_good < 50 || got_also < 50); ++i) {
            if (i < 50) {
                const auto m = testing::make_message(static_cast<std::uint64_t>(i), 64);
                REQUIRE(pub->offer(m));
            }
            (void)ctx->poll();
            auto count = [](std::size_t& n) {
                return [&n](const Message& m) {
                    n += m.kind == MessageKind::data ? 1U : 0U;
                };
            };
            (void)good->poll(64, count(got_good));
            (void)also_good->poll(64, count(got_also));
            (void)bad->poll(64, count(got_bad));
            ::usleep(1000);
        }
        CHECK(got_good == 50);
        CHECK(got_also == 50);
        CHECK(got_bad == 0);
        CHECK(bad->counters().auth_refused > 0);
        CHECK(bad->counters().messages_delivered == 0);
        // Both at once is refused; a world-readable key file too.
        ChannelOptions both = by_options;
        CHECK_FALSE(ctx->add_subscriber(with_key, both));
        (void)ctx->remove(*good);
        (void)ctx->remove(*also_good);
        (void)ctx->remove(*bad);
        (void)ctx->remove(*pub);
    }
    ::chmod(file.c_str(), 0640);
    auto refused = ctx->add_subscriber("mem://authnet:7400?key_file=" + file);
    REQUIRE_FALSE(refused);
    CHECK_THAT(refused.error().detail(), Catch::Contains("0600"));
    std::filesystem::remove(file);
    std::filesystem::remove(wrong);
}
