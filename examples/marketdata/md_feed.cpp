// SPDX-License-Identifier: Apache-2.0
// md-feed URI [--symbols N] [--rate TICKS_PER_S] [--seed S] [--replay FILE] [--duration SECONDS]
//             [--record FILE] [--day-ticks N] [--days N] [--date YYYYMMDD] [--window SQNS]
//             [--stream-id N] [--epoch E] [--deterministic]
// Publishes an A-share-like tick stream (md/generator.hpp) or a recording over a prizma
// channel, paced at --rate ticks per second of wall time: the exchange clock is simulated,
// so a whole day runs in day-ticks / rate seconds. Every message is a lossless-stream record
// (prizma::StreamPublisher): two feeds with the same seed, stream id and epoch and
// --deterministic write the same records, an A/B pair the gateways arbitrate.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

#include "../tools/cli.hpp"
#include "../tools/tool_util.hpp"
#include "md/codec.hpp"
#include "md/generator.hpp"

namespace {

struct Args {
    std::string uri;
    md::GeneratorConfig gen;
    double rate = 50'000;
    double duration = 0;
    std::string replay;
    std::string record;
    std::uint32_t window = 0;
    std::uint32_t stream_id = md::kDefaultStreamId;
    std::optional<std::uint32_t> epoch;
    bool deterministic = false;
};

int parse_args(int argc, char** argv, Args& a) {
    CLI::App app{"", "md-feed"};
    prizma::tools::init(
        app,
        "md-feed URI [--symbols N] [--rate TICKS_PER_S] [--seed S] [--replay FILE]\n"
        "               [--duration SECONDS] [--record FILE] [--day-ticks N] [--days N]\n"
        "               [--date YYYYMMDD] [--window SQNS] [--stream-id N] [--epoch E]\n"
        "               [--deterministic]",
        "Publishes A-share-like ticks (seeded, replayable) or a recording on URI.",
        "Exchange time is simulated: a day of --day-ticks ticks takes day-ticks / rate seconds.\n"
        "Each message is a lossless-stream record; an A/B pair is two md-feed processes with\n"
        "the same seed, --epoch and --deterministic (on one channel or two).\n"
        "Prints 'published N ticks, last channel seq S' at the end.");
    app.add_option("URI", a.uri, "udp://GROUP:PORT?iface=ADDR..., mem://NAME:DPORT")
        ->required()
        ->type_name("");
    app.add_option("--symbols", a.gen.symbols, "Symbols (default 5000)")
        ->type_name("N")
        ->check(prizma::tools::whole(1, 100'000));
    app.add_option("--rate", a.rate, "Ticks per second of wall time (default 50000; 0: unpaced)")
        ->type_name("TICKS_PER_S")
        ->check(prizma::tools::at_least(0));
    app.add_option("--seed", a.gen.seed, "Generator seed (default 1)")
        ->type_name("S")
        ->check(prizma::tools::whole());
    app.add_option("--replay", a.replay, "Publish this recording instead of generating")
        ->type_name("FILE");
    app.add_option("--duration", a.duration, "Stop after this many seconds (default: the end)")
        ->type_name("SECONDS")
        ->check(prizma::tools::at_least(0));
    app.add_option("--record", a.record, "Also write what is published to FILE")->type_name("FILE");
    app.add_option("--day-ticks", a.gen.day_ticks, "Continuous-session ticks a day (1000000)")
        ->type_name("N")
        ->check(prizma::tools::whole(1, 1'000'000'000));
    app.add_option("--days", a.gen.days, "Trading days (default 1)")
        ->type_name("N")
        ->check(prizma::tools::whole(1, 1000));
    app.add_option("--date", a.gen.first_date, "First trading day (default 20230818)")
        ->type_name("YYYYMMDD")
        ->check(CLI::Validator(
            [](std::string& s) -> std::string {
                const auto t = md::parse_time12(s + "0930");
                return t && md::weekday(static_cast<std::uint32_t>(*t / 10'000)) < 5
                           ? ""
                           : "'" + s + "' is not a weekday YYYYMMDD";
            },
            ""));
    app.add_option("--window", a.window, "Transmit window in packets (default: prizma's)")
        ->type_name("SQNS")
        ->check(prizma::tools::whole(16, 1'048'576));
    app.add_option("--stream-id", a.stream_id, "The stream's id (default 1)")
        ->type_name("N")
        ->check(prizma::tools::whole(1, 0xffffffff));
    app.add_option("--epoch", a.epoch,
                   "The stream's epoch (default: tenths of a second since 2024-01-01, a new one "
                   "each run)")
        ->type_name("E")
        ->check(prizma::tools::whole(1, 0xffffffff));
    app.add_flag("--deterministic", a.deterministic,
                 "Send time 0 in every message: the same input gives the same records (A/B)");
    return prizma::tools::parse(app, argc, argv);
}

/// A new epoch per run: tenths of a second since 2024-01-01 (fits 32 bits until 2037), so
/// that a gateway takes a feed started after another one as a new stream session.
std::uint32_t default_epoch() {
    constexpr std::int64_t k2024 = 1'704'067'200;  // 2024-01-01T00:00:00Z
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    return static_cast<std::uint32_t>((now - k2024 * 1000) / 100);
}

std::int64_t realtime_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

/// Publishes messages, paced by the ticks they carry, and records them.
class Sender {
public:
    Sender(prizma::Context& ctx, prizma::StreamPublisher& out, const Args& a, md::RecordWriter* rec)
        : ctx_(ctx), out_(out), a_(a), rec_(rec), start_(std::chrono::steady_clock::now()) {}

    /// False when the run should stop (duration over, or a send failed).
    bool send(std::vector<std::byte>& msg, std::size_t ticks) {
        if (!pace(ticks)) {
            return false;
        }
        const std::int64_t now = a_.deterministic ? 0 : realtime_ns();
        std::memcpy(msg.data() + 16, &now, sizeof now);  // the header's send time
        for (;;) {
            const auto r = out_.offer(msg);
            if (r) {
                break;
            }
            if (!prizma::is_transient(r.error())) {
                fmt::print(stderr, "md-feed: offer failed: {}\n", r.error().message());
                return false;
            }
            if (ctx_.poll() == 0) {
                ctx_.wait(std::chrono::microseconds(200));
            }
        }
        if (rec_ != nullptr && !rec_->write(msg)) {
            fmt::print(stderr, "md-feed: cannot write the recording\n");
            return false;
        }
        sent_ += ticks;
        (void)ctx_.poll();
        return true;
    }
    [[nodiscard]] std::uint64_t sent() const noexcept { return sent_; }

private:
    bool pace(std::size_t ticks) {
        for (;;) {
            const double el =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
            if (a_.duration > 0 && el >= a_.duration) {
                return false;
            }
            // Due when the wall clock reaches the message's last tick (64 ticks of slack):
            // sleep exactly until then (1 us timer slack, set in run()), not in 500 us steps.
            if (a_.rate <= 0) {
                return true;
            }
            const double due = (static_cast<double>(sent_ + ticks) - 64) / a_.rate;
            if (el >= due) {
                return true;
            }
            if (ctx_.poll() == 0) {
                ctx_.wait(std::chrono::nanoseconds(std::llround((due - el) * 1e9)));
            }
        }
    }
    prizma::Context& ctx_;
    prizma::StreamPublisher& out_;
    const Args& a_;
    md::RecordWriter* rec_;
    std::chrono::steady_clock::time_point start_;
    std::uint64_t sent_ = 0;
};

/// Generates the configured days; returns the last channel sequence number sent.
std::uint64_t run_generator(const Args& a, Sender& s, std::size_t max_bytes) {
    md::Generator gen(a.gen);
    md::MsgHeader h;
    h.feed_id = gen.feed_id();
    const std::size_t per_tick = md::records_per_message(md::MsgKind::ticks, max_bytes);
    const std::size_t per_inst = md::records_per_message(md::MsgKind::instruments, max_bytes);
    std::vector<md::Instrument> inst;
    std::vector<md::Tick> ticks;
    std::vector<std::byte> msg;
    std::uint64_t last = 0;
    while (gen.start_day(inst)) {
        for (std::size_t i = 0; i < inst.size(); i += per_inst) {
            const std::size_t n = std::min(per_inst, inst.size() - i);
            md::encode_instruments(msg, h, std::span(inst).subspan(i, n));
            if (!s.send(msg, 0)) {
                return last;
            }
        }
        md::Tick t;
        bool more = gen.next_tick(t);
        while (more) {
            ticks.clear();
            // One message per batch of ticks of the same exchange millisecond or less.
            while (more && ticks.size() < per_tick) {
                ticks.push_back(t);
                more = gen.next_tick(t);
            }
            md::encode_ticks(msg, h, ticks);
            if (!s.send(msg, ticks.size())) {
                return last;
            }
            last = ticks.back().channel_seq;
        }
    }
    return last;
}

/// Publishes a recording; returns the last channel sequence number sent, or nothing.
std::optional<std::uint64_t> run_replay(const Args& a, Sender& s) {
    md::RecordReader in;
    if (const std::string err = in.open(a.replay); !err.empty()) {
        fmt::print(stderr, "md-feed: {}\n", err);
        return std::nullopt;
    }
    std::vector<std::byte> msg;
    std::vector<md::Tick> ticks;
    std::vector<md::Instrument> inst;
    std::uint64_t last = 0;
    while (in.next(msg)) {
        md::MsgHeader h;
        ticks.clear();
        if (!md::decode(msg, h, ticks, inst)) {
            fmt::print(stderr, "md-feed: {}: a record is not a feed message\n", a.replay);
            return std::nullopt;
        }
        if (!s.send(msg, ticks.size())) {
            return last;
        }
        if (!ticks.empty()) {
            last = ticks.back().channel_seq;
        }
    }
    if (!in.error().empty()) {
        fmt::print(stderr, "md-feed: {}: {}\n", a.replay, in.error());
        return std::nullopt;
    }
    return last;
}

void linger_and_close(prizma::Context& ctx, prizma::Publisher& pub) {
    while (!pub.quiet()) {
        if (ctx.poll() == 0) {
            ctx.wait(std::chrono::milliseconds(1));
        }
    }
    pub.close();
    for (int i = 0; i < 20; ++i) {
        (void)ctx.poll();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

int run(int argc, char** argv) {
    Args a;
    if (const int rc = parse_args(argc, argv, a); rc >= 0) {
        return rc;
    }
    prizma::tools::precise_timers();  // pace() sleeps to each message's due time
    auto ctx = prizma::tools::make_context("md-feed");
    if (!ctx) {
        return 1;
    }
    prizma::ChannelOptions opts;
    if (a.window != 0) {
        opts.window_sqns = a.window;
    }
    auto pub = ctx->add_publisher(a.uri, opts);
    if (!pub) {
        fmt::print(stderr, "md-feed: {}: {}\n", a.uri, pub.error().message());
        return 1;
    }
    md::RecordWriter rec;
    if (!a.record.empty()) {
        if (const std::string err = rec.open(a.record); !err.empty()) {
            fmt::print(stderr, "md-feed: {}\n", err);
            return 1;
        }
    }
    const std::uint32_t epoch = a.epoch ? *a.epoch : default_epoch();
    auto out = prizma::StreamPublisher::create(*pub, a.stream_id, epoch);
    if (!out) {
        fmt::print(stderr, "md-feed: {}\n", out.error().message());
        return 1;
    }
    Sender s(*ctx, *out, a, a.record.empty() ? nullptr : &rec);
    // A record (its 28-byte header and the message) fits one packet.
    const std::size_t max_bytes =
        std::min<std::size_t>(pub->max_packet_payload(), 1400) - prizma::RecordHeader::kBytes;
    std::optional<std::uint64_t> last;
    if (a.replay.empty()) {
        last = run_generator(a, s, max_bytes);
    } else {
        last = run_replay(a, s);
    }
    if (!rec.close()) {
        fmt::print(stderr, "md-feed: cannot write {}\n", a.record);
        return 1;
    }
    linger_and_close(*ctx, *pub);
    if (!last) {
        return 1;
    }
    fmt::print("published {} ticks, last channel seq {}\n", s.sent(), *last);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main("md-feed", run, argc, argv);
}
