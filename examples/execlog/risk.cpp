// SPDX-License-Identifier: Apache-2.0
// execlog-risk: positions, exposure and P&L per account from the ExecLog's trades, printed
// periodically and on exit. Its state (and the last applied sequence) is checkpointed
// atomically to --state, so a restarted risk engine resumes exactly where its state is.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

#include "../tools/tool_util.hpp"
#include "execlog/consumer.hpp"
#include "execlog/input.hpp"
#include "execlog/record.hpp"

namespace {

constexpr const char* kTool = "execlog-risk";

struct Position {
    std::int64_t qty = 0;
    std::int64_t cash = 0;  // ticks x lots: sells add, buys subtract
    std::uint64_t bought = 0;
    std::uint64_t sold = 0;
};

/// Positions by (account, instrument): rows in a flat vector (a checkpoint copies it in one
/// go), found through a sorted index (iteration in key order).
class Positions {
public:
    struct Row {
        std::uint32_t account = 0;
        std::uint16_t instrument = 0;
        Position p;
    };
    /// The row, made if missing. A reference stays valid until the next new row.
    Position& at(std::uint32_t account, std::uint16_t instrument) {
        const auto [it, fresh] = index_.try_emplace({account, instrument}, rows_.size());
        if (fresh) {
            rows_.push_back({account, instrument, {}});
        }
        return rows_[it->second].p;
    }
    template <typename F>
    void each(F&& f) const {  // in (account, instrument) order
        for (const auto& [key, i] : index_) {
            f(key.first, key.second, rows_[i].p);
        }
    }
    [[nodiscard]] const std::vector<Row>& rows() const noexcept { return rows_; }

private:
    std::map<std::pair<std::uint32_t, std::uint16_t>, std::size_t> index_;
    std::vector<Row> rows_;
};

/// What a checkpoint holds, copied out of the engine cheaply (flat vectors) so that it can be
/// formatted on the checkpoint thread.
// The state file counts records by type: [0] not 112 bytes, [1..9] each type, [10] unknown.
constexpr std::size_t kUnknownSlot = execlog::kMaxRecordType + 1;
constexpr std::size_t kTypeSlots = kUnknownSlot + 1;

struct Snapshot {
    std::uint64_t next = 0;
    std::uint64_t lost = 0;
    std::uint64_t divergences = 0;
    std::array<std::uint64_t, kTypeSlots> types{};
    std::vector<std::pair<std::uint16_t, std::int64_t>> last_px;  // by instrument
    std::vector<Positions::Row> rows;                             // any order
    [[nodiscard]] std::string text();
};

std::string Snapshot::text() {
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
        return std::pair(a.account, a.instrument) < std::pair(b.account, b.instrument);
    });
    std::string s = fmt::format("execlog-risk-state 2\nnext {}\nlost {}\ndivergences {}\ntypes",
                                next, lost, divergences);
    for (const auto t : types) {
        s += fmt::format(" {}", t);
    }
    s += '\n';
    for (const auto& [instr, px] : last_px) {
        s += fmt::format("last {} {}\n", instr, px);
    }
    for (const auto& r : rows) {
        s += fmt::format("pos {} {} {} {} {} {}\n", r.account, r.instrument, r.p.qty, r.p.cash,
                         r.p.bought, r.p.sold);
    }
    return s + "end\n";
}

// Exposure and P&L sums: an account's sum of |position| x price does not fit an int64 once
// its positions are large (a price may be up to execlog::kMaxPrice).
__extension__ using Wide = __int128;

