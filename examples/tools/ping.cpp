// SPDX-License-Identifier: Apache-2.0
// prizma-ping PING_URI PONG_URI --count N --size S [--warmup N] [--rate R] [--wait spin|block]
//             [--cpu N] [--preset P] [--window PACKETS] [--timeout S] [--json]
// Round-trip time through prizma-pong: min/p50/p90/p99/p99.9/max from a log-linear histogram.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
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
        "measured from each message's scheduled send time (no coordinated omission).\n"
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

}  // namespace

int main(int argc, char** argv) {
    Args a;
    if (const int rc = parse(argc, argv, a); rc >= 0) {
        return rc;
    }
    if (a.cpu >= 0) {
        if (const std::string e = prizma::tools::pin_to_cpu(a.cpu); !e.empty()) {
            fmt::print(stderr, "prizma-ping: {}\n", e);
            return 1;
        }
    }
    auto created = prizma::Context::create();
    if (!created) {
        fmt::print(stderr, "prizma-ping: {}\n", created.error().message());
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
    if (a.size > pub->max_message_size()) {
        fmt::print(stderr, "prizma-ping: --size {} exceeds the channel's maximum message size {}\n",
                   a.size, pub->max_message_size());
        return 2;
    }
    const auto size = std::size_t{a.size};
    std::vector<std::byte> msg(size);
    for (std::size_t k = 16; k < size; ++k) {
        msg[k] = static_cast<std::byte>(k & 0xffU);
    }
    const auto timeout_ns = static_cast<std::int64_t>(std::min(a.timeout, 1e9) * 1e9);
    auto now = [] {
        return prizma::Context::now_ns();
    };
    std::uint64_t losses = 0;
    // Sends seq with timestamp t; serves the channel while the window is full.
    auto send = [&](std::uint64_t seq, std::int64_t t) -> bool {
        std::memcpy(msg.data(), &seq, 8);
        std::memcpy(msg.data() + 8, &t, 8);
        for (;;) {
            auto r = pub->offer(msg);
            if (r) {
                pub->flush();  // the message leaves now
                return true;
            }
            if (!prizma::is_transient(r.error())) {
                fmt::print(stderr, "prizma-ping: offer failed: {}\n", r.error().message());
                return false;
            }
            (void)ctx.poll();
        }
    };
    auto idle = [&](std::int64_t until) {
        if (!a.spin) {
            ctx.wait(
                std::chrono::nanoseconds(std::clamp<std::int64_t>(until - now(), 0, 1'000'000)));
        }
    };

    // Handshake: probe until prizma-pong answers (it joins at the first packet it hears).
    {
        const std::int64_t deadline = now() + timeout_ns;
        bool answered = false;
        while (!answered) {
            if (now() > deadline) {
                fmt::print(stderr,
                           "prizma-ping: no answer on {} within {} s: is prizma-pong running "
                           "({} -> {})?\n",
                           a.pong_uri, a.timeout, a.ping_uri, a.pong_uri);
                return 1;
            }
            if (!send(kProbe, now())) {
                return 1;
            }
            const std::int64_t until = now() + 20'000'000;
            while (!answered && now() < until) {
                const int work = ctx.poll();
                const auto got = sub->poll(64, [&](const prizma::Message& m) {
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
        const std::int64_t until = now() + 50'000'000;
        while (now() < until) {
            if (ctx.poll() == 0 && sub->poll(64, [](const prizma::Message&) {}) == 0) {
                idle(until);
            }
        }
    }

    prizma::tools::Histogram hist;
    const std::uint64_t total = a.warmup + a.count;
    std::uint64_t received = 0;
    std::int64_t measure_start = 0;
    std::int64_t next_progress = now() + 1'000'000'000;
    auto on_reply = [&](const prizma::Message& m) {
        if (m.kind == prizma::MessageKind::loss) {
            ++losses;
            return;
        }
        if (m.kind != prizma::MessageKind::data || m.payload.size() < 16) {
            return;
        }
        const std::uint64_t seq = load_u64(m.payload.data());
        if (seq == kProbe || seq >= total) {
            return;
        }
        const auto sent_at = static_cast<std::int64_t>(load_u64(m.payload.data() + 8));
        const std::int64_t t = now();
        if (seq >= a.warmup) {
            if (seq == a.warmup) {
                measure_start = sent_at;
            }
            hist.record(static_cast<std::uint64_t>(std::max<std::int64_t>(0, t - sent_at)));
        }
        ++received;
    };
    auto progress = [&] {
        if (!a.json && now() >= next_progress) {
            next_progress += 1'000'000'000;
            fmt::print(stderr, "prizma-ping: {}/{} round trips, p50 so far {:.2f} us\n", received,
                       total, static_cast<double>(hist.percentile(50)) / 1e3);
        }
    };
    bool timed_out = false;
    if (a.rate <= 0) {
        // Closed loop: one message in flight.
        for (std::uint64_t i = 0; i < total && !timed_out && losses == 0; ++i) {
            const std::uint64_t before = received;
            if (!send(i, now())) {
                return 1;
            }
            const std::int64_t deadline = now() + timeout_ns;
            while (received == before && losses == 0) {
                const int work = ctx.poll();
                if (sub->poll(1, on_reply) == 0 && work == 0) {
                    if (now() > deadline) {
                        timed_out = true;
                        break;
                    }
                    idle(deadline);
                }
            }
            progress();
        }
    } else {
        // Open loop at a fixed rate: RTT counts from the scheduled send time.
        const double interval = 1e9 / a.rate;
        const std::int64_t start = now();
        std::uint64_t sent = 0;
        std::int64_t last_progress = start;
        while (received < total && losses == 0) {
            const std::int64_t t = now();
            const auto due =
                start + static_cast<std::int64_t>(interval * static_cast<double>(sent));
            if (sent < total && t >= due) {
                if (!send(sent, due)) {
                    return 1;
                }
                ++sent;
            }
            const std::uint64_t before = received;
            const int work = ctx.poll();
            (void)sub->poll(64, on_reply);
            if (received != before) {
                last_progress = t;
            } else if (t - last_progress > timeout_ns) {
                timed_out = true;
                break;
            } else if (work == 0) {
                const auto next_due =
                    sent < total
                        ? start + static_cast<std::int64_t>(interval * static_cast<double>(sent))
                        : t + 1'000'000;
                idle(next_due);
            }
            progress();
        }
    }
    const std::int64_t end = now();
    const double secs = measure_start != 0 ? static_cast<double>(end - measure_start) / 1e9 : 0.0;
    const double per_sec =
        secs > 0 ? static_cast<double>(received > a.warmup ? received - a.warmup : 0) / secs : 0.0;
    const auto c = sub->counters();
    const char* mode = a.rate > 0 ? "open" : "closed";
    const std::string cpu = a.cpu >= 0 ? std::to_string(a.cpu) : std::string("-");
    if (a.json) {
        fmt::print(
            "{{\"ping\":{},\"pong\":{},\"count\":{},\"size\":{},\"warmup\":{},\"mode\":\"{}\","
            "\"rate\":{},\"wait\":\"{}\",\"cpu\":{},\"preset\":{},\"recorded\":{},"
            "\"rtt_ns\":{{\"min\":{},\"p50\":{},\"p90\":{},\"p99\":{},\"p99_9\":{},\"max\":{},"
            "\"mean\":{:.0f}}},\"round_trips_per_sec\":{:.0f},\"loss_events\":{},\"repairs\":{},"
            "\"timed_out\":{}}}\n",
            prizma::tools::json_string(a.ping_uri), prizma::tools::json_string(a.pong_uri), a.count,
            a.size, a.warmup, mode, a.rate, a.spin ? "spin" : "block", a.cpu,
            prizma::tools::json_string(std::string(prizma::to_string(a.opts.preset))), hist.count(), hist.min(),
            hist.percentile(50), hist.percentile(90), hist.percentile(99), hist.percentile(99.9),
            hist.max(), hist.mean(), per_sec, losses, c.repaired, timed_out ? "true" : "false");
    } else {
        fmt::print("prizma-ping: {} -> {}\n", a.ping_uri, a.pong_uri);
        fmt::print("  {} x {} B, warmup {}, {} loop{}, wait {}, cpu {}, preset {}\n", a.count,
                   a.size, a.warmup, mode,
                   a.rate > 0 ? fmt::format(" at {:.0f} msgs/s", a.rate) : "",
                   a.spin ? "spin" : "block", cpu, prizma::to_string(a.opts.preset));
        auto us = [](std::uint64_t ns) {
            return static_cast<double>(ns) / 1e3;
        };
        fmt::print(
            "  RTT us: min {:.2f}  p50 {:.2f}  p90 {:.2f}  p99 {:.2f}  p99.9 {:.2f}  max {:.2f}  "
            "mean {:.2f}  ({} recorded)\n",
            us(hist.min()), us(hist.percentile(50)), us(hist.percentile(90)),
            us(hist.percentile(99)), us(hist.percentile(99.9)), us(hist.max()), hist.mean() / 1e3,
            hist.count());
        fmt::print("  {:.0f} round trips/s; loss events {}, repairs {}\n", per_sec, losses,
                   c.repaired);
    }
    if (timed_out) {
        fmt::print(stderr, "prizma-ping: no reply for {} s after {} of {} round trips\n", a.timeout,
                   received, total);
    }
    if (losses != 0) {
        fmt::print(stderr, "prizma-ping: unrecoverable loss on {}\n", a.pong_uri);
    }
    return timed_out || losses != 0 || hist.count() != a.count ? 1 : 0;
}
