// SPDX-License-Identifier: Apache-2.0
// Recording and replay (docs/STREAMS.md, "Recording and late join"), side by side in one run:
//  - RecorderWrite: Recorder::append of 100-byte records (each a 160-byte journal frame) until
//    the journal holds them all, written and fdatasync()ed;
//  - RawWrite: the same number of bytes written dd-style (write(2) of 64 KiB blocks, one
//    fdatasync at the end) to a file in the same directory;
//  - ReplayLoopback/0: a ReplayServer on 127.0.0.1 streaming a journal of those records to one
//    ReplayClient (records/s; bytes = payload bytes), plaintext; /1 the same over TLS 1.3 with a
//    pre-shared key (what a replay off loopback uses), with kernel TLS where the kernel has
//    it (counter kernel_tls: the share of replays the kernel encrypted); /2 the same over TLS
//    done by OpenSSL in user space (ReplaySecurity::kernel_tls = false). Compare with
//    --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true (medians). The
//    counters server_cpu_ms and client_cpu_ms say which side's thread a replay was bound by.
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include <prizma/prizma.hpp>

namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kRecords = 200000;
constexpr std::size_t kPayload = 100;
constexpr std::size_t kFrameBytes = 32 + prizma::RecordHeader::kBytes + kPayload;

std::string temp_dir() {
    // The bench writes next to the build (real disk); PRIZMA_BENCH_DIR overrides.
    const char* base = std::getenv("PRIZMA_BENCH_DIR");  // NOLINT(concurrency-mt-unsafe)
    std::string t = (base != nullptr ? fs::path(base) : fs::current_path()) / "prizma-rec-XXXXXX";
    if (::mkdtemp(t.data()) == nullptr) {
        std::abort();
    }
    return t;
}

// On-CPU time of this process's threads other than the calling one (the replay server's), in
// ns, from /proc/self/task/*/schedstat (first field). Read outside the timed region's hot loop.
double other_threads_cpu_ns() {
    const long self = ::syscall(SYS_gettid);
    double total = 0;
    for (const auto& t : fs::directory_iterator("/proc/self/task")) {
        if (std::stol(t.path().filename().string()) == self) {
            continue;
        }
        std::ifstream f(t.path() / "schedstat");
        unsigned long long ns = 0;
        if (!(f >> ns)) {
            ns = 0;
        }
        total += static_cast<double>(ns);
    }
    return total;
}

double thread_cpu_ns() {
    timespec ts{};
    (void)::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

void write_journal(const std::string& dir, std::uint64_t n) {
    prizma::RecorderOptions o;
    o.directory = dir;
    o.stream_id = 42;
    auto rec = prizma::Recorder::open(o).value();
    std::vector<std::byte> payload(kPayload, std::byte{0x5A});
    prizma::StreamEvent e;
    e.epoch = 1;
    e.payload = payload;
    for (std::uint64_t i = 0; i < n; ++i) {
        e.sequence = i;
        while (!rec.append(e)) {
            std::this_thread::yield();
        }
    }
    (void)rec.flush();
}

/// Records [0, kRecords) as a StreamSubscriber delivers them (header + payload, verified).
const std::vector<std::byte>& records() {
    static const std::vector<std::byte> all = [] {
        constexpr std::size_t kRecordBytes = prizma::RecordHeader::kBytes + kPayload;
        std::vector<std::byte> v(kRecords * kRecordBytes, std::byte{0x5A});
        for (std::uint64_t i = 0; i < kRecords; ++i) {
            std::byte* r = v.data() + i * kRecordBytes;
            prizma::RecordHeader::write({r, kRecordBytes}, 42, 1, i,
                                        {r + prizma::RecordHeader::kBytes, kPayload});
        }
        return v;
    }();
    return all;
}

void BM_RecorderWrite(benchmark::State& state) {
    std::uint64_t back_pressured = 0;
    double flush_ns = 0;
    const auto& all = records();
    constexpr std::size_t kRecordBytes = prizma::RecordHeader::kBytes + kPayload;
    for (auto _ : state) {
        state.PauseTiming();
        const std::string dir = temp_dir();
        prizma::RecorderOptions o;
        o.directory = dir;
        o.stream_id = 42;
        std::optional<prizma::Recorder> rec(prizma::Recorder::open(o).value());
        prizma::StreamEvent e;
        e.epoch = 1;
        state.ResumeTiming();
        for (std::uint64_t i = 0; i < kRecords; ++i) {
            e.sequence = i;
            const auto r = std::span<const std::byte>(all).subspan(i * kRecordBytes, kRecordBytes);
            e.payload = r.subspan(prizma::RecordHeader::kBytes);
            while (!rec->append(e, r)) {
                std::this_thread::yield();
            }
        }
        const auto t1 = std::chrono::steady_clock::now();
        (void)rec->flush();
        const auto t2 = std::chrono::steady_clock::now();
        flush_ns += std::chrono::duration<double, std::nano>(t2 - t1).count();
        state.PauseTiming();
        back_pressured += rec->counters().back_pressured;
        rec.reset();
        fs::remove_all(dir);
        state.ResumeTiming();
    }
    state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kRecords));
    state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(kRecords * kFrameBytes));
    state.counters["back_pressured"] = static_cast<double>(back_pressured);
    state.counters["flush_ms"] = flush_ns / 1e6 / static_cast<double>(state.iterations());
}
BENCHMARK(BM_RecorderWrite)->Unit(benchmark::kMillisecond)->UseRealTime();

