// SPDX-License-Identifier: Apache-2.0
// execlog-fix: the ExecLog as a FIX 4.4 drop copy. A QuickFIX acceptor holds one session per
// account (TargetCompID A<account>); every record's ExecutionReports (35=8) and
// OrderCancelRejects (35=9) go into their account's session: stored in its FileStore with the
// session's own MsgSeqNum and sent when the firm is logged on; a firm that logs on later, or
// reconnects after a gap, gets what it missed by ResendRequest, from the store.
//
// Its position in the stream: --store DIR/execlog-fix.state (atomic, every 100 ms and on
// exit): the next record and, per session, the store's next MsgSeqNum at that moment. A
// restart (after kill -9 too) counts the application messages each store took after the
// checkpoint and does not send them again: each execution is in its session once, in order.
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

#include "../tools/tool_util.hpp"
#include "execlog/consumer.hpp"
#include "execlog/fix.hpp"
#include "execlog/fix_acceptor.hpp"
#include "execlog/record.hpp"

namespace {

constexpr const char* kTool = "execlog-fix";
constexpr const char* kStateHead = "execlog-fix-state 1";
constexpr std::int64_t kCheckpointNs = 100'000'000;

struct Args {
    execlog::ConsumerArgs consumer;
    std::uint16_t port = 0;
    std::string store;
    std::string accounts = "1-1000";
    std::string sender = "PRIZMA";
    bool verbose = false;
};

/// Where each session is: its store's next MsgSeqNum at the checkpoint, and how many of the
/// messages of records from `next` on it already holds (not to be sent again).
struct SessionMark {
    std::uint64_t base = 1;
    std::uint64_t pending = 0;
};

struct Position {
    std::uint64_t next = 0;
    std::map<std::uint32_t, SessionMark> sessions;  // by account
};

/// Reads the state file; an absent file is the start of the day (empty error).
std::string load_position(const std::string& path, Position& pos) {
    std::ifstream f(path);
    if (!f) {
        return errno == ENOENT
                   ? std::string{}
                   : fmt::format("cannot read '{}': {}", path,
                                 std::error_code(errno, std::system_category()).message());
    }
    std::string line;
    if (!std::getline(f, line) || line != kStateHead) {
        return fmt::format("'{}' is not an {} state file", path, kTool);
    }
    bool complete = false;
    while (std::getline(f, line)) {
        std::istringstream in(line);
        std::string word;
        in >> word;
        if (word == "next") {
            in >> pos.next;
        } else if (word == "session") {
            std::uint32_t a = 0;
            SessionMark m;
            in >> a >> m.base >> m.pending;
            pos.sessions[a] = m;
        } else if (word == "end") {
            complete = true;
        }
        if (in.fail()) {
            return fmt::format("'{}': bad line '{}'", path, line);
        }
    }
    return complete ? std::string{} : fmt::format("'{}' is cut short", path);
}

struct Stats {
    std::uint64_t messages = 0;
    std::uint64_t resumed = 0;  ///< not sent again after a restart: already in the store
    std::uint64_t no_session = 0;
    std::uint64_t unknown = 0;
    std::uint64_t lost = 0;
    std::uint64_t divergences = 0;
    bool ended = false;
};

class DropCopy {
public:
    DropCopy(execlog::FixAcceptor& fix, const Args& a) : fix_(fix), a_(a) {}

    /// From the state file and the stores: the next record, and each session's messages
    /// already stored past the checkpoint.
    std::string recover(const std::string& path) {
        Position pos;
        if (auto err = load_position(path, pos); !err.empty()) {
            return err;
        }
        next_ = pos.next;
        std::uint64_t held = 0;
        for (auto a = first_; a <= last_ && a != 0; ++a) {
            const auto it = pos.sessions.find(a);
            const SessionMark m = it == pos.sessions.end() ? SessionMark{} : it->second;
            pending_[a - first_] = m.pending + fix_.app_messages_since(a, m.base);
            held += pending_[a - first_];
        }
        fmt::print(stderr,
                   "{}: from sequence {}; {} messages of later records already in the "
                   "sessions' stores (not sent again)\n",
                   kTool, next_, held);
        return {};
    }

    void set_range(std::uint32_t first, std::uint32_t last) {
        first_ = first;
        last_ = last;
        pending_.assign(last - first + 1, 0);
    }
    [[nodiscard]] std::uint64_t next() const noexcept { return next_; }
    [[nodiscard]] const Stats& stats() const noexcept { return st_; }

    /// false: a session could not store a message (reported); stop.
    bool apply(const prizma::StreamEvent& e);

    /// The position now (between records): the state file's content.
    [[nodiscard]] std::string snapshot(std::uint64_t next) const {
        std::string s = fmt::format("{}\nnext {}\n", kStateHead, next);
        for (auto a = first_; a <= last_ && a != 0; ++a) {
            s +=
                fmt::format("session {} {} {}\n", a, fix_.next_sender_seq(a), pending_[a - first_]);
        }
        return s + "end\n";
    }

private:
    bool deliver(const execlog::FixMessage& m);

