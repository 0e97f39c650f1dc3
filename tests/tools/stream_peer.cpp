// SPDX-License-Identifier: Apache-2.0
// A stream publisher or arbitrating subscriber process for the hot-standby failover trials
// (tests/tools/stream_failover.sh; docs/STREAMS.md). Public API only.
//   stream_peer pub URI STATE_FILE COUNT RATE [START_NS]
//       Publishes records [S, COUNT) of stream 42, epoch 1, at RATE records/s, S read from
//       STATE_FILE (0 when absent): its own state, saved (write + rename) every 500 records, so
//       that a restarted publisher resumes where it had got to and rejoins as a standby. Every
//       97th record is 5,000 bytes (fragmented on UDP), the others 100. Lingers until quiet.
//       With START_NS (CLOCK_REALTIME, shared by the processes of a trial), record s is due at
//       START_NS + s / RATE, so a hot-standby pair sends each record at the same moment (a
//       restarted publisher catches up at most 4x as fast: rate_bytes_per_sec caps it, since
//       a burst at full speed would overrun the subscriber's socket buffer and stall the live
//       copy on repairs); without it, from its own start, unpaced between records.
//   stream_peer sub URI COUNT TIMEOUT_S [START_NS RATE [KILL_FILE]]
//       Reads the stream from sequence 0 and checks every record's bytes; exits 0 when records
//       0..COUNT-1 all arrived once, in order, with no loss event. Prints the counts, the
//       longest pause between two records and, given the publishers' schedule, the greatest
//       lateness of a record (delivered minus due): the failover stall plus the host's
//       scheduling noise, printed for the benchmark only (bench/stream_failover.sh). With
//       KILL_FILE (the wall-clock ns of the kill, written by the script), also the failover
//       stall: the greatest lateness of the records due within 100 ms after the kill, next
//       to the lateness before it.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <prizma/prizma.hpp>

namespace {

constexpr std::uint32_t kStream = 42;

std::vector<std::byte> body(std::uint64_t seq) {
    const std::size_t n = seq % 97 == 0 ? 5000 : 100;
    std::vector<std::byte> b(n);
    for (std::size_t k = 0; k < n; ++k) {
        b[k] = static_cast<std::byte>((seq * 131 + k * 7) & 0xffU);
    }
    return b;
}

std::uint64_t load_state(const std::string& path) {
    std::ifstream in(path);
    std::uint64_t s = 0;
    return (in >> s) ? s : 0;
}

void save_state(const std::string& path, std::uint64_t next) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << next << '\n';
    }
    (void)std::rename(tmp.c_str(), path.c_str());
}

std::int64_t wall_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

int publish(const std::string& uri,
            const std::string& state,
            std::uint64_t count,
            double rate,
            std::int64_t start_ns) {
    auto ctx = prizma::Context::create();
    if (!ctx) {
        std::fprintf(stderr, "stream_peer: %s\n", ctx.error().message().c_str());
        return 1;
    }
    prizma::ChannelOptions options;
    if (start_ns != 0) {  // ~180 bytes a record on average (every 97th is 5,000)
        options.rate_bytes_per_sec = static_cast<std::uint64_t>(rate * 180 * 4);
    }
    auto pub = ctx->add_publisher(uri, options);
    if (!pub) {
        std::fprintf(stderr, "stream_peer: %s\n", pub.error().message().c_str());
        return 1;
    }
    const std::uint64_t first = load_state(state);
    auto out = prizma::StreamPublisher::create(*pub, kStream, 1, first);
    if (!out) {
        std::fprintf(stderr, "stream_peer: %s\n", out.error().message().c_str());
        return 1;
    }
    std::fprintf(stderr, "stream_peer: publishing from %llu\n",
                 static_cast<unsigned long long>(first));
    const std::uint64_t base = start_ns != 0 ? 0 : first;
    const std::int64_t start = start_ns != 0 ? start_ns : wall_ns();
    while (out->next_sequence() < count) {
        const std::uint64_t seq = out->next_sequence();
        const auto due =
            start + static_cast<std::int64_t>(static_cast<double>(seq - base) / rate * 1e9);
        while (wall_ns() < due) {
            if (ctx->poll() == 0) {
                std::this_thread::sleep_for(std::chrono::microseconds(50));
            }
        }
        const auto r = out->offer(body(seq));
        if (!r && !prizma::is_transient(r.error())) {
            std::fprintf(stderr, "stream_peer: offer: %s\n", r.error().message().c_str());
            return 1;
        }
        (void)ctx->poll();
        if (r && seq % 500 == 0) {
            save_state(state, seq);
        }
    }
    save_state(state, out->next_sequence());
    while (!pub->quiet()) {
        if (ctx->poll() == 0) {
            ctx->wait(std::chrono::milliseconds(1));
        }
    }
    return 0;
}

/// From each record's lateness (ns, by sequence) and the kill time: the failover stall (the
/// greatest lateness of the records due within 100 ms after the kill) against the lateness of
/// the records due before it (p99 and greatest), printed.
void print_failover(const std::vector<std::int64_t>& late,
                    std::int64_t start_ns,
                    double rate,
                    const std::string& kill_file) {
    std::ifstream in(kill_file);
    std::int64_t kill_ns = 0;
    if (!(in >> kill_ns)) {
        return;
    }
    std::int64_t stall = 0;
    std::vector<std::int64_t> before;
    for (std::size_t s = 0; s < late.size(); ++s) {
        const auto due = start_ns + static_cast<std::int64_t>(static_cast<double>(s) / rate * 1e9);
        if (due < kill_ns) {
            before.push_back(late[s]);
        } else if (due < kill_ns + 100'000'000) {
            stall = std::max(stall, late[s]);
        }
    }
    if (before.empty()) {
        return;
    }
    std::sort(before.begin(), before.end());
    const std::int64_t p99 = before[before.size() * 99 / 100];
    std::printf(
        "failover: stall %.3f ms (greatest lateness of the records due within 100 ms "
        "after the kill); before the kill: p99 %.3f ms, greatest %.3f ms\n",
        static_cast<double>(stall) / 1e6, static_cast<double>(p99) / 1e6,
        static_cast<double>(before.back()) / 1e6);
}