class Risk {
public:
    /// false: `e` is a trade that would take a position past the int64 range; nothing of it
    /// is applied (reported).
    bool apply(const prizma::StreamEvent& e);
    [[nodiscard]] Snapshot snapshot(std::uint64_t next) const;
    [[nodiscard]] std::string state_text(std::uint64_t next) const { return snapshot(next).text(); }
    /// Loads a state file; returns the next sequence, or an error text.
    std::string load(const std::string& path, std::uint64_t& next);
    void print(std::FILE* out, std::uint64_t next) const;
    [[nodiscard]] bool ended() const noexcept { return ended_; }
    [[nodiscard]] std::uint64_t lost() const noexcept { return lost_; }
    [[nodiscard]] std::uint64_t divergences() const noexcept { return divergences_; }
    [[nodiscard]] std::uint64_t trades() const noexcept {
        return types_[static_cast<std::size_t>(execlog::RecordType::trade)];
    }
    [[nodiscard]] std::uint64_t unknown_types() const noexcept { return types_[kUnknownSlot]; }

private:
    bool trade(std::uint64_t sequence, const execlog::Record& r);
    Positions pos_;
    std::map<std::uint16_t, std::int64_t> last_px_;
    std::array<std::uint64_t, kTypeSlots> types_{};  // [type 1..9], [10] unknown, [0] bad size
    std::uint64_t lost_ = 0;
    std::uint64_t divergences_ = 0;
    bool ended_ = false;
};

bool Risk::trade(std::uint64_t sequence, const execlog::Record& r) {
    const auto q = static_cast<std::int64_t>(r.last_qty);
    (void)pos_.at(r.account, r.instrument);  // both rows exist before either is referenced
    Position& maker = pos_.at(r.maker_account, r.instrument);
    Position& taker = pos_.at(r.account, r.instrument);
    Position& buyer = r.side == execlog::Side::buy ? taker : maker;
    Position& seller = r.side == execlog::Side::buy ? maker : taker;
    // Computed on copies, checked, then stored: a trade that does not fit changes nothing.
    // (Buyer and seller are one row when an account trades with itself.)
    std::int64_t v = 0;
    Position b = buyer;
    bool overflow = __builtin_mul_overflow(q, r.price, &v)
                    || __builtin_add_overflow(b.qty, q, &b.qty)
                    || __builtin_sub_overflow(b.cash, v, &b.cash)
                    || __builtin_add_overflow(b.bought, r.last_qty, &b.bought);
    Position s = &seller == &buyer ? b : seller;
    overflow = overflow || __builtin_sub_overflow(s.qty, q, &s.qty)
               || __builtin_add_overflow(s.cash, v, &s.cash)
               || __builtin_add_overflow(s.sold, r.last_qty, &s.sold);
    if (overflow) {
        fmt::print(stderr,
                   "{}: record {}: a trade of {} at {} takes a position of account {} or {} in "
                   "instrument {} past the int64 range\n",
                   kTool, sequence, r.last_qty, r.price, r.account, r.maker_account, r.instrument);
        return false;
    }
    buyer = b;
    seller = s;
    last_px_[r.instrument] = r.price;
    return true;
}

bool Risk::apply(const prizma::StreamEvent& e) {
    switch (e.kind) {
        case prizma::StreamEventKind::loss:
            lost_ += e.count;
            fmt::print(stderr, "{}: LOSS: records [{}, {}) are lost for good\n", kTool, e.sequence,
                       e.sequence + e.count);
            return true;
        case prizma::StreamEventKind::stall:
            fmt::print(stderr, "{}: STALL: records from {} on may be lost (no archiver to ask)\n",
                       kTool, e.sequence);
            return true;
        case prizma::StreamEventKind::divergence:
            ++divergences_;
            fmt::print(
                stderr,
                "{}: DIVERGENCE: a copy of record {} from source {} differs from the one applied\n",
                kTool, e.sequence, execlog::tsi_text(e.source));
            return true;
        case prizma::StreamEventKind::reset:
            fmt::print(stderr, "{}: new epoch {} at sequence {}\n", kTool, e.epoch, e.sequence);
            return true;
        case prizma::StreamEventKind::dispute:
            fmt::print(stderr,
                       "{}: HALTED at record {}: the cores' {} copies differ and none has the "
                       "quorum; nothing is applied until the archive holds the operator's "
                       "choice\n",
                       kTool, e.sequence, e.count);
            return true;
        case prizma::StreamEventKind::record: break;
    }
    execlog::Record r;
    switch (execlog::decode(e.payload, r)) {
        case execlog::DecodeStatus::bad_size:
            if (types_[0]++ < 10) {
                fmt::print(stderr, "{}: record {}: {} bytes, not an ExecLog record (skipped)\n",
                           kTool, e.sequence, e.payload.size());
            }
            return true;
        case execlog::DecodeStatus::unknown_type:
            if (types_[kUnknownSlot]++ < 10) {
                fmt::print(stderr, "{}: record {}: unknown record type {} (skipped)\n", kTool,
                           e.sequence, execlog::type_byte(e.payload));
            }
            return true;
        case execlog::DecodeStatus::ok: break;
    }
    if (r.type == execlog::RecordType::trade && !trade(e.sequence, r)) {
        return false;
    }
    ++types_[static_cast<std::size_t>(r.type)];
    ended_ = ended_ || r.type == execlog::RecordType::session_end;
    return true;
}