    execlog::FixAcceptor& fix_;
    const Args& a_;
    std::uint32_t first_ = 1;
    std::uint32_t last_ = 0;
    std::vector<std::uint64_t> pending_;  // by account - first_
    std::uint64_t next_ = 0;
    std::vector<execlog::FixMessage> msgs_;
    Stats st_;
};

bool DropCopy::deliver(const execlog::FixMessage& m) {
    if (!fix_.has_session(m.account)) {
        if (st_.no_session++ < 10) {
            fmt::print(stderr, "{}: no session for account {} (--accounts {}): message dropped\n",
                       kTool, m.account, a_.accounts);
        }
        return true;
    }
    std::uint64_t& pending = pending_[m.account - first_];
    if (pending > 0) {
        --pending;
        ++st_.resumed;
        return true;
    }
    std::string err;
    if (!fix_.send(m.account, m.msg_type, m.fields, err)) {
        fmt::print(stderr, "{}: {}\n", kTool, err);
        return false;
    }
    ++st_.messages;
    return true;
}

bool DropCopy::apply(const prizma::StreamEvent& e) {
    switch (e.kind) {
        case prizma::StreamEventKind::loss:
            st_.lost += e.count;
            fmt::print(stderr, "{}: LOSS: records [{}, {}) are lost for good\n", kTool, e.sequence,
                       e.sequence + e.count);
            return true;
        case prizma::StreamEventKind::stall:
            fmt::print(stderr, "{}: STALL: records from {} on may be lost (no archiver to ask)\n",
                       kTool, e.sequence);
            return true;
        case prizma::StreamEventKind::divergence:
            ++st_.divergences;
            fmt::print(stderr, "{}: DIVERGENCE: a copy of record {} from source {} differs\n",
                       kTool, e.sequence, execlog::tsi_text(e.source));
            return true;
        case prizma::StreamEventKind::dispute:
            fmt::print(stderr,
                       "{}: HALTED at record {}: the cores' {} copies differ and none has the "
                       "quorum; nothing is sent until the archive holds the operator's choice\n",
                       kTool, e.sequence, e.count);
            return true;
        case prizma::StreamEventKind::record: break;
        default: return true;
    }
    execlog::Record r;
    if (execlog::decode(e.payload, r) != execlog::DecodeStatus::ok) {
        if (st_.unknown++ < 10) {
            fmt::print(stderr, "{}: record {}: unknown record type {} ({} bytes; skipped)\n", kTool,
                       e.sequence, execlog::type_byte(e.payload), e.payload.size());
        }
        return true;
    }
    if (r.type == execlog::RecordType::session_end && !st_.ended) {
        st_.ended = true;
        fmt::print(stderr,
                   "{}: session end at record {}: every record is in its session; serving "
                   "logons and resends until stopped\n",
                   kTool, e.sequence);
    }
    msgs_.clear();
    execlog::fix_messages(e.sequence, r, msgs_);
    // In order, stopping at the first that cannot be stored.
    return std::ranges::all_of(msgs_, [this](const auto& m) { return deliver(m); });
}

/// "FIRST-LAST" (or one account).
bool parse_accounts(const std::string& text, std::uint32_t& first, std::uint32_t& last) {
    std::istringstream in(text);
    char dash = 0;
    if (!(in >> first)) {
        return false;
    }
    last = first;
    if (in >> dash && (dash != '-' || !(in >> last))) {
        return false;
    }
    std::string rest;
    return !(in >> rest) && first >= 1 && first <= last && last - first < 100'000;
}

/// Every session keeps four files open: take the hard limit of descriptors.
void raise_fd_limit() {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)::setrlimit(RLIMIT_NOFILE, &rl);  // best effort: QuickFIX reports a failed open
    }
}

void add_options(CLI::App& app, Args& a) {
    execlog::add_consumer_options(app, a.consumer);
    app.add_option("--listen", a.port, "TCP port the firms' FIX sessions connect to")
        ->required()
        ->check(prizma::tools::whole(1, 65535));
    app.add_option("--store", a.store,
                   "Directory of the sessions' stores (QuickFIX FileStore) and the state file")
        ->required();
    app.add_option("--accounts", a.accounts,
                   "Accounts with a session: FIRST-LAST (default 1-1000); TargetCompID A<n>");
    app.add_option("--sender-comp-id", a.sender, "SenderCompID (default PRIZMA)");
    app.add_flag("--verbose-sessions", a.verbose, "Print every session event");
}

void write_metrics(execlog::Metrics& m,
                   const Stats& st,
                   execlog::Feed& f,
                   const execlog::FixAcceptor& fix,
                   std::int64_t now) {
    m.feed(f, f.halted());
    m.counter(execlog::metric("execlog_fix_messages_total"), st.messages);
    m.counter(execlog::metric("execlog_fix_no_session_total"), st.no_session);
    m.gauge(execlog::metric("execlog_fix_sessions_logged_on"),
            static_cast<double>(fix.logged_on()));
    m.counter(execlog::metric("execlog_unknown_types_total"), st.unknown);
    m.publish(kTool, now);
}

