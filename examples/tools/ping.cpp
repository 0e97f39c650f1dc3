// SPDX-License-Identifier: Apache-2.0
// prizma-ping PING_URI PONG_URI --count N --size S [--warmup N] [--rate R] [--wait spin|block]
//             [--cpu N] [--preset P] [--window PACKETS] [--timeout S] [--json]
// Round-trip time through prizma-pong: min/p50/p90/p99/p99.9/max from a log-linear histogram.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

#include "cli.hpp"
#include "histogram.hpp"
#include "tool_util.hpp"

namespace {

constexpr std::uint64_t kProbe = ~std::uint64_t{0};  // handshake messages carry this seq

std::uint64_t load_u64(const std::byte* p) noexcept {
    std::uint64_t v = 0;
    std::memcpy(&v, p, 8);
    return v;
}

struct Args {
    std::string ping_uri;
    std::string pong_uri;
    std::uint64_t count = 0;
    std::uint64_t size = 0;
    std::uint64_t warmup = 0;  // default: min(1000, count / 10)
    double rate = 0;
    bool spin = true;
    int cpu = -1;
    double timeout = 10;
    bool json = false;
    prizma::ChannelOptions opts;
};

int parse(int argc, char** argv, Args& a) {
    CLI::App app{"", "prizma-ping"};
    prizma::tools::init(
        app,
        "prizma-ping PING_URI PONG_URI --count N --size BYTES [--warmup N] [--rate R]\n"
        "                   [--wait spin|block] [--cpu N] [--preset wan|lan|rdma]\n"
        "                   [--window PACKETS] [--timeout SECONDS] [--json]",
        "Sends N messages of BYTES on PING_URI; prizma-pong echoes them on PONG_URI. Prints\n"
        "min/p50/p90/p99/p99.9/max round-trip time (RTT).",
        "Closed loop (default): one message in flight. --rate R: open loop at R msgs/s, RTT\n"
        "measured from each message's scheduled send time (no coordinated omission), and\n"
        "beside it from its actual send (JSON: rtt_from_send_ns).\n"
        "Exits 1 when prizma-pong does not answer, a reply is lost or --timeout runs out.");
    app.add_option("PING_URI", a.ping_uri,
                   "Channel the messages go out on (prizma-pong's PING_URI)")
        ->required()
        ->type_name("");
    app.add_option("PONG_URI", a.pong_uri,
                   "Channel the echoes come back on (prizma-pong's PONG_URI)")
        ->required()
        ->type_name("");
    app.add_option("--count", a.count, "Round trips measured (> 0)")
        ->required()
        ->type_name("N")
        ->check(prizma::tools::whole(1));
    app.add_option("--size", a.size, "Bytes per message (>= 16: sequence number and send time)")
        ->required()
        ->type_name("BYTES")
        ->check(prizma::tools::whole(16));
    app.add_option("--warmup", a.warmup,
                   "Round trips first, not recorded (default 1000 or N/10, the smaller)")
        ->type_name("N")
        ->check(prizma::tools::whole());
    app.add_option("--rate", a.rate, "Open loop at R messages/s (default 0: closed loop)")
        ->type_name("R")
        ->check(prizma::tools::at_least(0));
    std::string wait = "spin";
    app.add_option("--wait", wait,
                   "spin busy-polls (default); block sleeps on the transports'\n"
                   "wakeup fds")
        ->type_name("spin|block")
        ->check(prizma::tools::one_of({"spin", "block"}));
    app.add_option("--cpu", a.cpu, "Pin the thread to this CPU (default: not pinned)")
        ->type_name("N")
        ->check(prizma::tools::whole(0, 4095));
    prizma::tools::add_preset(app, a.opts);
    app.add_option("--window", a.opts.window_sqns,
                   "Transmit/receive window in packets, 64..2^30 (default 65536)")
        ->type_name("PACKETS")
        ->check(prizma::tools::whole(64, 1U << 30U));
    app.add_option("--timeout", a.timeout,
                   "Give up when no reply comes for this long, and on the handshake\n"
                   "with prizma-pong (default 10)")
        ->type_name("SECONDS")
        ->check(prizma::tools::above(0));
    app.add_flag("--json", a.json, "Print one JSON object instead of the text summary");
    if (const int rc = prizma::tools::parse(app, argc, argv); rc >= 0) {
        return rc;
    }
    a.spin = wait == "spin";
    if (app.count("--warmup") == 0) {
        a.warmup = std::min<std::uint64_t>(1000, a.count / 10);
    }
    return -1;
}

std::int64_t now_ns() noexcept {
    return prizma::Context::now_ns();
}

/// Why the measurement stopped.
enum class End { complete, timed_out, send_failed };

/// The round trips through prizma-pong: the handshake, the closed or open loop, the summary.
class Pinger {
public:
    Pinger(const Args& a, prizma::Context& ctx, prizma::Publisher& pub, prizma::Subscriber& sub)
        : a_(a),
          ctx_(ctx),
          pub_(pub),
          sub_(sub),
          msg_(std::size_t{a.size}),
          timeout_ns_(static_cast<std::int64_t>(std::min(a.timeout, 1e9) * 1e9)),
          total_(a.warmup + a.count),
          left_at_(a.rate > 0 ? total_ : 0) {
        for (std::size_t k = 16; k < msg_.size(); ++k) {
            msg_[k] = static_cast<std::byte>(k & 0xffU);
        }
    }

