// SPDX-License-Identifier: Apache-2.0
// MQBench/<transport>/pgm/<size>/<batch>: the exchange's table, through the public API.
// One iteration = offer `batch` messages of `size` bytes on a channel, flush, and poll the
// subscriber (same process, same thread) until all of them are delivered: the time of one
// iteration is "batch × size publish → last delivered" (the exchange quotes 8 × 100 B in ~20 µs
// over UDP multicast and ~10 µs over RDMA). Transports:
//   posix   udp://239.192.97.1:PORT?iface=127.0.0.1 (real kernel UDP multicast on loopback)
//   memory  mem://mqbench:7500 (in-process network: the library's own cost)
//   verbs   verbs://DEVICE/239.192.97.3:7500, only when PRIZMA_BENCH_VERBS=DEVICE is set (an
//           RDMA device or Soft-RoCE rxe0); otherwise not registered.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <prizma/prizma.hpp>

namespace {

struct Rig {
    std::optional<prizma::Context> ctx;
    std::optional<prizma::Subscriber> sub;
    std::optional<prizma::Publisher> pub;
    std::string error;
};

Rig make_rig(const std::string& uri) {
    Rig r;
    auto ctx = prizma::Context::create();
    if (!ctx) {
        r.error = ctx.error().message();
        return r;
    }
    r.ctx = std::move(*ctx);
    prizma::ChannelOptions o;
    o.window_sqns = 1U << 14U;
    auto sub = r.ctx->add_subscriber(uri, o);
    if (!sub) {
        r.error = uri + ": " + sub.error().message();
        return r;
    }
    auto pub = r.ctx->add_publisher(uri, o);
    if (!pub) {
        r.error = uri + ": " + pub.error().message();
        return r;
    }
    r.sub.emplace(std::move(*sub));
    r.pub.emplace(std::move(*pub));
    return r;
}

void MQBench(benchmark::State& state, const std::string& uri) {
    Rig rig = make_rig(uri);
    if (!rig.error.empty()) {
        state.SkipWithError(rig.error.c_str());
        return;
    }
    const auto size = static_cast<std::size_t>(state.range(0));
    const auto batch = static_cast<std::uint64_t>(state.range(1));
    std::vector<std::byte> msg(size, std::byte{0x5a});
    std::uint64_t delivered = 0;
    std::uint64_t lost = 0;
    std::uint64_t retries = 0;
    auto on_message = [&](const prizma::Message& m) {
        if (m.kind == prizma::MessageKind::data) {
            ++delivered;
            benchmark::DoNotOptimize(m.payload.data());
        } else if (m.kind == prizma::MessageKind::loss) {
            lost += m.count;
        }
    };
    std::uint64_t offered = 0;
    // One round outside the timing: the subscriber meets the source, pages get touched.
    auto round = [&](std::uint64_t n) {
        for (std::uint64_t i = 0; i < n; ++i) {
            for (;;) {  // back-pressure: drive the context and retry
                auto r = rig.pub->offer(msg);
                if (r) {
                    break;
                }
                if (!prizma::is_transient(r.error())) {
                    state.SkipWithError(r.error().message().c_str());
                    return false;
                }
                ++retries;
                (void)rig.ctx->poll();
            }
        }
        offered += n;
        (void)rig.ctx->poll();  // flush: the batch leaves in one send call
        const std::int64_t deadline = prizma::Context::now_ns() + 2'000'000'000;
        while (delivered + lost < offered) {
            (void)rig.ctx->poll();
            (void)rig.sub->poll(n + 4, on_message);
            if (prizma::Context::now_ns() > deadline) {
                state.SkipWithError("messages neither delivered nor reported lost within 2 s");
                return false;
            }
        }
        return true;
    };
    for (int i = 0; i < 256; ++i) {
        if (!round(batch)) {
            return;
        }
    }
    offered = delivered = lost = retries = 0;
    for (auto _ : state) {
        if (!round(batch)) {
            return;
        }
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(offered));
    state.SetBytesProcessed(static_cast<std::int64_t>(offered * size));
    state.counters["lost"] = static_cast<double>(lost);
    state.counters["retries"] = static_cast<double>(retries);
}

void register_all() {
    std::vector<std::pair<std::string, std::string>> transports = {
        {"posix", "udp://239.192.97.1:47600?iface=127.0.0.1"},
        {"memory", "mem://mqbench:7500"},
    };
    if (const char* dev = std::getenv("PRIZMA_BENCH_VERBS"); dev != nullptr && *dev != '\0') {
        transports.emplace_back("verbs", std::string("verbs://") + dev + "/239.192.97.3:7500");
    }
    for (const auto& [name, uri] : transports) {
        for (const std::int64_t size : {100, 500}) {
            for (const std::int64_t batch : {8, 64}) {
                benchmark::RegisterBenchmark(("MQBench/" + name + "/pgm").c_str(), MQBench, uri)
                    ->Args({size, batch})
                    ->UseRealTime();
            }
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    register_all();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
        return 1;
    }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