// dd-style; with state.range(0) = 1 it also starts writeback every MiB (sync_file_range), as
// the recorder's writer does, so the final fdatasync waits for less.
void BM_RawWrite(benchmark::State& state) {
    const bool kick = state.range(0) != 0;
    std::vector<std::byte> block(std::size_t{64} << 10U, std::byte{0x5A});
    const std::size_t total = kRecords * kFrameBytes;
    for (auto _ : state) {
        state.PauseTiming();
        const std::string dir = temp_dir();
        const std::string file = dir + "/raw";
        state.ResumeTiming();
        const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        std::size_t kicked = 0;
        for (std::size_t done = 0; done < total;) {
            const std::size_t n = std::min(block.size(), total - done);
            const ssize_t w = ::write(fd, block.data(), n);
            if (w <= 0) {
                std::abort();
            }
            done += static_cast<std::size_t>(w);
            if (kick && done - kicked >= (std::size_t{1} << 20U)) {
                (void)::sync_file_range(fd, static_cast<off_t>(kicked),
                                        static_cast<off_t>(done - kicked), SYNC_FILE_RANGE_WRITE);
                kicked = done;
            }
        }
        (void)::fdatasync(fd);
        (void)::close(fd);
        state.PauseTiming();
        fs::remove_all(dir);
        state.ResumeTiming();
    }
    state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kRecords));
    state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(total));
}
BENCHMARK(BM_RawWrite)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ReplayLoopback(benchmark::State& state) {
    const std::string dir = temp_dir();
    write_journal(dir, kRecords);
    prizma::ReplaySecurity sec;
    if (state.range(0) >= 1) {
        sec.keys.emplace();
        sec.keys->keys.push_back({7, {}});
        sec.keys->keys.back().bytes.fill(0x42);
        sec.kernel_tls = state.range(0) == 1;
    }
    prizma::ReplayServerOptions o;
    o.streams = {{42, dir}};
    o.security = sec;
    auto server = prizma::ReplayServer::start(o).value();
    prizma::ReplayClientOptions co;
    co.security = sec;
    std::uint64_t records = 0;
    const double server0 = other_threads_cpu_ns();
    const double client0 = thread_cpu_ns();
    for (auto _ : state) {
        prizma::ReplayRequest rq;
        rq.stream_id = 42;
        auto client = prizma::ReplayClient::connect("127.0.0.1", server.port(), rq, co).value();
        prizma::JournalEntry e;
        while (!client.done()) {
            auto r = client.next(e);
            if (!r) {
                state.SkipWithError("replay failed");
                break;
            }
            if (*r) {
                ++records;
            } else if (!client.done()) {
                client.wait(std::chrono::milliseconds(1));
            }
        }
    }
    // Each side's CPU per replay: the server's thread and the client's (this one).
    const auto iters = static_cast<double>(state.iterations());
    state.counters["server_cpu_ms"] = (other_threads_cpu_ns() - server0) / 1e6 / iters;
    state.counters["client_cpu_ms"] = (thread_cpu_ns() - client0) / 1e6 / iters;
    state.counters["kernel_tls"] = static_cast<double>(server.counters().kernel_tls) / iters;
    state.SetItemsProcessed(static_cast<std::int64_t>(records));
    state.SetBytesProcessed(static_cast<std::int64_t>(records * kPayload));
    server.stop();
    fs::remove_all(dir);
}
BENCHMARK(BM_ReplayLoopback)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
