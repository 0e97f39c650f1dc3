// SPDX-License-Identifier: Apache-2.0
// The shared-memory stats file: what the writer puts in is what a reader gets back; junk and
// a writer stuck mid-update are refused with a reason; the file goes with the writer.
#include "lib/pubsub/stats_file.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/catch.hpp"

using namespace prizma;  // NOLINT(google-build-using-namespace): test file

namespace {
std::string temp_dir() {
    char tmpl[] = "/tmp/prizma-stats-XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    REQUIRE(d != nullptr);
    return d;
}
}  // namespace

TEST_CASE("stats file: round trip, names, roles, removal", "[unit][stats]") {
    const std::string dir = temp_dir();
    std::string path;
    {
        stats::Writer w;
        REQUIRE(w.open(dir));
        path = w.path();
        REQUIRE(std::filesystem::exists(path));
        w.set_channel(0, "udp://239.1.2.3:7600?iface=127.0.0.1", true);
        w.set_channel(1, "mem://x:7500", false);
        ChannelCounters c;
        c.odata_sent = 42;
        c.naks_received = 7;
        std::array<NamedCounter, stats::kMaxCounters> buf{};
        std::size_t n = stats::flatten(c, buf);
        REQUIRE(n == 26);  // every ChannelCounters field
        buf[n++] = {"rx_ring_low", 3};
        w.begin();
        w.values(0, std::span(buf).first(n));
        ChannelCounters d;
        d.messages_delivered = 1000;
        w.values(1, std::span(buf).first(stats::flatten(d, buf)));
        protocol::PeerCounters sc[2]{};
        sc[0].tsi.gsi.bytes = {0xde, 0xad, 0xbe, 0xef, 0x00, 0x01};
        sc[0].tsi.sport = 4321;
        sc[0].nak_sent = 5;
        sc[1].apdus_delivered = 9;
        w.sources(1, sc, 11);
        w.end();

        auto s = stats::read(path);
        REQUIRE(s.has_value());
        CHECK(s->pid == static_cast<std::uint64_t>(::getpid()));
        CHECK(s->updates == 3);  // two set_channel + one update
        REQUIRE(s->channels.size() == 2);
        CHECK(s->channels[0].uri == "udp://239.1.2.3:7600?iface=127.0.0.1");
        CHECK(s->channels[0].publisher);
        CHECK_FALSE(s->channels[1].publisher);
        const auto& k0 = s->channels[0].counters;
        REQUIRE(k0.size() == 27);
        CHECK(k0[6] == std::pair<std::string, std::uint64_t>{"odata_sent", 42});
        CHECK(k0[10] == std::pair<std::string, std::uint64_t>{"naks_received", 7});
        CHECK(k0[26] == std::pair<std::string, std::uint64_t>{"rx_ring_low", 3});
        CHECK(s->channels[1].counters[13]
              == std::pair<std::string, std::uint64_t>{"messages_delivered", 1000});
        const auto& src = s->channels[1].sources;
        REQUIRE(src.size() == 2);
        CHECK(src[0].tsi == "deadbeef0001.4321");
        CHECK(src[0].counters[5] == std::pair<std::string, std::uint64_t>{"naks_sent", 5});
        CHECK(src[1].counters[9] == std::pair<std::string, std::uint64_t>{"messages_delivered", 9});
        CHECK(s->channels[1].sources_not_shown == 9);
        CHECK(s->channels[0].sources.empty());
    }
    CHECK_FALSE(std::filesystem::exists(path));  // removed with the writer
    std::filesystem::remove_all(dir);
}

TEST_CASE("stats file: a new writer removes files of processes that no longer exist",
          "[unit][stats]") {
    const std::string dir = temp_dir();
    // pid_max is at most 4194304: this pid cannot exist. Our own pid's other file stays.
    std::ofstream(dir + "/4999999-0.stats") << "left by a killed process";
    const std::string mine = dir + "/" + std::to_string(::getpid()) + "-77.stats";
    std::ofstream(mine) << "alive";
    std::ofstream(dir + "/notes.txt") << "not ours";
    {
        stats::Writer w;
        REQUIRE(w.open(dir));
        CHECK_FALSE(std::filesystem::exists(dir + "/4999999-0.stats"));
        CHECK(std::filesystem::exists(mine));
        CHECK(std::filesystem::exists(dir + "/notes.txt"));
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("stats file: junk and a writer stuck mid-update are refused", "[unit][stats]") {
    const std::string dir = temp_dir();
    {
        std::ofstream(dir + "/junk.stats") << "not a stats file";
        auto junk = stats::read(dir + "/junk.stats");
        REQUIRE_FALSE(junk.has_value());
        CHECK(junk.error().message().find("not a prizma stats file") != std::string::npos);
        CHECK(junk.error() == Errc::invalid_argument);
        auto missing = stats::read(dir + "/missing.stats");
        REQUIRE_FALSE(missing.has_value());
        CHECK(missing.error() == std::errc::no_such_file_or_directory);
    }
    {
        stats::Writer w;
        REQUIRE(w.open(dir));
        w.set_channel(0, "mem://a:1", true);
        w.begin();  // never ended: the sequence stays odd
        auto busy = stats::read(w.path());
        REQUIRE_FALSE(busy.has_value());
        CHECK(busy.error().message().find("busy") != std::string::npos);
        w.end();
        CHECK(stats::read(w.path()).has_value());
    }
    std::filesystem::remove_all(dir);
}