    /// Probes until prizma-pong answers (it joins at the first packet it hears), then drains
    /// the answers to the other probes. False after --timeout or a failed send (printed).
    bool handshake() {
        const std::int64_t deadline = now_ns() + timeout_ns_;
        bool answered = false;
        while (!answered) {
            if (now_ns() > deadline) {
                fmt::print(stderr,
                           "prizma-ping: no answer on {} within {} s: is prizma-pong running "
                           "({} -> {})?\n",
                           a_.pong_uri, a_.timeout, a_.ping_uri, a_.pong_uri);
                return false;
            }
            if (!send(kProbe, now_ns())) {
                return false;
            }
            const std::int64_t until = now_ns() + 20'000'000;
            while (!answered && now_ns() < until) {
                const int work = ctx_.poll();
                const auto got = sub_.poll(64, [&](const prizma::Message& m) {
                    answered = answered
                               || (m.kind == prizma::MessageKind::data && m.payload.size() >= 16
                                   && load_u64(m.payload.data()) == kProbe);
                });
                if (work == 0 && got == 0) {
                    idle(until);
                }
            }
        }
        // Drain the answers to the other probes.
        const std::int64_t until = now_ns() + 50'000'000;
        while (now_ns() < until) {
            if (ctx_.poll() == 0 && sub_.poll(64, [](const prizma::Message&) {}) == 0) {
                idle(until);
            }
        }
        return true;
    }

    /// The warm-up and measured round trips, closed loop or (--rate) open loop.
    End measure() {
        next_progress_ = now_ns() + 1'000'000'000;
        return a_.rate <= 0 ? closed_loop() : open_loop();
    }

    /// Prints the summary (text or JSON) and why the run failed, if it did. Returns the exit
    /// code: 0 when every measured round trip was recorded.
    int report(End end) const {
        const bool timed_out = end == End::timed_out;
        const std::int64_t end_ns = now_ns();
        const double secs =
            measure_start_ != 0 ? static_cast<double>(end_ns - measure_start_) / 1e9 : 0.0;
        const double per_sec =
            secs > 0 ? static_cast<double>(received_ > a_.warmup ? received_ - a_.warmup : 0) / secs
                     : 0.0;
        const auto c = sub_.counters();
        if (a_.json) {
            print_json(per_sec, c.repaired, timed_out);
        } else {
            print_text(per_sec, c.repaired);
        }
        if (timed_out) {
            fmt::print(stderr, "prizma-ping: no reply for {} s after {} of {} round trips\n",
                       a_.timeout, received_, total_);
        }
        if (losses_ != 0) {
            fmt::print(stderr, "prizma-ping: unrecoverable loss on {}\n", a_.pong_uri);
        }
        return timed_out || losses_ != 0 || hist_.count() != a_.count ? 1 : 0;
    }

private:
    /// Sends seq with timestamp t; serves the channel while the window is full. False when
    /// the offer failed for good (printed).
    bool send(std::uint64_t seq, std::int64_t t) {
        std::memcpy(msg_.data(), &seq, 8);
        std::memcpy(msg_.data() + 8, &t, 8);
        for (;;) {
            if (seq < left_at_.size()) {
                left_at_[seq] = now_ns();  // open loop: when it really left, beside the schedule
            }
            auto r = pub_.offer(msg_);
            if (r) {
                pub_.flush();  // the message leaves now
                return true;
            }
            if (!prizma::is_transient(r.error())) {
                fmt::print(stderr, "prizma-ping: offer failed: {}\n", r.error().message());
                return false;
            }
            (void)ctx_.poll();
        }
    }

    /// With --wait block: sleeps on the transports' wakeup until `until` (at most 1 ms).
    void idle(std::int64_t until) {
        if (!a_.spin) {
            ctx_.wait(
                std::chrono::nanoseconds(std::clamp<std::int64_t>(until - now_ns(), 0, 1'000'000)));
        }
    }