Snapshot Risk::snapshot(std::uint64_t next) const {
    Snapshot c;
    c.next = next;
    c.lost = lost_;
    c.divergences = divergences_;
    c.types = types_;
    c.last_px.assign(last_px_.begin(), last_px_.end());
    c.rows = pos_.rows();
    return c;
}

std::string Risk::load(const std::string& path, std::uint64_t& next) {
    std::ifstream f(path);
    if (!f) {
        return {};  // none yet: from the start
    }
    std::string line;
    std::string word;
    bool complete = false;
    if (!std::getline(f, line) || line != "execlog-risk-state 2") {
        return fmt::format("'{}' is not an execlog-risk state file", path);
    }
    while (std::getline(f, line)) {
        std::istringstream in(line);
        in >> word;
        if (word == "next") {
            in >> next;
        } else if (word == "lost") {
            in >> lost_;
        } else if (word == "divergences") {
            in >> divergences_;
        } else if (word == "types") {
            for (auto& t : types_) {
                in >> t;
            }
        } else if (word == "last") {
            std::uint16_t i = 0;
            in >> i;
            in >> last_px_[i];
        } else if (word == "pos") {
            std::uint32_t a = 0;
            std::uint16_t i = 0;
            in >> a >> i;
            Position& p = pos_.at(a, i);
            in >> p.qty >> p.cash >> p.bought >> p.sold;
        } else if (word == "end") {
            complete = true;
        }
        if (in.fail()) {
            return fmt::format("'{}': bad line '{}'", path, line);
        }
    }
    ended_ = types_[static_cast<std::size_t>(execlog::RecordType::session_end)] > 0;
    return complete ? std::string{} : fmt::format("'{}' is cut short", path);
}

void Risk::print(std::FILE* out, std::uint64_t next) const {
    std::map<std::uint32_t, std::pair<Wide, Wide>> acct;  // exposure, P&L
    pos_.each([&](std::uint32_t account, std::uint16_t instrument, const Position& p) {
        const auto it = last_px_.find(instrument);
        const Wide px = it == last_px_.end() ? 0 : it->second;
        const Wide qty = p.qty;
        auto& [exposure, pnl] = acct[account];
        exposure += (qty < 0 ? -qty : qty) * px;
        pnl += p.cash + qty * px;
    });
    Wide gross = 0;
    Wide total = 0;
    std::uint32_t worst = 0;
    Wide worst_pnl = 0;
    for (const auto& [a, v] : acct) {
        gross += v.first;
        total += v.second;
        if (v.second < worst_pnl) {
            worst = a;
            worst_pnl = v.second;
        }
    }
    const std::size_t trades = types_[static_cast<std::size_t>(execlog::RecordType::trade)];
    fmt::print(
        out,
        "{}: next {}, trades {}, accounts {}, gross exposure {:.2f}, P&L sum {:.2f} (zero-sum), "
        "worst account {} P&L {:.2f}, lost {}, divergences {}, unknown types {}\n",
        kTool, next, trades, acct.size(), static_cast<double>(gross) / 100,
        static_cast<double>(total) / 100, worst, static_cast<double>(worst_pnl) / 100, lost_,
        divergences_, types_[kUnknownSlot]);
    (void)std::fflush(out);
}

