// SPDX-License-Identifier: Apache-2.0
// execlog-core: the exchange's deterministic matching engine, publishing its ExecLog as a
// lossless stream (docs/EXECLOG.md). Two of them on one channel are a hot-standby pair: the
// same input gives the same records, byte for byte, and subscribers keep the first copy.
// A core that starts while the stream is live (a restarted one) listens first, regenerates
// its input silently up to the live sequence and publishes from there, as the standby.
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

#include "../tools/cli.hpp"
#include "../tools/replay_cli.hpp"
#include "../tools/tool_util.hpp"
#include "execlog/engine.hpp"
#include "execlog/feed.hpp"
#include "execlog/input.hpp"
#include "execlog/metrics.hpp"
#include "execlog/record.hpp"

namespace {

constexpr const char* kTool = "execlog-core";

struct Args {
    std::string uri;
    execlog::GeneratorOptions gen;
    std::string orders;
    std::uint32_t epoch = 1;
    std::uint32_t stream_id = execlog::kDefaultStreamId;
    std::string state_dir;
    std::uint32_t join_wait_ms = 500;
    std::uint32_t window = 65536;
    std::uint32_t repair_budget = 100;
    std::uint32_t linger_ms = 5000;
    bool spin = false;
    std::string fault;
    std::string anchor_file;
    std::string schedule_file;
    std::string name;     ///< the source's GSI (execlog::core_gsi), so consumers name the core
    std::string archive;  ///< HOST:PORT of the archiver: asked whether the session has ended
    prizma::tools::ReplaySecurityArgs archive_security;
    prizma::ReplaySecurity archive_sec;
    execlog::MetricsArgs metrics;
};

struct Fault {
    enum class Kind : std::uint8_t { none, unknown_type, diverge };
    Kind kind = Kind::none;
    std::uint64_t at = 0;
};

std::optional<Fault> parse_fault(const std::string& s) {
    Fault f;
    if (s.empty()) {
        return f;
    }
    const auto at = s.find('@');
    const std::string what = s.substr(0, at);
    if (at == std::string::npos || (what != "unknown-type" && what != "diverge")) {
        return std::nullopt;
    }
    f.kind = what == "diverge" ? Fault::Kind::diverge : Fault::Kind::unknown_type;
    try {
        f.at = std::stoull(s.substr(at + 1));
    } catch (const std::exception&) {
        return std::nullopt;
    }
    return f;
}

/// The live stream as heard on the core's own channel (before it publishes).
struct Listener {
    prizma::Subscriber sub;
    prizma::StreamSubscriber in;
    bool heard = false;
    std::uint32_t epoch = 0;
    std::uint64_t next = 0;
    void poll() {
        in.poll(1024, [&](const prizma::StreamEvent& e) {
            if (e.kind == prizma::StreamEventKind::record
                || e.kind == prizma::StreamEventKind::reset) {
                heard = true;
                epoch = e.epoch;
                next = std::max(next,
                                e.sequence + (e.kind == prizma::StreamEventKind::record ? 1 : 0));
            }
        });
    }
};

struct SavedState {
    std::uint32_t epoch = 0;
    std::uint64_t next = 0;
    bool ended = false;  ///< this core published the session end (sequence next - 1)
};

std::optional<SavedState> load_state(const std::string& dir) {
    if (dir.empty()) {
        return std::nullopt;
    }
    std::ifstream f(dir + "/core.state");
    std::string k1;
    std::string k2;
    SavedState s;
    if (f >> k1 >> s.epoch >> k2 >> s.next && k1 == "epoch" && k2 == "next") {
        std::string k3;
        s.ended = f >> k3 && k3 == "ended";
        return s;
    }
    return std::nullopt;
}

/// Asks the archiver whether its journal holds the session end of `epoch` at or after `from`.
/// Returns its sequence, or nullopt (not there, or the archiver could not say: `why` set).
std::optional<std::uint64_t> archived_session_end(const Args& a,
                                                  std::uint64_t from,
                                                  std::string& why) {
    const auto hp = execlog::parse_host_port(a.archive);
    prizma::ReplayRequest req;
    req.stream_id = a.stream_id;
    req.from = from;
    prizma::ReplayClientOptions opt;
    opt.security = a.archive_sec;
    auto c = prizma::ReplayClient::connect(hp->first, hp->second, req, opt);
    if (!c) {
        why = c.error().message();
        return std::nullopt;
    }
    const std::int64_t until = prizma::Context::now_ns() + 30'000'000'000;
    prizma::JournalEntry e;
    while (!c->done() && prizma::Context::now_ns() < until && !prizma::tools::stop_requested()) {
        const auto got = c->next(e);
        if (!got) {
            why = c->error_text().empty() ? got.error().message() : c->error_text();
            return std::nullopt;
        }
        if (!*got) {
            c->wait(std::chrono::milliseconds(100));
            continue;
        }
        if (e.kind == prizma::StreamEventKind::record && e.epoch == a.epoch
            && execlog::type_byte(e.payload())
                   == static_cast<std::uint8_t>(execlog::RecordType::session_end)) {
            return e.sequence;
        }
    }
    if (!c->done()) {
        why = "no answer in 30 s";
    }
    return std::nullopt;
}

class Core {
public:
    Core(Args args,
         prizma::Context ctx,
         prizma::Publisher pub,
         execlog::InputSource src,
         Fault fault)
        : a_(std::move(args)),
          ctx_(std::move(ctx)),
          pub_(pub),
          src_(std::move(src)),
          engine_(a_.gen.instruments),
          fault_(fault),
          buf_(execlog::kRecordBytes),
          metrics_(a_.metrics, "core", a_.name.empty() ? execlog::tsi_text(pub.tsi()) : a_.name) {}
    int run();

private:
    int join();
    [[nodiscard]] bool session_over(const std::optional<SavedState>& saved) const;
    bool fast_forward(std::uint64_t target, Listener* live);
    bool publish_pending();
    void say_held(std::uint64_t seq, std::int64_t held_ns);
    bool offer(const execlog::Record& r);
    void save_state(bool final = false);
    void write_metrics(std::int64_t now);
    [[nodiscard]] std::int64_t due(std::uint64_t input) const {
        return t0_ns_
               + static_cast<std::int64_t>(
                   a_.gen.rate == 0 ? 0 : input * 1'000'000'000ULL / a_.gen.rate);
    }
    int finish();
    /// Starts the input schedule (or takes --schedule-file's) and writes the anchor; false
    /// when --schedule-file has none.
    bool start_schedule(std::uint64_t first_input);

    Args a_;
    prizma::Context ctx_;
    prizma::Publisher pub_;
    execlog::InputSource src_;
    execlog::Engine engine_;
    Fault fault_;
    std::optional<prizma::StreamPublisher> out_;
    std::vector<execlog::Record> pending_;
    std::vector<std::byte> buf_;
    std::uint64_t inputs_ = 0;    // inputs processed
    std::uint64_t produced_ = 0;  // records made (the next record's sequence)
    std::uint64_t first_published_ = 0;
    std::uint64_t last_time_ns_ = execlog::kSessionStartNs;
    std::uint64_t back_pressured_ = 0;
    std::int64_t t0_ns_ = 0;
    std::int64_t started_ns_ = 0;
    std::int64_t saved_at_ns_ = 0;
    std::optional<execlog::Checkpointer> checkpoint_;
    bool warned_ = false;
    bool inputs_done_ = false;
    bool ended_ = false;  // the session end is published
    execlog::Metrics metrics_;
    std::int64_t held_since_ns_ = 0;  // held by flow control since (0: not held)
    std::int64_t held_ns_ = 0;        // held in all, before held_since_ns_
};

// Runs inputs silently until the records they make pass `target` (the live stream's next
// sequence); the input that crosses it is left in pending_ to publish.
bool Core::fast_forward(std::uint64_t target, Listener* live) {
    execlog::Input in;
    while (!prizma::tools::stop_requested()) {
        if (live != nullptr && (inputs_ & 1023U) == 0) {
            (void)ctx_.poll();
            live->poll();
            target = std::max(target, live->next);
        }
        pending_.clear();
        if (!src_.next(in)) {
            inputs_done_ = true;
            return true;
        }
        engine_.process(in, pending_);
        ++inputs_;
        last_time_ns_ = in.time_ns;
        if (produced_ + pending_.size() > target) {
            return true;
        }
        produced_ += pending_.size();
    }
    return false;
}

bool Core::offer(const execlog::Record& r) {
    execlog::encode(r, buf_);
    const std::uint64_t seq = out_->next_sequence();
    if (fault_.kind != Fault::Kind::none && seq == fault_.at) {
        if (fault_.kind == Fault::Kind::unknown_type) {
            buf_[0] = std::byte{99};
        } else {
            buf_[44] ^= std::byte{1};  // order_qty: a copy that differs from the other core's
        }
    }
    std::int64_t held_since = 0;
    std::int64_t said_at = 0;
    for (;;) {
        const auto res = out_->offer(buf_);
        if (res) {
            ++produced_;
            if (held_since_ns_ != 0) {
                held_ns_ += prizma::Context::now_ns() - held_since_ns_;
                held_since_ns_ = 0;
            }
            if (said_at != 0) {
                fmt::print(stderr, "{}: released after {:.1f} s held at record {}\n", kTool,
                           static_cast<double>(prizma::Context::now_ns() - held_since) / 1e9, seq);
            }
            return true;
        }
        if (!prizma::is_transient(res.error())) {
            fmt::print(stderr, "{}: publishing record {}: {}\n", kTool, seq, res.error().message());
            return false;
        }
        ++back_pressured_;
        const std::int64_t now = prizma::Context::now_ns();
        held_since = held_since == 0 ? now : held_since;
        held_since_ns_ = held_since;
        if (metrics_.due(now)) {
            write_metrics(now);
        }
        if (now - held_since > 1'000'000'000 && now - said_at > 5'000'000'000) {
            said_at = now;
            say_held(seq, now - held_since);
        }
        if (prizma::tools::stop_requested()) {
            return false;
        }
        if (ctx_.poll() == 0 && !a_.spin) {
            ctx_.wait(std::chrono::milliseconds(1));
        }
    }
}

void Core::write_metrics(std::int64_t now) {
    auto& m = metrics_;
    m.gauge(execlog::metric("execlog_core_next_sequence"), static_cast<double>(produced_));
    m.counter(execlog::metric("execlog_core_records_total"), produced_ - first_published_);
    m.counter(execlog::metric("execlog_core_inputs_total"), inputs_);
    m.gauge(execlog::metric("execlog_core_held"), held_since_ns_ != 0 ? 1.0 : 0.0);
    const std::int64_t held = held_ns_ + (held_since_ns_ != 0 ? now - held_since_ns_ : 0);
    m.counter_seconds(execlog::metric("execlog_core_held_seconds_total"),
                      static_cast<double>(held) / 1e9);
    m.counter(execlog::metric("execlog_core_back_pressured_total"), back_pressured_);
    m.gauge(execlog::metric("execlog_core_epoch"), static_cast<double>(a_.epoch));
    m.gauge(execlog::metric("execlog_core_session_ended"), ended_ ? 1.0 : 0.0);
    const auto c = pub_.counters();
    m.counter(execlog::metric("execlog_pgm_naks_received_total"), c.naks_received);
    m.counter(execlog::metric("execlog_pgm_rdata_sent_total"), c.rdata_sent);
    m.counter(execlog::metric("execlog_pgm_flow_evicted_total"), c.flow_evicted);
    m.publish(kTool, now);
}

// Loud holds: which flow-control member the core waits for, and how long.
void Core::say_held(std::uint64_t seq, std::int64_t held_ns) {
    const auto receivers = pub_.flow_receivers();
    std::string who;
    for (const auto& r : receivers) {
        who += fmt::format(
            "; member tag {}: {}, lag {} packets, heard {} ms ago", r.tag,
            r.counted ? "counted" : "not counted", r.lag,
            std::chrono::duration_cast<std::chrono::milliseconds>(r.since_heard).count());
    }
    const bool any_counted =
        std::any_of(receivers.begin(), receivers.end(), [](const auto& r) { return r.counted; });
    // What the repairs looked like meanwhile (a member held back by a repair refused shows
    // here as NAKs ignored).
    const auto c = pub_.counters();
    fmt::print(stderr,
               "{}: HELD for {:.1f} s at record {}: {}{}; repairs: naks {}, rdata {}, ignored {} "
               "(requester's share {}, budget {}, repeats {}), flow evicted {}\n",
               kTool, static_cast<double>(held_ns) / 1e9, seq,
               any_counted ? "flow control: a counted member (the archiver) is a window behind"
                           : "flow control: no archiver counted (flow_group: the exchange does "
                             "not publish what it cannot journal)",
               who, c.naks_received, c.rdata_sent, c.naks_ignored, c.naks_requester_limited,
               c.naks_budget_limited, c.naks_repeat_limited, c.flow_evicted);
}

bool Core::publish_pending() {
    for (const auto& r : pending_) {
        if (!offer(r)) {
            return false;
        }
    }
    pending_.clear();
    return true;
}

void Core::save_state(bool final) {
    saved_at_ns_ = prizma::Context::now_ns();
    if (a_.state_dir.empty()) {
        return;
    }
    if (!checkpoint_) {
        checkpoint_.emplace(a_.state_dir + "/core.state");
    }
    if (const std::string err = checkpoint_->error(); !err.empty() && !warned_) {
        warned_ = true;
        fmt::print(stderr, "{}: warning: {}\n", kTool, err);
    }
    std::string text = fmt::format("epoch {}\nnext {}\n", a_.epoch, produced_);
    if (final && ended_) {
        text += "ended\n";  // a restart refuses to publish this session again
    }
    if (final) {
        if (const std::string err = checkpoint_->finish(text); !err.empty() && !warned_) {
            fmt::print(stderr, "{}: warning: {}\n", kTool, err);
        }
        return;
    }
    // Written off the publishing loop: an fdatasync must not hold the stream back.
    checkpoint_->submit(std::move(text));
}

// The session-end guard: a core never publishes a session again that has ended, by its own
// saved state or by the archive (--archive). True (said why) when it has.
bool Core::session_over(const std::optional<SavedState>& saved) const {
    if (saved && saved->epoch == a_.epoch && saved->ended) {
        fmt::print(stderr,
                   "{}: the session of stream {} epoch {} has ended: this core published its "
                   "end at record {} ('{}/core.state'); refusing to publish it again\n",
                   kTool, a_.stream_id, a_.epoch, saved->next - 1, a_.state_dir);
        return true;
    }
    if (a_.archive.empty()) {
        return false;
    }
    const std::uint64_t from =
        saved && saved->epoch == a_.epoch && saved->next > 0 ? saved->next - 1 : 0;
    std::string why;
    if (const auto end = archived_session_end(a_, from, why)) {
        fmt::print(stderr,
                   "{}: the session of stream {} epoch {} has ended: the archive ({}) holds its "
                   "end at record {}; refusing to publish it again\n",
                   kTool, a_.stream_id, a_.epoch, a_.archive, *end);
        return true;
    }
    if (!why.empty()) {
        fmt::print(stderr,
                   "{}: warning: could not ask the archive ({}) whether the session has ended: "
                   "{}; going on\n",
                   kTool, a_.archive, why);
    }
    return false;
}

// Listens for the live stream, then regenerates the input silently up to where it is.
// Returns -1 to go on, or the exit code.
int Core::join() {
    prizma::ChannelOptions lo;
    lo.window_sqns = 4096;  // not passive: an SPMR brings the live source's SPM at once
    lo.preallocated_sources = 2;
    auto sub = ctx_.add_subscriber(execlog::strip_flow_keys(a_.uri), lo);
    prizma::StreamOptions so;
    so.stream_id = a_.stream_id;
    auto in = prizma::StreamSubscriber::create(so);
    if (!sub || !in) {
        fmt::print(stderr, "{}: {}\n", kTool, !sub ? sub.error().message() : in.error().message());
        return 1;
    }
    Listener live{*sub, std::move(*in)};
    (void)live.in.add(live.sub);
    const std::int64_t until =
        prizma::Context::now_ns() + std::int64_t{a_.join_wait_ms} * 1'000'000;
    while (!live.heard && prizma::Context::now_ns() < until && !prizma::tools::stop_requested()) {
        if (ctx_.poll() == 0) {
            ctx_.wait(std::chrono::milliseconds(1));
        }
        live.poll();
    }
    if (live.heard && live.epoch > a_.epoch) {
        fmt::print(stderr,
                   "{}: error: the live stream {} is at epoch {}; this core's epoch {} is stale "
                   "(refusing to publish it)\n",
                   kTool, a_.stream_id, live.epoch, a_.epoch);
        return 1;
    }
    const auto saved = load_state(a_.state_dir);
    std::uint64_t target = 0;
    const bool follow = live.heard && live.epoch == a_.epoch;
    if (!follow && session_over(saved)) {
        return 0;
    }
    if (follow) {
        target = live.next;
        fmt::print("{}: live stream heard at sequence {}: joining as the standby\n", kTool, target);
    } else if (saved && saved->epoch == a_.epoch && saved->next > 0) {
        target = saved->next;
        fmt::print("{}: no live stream; resuming from saved state at sequence {}\n", kTool, target);
    } else {
        fmt::print("{}: starting stream {} epoch {}\n", kTool, a_.stream_id, a_.epoch);
    }
    if (!fast_forward(target, follow ? &live : nullptr)) {
        return 0;
    }
    live.in.remove(live.sub);
    (void)ctx_.remove(live.sub);
    if (inputs_done_ && produced_ < std::max(target, live.next)) {
        // Even the session end (sequence produced_) is out: nothing left to publish.
        fmt::print("{}: the stream is complete (next {}): nothing to publish\n", kTool,
                   std::max(target, live.next));
        return 0;
    }
    auto out = prizma::StreamPublisher::create(pub_, a_.stream_id, a_.epoch, produced_);
    if (!out) {
        fmt::print(stderr, "{}: {}\n", kTool, out.error().message());
        return 1;
    }
    out_.emplace(*out);
    first_published_ = produced_;
    t0_ns_ = prizma::Context::now_ns() - (due(inputs_ == 0 ? 0 : inputs_ - 1) - due(0));
    return -1;
}

int Core::finish() {
    const bool stopped = prizma::tools::stop_requested();
    if (!stopped && !offer(execlog::Engine::session_end(inputs_, last_time_ns_))) {
        return 1;
    }
    ended_ = !stopped;
    save_state(true);
    const double secs = static_cast<double>(prizma::Context::now_ns() - started_ns_) / 1e9;
    fmt::print("{}: {} records in {:.3f} s: {:.0f} records/s\n", kTool,
               produced_ - first_published_, secs,
               secs > 0 ? static_cast<double>(produced_ - first_published_) / secs : 0.0);
    (void)std::fflush(stdout);
    // Linger: repair what receivers still miss until every flow-controlled receiver has
    // consumed the end (a restarted archiver may still be recovering), at most --linger-ms.
    const std::int64_t start = prizma::Context::now_ns();
    const std::int64_t until = start + std::int64_t{a_.linger_ms} * 1'000'000;
    while (prizma::Context::now_ns() < until && !prizma::tools::stop_requested()) {
        if (ctx_.poll() == 0) {
            ctx_.wait(std::chrono::milliseconds(1));
        }
        if (!pub_.quiet()) {
            continue;
        }
        const auto receivers = pub_.flow_receivers();
        const bool all_done =
            std::all_of(receivers.begin(), receivers.end(),
                        [](const prizma::FlowReceiverInfo& r) { return !r.counted || r.lag == 0; });
        const bool any_counted =
            std::any_of(receivers.begin(), receivers.end(),
                        [](const prizma::FlowReceiverInfo& r) { return r.counted; });
        if (receivers.empty() || (any_counted && all_done)) {
            break;
        }
    }
    fmt::print(
        "{}: published records [{}, {}) of stream {} epoch {}: {} inputs, {} resting orders, "
        "{} rejected ({} past the price or quantity limit), back-pressured {} times{}\n",
        kTool, first_published_, produced_, a_.stream_id, a_.epoch, inputs_,
        engine_.resting_orders(), engine_.counters().rejected, engine_.counters().out_of_range,
        back_pressured_, stopped ? " (stopped)" : "");
    write_metrics(prizma::Context::now_ns());
    const auto c = pub_.counters();
    fmt::print(
        "{}: pgm: odata {}, rdata {}, naks received {}, naks ignored {} (requester's share {}, "
        "budget {}, repeats {}), repairs dropped {}, flow blocked {}, flow evicted {}\n",
        kTool, c.odata_sent, c.rdata_sent, c.naks_received, c.naks_ignored,
        c.naks_requester_limited, c.naks_budget_limited, c.naks_repeat_limited, c.repairs_dropped,
        c.flow_blocked, c.flow_evicted);
    return 0;
}

bool Core::start_schedule(std::uint64_t first_input) {
    // The schedule starts when the first record is out (flow control holds it until the
    // archiver is counted): no burst to catch up with the time spent waiting.
    t0_ns_ = prizma::Context::now_ns() - (due(first_input) - due(0));
    started_ns_ = prizma::Context::now_ns();
    // The wall-clock time input 0 is due (for consumers' --latency-anchor-ns, same host).
    const std::int64_t unix_now = execlog::unix_now_ns();
    if (!a_.schedule_file.empty()) {
        // A hot standby in step with its active: the inputs come when they came to it (the
        // same input feed), so a takeover resumes the active's schedule, not a later one.
        const auto given = execlog::read_anchor_file(a_.schedule_file);
        if (!given) {
            fmt::print(stderr, "{}: --schedule-file {}: no anchor (unix ns) in it\n", kTool,
                       a_.schedule_file);
            return false;
        }
        t0_ns_ = prizma::Context::now_ns() - (unix_now - *given);
    }
    const std::int64_t anchor = unix_now - (prizma::Context::now_ns() - t0_ns_);
    fmt::print("{}: anchor_unix_ns {}\n", kTool, anchor);
    if (!a_.anchor_file.empty()) {
        if (const auto err =
                execlog::write_file_atomically(a_.anchor_file, fmt::format("{}\n", anchor));
            !err.empty()) {
            fmt::print(stderr, "{}: warning: --anchor-file: {}\n", kTool, err);
        }
    }
    return true;
}

int Core::run() {
    if (!a_.spin) {
        // It sleeps until each input is due: with Linux's default 50 us timer slack every
        // record would leave up to 50 us late.
        (void)::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
    }
    if (const int rc = join(); rc >= 0) {
        return rc;
    }
    const std::uint64_t first_input = inputs_ == 0 ? 0 : inputs_ - 1;
    if (!publish_pending()) {
        return 1;
    }
    if (!start_schedule(first_input)) {
        return 2;
    }
    // Printed once the first record is out (flow control may hold it until the archiver is
    // there): a standby started after this line hears this core.
    fmt::print("{}: source {} publishing from sequence {} (input {})\n", kTool,
               execlog::tsi_text(pub_.tsi()), first_published_, first_input);
    (void)std::fflush(stdout);
    execlog::Input in;
    while (!inputs_done_ && !prizma::tools::stop_requested()) {
        const std::int64_t now = prizma::Context::now_ns();
        int n = 0;
        while (n < 256 && due(inputs_) <= now) {
            if (!src_.next(in)) {
                inputs_done_ = true;
                break;
            }
            engine_.process(in, pending_);
            ++inputs_;
            last_time_ns_ = in.time_ns;
            if (!publish_pending()) {
                return 1;
            }
            ++n;
        }
        const int work = ctx_.poll();
        if (now - saved_at_ns_ > 100'000'000) {
            save_state();
        }
        if (metrics_.due(now)) {
            write_metrics(now);
        }
        if (n == 0 && work == 0 && !a_.spin) {
            const std::int64_t wait_ns = due(inputs_) - prizma::Context::now_ns();
            if (wait_ns > 0) {
                ctx_.wait(std::chrono::nanoseconds(std::min<std::int64_t>(wait_ns, 10'000'000)));
            }
        }
    }
    return finish();
}

void add_options(CLI::App& app, Args& a) {
    app.add_option("uri", a.uri, "Channel URI (e.g. udp://239.192.130.1:24801?iface=127.0.0.1)")
        ->required();
    app.add_option("--seed", a.gen.seed, "Order generator seed")->check(prizma::tools::whole());
    app.add_option("--rate", a.gen.rate, "Orders per second (input time and pacing; 0: unpaced)")
        ->check(prizma::tools::whole());
    app.add_option("--count", a.gen.count, "Orders to generate")->check(prizma::tools::whole());
    app.add_option("--orders", a.orders, "Read orders from FILE instead (format: docs/EXECLOG.md)");
    app.add_option("--epoch", a.epoch, "Stream epoch (default 1)")
        ->check(prizma::tools::whole(1, 0xffffffffU));
    app.add_option("--stream-id", a.stream_id, "Stream id (default 21)")
        ->check(prizma::tools::whole(0, 0xffffffffU));
    app.add_option("--state", a.state_dir, "Directory for the core's resume point");
    app.add_option("--instruments", a.gen.instruments, "Instruments (default 64)")
        ->check(prizma::tools::whole(1, 60000));
    app.add_option("--accounts", a.gen.accounts, "Accounts (default 1000)")
        ->check(prizma::tools::whole(1, 10000000));
    app.add_option("--join-wait-ms", a.join_wait_ms,
                   "Listen this long for a live stream first (default 500)")
        ->check(prizma::tools::whole(0, 60000));
    app.add_option("--window", a.window, "Transmit window, packets (default 65536)")
        ->check(prizma::tools::whole(64, 1U << 22U));
    app.add_option("--repair-budget", a.repair_budget,
                   "Repair budget, percent of data sent (all NAKs together; default 100)")
        ->check(prizma::tools::whole(1, 10000));
    app.add_option("--linger-ms", a.linger_ms,
                   "After the session end, repair until every flow-controlled receiver has it, at "
                   "most this long (default 5000)")
        ->check(prizma::tools::whole(0, 3600000));
    app.add_flag("--spin", a.spin, "Busy-poll instead of sleeping between inputs");
    app.add_option("--fault", a.fault, "Test fault: unknown-type@SEQ or diverge@SEQ");
    app.add_option("--name", a.name,
                   "The core's name, 1-6 letters, digits, '-' or '_' (e.g. core-a): its "
                   "source's GSI, so every consumer names the copies it sends (default: a "
                   "random GSI, shown in hex)");
    app.add_option("--anchor-file", a.anchor_file,
                   "Write the wall-clock time input 0 is due there (latency measurements)");
    app.add_option("--schedule-file", a.schedule_file,
                   "Follow the schedule another core's --anchor-file holds (a hot standby in "
                   "step with its active) instead of starting one when publishing starts");
    app.add_option("--archive", a.archive,
                   "The archiver's replay service, HOST:PORT: with no live stream, ask it whether "
                   "the session has ended before publishing");
    prizma::tools::add_replay_security_options(app, a.archive_security, false);
    execlog::add_metrics_options(app, a.metrics);
}

int run(int argc, char** argv) {
    CLI::App app{"", kTool};
    prizma::tools::init(
        app, "execlog-core URI (--seed S --rate R --count N | --orders FILE) [options]",
        "The deterministic matching engine: publishes the ExecLog (docs/EXECLOG.md) as a lossless "
        "stream on URI. Two cores with the same input are a hot-standby pair; one started while "
        "the stream is live joins it as the standby.");
    Args a;
    add_options(app, a);
    if (const int rc = prizma::tools::parse(app, argc, argv); rc >= 0) {
        return rc;
    }
    if (!a.archive.empty() && !execlog::parse_host_port(a.archive)) {
        fmt::print(stderr, "{}: --archive '{}': want HOST:PORT\n", kTool, a.archive);
        return 2;
    }
    auto sec = prizma::tools::replay_security(a.archive_security);
    if (!sec) {
        fmt::print(stderr, "{}: {}\n", kTool, sec.error().message());
        return 2;
    }
    a.archive_sec = std::move(*sec);
    const auto gsi = execlog::core_gsi(a.name);
    if (!a.name.empty() && !gsi) {
        fmt::print(stderr, "{}: --name '{}': want 1-6 letters, digits, '-' or '_'\n", kTool,
                   a.name);
        return 2;
    }
    const auto fault = parse_fault(a.fault);
    if (!fault) {
        fmt::print(stderr, "{}: --fault '{}': want unknown-type@SEQ or diverge@SEQ\n", kTool,
                   a.fault);
        return 2;
    }
    std::optional<execlog::InputSource> src;
    if (!a.orders.empty()) {
        src.emplace(execlog::read_order_file(a.orders));  // throws with file:line
    } else {
        src.emplace(a.gen);
    }
    if (!a.state_dir.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(a.state_dir, ec);
        if (ec) {
            fmt::print(stderr, "{}: --state '{}': {}\n", kTool, a.state_dir, ec.message());
            return 1;
        }
    }
    prizma::tools::stop_on_signals();
    auto ctx = prizma::tools::make_context(kTool);
    if (!ctx) {
        return 1;
    }
    prizma::ChannelOptions po;
    po.window_sqns = a.window;
    po.repair_budget_percent = a.repair_budget;
    po.gsi = gsi;
    auto pub = ctx->add_publisher(a.uri, po);
    if (!pub) {
        fmt::print(stderr, "{}: {}\n", kTool, pub.error().message());
        return 1;
    }
    Core core(a, std::move(*ctx), *pub, std::move(*src), *fault);
    return core.run();
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main(kTool, run, argc, argv);
}
