// SPDX-License-Identifier: Apache-2.0
// Lossless streams (docs/STREAMS.md): what arbitration costs per record against a plain
// subscriber, end to end over mem:// through the public API (publish, deliver, and for the
// stream: header, checksum written and verified, sequence arbitration).
#include <cstring>
#include <vector>

#include <benchmark/benchmark.h>

#include <prizma/prizma.hpp>

// What a consumer does with a payload at least: touch each of its cache lines (a stream's
// checksum reads them all anyway; without this the plain subscriber would never load them).
static void consume(std::span<const std::byte> p) {
    unsigned sum = 0;
    for (std::size_t i = 0; i < p.size(); i += 64) {
        sum += std::to_integer<unsigned>(p[i]);
    }
    if (!p.empty()) {
        sum += std::to_integer<unsigned>(p.back());
    }
    benchmark::DoNotOptimize(sum);
}

// Argument: 0 = a StreamPublisher's records read by a plain Subscriber, 1 = the same records
// read by a StreamSubscriber (the difference is what arbitration costs a subscriber: header
// parse, checksum verified, sequence decided), 2 = a hot-standby pair (two StreamPublishers,
// every record arrives twice and the second copy is dropped as a duplicate).
static void BM_StreamDeliver(benchmark::State& state) {
    const auto mode = state.range(0);
    auto ctx = prizma::Context::create().value();
    auto sub = ctx.add_subscriber("mem://bench-stream:7500");
    auto pa = ctx.add_publisher("mem://bench-stream:7500");
    auto pb = ctx.add_publisher("mem://bench-stream:7500");
    auto sa = prizma::StreamPublisher::create(*pa, 1, 1).value();
    auto sb = prizma::StreamPublisher::create(*pb, 1, 1).value();
    prizma::StreamOptions so;
    so.stream_id = 1;
    auto stream = prizma::StreamSubscriber::create(so).value();
    (void)stream.add(*sub);
    std::vector<std::byte> msg(100, std::byte{7});
    std::uint64_t delivered = 0;
    for (auto _ : state) {
        for (int i = 0; i < 8; ++i) {
            (void)sa.offer(msg);
            if (mode == 2) {
                (void)sb.offer(msg);
            }
        }
        (void)ctx.poll();
        if (mode == 0) {
            delivered += sub->poll(64, [](const prizma::Message& m) { consume(m.payload); });
        } else {
            delivered += stream.poll(64, [](const prizma::StreamEvent& e) { consume(e.payload); });
        }
    }
    state.SetItemsProcessed(state.iterations() * 8);
    state.counters["delivered"] = static_cast<double>(delivered);
}
BENCHMARK(BM_StreamDeliver)->Arg(0)->Arg(1)->Arg(2);