int subscribe(const std::string& uri,
              std::uint64_t count,
              double timeout_s,
              std::int64_t start_ns,
              double rate,
              const std::string& kill_file) {
    auto ctx = prizma::Context::create();
    if (!ctx) {
        return 1;
    }
    auto sub = ctx->add_subscriber(uri);
    if (!sub) {
        std::fprintf(stderr, "stream_peer: %s\n", sub.error().message().c_str());
        return 1;
    }
    prizma::StreamOptions so;
    so.stream_id = kStream;
    so.start_sequence = 0;
    auto in = prizma::StreamSubscriber::create(so);
    if (!in || !in->add(*sub)) {
        return 1;
    }
    std::fprintf(stderr, "stream_peer: listening\n");
    std::uint64_t expect = 0;
    std::uint64_t bad = 0;
    std::uint64_t losses = 0;
    std::uint64_t out_of_order = 0;
    std::int64_t last_ns = 0;
    std::int64_t max_pause_ns = 0;
    std::int64_t max_late_ns = 0;
    std::uint64_t latest = 0;  // the record that was latest
    std::vector<std::int64_t> late(start_ns != 0 ? count : 0, 0);
    std::int64_t idle_since = prizma::Context::now_ns();
    while (expect < count) {
        const int work = ctx->poll();
        const std::size_t got = in->poll(256, [&](const prizma::StreamEvent& e) {
            if (e.kind == prizma::StreamEventKind::loss) {
                ++losses;
                expect = e.sequence + e.count;
                return;
            }
            if (e.kind != prizma::StreamEventKind::record) {
                return;
            }
            out_of_order += e.sequence != expect ? 1U : 0U;
            const auto want = body(e.sequence);
            bad += (e.payload.size() != want.size()
                    || std::memcmp(e.payload.data(), want.data(), want.size()) != 0)
                       ? 1U
                       : 0U;
            expect = e.sequence + 1;
            const std::int64_t now = prizma::Context::now_ns();
            if (last_ns != 0) {
                max_pause_ns = std::max(max_pause_ns, now - last_ns);
            }
            last_ns = now;
            if (start_ns != 0) {
                const auto due =
                    start_ns
                    + static_cast<std::int64_t>(static_cast<double>(e.sequence) / rate * 1e9);
                const std::int64_t l = wall_ns() - due;
                if (l > max_late_ns) {
                    max_late_ns = l;
                    latest = e.sequence;
                }
                if (e.sequence < late.size()) {
                    late[e.sequence] = l;
                }
            }
        });
        const std::int64_t now = prizma::Context::now_ns();
        if (got != 0) {
            idle_since = now;
        } else if (static_cast<double>(now - idle_since) > timeout_s * 1e9) {
            break;
        }
        if (work == 0 && got == 0) {
            ctx->wait(std::chrono::milliseconds(1));
        }
    }
    const auto& c = in->counters();
    std::printf(
        "stream: records %llu of %llu, losses %llu, out-of-order %llu, bad %llu, duplicates %llu, "
        "divergences %llu, longest pause %.3f ms, greatest lateness %.3f ms (record %llu)\n",
        static_cast<unsigned long long>(c.records), static_cast<unsigned long long>(count),
        static_cast<unsigned long long>(losses), static_cast<unsigned long long>(out_of_order),
        static_cast<unsigned long long>(bad), static_cast<unsigned long long>(c.duplicates),
        static_cast<unsigned long long>(c.divergences), static_cast<double>(max_pause_ns) / 1e6,
        static_cast<double>(max_late_ns) / 1e6, static_cast<unsigned long long>(latest));
    const auto pc = sub->counters();
    std::printf("pgm: odata %llu, rdata %llu, naks sent %llu, repaired %llu, lost %llu\n",
                static_cast<unsigned long long>(pc.odata_received),
                static_cast<unsigned long long>(pc.rdata_received),
                static_cast<unsigned long long>(pc.naks_sent),
                static_cast<unsigned long long>(pc.repaired),
                static_cast<unsigned long long>(pc.lost_sqns));
    if (!kill_file.empty()) {
        print_failover(late, start_ns, rate, kill_file);
    }
    return c.records == count && losses == 0 && out_of_order == 0 && bad == 0 && c.divergences == 0
               ? 0
               : 1;
}

}  // namespace

int main(int argc, char** argv) {
    const std::vector<std::string> a(argv + 1, argv + argc);
    if ((a.size() == 5 || a.size() == 6) && a[0] == "pub") {
        return publish(a[1], a[2], std::stoull(a[3]), std::stod(a[4]),
                       a.size() == 6 ? std::stoll(a[5]) : 0);
    }
    if ((a.size() == 4 || a.size() == 6 || a.size() == 7) && a[0] == "sub") {
        return subscribe(a[1], std::stoull(a[2]), std::stod(a[3]),
                         a.size() >= 6 ? std::stoll(a[4]) : 0, a.size() >= 6 ? std::stod(a[5]) : 1,
                         a.size() == 7 ? a[6] : std::string());
    }
    std::fprintf(stderr,
                 "usage: stream_peer pub URI STATE_FILE COUNT RATE [START_NS] | "
                 "sub URI COUNT TIMEOUT_S [START_NS RATE [KILL_FILE]]\n");
    return 2;
}
