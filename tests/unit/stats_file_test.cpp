// SPDX-License-Identifier: Apache-2.0
// The shared-memory stats file: what the writer puts in is what a reader gets back; junk and
// a writer stuck mid-update are refused with a reason; the file goes with the writer. On a
// shared host (another local user plants things): the writer refuses a directory that is not
// its own alone, never follows a symbolic link nor reuses a planted file; the reader survives
// a file truncated under it, and neither its strings nor its pid are taken on trust.
#include "lib/stats/stats_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <prizma/context.hpp>

#include "tests/support/catch.hpp"

using namespace prizma;  // NOLINT(google-build-using-namespace): test file

namespace {
std::string temp_dir() {
    char tmpl[] = "/tmp/prizma-stats-XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    REQUIRE(d != nullptr);
    return d;
}

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream out;
    out << f.rdbuf();
    return out.str();
}

void spit(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

/// The name the next Writer of this process will give its file (the writers number their
/// files one after the other): learnt from a writer made and dropped now.
std::string next_file_name(const std::string& dir) {
    stats::Writer probe;
    REQUIRE(probe.open(dir));
    const std::string name = std::filesystem::path(probe.path()).filename().string();
    const std::size_t dash = name.find('-');
    const std::uint64_t n = std::stoull(name.substr(dash + 1));
    return name.substr(0, dash + 1) + std::to_string(n + 1) + ".stats";
}

/// The uid /proc/PID/status gives as effective, or -1.
long effective_uid(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("Uid:", 0) == 0) {
            std::istringstream in(line.substr(4));
            long real = -1;
            long effective = -1;
            in >> real >> effective;
            return effective;
        }
    }
    return -1;
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
        w.set_channel(0, "udp://239.1.2.3:7600?iface=127.0.0.1", true,
                      "udp iface 127.0.0.1 ttl 1 rcvbuf 212992");
        w.set_channel(1, "mem://x:7500", false, std::string(500, 'v'));  // cut to fit
        ChannelCounters c;
        c.odata_sent = 42;
        c.naks_received = 7;
        std::array<NamedCounter, stats::kMaxCounters> buf{};
        std::size_t n = stats::flatten(c, buf);
        REQUIRE(n == prizma::kChannelCounterFields.size());  // every field
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
        CHECK(s->channels[0].transport == "udp iface 127.0.0.1 ttl 1 rcvbuf 212992");
        CHECK(s->channels[1].transport == std::string(stats::kTransportLen - 1, 'v'));
        CHECK(s->channels[0].publisher);
        CHECK_FALSE(s->channels[1].publisher);
        // Every field in declaration order, then the transport's own.
        const auto& k0 = s->channels[0].counters;
        REQUIRE(k0.size() == kChannelCounterFields.size() + 1);
        auto at = [](std::string_view name) {
            for (std::size_t i = 0; i < kChannelCounterFields.size(); ++i) {
                if (kChannelCounterFields[i].name == name) {
                    return i;
                }
            }
            FAIL("no counter " << name);
            return std::size_t{0};
        };
        CHECK(k0[at("odata_sent")] == std::pair<std::string, std::uint64_t>{"odata_sent", 42});
        CHECK(k0[at("naks_received")] == std::pair<std::string, std::uint64_t>{"naks_received", 7});
        CHECK(k0.back() == std::pair<std::string, std::uint64_t>{"rx_ring_low", 3});
        CHECK(s->channels[1].counters[at("messages_delivered")]
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

TEST_CASE("stats file: a symbolic link at the file's path is not followed", "[unit][stats]") {
    const std::string dir = temp_dir();
    const std::string elsewhere = temp_dir();
    const std::string victim = elsewhere + "/victim";
    spit(victim, "precious content");
    REQUIRE(::chmod(victim.c_str(), 0600) == 0);
    const std::string name = next_file_name(dir);
    REQUIRE(::symlink(victim.c_str(), (dir + "/" + name).c_str()) == 0);
    {
        stats::Writer w;
        REQUIRE(w.open(dir));
        REQUIRE(w.path() == dir + "/" + name);
        w.set_channel(0, "mem://a:1", true);
        struct stat st {};
        REQUIRE(::lstat(w.path().c_str(), &st) == 0);
        CHECK(S_ISREG(st.st_mode));  // a file of its own, not the link
        CHECK(stats::read(w.path()).has_value());
    }
    CHECK(slurp(victim) == "precious content");  // not truncated, not written through
    std::filesystem::remove_all(dir);
    std::filesystem::remove_all(elsewhere);
}

TEST_CASE("stats file: a directory that is not ours alone is refused with the reason",
          "[unit][stats]") {
    const std::string base = temp_dir();
    auto refused = [](const std::string& dir, const std::string& why) {
        stats::Writer w;
        auto r = w.open(dir);
        REQUIRE_FALSE(r.has_value());
        INFO(r.error().message());
        CHECK(r.error().message().find("stats directory " + dir + " refused: " + why)
              != std::string::npos);
        CHECK_FALSE(w.enabled());
        CHECK(w.path().empty());
        w.begin();  // a disabled writer ignores updates (no crash)
    };
    // Writable by others (as the old shared 01777 directory was).
    const std::string open_dir = base + "/open";
    REQUIRE(::mkdir(open_dir.c_str(), 0700) == 0);
    REQUIRE(::chmod(open_dir.c_str(), 01777) == 0);
    refused(open_dir, "writable by other users (mode 1777)");
    CHECK(std::filesystem::is_empty(open_dir));
    // A symbolic link, even to a directory of ours.
    const std::string real = base + "/real";
    REQUIRE(::mkdir(real.c_str(), 0700) == 0);
    REQUIRE(::symlink(real.c_str(), (base + "/link").c_str()) == 0);
    refused(base + "/link", "a symbolic link");
    CHECK(std::filesystem::is_empty(real));
    // Another user's (made before us, with a mode that looks right).
    if (::geteuid() == 0) {
        const std::string theirs = base + "/theirs";
        REQUIRE(::mkdir(theirs.c_str(), 0700) == 0);
        REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
        refused(theirs, "owned by uid 65534, not by this process's uid 0");
        CHECK(std::filesystem::is_empty(theirs));
    } else {
        WARN("not root: a directory of another user was not checked");
    }
    // A directory of ours is made 0700.
    stats::Writer w;
    REQUIRE(w.open(base + "/made"));
    struct stat st {};
    REQUIRE(::lstat((base + "/made").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777U) == 0700);
    std::filesystem::remove_all(base);
}

TEST_CASE("stats file: a Context whose stats directory is refused works without one",
          "[unit][stats]") {
    const std::string dir = temp_dir();
    REQUIRE(::chmod(dir.c_str(), 0777) == 0);
    // (The environment is changed while no other thread runs.)
    const char* old = std::getenv("PRIZMA_STATS_DIR");  // NOLINT(concurrency-mt-unsafe)
    const std::string saved = old != nullptr ? old : "";
    REQUIRE(::setenv("PRIZMA_STATS_DIR", dir.c_str(), 1) == 0);  // NOLINT(concurrency-mt-unsafe)
    {
        auto ctx = Context::create();
        REQUIRE(ctx.has_value());
        CHECK(ctx->stats_file().empty());
        CHECK_THAT(std::string(ctx->stats_error()), Catch::Contains(dir));  // says why
        auto pub = ctx->add_publisher("mem://stats-refused:7000");
        REQUIRE(pub.has_value());
        (void)ctx->poll();
    }
    if (old != nullptr) {
        (void)::setenv("PRIZMA_STATS_DIR", saved.c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
    } else {
        (void)::unsetenv("PRIZMA_STATS_DIR");  // NOLINT(concurrency-mt-unsafe)
    }
    CHECK(std::filesystem::is_empty(dir));
    std::filesystem::remove_all(dir);
}

TEST_CASE("stats file: a file planted at our name is replaced, and truncating it hurts no one",
          "[unit][stats]") {
    const std::string dir = temp_dir();
    const std::string name = next_file_name(dir);
    const std::string planted = dir + "/" + name;
    // Planted (as another user would: world-writable, theirs when we are root), and kept
    // open to truncate later.
    const int fd = ::open(planted.c_str(), O_RDWR | O_CREAT | O_EXCL, 0666);
    REQUIRE(fd >= 0);
    REQUIRE(::fchmod(fd, 0666) == 0);
    if (::geteuid() == 0) {
        REQUIRE(::fchown(fd, 65534, 65534) == 0);
    }
    struct stat theirs {};
    REQUIRE(::fstat(fd, &theirs) == 0);
    {
        stats::Writer w;
        REQUIRE(w.open(dir));
        REQUIRE(w.path() == planted);
        struct stat ours {};
        REQUIRE(::lstat(w.path().c_str(), &ours) == 0);
        CHECK(ours.st_ino != theirs.st_ino);  // a new file...
        CHECK(ours.st_uid == ::geteuid());    // ...of ours
        CHECK((ours.st_mode & 07777U) == 0644);
        CHECK(ours.st_nlink == 1);
        // Truncated by its planter: the old file, not the writer's mapping (else SIGBUS here).
        REQUIRE(::ftruncate(fd, 0) == 0);
        w.set_channel(0, "mem://a:1", true);
        w.begin();
        w.end();
        auto s = stats::read(w.path());
        REQUIRE(s.has_value());
        CHECK(s->updates == 2);
    }
    (void)::close(fd);
    std::filesystem::remove_all(dir);
}

TEST_CASE("stats reader: a file truncated while it is read is an error, never a SIGBUS",
          "[unit][stats]") {
    const std::string dir = temp_dir();
    std::string bytes;
    {
        stats::Writer w;
        REQUIRE(w.open(dir));
        w.set_channel(0, "mem://a:1", true);
        w.begin();
        w.end();  // even: a whole copy reads as consistent; a cut one must not
        bytes = slurp(w.path());
    }
    REQUIRE(bytes.size() == stats::kFileSize);
    const std::string path = dir + "/1-0.stats";
    spit(path, bytes);
    const int fd = ::open(path.c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    std::atomic<bool> stop{false};
    std::thread cutter([&] {
        // Cut to half, then whole again with its tail. The header (its sequence lock odd)
        // is never touched: a zeroed header with the magic already back would read as a
        // consistent, even copy for a moment, whatever the reader does.
        const std::size_t half = stats::kFileSize / 2;
        while (!stop.load()) {
            (void)::ftruncate(fd, static_cast<off_t>(half));
            (void)::ftruncate(fd, static_cast<off_t>(stats::kFileSize));
            (void)::pwrite(fd, bytes.data() + half, stats::kFileSize - half,
                           static_cast<off_t>(half));
        }
    });
    bool cut_while_read = false;
    std::size_t reads = 0;
    for (; reads < 200000 && !cut_while_read; ++reads) {
        auto s = stats::read(path);
        if (s.has_value()) {  // read while whole: the file's own contents
            REQUIRE(s->channels.size() == 1);
            REQUIRE(s->channels[0].uri == "mem://a:1");
            continue;
        }
        cut_while_read =
            s.error().message().find("truncated while being read") != std::string::npos;
    }
    stop = true;
    cutter.join();
    (void)::close(fd);
    INFO("reads: " << reads);
    CHECK(cut_while_read);
    std::filesystem::remove_all(dir);
}

TEST_CASE("stats reader: strings are the file's bytes, printable() makes them safe",
          "[unit][stats]") {
    const std::string dir = temp_dir();
    const std::string uri = "mem://\x1b[2J\x1b]0;owned\x07x:1";
    {
        stats::Writer w;
        REQUIRE(w.open(dir));
        w.set_channel(0, uri, true);
        const NamedCounter c[] = {{"\x1b[31mred\x9b", 1}};
        w.begin();
        w.values(0, c);
        w.end();
        auto s = stats::read(w.path());
        REQUIRE(s.has_value());
        REQUIRE(s->channels.size() == 1);
        CHECK(s->channels[0].uri == uri);  // as found
        CHECK(stats::printable(s->channels[0].uri) == R"(mem://\x1b[2J\x1b]0;owned\x07x:1)");
        CHECK(stats::printable(s->channels[0].counters.at(0).first) == R"(\x1b[31mred\x9b)");
    }
    CHECK(stats::printable("caf\xc3\xa9 \x7f\\ ok") == R"(caf\xc3\xa9 \x7f\ ok)");
    std::filesystem::remove_all(dir);
}

TEST_CASE("stats reader: a pid that runs as another user than the file's owner is flagged",
          "[unit][stats][process]") {
    const std::string dir = temp_dir();
    std::string bytes;
    {
        stats::Writer w;
        REQUIRE(w.open(dir));
        auto s = stats::read(w.path());
        REQUIRE(s.has_value());
        CHECK(s->process == stats::ProcessState::running);
        CHECK(s->file_uid == ::geteuid());
        bytes = slurp(w.path());
    }
    // Another user's process: a child that became nobody (root), else init (not root).
    pid_t child = -1;
    pid_t other = 1;
    if (::geteuid() == 0) {
        child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            if (::setgid(65534) != 0 || ::setuid(65534) != 0) {
                ::_exit(1);
            }
            ::pause();
            ::_exit(0);
        }
        other = child;
        for (int i = 0; i < 2000 && effective_uid(child) != 65534; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    const long other_uid = effective_uid(other);
    auto claim = [&](std::uint64_t pid) {
        std::string forged = bytes;
        std::memcpy(forged.data() + offsetof(stats::FileHeader, pid), &pid, sizeof pid);
        spit(dir + "/forged.stats", forged);
        auto s = stats::read(dir + "/forged.stats");
        REQUIRE(s.has_value());
        CHECK(s->pid == pid);
        return s->process;
    };
    if (other_uid >= 0 && static_cast<uid_t>(other_uid) != ::geteuid()) {
        CHECK(claim(static_cast<std::uint64_t>(other)) == stats::ProcessState::other_user);
    } else {
        WARN("no process of another user here: that claim was not checked");
    }
    CHECK(claim(static_cast<std::uint64_t>(::getpid())) == stats::ProcessState::running);
    CHECK(claim(4999999) == stats::ProcessState::exited);  // beyond pid_max
    CHECK(claim(0) == stats::ProcessState::exited);
    if (child > 0) {
        (void)::kill(child, SIGKILL);
        (void)::waitpid(child, nullptr, 0);
    }
    std::filesystem::remove_all(dir);
}
