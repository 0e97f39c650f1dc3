// SPDX-License-Identifier: Apache-2.0
// Unit tests of the ExecLog example's parts: the atomic state-file writer (mode, planted
// symlinks, failures), the engine's price and quantity limits, the FIX renderer's numbers
// near those limits, and the recovery of a FIX output file with a bad tail.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "execlog/engine.hpp"
#include "execlog/feed.hpp"
#include "execlog/fix.hpp"
#include "execlog/record.hpp"

namespace {

namespace fs = std::filesystem;

/// A fresh directory, removed with its content at the end of the test.
struct TempDir {
    fs::path path;
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "execlog-unit-XXXXXX").string();
        REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        path = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
        fs::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    TempDir(TempDir&&) = delete;
    TempDir& operator=(TempDir&&) = delete;
    [[nodiscard]] std::string operator/(const char* name) const { return (path / name).string(); }
    [[nodiscard]] std::set<std::string> names() const {
        std::set<std::string> out;
        for (const auto& e : fs::directory_iterator(path)) {
            out.insert(e.path().filename().string());
        }
        return out;
    }
};

// read(2), not istreambuf_iterator: GCC 12 at -O3 warns (-Wnull-dereference) inside
// libstdc++'s streambuf there.
std::string slurp(const std::string& path) {
    std::string out;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return out;
    }
    char buf[65536];
    for (ssize_t n = 0; (n = ::read(fd, buf, sizeof buf)) > 0;) {
        out.append(buf, static_cast<std::size_t>(n));
    }
    (void)::close(fd);
    return out;
}

void spit(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
    REQUIRE(f.good());
}

unsigned mode_of(const std::string& path) {
    struct stat st {};
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    return st.st_mode & 07777U;
}