/// Core-to-consumer latency (records carry their input time; the core prints when input 0
/// was due on the wall clock) and the longest pause between two records.
struct Timing {
    std::int64_t anchor_ns = 0;  // 0: no latency samples
    std::string anchor_file;     // read it until it is there
    std::int64_t tried_ns = 0;
    std::vector<std::int64_t> samples;
    std::int64_t last_ns = 0;
    std::int64_t longest_pause_ns = 0;
    bool after_pause = false;              // this record ends the longest pause so far
    std::int64_t after_pause_late_ns = 0;  // how late that record was applied (its due time)

    void on_record(std::span<const std::byte> payload) {
        const std::int64_t now = prizma::Context::now_ns();
        after_pause = last_ns != 0 && now - last_ns > longest_pause_ns;
        if (after_pause) {
            longest_pause_ns = now - last_ns;
        }
        last_ns = now;
        if (anchor_ns == 0 && !anchor_file.empty() && now - tried_ns > 10'000'000) {
            tried_ns = now;
            anchor_ns = execlog::read_anchor_file(anchor_file).value_or(0);
        }
        execlog::Record r;
        if (anchor_ns == 0 || execlog::decode(payload, r) != execlog::DecodeStatus::ok) {
            return;
        }
        const std::int64_t unix_now = execlog::unix_now_ns();
        const auto due =
            anchor_ns + static_cast<std::int64_t>(r.time_ns - execlog::kSessionStartNs);
        samples.push_back(unix_now - due);
        if (after_pause) {
            after_pause_late_ns = unix_now - due;
        }
    }
    void print() {
        if (samples.empty()) {
            fmt::print("{}: longest pause between two records {:.3f} ms\n", kTool,
                       static_cast<double>(longest_pause_ns) / 1e6);
            return;
        }
        // Against the schedule: a pause the stream itself had (no input due) is no stall, and
        // a standby that took over late shows as the lateness of the records after it.
        fmt::print(
            "{}: longest pause between two records {:.3f} ms, the record after it applied "
            "{:.3f} ms after it was due\n",
            kTool, static_cast<double>(longest_pause_ns) / 1e6,
            static_cast<double>(after_pause_late_ns) / 1e6);
        std::sort(samples.begin(), samples.end());
        const auto at = [&](double q) {
            const auto i = static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1));
            return static_cast<double>(samples[i]) / 1e3;
        };
        fmt::print(
            "{}: latency us (input due -> applied): p50 {:.1f} p99 {:.1f} p99.9 {:.1f} "
            "max {:.1f} ({} records)\n",
            kTool, at(0.5), at(0.99), at(0.999), at(1.0), samples.size());
    }
};

void write_metrics(execlog::Metrics& m, const Risk& risk, execlog::Feed& f, std::int64_t now) {
    m.feed(f, f.halted());
    m.counter(execlog::metric("execlog_risk_trades_total"), risk.trades());
    m.counter(execlog::metric("execlog_unknown_types_total"), risk.unknown_types());
    m.publish(kTool, now);
}

void print_final(const Risk& risk, const execlog::Feed& f, Timing& timing) {
    const auto& c = f.counters();
    const auto s = f.stream_counters();
    risk.print(stdout, f.next_sequence());
    timing.print();
    if (c.catchup_ns > 0) {
        fmt::print(
            "{}: caught up {} records from the archiver in {:.3f} s: {:.0f} records/s\n", kTool,
            c.catchup_records, static_cast<double>(c.catchup_ns) / 1e9,
            static_cast<double>(c.catchup_records) * 1e9 / static_cast<double>(c.catchup_ns));
    }
    fmt::print(
        "{}: final: next {}, applied {}, skipped {}, late joins {}, replayed {}, lost {}, "
        "divergences {}, stale-epoch {}, cpu {:.3f} s\n",
        kTool, f.next_sequence(), c.delivered, c.skipped, c.late_joins, c.replayed, risk.lost(),
        risk.divergences(), s.stale_epoch, execlog::cpu_seconds());
}