    /// One echo (or loss event) from prizma-pong: recorded once the warm-up is over.
    void on_reply(const prizma::Message& m) {
        if (m.kind == prizma::MessageKind::loss) {
            ++losses_;
            return;
        }
        if (m.kind != prizma::MessageKind::data || m.payload.size() < 16) {
            return;
        }
        const std::uint64_t seq = load_u64(m.payload.data());
        if (seq == kProbe || seq >= total_) {
            return;
        }
        const auto sent_at = static_cast<std::int64_t>(load_u64(m.payload.data() + 8));
        const std::int64_t t = now_ns();
        if (seq >= a_.warmup) {
            if (seq == a_.warmup) {
                measure_start_ = sent_at;
            }
            hist_.record(static_cast<std::uint64_t>(std::max<std::int64_t>(0, t - sent_at)));
            if (seq < left_at_.size()) {
                from_send_.record(
                    static_cast<std::uint64_t>(std::max<std::int64_t>(0, t - left_at_[seq])));
            }
        }
        ++received_;
    }

    /// Once a second (text mode): how far the run is, on stderr.
    void progress() {
        if (!a_.json && now_ns() >= next_progress_) {
            next_progress_ += 1'000'000'000;
            fmt::print(stderr, "prizma-ping: {}/{} round trips, p50 so far {:.2f} us\n", received_,
                       total_, static_cast<double>(hist_.percentile(50)) / 1e3);
        }
    }

    /// Closed loop: one message in flight.
    End closed_loop() {
        const auto handler = [this](const prizma::Message& m) {
            on_reply(m);
        };
        bool timed_out = false;
        for (std::uint64_t i = 0; i < total_ && !timed_out && losses_ == 0; ++i) {
            const std::uint64_t before = received_;
            if (!send(i, now_ns())) {
                return End::send_failed;
            }
            const std::int64_t deadline = now_ns() + timeout_ns_;
            while (received_ == before && losses_ == 0) {
                const int work = ctx_.poll();
                if (sub_.poll(1, handler) == 0 && work == 0) {
                    if (now_ns() > deadline) {
                        timed_out = true;
                        break;
                    }
                    idle(deadline);
                }
            }
            progress();
        }
        return timed_out ? End::timed_out : End::complete;
    }

    /// Open loop at a fixed rate: RTT counts from the scheduled send time.
    End open_loop() {
        const auto handler = [this](const prizma::Message& m) {
            on_reply(m);
        };
        const double interval = 1e9 / a_.rate;
        const std::int64_t start = now_ns();
        std::uint64_t sent = 0;
        std::int64_t last_progress = start;
        while (received_ < total_ && losses_ == 0) {
            const std::int64_t t = now_ns();
            const auto due =
                start + static_cast<std::int64_t>(interval * static_cast<double>(sent));
            if (sent < total_ && t >= due) {
                if (!send(sent, due)) {
                    return End::send_failed;
                }
                ++sent;
            }
            const std::uint64_t before = received_;
            const int work = ctx_.poll();
            (void)sub_.poll(64, handler);
            if (received_ != before) {
                last_progress = t;
            } else if (t - last_progress > timeout_ns_) {
                return End::timed_out;
            } else if (work == 0) {
                const auto next_due =
                    sent < total_
                        ? start + static_cast<std::int64_t>(interval * static_cast<double>(sent))
                        : t + 1'000'000;
                idle(next_due);
            }
            progress();
        }
        return End::complete;
    }

    void print_json(double per_sec, std::uint64_t repaired, bool timed_out) const {
        using prizma::tools::Json;
        const Json doc = {
            {"ping", a_.ping_uri},
            {"pong", a_.pong_uri},
            {"count", a_.count},
            {"size", a_.size},
            {"warmup", a_.warmup},
            {"mode", mode()},
            {"rate", a_.rate},
            {"wait", a_.spin ? "spin" : "block"},
            {"cpu", a_.cpu},
            {"preset", prizma::to_string(a_.opts.preset)},
            {"recorded", hist_.count()},
            {"rtt_ns", summary(hist_)},
            {"rtt_from_send_ns", left_at_.empty() ? Json(nullptr) : summary(from_send_)},
            {"round_trips_per_sec", std::llround(per_sec)},
            {"loss_events", losses_},
            {"repairs", repaired},
            {"timed_out", timed_out}};
        fmt::print("{}\n", prizma::tools::json_text(doc));
    }

    /// An RTT histogram's summary, in ns (the mean rounded). Open loop also reports the RTT from
    /// each message's actual send; closed loop has null there (the schedule is the send).
    static prizma::tools::Json summary(const prizma::tools::Histogram& h) {
        return {{"min", h.min()},
                {"p50", h.percentile(50)},
                {"p90", h.percentile(90)},
                {"p99", h.percentile(99)},
                {"p99_9", h.percentile(99.9)},
                {"max", h.max()},
                {"mean", std::llround(h.mean())}};
    }

