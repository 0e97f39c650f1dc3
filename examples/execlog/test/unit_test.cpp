// SPDX-License-Identifier: Apache-2.0
// Unit tests of the ExecLog example's parts: the atomic state-file writer (mode, planted
// symlinks, failures), the engine's price and quantity limits, the FIX renderer's numbers
// near those limits, and the recovery of a FIX output file with a bad tail.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "execlog/divergence.hpp"
#include "execlog/engine.hpp"
#include "execlog/feed.hpp"
#include "execlog/fix.hpp"
#include "execlog/fix_acceptor.hpp"
#include "execlog/metrics.hpp"
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

TEST_CASE("metrics: the text format, each family once, the file replaced whole",
          "[execlog][metrics]") {
    TempDir dir;
    execlog::MetricsArgs args;
    args.file = dir / "risk.prom";
    execlog::Metrics m(args, "risk", "a\"b\\c\nd");
    const execlog::MetricFamily x{"execlog_x_total", "counter", "Xs"};
    const execlog::MetricFamily y{"execlog_y_total", "counter", "Ys"};
    const execlog::MetricFamily g{"execlog_g", "gauge", "G"};
    REQUIRE(m.due(0));
    m.counter(x, 7);
    m.counter(y, 1, "source=\"s1\"");
    m.counter(y, 2, "source=\"s2\"");
    m.gauge(g, 0.5);
    REQUIRE(m.write(5).empty());
    CHECK_FALSE(m.due(5 + 999'999'999));
    CHECK(m.due(5 + 1'000'000'000));
    const std::string text = slurp(args.file);
    const std::string labels = "role=\"risk\",name=\"a\\\"b\\\\c\\nd\"";
    CHECK(text.find("# HELP execlog_x_total Xs\n# TYPE execlog_x_total counter\nexeclog_x_total{"
                    + labels + "} 7\n")
          != std::string::npos);
    CHECK(text.find("execlog_y_total{" + labels + ",source=\"s1\"} 1\nexeclog_y_total{" + labels
                    + ",source=\"s2\"} 2\n")
          != std::string::npos);
    std::size_t helps = 0;
    for (std::size_t at = 0; (at = text.find("# HELP execlog_y_total", at)) != std::string::npos;
         ++at) {
        ++helps;
    }
    CHECK(helps == 1);
    CHECK(text.find("execlog_g{" + labels + "} 0.5\n") != std::string::npos);
    CHECK(text.find("execlog_up{" + labels + "} 1\n") != std::string::npos);
    CHECK(text.find("execlog_metrics_written_seconds{") != std::string::npos);
    CHECK(dir.names() == std::set<std::string>{"risk.prom"});  // no temporary left
    struct stat st {};
    REQUIRE(::stat(args.file.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777U) == 0644U);
    // The next write holds only what was set since: nothing of the first set repeats.
    m.counter(x, 8);
    REQUIRE(m.write(2'000'000'000).empty());
    const std::string text2 = slurp(args.file);
    CHECK(text2.find("} 8\n") != std::string::npos);
    CHECK(text2.find("execlog_y_total") == std::string::npos);
}

TEST_CASE("metrics: disabled writes nothing; an unwritable directory is an error",
          "[execlog][metrics]") {
    const execlog::MetricFamily x{"execlog_x_total", "counter", "Xs"};
    const execlog::MetricFamily g{"execlog_g", "gauge", "G"};
    execlog::Metrics off(execlog::MetricsArgs{}, "core", "core-a");
    CHECK_FALSE(off.enabled());
    CHECK_FALSE(off.due(INT64_MAX / 2));
    off.counter(x, 1);
    CHECK(off.write(1).empty());
    execlog::MetricsArgs bad;
    bad.file = "/nonexistent-dir/x.prom";
    execlog::Metrics m(bad, "core", "core-a");
    m.gauge(g, 1);
    const std::string err = m.write(1);
    CHECK(err.find("/nonexistent-dir/x.prom") != std::string::npos);
}

TEST_CASE("metrics: docs/EXECLOG.md's table lists exactly the families the programs write",
          "[execlog][metrics]") {
    // The names in the first column of the table under "### Metrics (Prometheus)", each in
    // backquotes (labels such as {source=...} cut off).
    std::ifstream doc(EXECLOG_DOC);
    REQUIRE(doc);
    std::set<std::string> documented;
    std::string line;
    bool in_section = false;
    while (std::getline(doc, line)) {
        if (line.starts_with("#")) {
            in_section = line == "### Metrics (Prometheus)";
            continue;
        }
        if (!in_section || !line.starts_with("| `")) {
            continue;
        }
        const std::string cell = line.substr(1, line.find('|', 1) - 1);
        for (std::size_t at = cell.find('`'); at != std::string::npos;) {
            const std::size_t end = cell.find('`', at + 1);
            REQUIRE(end != std::string::npos);
            const std::string name = cell.substr(at + 1, end - at - 1);
            documented.insert(name.substr(0, name.find('{')));
            at = cell.find('`', end + 1);
        }
    }
    std::set<std::string> written;
    for (const auto& f : execlog::kMetricFamilies) {
        CHECK((f.type == "counter" || f.type == "gauge"));
        CHECK(written.insert(std::string(f.name)).second);  // each family once
    }
    CHECK(documented == written);
}

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
    CHECK(out[0].type == RecordType::replace_rejected);
    CHECK(out[0].reason == Reject::bad_quantity);
    CHECK(out[0].orig_request_id == 1);  // the order's request: its OrigClOrdID
    CHECK(out[0].cum == 4);              // the order as it stands
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

/// The value of `tag` in `m`, or "-".
std::string tag_value(const execlog::FixMessage& m, int tag) {
    for (const auto& [t, v] : m.fields) {
        if (t == tag) {
            return v;
        }
    }
    return "-";
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
    std::vector<execlog::FixMessage> out;
    REQUIRE(execlog::fix_messages(1, r, out) == 2);
    CHECK(tag_value(out[0], 31) == "92233720368.54");
    CHECK(tag_value(out[0], 6) == "92233720368.5400");  // notional x 100 would not fit an int64
    CHECK(out[0].account == 7);
    CHECK(out[1].account == 8);
    CHECK(tag_value(out[1], 54) == "2");  // the resting order's side
    CHECK(tag_value(out[0], 17) == "1-1");
    CHECK(tag_value(out[1], 17) == "1-2");
    // Fields off the wire are not trusted: no overflow on the most negative values either.
    r.price = std::numeric_limits<std::int64_t>::min();
    r.notional = std::numeric_limits<std::int64_t>::min();
    r.cum = 1;
    out.clear();
    REQUIRE(execlog::fix_messages(2, r, out) == 2);
    CHECK(tag_value(out[0], 31) == "-92233720368547758.08");
    CHECK(tag_value(out[0], 6) == "-92233720368547758.0800");
}

TEST_CASE("FIX AvgPx is rounded half away from zero to its 4 decimals", "[execlog][fix]") {
    CHECK(execlog::fix_avg_px(10001, 3) == "33.3367");  // 3333.666... ticks
    CHECK(execlog::fix_avg_px(10000, 3) == "33.3333");
    CHECK(execlog::fix_avg_px(1, 200) == "0.0001");  // 0.00005: half, away from zero
    CHECK(execlog::fix_avg_px(1, 201) == "0.0000");
    CHECK(execlog::fix_avg_px(-1, 200) == "-0.0001");
    CHECK(execlog::fix_avg_px(19999, 2) == "99.9950");
    CHECK(execlog::fix_avg_px(199999, 2000) == "1.0000");  // 0.999995: the carry reaches the units
    CHECK(execlog::fix_avg_px(5, 0) == "0");
    // (2^63 - 1) / 3 ticks = 30744573456182586.0233... units: exact where a double is not.
    CHECK(execlog::fix_avg_px(std::numeric_limits<std::int64_t>::max(), 3)
          == "30744573456182586.0233");
}

TEST_CASE("FIX 4.4 codes: OrdRejReason, CxlRejReason, ExecType and OrdStatus", "[execlog][fix]") {
    using execlog::Reject;
    CHECK(execlog::ord_rej_reason(Reject::unknown_instrument) == 1);  // Unknown symbol
    CHECK(execlog::ord_rej_reason(Reject::bad_quantity) == 13);       // Incorrect quantity
    CHECK(execlog::ord_rej_reason(Reject::bad_price) == 99);          // Other
    CHECK(execlog::ord_rej_reason(Reject::unknown_order) == 6);       // Duplicate order
    CHECK(execlog::cxl_rej_reason(Reject::unknown_order) == 1);       // Unknown order
    CHECK(execlog::cxl_rej_reason(Reject::not_owner) == 2);           // Broker/Exchange option
    CHECK(execlog::cxl_rej_reason(Reject::bad_quantity) == 99);

    std::vector<execlog::FixMessage> out;
    execlog::Record rej = accepted(5);
    rej.type = execlog::RecordType::cancel_rejected;
    rej.reason = Reject::unknown_order;
    rej.order_id = 3;
    rej.orig_request_id = 3;
    rej.leaves = 0;
    REQUIRE(execlog::fix_messages(9, rej, out) == 1);
    CHECK(out[0].msg_type == '9');
    CHECK(tag_value(out[0], 37) == "NONE");  // FIX 4.4: the order is unknown
    CHECK(tag_value(out[0], 41) == "3");
    CHECK(tag_value(out[0], 39) == "8");
    CHECK(tag_value(out[0], 434) == "1");
    CHECK(tag_value(out[0], 102) == "1");
    CHECK(tag_value(out[0], 17) == "-");  // no ExecID on an OrderCancelReject
    CHECK(tag_value(out[0], 55) == "-");  // nor Symbol, nor Side: 4.4 defines none there

    out.clear();
    rej.type = execlog::RecordType::replace_rejected;
    rej.reason = Reject::not_owner;
    rej.cum = 4;
    REQUIRE(execlog::fix_messages(10, rej, out) == 1);
    CHECK(tag_value(out[0], 37) == "3");
    CHECK(tag_value(out[0], 39) == "1");  // the order stands, partially filled
    CHECK(tag_value(out[0], 434) == "2");
    CHECK(tag_value(out[0], 102) == "2");

    out.clear();
    execlog::Record rep = accepted(6);
    rep.type = execlog::RecordType::replaced;
    rep.orig_request_id = 2;
    REQUIRE(execlog::fix_messages(11, rep, out) == 1);
    CHECK(tag_value(out[0], 150) == "5");
    CHECK(tag_value(out[0], 39) == "0");  // not 5: retired in 4.4; the order's state
    CHECK(tag_value(out[0], 41) == "2");
    rep.cum = 3;
    out.clear();
    (void)execlog::fix_messages(12, rep, out);
    CHECK(tag_value(out[0], 39) == "1");

    out.clear();
    execlog::Record bad = accepted(7);
    bad.type = execlog::RecordType::rejected;
    bad.reason = Reject::bad_quantity;
    REQUIRE(execlog::fix_messages(13, bad, out) == 1);
    CHECK(tag_value(out[0], 150) == "8");
    CHECK(tag_value(out[0], 39) == "8");
    CHECK(tag_value(out[0], 103) == "13");
    CHECK(tag_value(out[0], 151) == "0");

    out.clear();
    execlog::Record end;
    end.type = execlog::RecordType::session_end;
    CHECK(execlog::fix_messages(14, end, out) == 0);
}

namespace {
/// A TCP port of 127.0.0.1 that was free a moment ago.
std::uint16_t free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    ::close(fd);
    return ntohs(a.sin_port);
}
}  // namespace

TEST_CASE(
    "a session's store: messages kept while nobody is logged on, counted after a "
    "checkpoint",
    "[execlog][fix]") {
    TempDir dir;
    const std::string store = (dir.path / "store").string();
    fs::create_directories(store);
    execlog::FixAcceptorOptions o;
    // Never started, but QuickFIX binds its port when the acceptor is made: a free one above
    // 1024 (a user may not bind port 1).
    o.port = free_port();
    o.store_dir = store;
    o.first_account = 7;
    o.last_account = 8;
    std::string err;
    {
        auto fix = execlog::FixAcceptor::create(o, err);
        INFO(err);
        REQUIRE(fix != nullptr);
        CHECK(fix->has_session(7));
        CHECK_FALSE(fix->has_session(9));
        CHECK(fix->next_sender_seq(7) == 1);
        std::vector<execlog::FixMessage> out;
        (void)execlog::fix_messages(1, accepted(1), out);
        (void)execlog::fix_messages(2, trade(2), out);  // A7, then A8
        for (const auto& m : out) {
            REQUIRE(fix->send(m.account, m.msg_type, m.fields, err));
        }
        CHECK_FALSE(fix->send(9, '8', out[0].fields, err));
        CHECK(err == "no session for account 9");
        CHECK(fix->next_sender_seq(7) == 3);
        CHECK(fix->next_sender_seq(8) == 2);
        CHECK(fix->app_messages_since(7, 1) == 2);
        CHECK(fix->app_messages_since(7, 2) == 1);
        CHECK(fix->app_messages_since(8, 1) == 1);
        CHECK(fix->logged_on() == 0);
    }
    // A restart reads the same stores: the sequence numbers go on.
    auto again = execlog::FixAcceptor::create(o, err);
    REQUIRE(again != nullptr);
    CHECK(again->next_sender_seq(7) == 3);
    CHECK(again->app_messages_since(7, 1) == 2);
    CHECK(again->app_messages_since(7, 99) == 2);  // a base past the end: the store was reset
}

TEST_CASE("divergence: the marker holds both copies, the decision names its record",
          "[execlog][divergence]") {
    TempDir dir;
    const std::string path = (dir.path / "journal.divergences").string();
    execlog::Divergence d;
    d.sequence = 20000;
    d.journaled.sport = 1;
    d.differing.sport = 2;
    const std::vector<std::byte> a{std::byte{0x01}, std::byte{0xab}};
    const std::vector<std::byte> b{std::byte{0x01}, std::byte{0xaa}};
    const std::string line =
        execlog::divergence_marker(d, std::span<const std::byte>(a), std::span<const std::byte>(b));
    CHECK(line.starts_with("divergence record 20000 journaled "));
    CHECK(line.find(".1 01ab differing ") != std::string::npos);
    CHECK(line.ends_with(".2 01aa\n"));
    CHECK(execlog::divergence_marker(d, std::nullopt, std::span<const std::byte>(b))
              .find(".1 - differing")
          != std::string::npos);
    REQUIRE(execlog::append_durably(path, line).empty());
    REQUIRE(execlog::append_durably(path, line).empty());
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777U) == 0600U);
    CHECK(std::filesystem::file_size(path) == 2 * line.size());

    const std::string decision = (dir.path / "journal.decision").string();
    CHECK_FALSE(execlog::read_decision(decision, 20000));  // none yet
    std::ofstream(decision) << "continue 19999\n";
    CHECK_FALSE(execlog::read_decision(decision, 20000));  // an older halt's decision
    std::ofstream(decision) << "continue 20000\n";
    CHECK(execlog::read_decision(decision, 20000)->what == execlog::Decision::go_on);
    std::ofstream(decision) << "stop 20000\n";
    CHECK(execlog::read_decision(decision, 20000)->what == execlog::Decision::stop);
    std::ofstream(decision) << "maybe 20000\n";
    CHECK_FALSE(execlog::read_decision(decision, 20000));
    std::ofstream(decision) << "use 20000\n";  // which copy?
    CHECK_FALSE(execlog::read_decision(decision, 20000));
    std::ofstream(decision) << "use 20000 core-b.7\n";
    const auto use = execlog::read_decision(decision, 20000);
    REQUIRE(use);
    CHECK(use->what == execlog::Decision::use);
    CHECK(use->which == "core-b.7");

    // A dispute's copies, named by source or by checksum.
    prizma::Tsi ta{*execlog::core_gsi("core-a"), 7};
    prizma::Tsi tb{*execlog::core_gsi("core-b"), 7};
    const std::vector<prizma::DisputedCopy> copies{{ta, 0x1234, 1, b}, {tb, 0xabcdef, 1, b}};
    CHECK(execlog::pick_copy(copies, "core-b.7") == 0xabcdefU);
    CHECK(execlog::pick_copy(copies, "0000000000001234") == 0x1234U);
    CHECK_FALSE(execlog::pick_copy(copies, "core-c.7"));
    CHECK_FALSE(execlog::pick_copy(copies, "1234"));
    const std::string dl = execlog::dispute_marker(20001, copies);
    CHECK(dl == "dispute record 20001 copy core-a.7 0000000000001234 01aa copy core-b.7 "
                "0000000000abcdef 01aa\n");
}

TEST_CASE("execlog: a core's name is its GSI, and every consumer prints it", "[execlog]") {
    const auto g = execlog::core_gsi("core-a");
    REQUIRE(g);
    CHECK(execlog::tsi_text(prizma::Tsi{*g, 4242}) == "core-a.4242");
    CHECK(execlog::tsi_text(prizma::Tsi{*execlog::core_gsi("b"), 1}) == "b.1");
    CHECK_FALSE(execlog::core_gsi(""));
    CHECK_FALSE(execlog::core_gsi("core-ab"));  // 7 bytes: a GSI has 6
    CHECK_FALSE(execlog::core_gsi("co re"));
    prizma::Gsi random{};
    random.bytes = {0x0a, 0xff, 0x00, 0x41, 0x00, 0x00};
    CHECK(execlog::tsi_text(prizma::Tsi{random, 9}) == "0aff00410000.9");
}