int serve(execlog::FixAcceptor& fix, DropCopy& dc, const Args& a, const std::string& state_path) {
    auto ctx = prizma::tools::make_context(kTool);
    if (!ctx) {
        return 1;
    }
    auto feed = execlog::Feed::open(*ctx, a.consumer.feed, dc.next());
    if (!feed) {
        fmt::print(stderr, "{}: {}\n", kTool, feed.error().message());
        return 1;
    }
    execlog::Feed& f = **feed;
    std::string err;
    if (!fix.start(err)) {
        fmt::print(stderr, "{}: {}\n", kTool, err);
        return 1;
    }
    fmt::print(stderr, "{}: listening on port {} for {} sessions\n", kTool, a.port, a.accounts);
    execlog::Checkpointer checkpoint(state_path);
    std::int64_t saved_at = prizma::Context::now_ns();
    execlog::Metrics metrics(a.consumer.metrics, "fix", "fix");
    prizma::StreamEvent e;
    bool ok = true;
    while (ok && !prizma::tools::stop_requested()
           && !(a.consumer.exit_at_end && dc.stats().ended)) {
        const int work = ctx->poll();
        int n = 0;
        while (ok && n < 1024 && f.next(e)) {
            ok = dc.apply(e);
            ++n;
        }
        const std::int64_t now = prizma::Context::now_ns();
        if (ok && now - saved_at > kCheckpointNs) {
            saved_at = now;
            if (err = checkpoint.error(); !err.empty()) {
                fmt::print(stderr, "{}: {}\n", kTool, err);
                return 1;
            }
            checkpoint.submit(dc.snapshot(f.next_sequence()));
        }
        if (metrics.due(now)) {
            write_metrics(metrics, dc.stats(), f, fix, now);
        }
        if (work == 0 && n == 0) {
            execlog::idle(*ctx, f, a.consumer.spin);
        }
    }
    // A failed store write stops at the record before it: the checkpoint is at or before it.
    if (ok) {
        if (err = checkpoint.finish(dc.snapshot(f.next_sequence())); !err.empty()) {
            fmt::print(stderr, "{}: {}\n", kTool, err);
            return 1;
        }
    }
    write_metrics(metrics, dc.stats(), f, fix, prizma::Context::now_ns());
    const Stats& st = dc.stats();
    fmt::print(stderr,
               "{}: final: next {}, messages {}, not resent {}, no session {}, applied {}, "
               "skipped {}, late joins {}, lost {}, divergences {}, unknown types {}, "
               "logged on {}, cpu {:.3f} s\n",
               kTool, f.next_sequence(), st.messages, st.resumed, st.no_session,
               f.counters().delivered, f.counters().skipped, f.counters().late_joins, st.lost,
               st.divergences, st.unknown, fix.logged_on(), execlog::cpu_seconds());
    fix.stop();
    return ok ? 0 : 1;
}

int run(int argc, char** argv) {
    CLI::App app{"", kTool};
    prizma::tools::init(app,
                        "execlog-fix URI --listen PORT --store DIR [--accounts FIRST-LAST] "
                        "[options]",
                        "The ExecLog as a FIX 4.4 drop copy: one QuickFIX session per account.");
    Args a;
    add_options(app, a);
    if (const int rc = prizma::tools::parse(app, argc, argv); rc >= 0) {
        return rc;
    }
    std::uint32_t first = 0;
    std::uint32_t last = 0;
    if (!parse_accounts(a.accounts, first, last)) {
        fmt::print(stderr, "{}: --accounts '{}': want FIRST-LAST (1 <= FIRST <= LAST)\n", kTool,
                   a.accounts);
        return 2;
    }
    if (!execlog::finish_consumer_args(kTool, a.consumer)) {
        return 2;
    }
    ::umask(077);  // the stores hold every firm's executions: nobody else's business
    if (::mkdir(a.store.c_str(), 0700) != 0 && errno != EEXIST) {
        fmt::print(stderr, "{}: cannot make '{}': {}\n", kTool, a.store,
                   std::error_code(errno, std::system_category()).message());
        return 1;
    }
    raise_fd_limit();
    std::string err;
    execlog::FixAcceptorOptions o;
    o.port = a.port;
    o.store_dir = a.store;
    o.sender = a.sender;
    o.first_account = first;
    o.last_account = last;
    o.verbose_events = a.verbose;
    auto fix = execlog::FixAcceptor::create(o, err);
    if (!fix) {
        fmt::print(stderr, "{}: {}\n", kTool, err);
        return 1;
    }
    DropCopy dc(*fix, a);
    dc.set_range(first, last);
    const std::string state_path = a.store + "/execlog-fix.state";
    if (err = dc.recover(state_path); !err.empty()) {
        fmt::print(stderr, "{}: {}\n", kTool, err);
        return 1;
    }
    prizma::tools::stop_on_signals();
    return serve(*fix, dc, a, state_path);
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main(kTool, run, argc, argv);
}