    void print_text(double per_sec, std::uint64_t repaired) const {
        const std::string cpu = a_.cpu >= 0 ? std::to_string(a_.cpu) : std::string("-");
        fmt::print("prizma-ping: {} -> {}\n", a_.ping_uri, a_.pong_uri);
        fmt::print("  {} x {} B, warmup {}, {} loop{}, wait {}, cpu {}, preset {}\n", a_.count,
                   a_.size, a_.warmup, mode(),
                   a_.rate > 0 ? fmt::format(" at {:.0f} msgs/s", a_.rate) : "",
                   a_.spin ? "spin" : "block", cpu, prizma::to_string(a_.opts.preset));
        auto us = [](std::uint64_t ns) {
            return static_cast<double>(ns) / 1e3;
        };
        fmt::print(
            "  RTT us: min {:.2f}  p50 {:.2f}  p90 {:.2f}  p99 {:.2f}  p99.9 {:.2f}  max {:.2f}  "
            "mean {:.2f}  ({} recorded)\n",
            us(hist_.min()), us(hist_.percentile(50)), us(hist_.percentile(90)),
            us(hist_.percentile(99)), us(hist_.percentile(99.9)), us(hist_.max()),
            hist_.mean() / 1e3, hist_.count());
        if (!left_at_.empty()) {
            // The line above counts from the schedule (the sender's own lateness included:
            // no coordinated omission); this one from when each message really left.
            fmt::print("  RTT us from the actual send: p50 {:.2f}  p99 {:.2f}  p99.9 {:.2f}\n",
                       us(from_send_.percentile(50)), us(from_send_.percentile(99)),
                       us(from_send_.percentile(99.9)));
        }
        fmt::print("  {:.0f} round trips/s; loss events {}, repairs {}\n", per_sec, losses_,
                   repaired);
    }

    [[nodiscard]] const char* mode() const { return a_.rate > 0 ? "open" : "closed"; }

    const Args& a_;
    prizma::Context& ctx_;
    prizma::Publisher& pub_;
    prizma::Subscriber& sub_;
    std::vector<std::byte> msg_;
    std::int64_t timeout_ns_;
    std::uint64_t total_;  ///< warm-up + measured round trips
    std::uint64_t losses_ = 0;
    prizma::tools::Histogram hist_;       ///< from the scheduled send (closed loop: the send)
    std::vector<std::int64_t> left_at_;   ///< open loop: when message i really left
    prizma::tools::Histogram from_send_;  ///< open loop: from the actual send
    std::uint64_t received_ = 0;
    std::int64_t measure_start_ = 0;  ///< send time of the first measured message
    std::int64_t next_progress_ = 0;
};

int run(int argc, char** argv) {
    Args a;
    if (const int rc = parse(argc, argv, a); rc >= 0) {
        return rc;
    }
    prizma::tools::precise_timers();
    if (a.cpu >= 0) {
        if (const std::string e = prizma::tools::pin_to_cpu(a.cpu); !e.empty()) {
            fmt::print(stderr, "prizma-ping: {}\n", e);
            return 1;
        }
    }
    auto created = prizma::tools::make_context("prizma-ping");
    if (!created) {
        return 1;
    }
    prizma::Context& ctx = *created;
    auto pub = ctx.add_publisher(a.ping_uri, a.opts);
    if (!pub) {
        fmt::print(stderr, "prizma-ping: {}: {}\n", a.ping_uri, pub.error().message());
        return 1;
    }
    auto sub = ctx.add_subscriber(a.pong_uri, a.opts);
    if (!sub) {
        fmt::print(stderr, "prizma-ping: {}: {}\n", a.pong_uri, sub.error().message());
        return 1;
    }
    for (const std::string& d : {pub->transport_description(), sub->transport_description()}) {
        if (!d.empty()) {
            fmt::print(stderr, "prizma-ping: transport: {}\n", d);  // what was chosen
        }
    }
    if (a.size > pub->max_message_size()) {
        fmt::print(stderr, "prizma-ping: --size {} exceeds the channel's maximum message size {}\n",
                   a.size, pub->max_message_size());
        return 2;
    }
    Pinger pinger(a, ctx, *pub, *sub);
    if (!pinger.handshake()) {
        return 1;
    }
    const End end = pinger.measure();
    if (end == End::send_failed) {
        return 1;
    }
    return pinger.report(end);
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main("prizma-ping", run, argc, argv);
}