bool is_symlink(const std::string& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

bool is_regular(const std::string& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

/// Sets the umask for a scope: a checkpoint's 0600 must not come from the test's umask.
struct Umask {
    mode_t old;
    explicit Umask(mode_t m) : old(::umask(m)) {}
    ~Umask() { (void)::umask(old); }
    Umask(const Umask&) = delete;
    Umask& operator=(const Umask&) = delete;
    Umask(Umask&&) = delete;
    Umask& operator=(Umask&&) = delete;
};

}  // namespace

TEST_CASE("a state file is replaced whole, mode 0600, and no temporary file is left",
          "[execlog][state]") {
    const Umask um(022);  // the old writer's 0644 would survive this umask
    const TempDir d;
    const std::string state = d / "risk.state";
    spit(state, "old\n");
    REQUIRE(::chmod(state.c_str(), 0644) == 0);
    CHECK(execlog::write_file_atomically(state, "new state\n").empty());
    CHECK(slurp(state) == "new state\n");
    CHECK(mode_of(state) == 0600U);
    CHECK(d.names() == std::set<std::string>{"risk.state"});
    // A file that did not exist yet.
    const std::string fresh = d / "core.state";
    CHECK(execlog::write_file_atomically(fresh, "epoch 1\nnext 5\n").empty());
    CHECK(mode_of(fresh) == 0600U);
    CHECK(d.names() == std::set<std::string>{"risk.state", "core.state"});
}

TEST_CASE("a symlink planted at the temporary or the final name is never written through",
          "[execlog][state]") {
    const TempDir d;
    const std::string victim = d / "victim";
    spit(victim, "precious\n");
    const std::string state = d / "risk.state";
    // The old writer's fixed temporary name: it opened it with O_CREAT|O_TRUNC, following the
    // link, truncated the victim and renamed the link over the state file.
    REQUIRE(::symlink(victim.c_str(), (d / "risk.state.tmp").c_str()) == 0);
    CHECK(execlog::write_file_atomically(state, "checkpoint 1\n").empty());
    CHECK(slurp(victim) == "precious\n");
    CHECK(is_regular(state));
    CHECK(slurp(state) == "checkpoint 1\n");
    CHECK(is_symlink(d / "risk.state.tmp"));  // left alone
    // A symlink at the final name is replaced by the file, not written through.
    const std::string linked = d / "core.state";
    REQUIRE(::symlink(victim.c_str(), linked.c_str()) == 0);
    CHECK(execlog::write_file_atomically(linked, "epoch 1\n").empty());
    CHECK(slurp(victim) == "precious\n");
    CHECK(is_regular(linked));
    CHECK(slurp(linked) == "epoch 1\n");
}

TEST_CASE("a state file that cannot be written is reported and leaves the old one",
          "[execlog][state]") {
    const TempDir d;
    SECTION("its directory is a file") {
        const std::string file = d / "file";
        spit(file, "x");
        const std::string err = execlog::write_file_atomically(file + "/risk.state", "s\n");
        INFO(err);
        CHECK(err.find(file + "/risk.state") != std::string::npos);
        CHECK(err.find("Not a directory") != std::string::npos);
        CHECK(d.names() == std::set<std::string>{"file"});
    }
    SECTION("its directory is not writable (non-root only: root writes anyway)") {
        if (::geteuid() == 0) {
            WARN("running as root: a mode 0500 directory does not stop root");
            return;
        }
        REQUIRE(::chmod(d.path.c_str(), 0500) == 0);
        const std::string err = execlog::write_file_atomically(d / "risk.state", "s\n");
        INFO(err);
        CHECK(err.find("Permission denied") != std::string::npos);
    }
    SECTION("a write fails half-way (RLIMIT_FSIZE): the old file stays, the temporary goes") {
        const std::string state = d / "risk.state";
        spit(state, "old\n");
        struct rlimit old {};
        REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
        auto* const prev = std::signal(SIGXFSZ, SIG_IGN);  // write() fails with EFBIG instead
        struct rlimit small = old;
        small.rlim_cur = 4096;
        REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
        const std::string err = execlog::write_file_atomically(state, std::string(10000, 'x'));
        REQUIRE(::setrlimit(RLIMIT_FSIZE, &old) == 0);
        (void)std::signal(SIGXFSZ, prev);
        INFO(err);
        CHECK(err.find("cannot write") != std::string::npos);
        CHECK(err.find("File too large") != std::string::npos);
        CHECK(slurp(state) == "old\n");
        CHECK(d.names() == std::set<std::string>{"risk.state"});
    }
    SECTION("the Checkpointer reports the error from its thread") {
        const std::string file = d / "file";
        spit(file, "x");
        execlog::Checkpointer c(file + "/risk.state");
        c.submit(std::string("s1\n"));
        const std::string err = c.finish("s2\n");
        INFO(err);
        CHECK(err.find("Not a directory") != std::string::npos);
    }
}

namespace {

execlog::Input order(std::uint64_t id,
                     execlog::Side side,
                     execlog::OrdType type,
                     std::uint32_t qty,
                     std::int64_t price) {
    execlog::Input in;
    in.kind = execlog::Input::Kind::new_order;
    in.time_ns = 1000 + id;
    in.request_id = id;
    in.account = static_cast<std::uint32_t>(id);
    in.side = side;
    in.ord_type = type;
    in.tif = type == execlog::OrdType::market ? execlog::Tif::ioc : execlog::Tif::day;
    in.qty = qty;
    in.price = price;
    return in;
}

std::vector<execlog::Record> run(execlog::Engine& e, const execlog::Input& in) {
    std::vector<execlog::Record> out;
    e.process(in, out);
    return out;
}

}  // namespace

TEST_CASE("the engine refuses a price or quantity past its limits and trades at them",
          "[execlog][engine]") {
    using execlog::kMaxPrice;
    using execlog::kMaxQty;
    using execlog::OrdType;
    using execlog::RecordType;
    using execlog::Reject;
    using execlog::Side;
    constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
    STATIC_REQUIRE(kMaxPrice == 9'223'372'036'854);
    execlog::Engine e(4);
    // A sell near 2^63 would rest, and the next buy would compute its notional: refused.
    auto out = run(e, order(1, Side::sell, OrdType::limit, 10, kInt64Max - 5));
    REQUIRE(out.size() == 1);
    CHECK(out[0].type == RecordType::rejected);
    CHECK(out[0].reason == Reject::bad_price);
    CHECK(out[0].price == kInt64Max - 5);
    out = run(e, order(2, Side::sell, OrdType::limit, 1, kMaxPrice + 1));
    REQUIRE(out.size() == 1);
    CHECK(out[0].reason == Reject::bad_price);
    out = run(e, order(3, Side::sell, OrdType::limit, kMaxQty + 1, 100));
    REQUIRE(out.size() == 1);
    CHECK(out[0].reason == Reject::bad_quantity);
    CHECK(e.counters().rejected == 3);
    CHECK(e.counters().out_of_range == 3);
    CHECK(e.resting_orders() == 0);
    // Honest orders at both limits: the largest notional there is.
    out = run(e, order(4, Side::sell, OrdType::limit, kMaxQty, kMaxPrice));
    REQUIRE(out.size() == 1);
    CHECK(out[0].type == RecordType::accepted);
    out = run(e, order(5, Side::buy, OrdType::market, kMaxQty, 0));
    REQUIRE(out.size() == 2);
    CHECK(out[1].type == RecordType::trade);
    CHECK(out[1].price == kMaxPrice);
    CHECK(out[1].last_qty == kMaxQty);
    CHECK(out[1].notional == kMaxPrice * kMaxQty);
    CHECK(out[1].maker_notional == kMaxPrice * kMaxQty);
    CHECK(out[1].maker_order_id == 4);
    CHECK(e.resting_orders() == 0);
    CHECK(e.counters().rejected == 3);
}

TEST_CASE("a replace may not take an order's quantity past kMaxQty", "[execlog][engine]") {
    using execlog::kMaxQty;
    using execlog::OrdType;
    using execlog::RecordType;
    using execlog::Reject;
    using execlog::Side;
    execlog::Engine e(1);
    (void)run(e, order(1, Side::buy, OrdType::limit, 10, 1000));
    auto out = run(e, order(2, Side::sell, OrdType::limit, 4, 1000));  // fills 4 of order 1
    REQUIRE(out.size() == 2);
    REQUIRE(out[1].type == RecordType::trade);
    execlog::Input rep;
    rep.kind = execlog::Input::Kind::replace;
    rep.request_id = 3;
    rep.account = 1;
    rep.target_order = 1;
    rep.qty = kMaxQty - 3;  // 4 filled + this: one lot too many
    rep.price = 1000;
    out = run(e, rep);
    REQUIRE(out.size() == 1);
    CHECK(out[0].type == RecordType::rejected);
    CHECK(out[0].reason == Reject::bad_quantity);
    CHECK(e.counters().out_of_range == 1);
    rep.request_id = 4;
    rep.qty = kMaxQty - 4;
    out = run(e, rep);
    REQUIRE(out.size() == 1);
    CHECK(out[0].type == RecordType::replaced);
    CHECK(out[0].order_qty == kMaxQty);
    CHECK(out[0].cum == 4);
}

namespace {

/// The value of `tag` in the first message of `fix` ('|'-delimited), or "-".
std::string tag_value(const std::string& fix, const std::string& tag) {
    const std::string key = "|" + tag + "=";
    const auto at = fix.find(key);
    if (at == std::string::npos) {
        return "-";
    }
    const auto v = at + key.size();
    return fix.substr(v, fix.find('|', v) - v);
}

execlog::Record accepted(std::uint64_t id) {
    execlog::Record r;
    r.type = execlog::RecordType::accepted;
    r.time_ns = 1'767'605'400'000'000'000ULL + id;
    r.order_id = id;
    r.request_id = id;
    r.account = 7;
    r.order_qty = 10;
    r.price = 1000;
    r.leaves = 10;
    return r;
}

execlog::Record trade(std::uint64_t id) {
    execlog::Record r = accepted(id);
    r.type = execlog::RecordType::trade;
    r.last_qty = 10;
    r.leaves = 0;
    r.cum = 10;
    r.notional = 10000;
    r.maker_account = 8;
    r.maker_order_id = id - 1;
    r.maker_request_id = id - 1;
    r.maker_cum = 10;
    r.maker_notional = 10000;
    return r;
}

}  // namespace

TEST_CASE("FIX prices and AvgPx at the engine's limits and past them", "[execlog][fix]") {
    execlog::Record r = trade(2);
    r.price = execlog::kMaxPrice;
    r.last_qty = execlog::kMaxQty;
    r.cum = execlog::kMaxQty;
    r.notional = execlog::kMaxPrice * execlog::kMaxQty;
    execlog::FixRenderer fix('|');
    std::string out;
    REQUIRE(fix.render(1, r, out) == 2);
    CHECK(tag_value(out, "31") == "92233720368.54");
    CHECK(tag_value(out, "6") == "92233720368.5400");  // notional x 100 would not fit an int64
    // Fields off the wire are not trusted: no overflow on the most negative values either.
    r.price = std::numeric_limits<std::int64_t>::min();
    r.notional = std::numeric_limits<std::int64_t>::min();
    r.cum = 1;
    out.clear();
    REQUIRE(fix.render(2, r, out) == 2);
    CHECK(tag_value(out, "31") == "-92233720368547758.08");
    CHECK(tag_value(out, "6") == "-92233720368547758.0800");
    r.notional = 10001;  // over 3 lots: 3333.67 ticks, shown as 33.3366 (truncated)
    r.cum = 3;
    out.clear();
    REQUIRE(fix.render(3, r, out) == 2);
    CHECK(tag_value(out, "6") == "33.3366");
}

TEST_CASE("FIX recovery keeps the whole records before a bad tail, and says why",
          "[execlog][fix]") {
    execlog::FixRenderer fix('|');
    std::string good;
    (void)fix.render(0, accepted(1), good);
    (void)fix.render(1, accepted(2), good);
    (void)fix.render(2, trade(3), good);  // two messages
    const auto check_kept = [&](const execlog::FixRecovery& rec) {
        CHECK(rec.keep_bytes == good.size());
        CHECK(rec.next_sequence == 3);
        CHECK(rec.next_msg_seq == 5);
        CHECK(rec.messages == 4);
    };
    SECTION("a whole file") {
        const auto rec = execlog::recover_fix(good, '|');
        check_kept(rec);
        CHECK(rec.problem.empty());
    }
    SECTION("BodyLength 999999999") {
        const auto rec = execlog::recover_fix(good + "8=FIX.4.4|9=999999999|35=8|49=PRIZMA|", '|');
        check_kept(rec);
        CHECK(rec.problem_at == good.size());
        CHECK(rec.problem
              == "BodyLength(9) 999999999 runs past the end of the file (15 bytes left)");
    }
    SECTION("a BodyLength that wraps the offset past 2^64 (it threw std::out_of_range)") {
        const std::string tail = "8=FIX.4.4|9=18446744073709551580|35=8|49=PRIZMA|";
        execlog::FixRecovery rec;
        REQUIRE_NOTHROW(rec = execlog::recover_fix(good + tail, '|'));
        check_kept(rec);
        CHECK(rec.problem.find("BodyLength(9) 18446744073709551580 runs past the end")
              != std::string::npos);
        REQUIRE_NOTHROW(rec = execlog::recover_fix(tail, '|'));
        CHECK(rec.keep_bytes == 0);
        CHECK(rec.next_sequence == 0);
    }
    SECTION("a BodyLength that is no number, or too big for one") {
        auto rec = execlog::recover_fix(good + "8=FIX.4.4|9=99999999999999999999|35=8|", '|');
        check_kept(rec);
        CHECK(rec.problem == "BodyLength(9) '99999999999999999999' is not a number");
        rec = execlog::recover_fix(good + "8=FIX.4.4|9=-5|35=8|", '|');
        check_kept(rec);
        CHECK(rec.problem == "BodyLength(9) '-5' is not a number");
    }
    SECTION("a torn tail: each prefix of a next message") {
        std::string next;
        (void)execlog::FixRenderer('|', 5).render(3, accepted(4), next);
        for (std::size_t n = 1; n < next.size(); ++n) {
            const auto rec = execlog::recover_fix(good + next.substr(0, n), '|');
            INFO(n << " bytes: " << rec.problem);
            CHECK(rec.keep_bytes == good.size());
            CHECK(!rec.problem.empty());
        }
        const auto rec = execlog::recover_fix(good + next, '|');
        CHECK(rec.keep_bytes == good.size() + next.size());
        CHECK(rec.next_sequence == 4);
    }
    SECTION("a trade with one of its two legs: the record is not complete") {
        std::string t;
        (void)execlog::FixRenderer('|', 5).render(3, trade(4), t);
        const std::string first_leg = t.substr(0, t.find("8=FIX", 1));
        const auto rec = execlog::recover_fix(good + first_leg, '|');
        check_kept(rec);
        CHECK(rec.problem == "the last record's messages are incomplete");
    }
    SECTION("a bad CheckSum in the middle: nothing after it is kept") {
        std::string bad = good;
        bad[bad.find("|10=") + 4] = bad[bad.find("|10=") + 4] == '9' ? '8' : '9';
        const auto rec = execlog::recover_fix(bad, '|');
        CHECK(rec.keep_bytes == 0);
        CHECK(rec.problem_at == 0);
        CHECK(rec.problem.find("CheckSum(10)") == 0);
    }
}