int run(int argc, char** argv) {
    CLI::App app{"", kTool};
    prizma::tools::init(app, "execlog-risk URI [--state FILE] [--replay HOST:PORT] [options]",
                        "Positions, exposure and P&L per account from the ExecLog.");
    execlog::ConsumerArgs a;
    execlog::add_consumer_options(app, a);
    std::string state = "execlog-risk.state";
    std::uint32_t checkpoint_ms = 200;
    std::uint32_t print_ms = 1000;
    Timing timing;
    app.add_option("--latency-anchor-file", timing.anchor_file,
                   "The core's --anchor-file: measure core-to-here latency (same host)");
    app.add_option("--state", state,
                   "State file (checkpointed atomically; default execlog-risk.state)");
    app.add_option("--checkpoint-ms", checkpoint_ms, "Checkpoint period (default 200)")
        ->check(prizma::tools::whole(1, 3600000));
    app.add_option("--print-ms", print_ms, "Summary period (default 1000; 0: only on exit)")
        ->check(prizma::tools::whole(0, 3600000));
    if (const int rc = prizma::tools::parse(app, argc, argv); rc >= 0) {
        return rc;
    }
    if (!execlog::finish_consumer_args(kTool, a)) {
        return 2;
    }
    Risk risk;
    std::uint64_t next = 0;
    if (const std::string err = risk.load(state, next); !err.empty()) {
        fmt::print(stderr, "{}: {}\n", kTool, err);
        return 1;
    }
    prizma::tools::stop_on_signals();
    auto ctx = prizma::tools::make_context(kTool);
    if (!ctx) {
        return 1;
    }
    auto feed = execlog::Feed::open(*ctx, a.feed, next);
    if (!feed) {
        fmt::print(stderr, "{}: {}\n", kTool, feed.error().message());
        return 1;
    }
    execlog::Feed& f = **feed;
    fmt::print("{}: from sequence {}\n", kTool, next);
    execlog::Checkpointer checkpoint(state);
    execlog::Metrics metrics(a.metrics, "risk", "risk");
    std::int64_t saved_at = prizma::Context::now_ns();
    std::int64_t printed_at = saved_at;
    prizma::StreamEvent e;
    while (!prizma::tools::stop_requested() && !(a.exit_at_end && risk.ended())) {
        const int work = ctx->poll();
        int n = 0;
        while (n < 1024 && f.next(e)) {
            if (!risk.apply(e)) {
                // Stop rather than go on with wrong positions: the state saved is the one
                // before this record, so a restart stops here again, as loudly.
                const auto err = checkpoint.finish(risk.state_text(e.sequence));
                fmt::print(stderr, "{}: stopped at record {}{}{}\n", kTool, e.sequence,
                           err.empty() ? "" : ": ", err);
                return 1;
            }
            if (e.kind == prizma::StreamEventKind::record) {
                timing.on_record(e.payload);
            }
            ++n;
        }
        const std::int64_t now = prizma::Context::now_ns();
        if (now - saved_at > std::int64_t{checkpoint_ms} * 1'000'000) {
            saved_at = now;
            if (const auto err = checkpoint.error(); !err.empty()) {
                fmt::print(stderr, "{}: {}\n", kTool, err);
                return 1;
            }
            // Copied here (flat vectors), formatted and written on the checkpoint thread.
            checkpoint.submit(
                [c = risk.snapshot(f.next_sequence())]() mutable { return c.text(); });
        }
        if (print_ms != 0 && now - printed_at > std::int64_t{print_ms} * 1'000'000) {
            printed_at = now;
            risk.print(stdout, f.next_sequence());
        }
        if (metrics.due(now)) {
            write_metrics(metrics, risk, f, now);
        }
        if (work == 0 && n == 0) {
            execlog::idle(*ctx, f, a.spin);
        }
    }
    write_metrics(metrics, risk, f, prizma::Context::now_ns());
    if (const auto err = checkpoint.finish(risk.state_text(f.next_sequence())); !err.empty()) {
        fmt::print(stderr, "{}: {}\n", kTool, err);
        return 1;
    }
    print_final(risk, f, timing);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main(kTool, run, argc, argv);
}
