// SPDX-License-Identifier: Apache-2.0
// Transmit/receive window costs and the end-to-end protocol path over the memory transport.
#include <array>
#include <cstring>
#include <vector>

#include <benchmark/benchmark.h>

#include "lib/pgm/checksum.hpp"
#include "lib/protocol/receiver.hpp"
#include "lib/protocol/source.hpp"
#include "lib/pubsub/session.hpp"
#include "transports/memory/memory_transport.hpp"

using namespace prizma;  // NOLINT(google-build-using-namespace): benchmark file

namespace {

protocol::SourceConfig source_cfg() {
    protocol::SourceConfig c;
    c.tsi.gsi = Gsi{{1, 2, 3, 4, 5, 6}};
    c.tsi.sport = 1000;
    c.nla = pgm::Nla::ipv4(127, 0, 0, 1);
    c.group = pgm::Nla::ipv4(239, 1, 1, 1);
    c.txw_sqns = 1U << 16U;
    c.timers = protocol::preset(protocol::Preset::lan);
    return c;
}

protocol::ReceiverConfig receiver_cfg() {
    protocol::ReceiverConfig c;
    c.group = pgm::Nla::ipv4(239, 1, 1, 1);
    c.rxw_sqns = 1U << 14U;
    c.timers = protocol::preset(protocol::Preset::lan);
    return c;
}

struct NullSink final : protocol::PacketSink {
    std::size_t bytes = 0;
    void emit(const TxPacket& p) noexcept override { bytes += p.header.size() + p.payload.size(); }
};

// Collects emitted packets (copied) so they can be fed to a receiver.
struct Collect final : protocol::PacketSink {
    std::vector<std::vector<std::byte>> pkts;
    void emit(const TxPacket& p) noexcept override {
        std::vector<std::byte> b(p.header.begin(), p.header.end());
        b.insert(b.end(), p.payload.begin(), p.payload.end());
        pkts.push_back(std::move(b));
    }
};

}  // namespace

// Source::send: window slot, header, checksum of header + payload, emit.
static void BM_TxwSend(benchmark::State& state) {
    auto src = std::move(*protocol::Source::create(source_cfg()));
    NullSink sink;
    std::vector<std::byte> msg(static_cast<std::size_t>(state.range(0)), std::byte{7});
    std::int64_t now = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(src->send(msg, ++now, sink));
    }
    state.SetItemsProcessed(state.iterations());
    state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_TxwSend)->Arg(100)->Arg(1400);

// Receiver: parse + in-order insert + deliver of ODATA built beforehand in blocks of 4096.
static void BM_RxwInsertDeliver(benchmark::State& state) {
    auto src = std::move(*protocol::Source::create(source_cfg()));
    auto rcv = std::move(*protocol::Receiver::create(receiver_cfg()));
    Collect c;
    std::vector<std::byte> msg(100, std::byte{7});
    constexpr std::size_t kBlock = 4096;
    NullSink sink;
    std::size_t i = kBlock;
    std::uint64_t delivered = 0;
    for (auto _ : state) {
        if (i == kBlock) {
            state.PauseTiming();
            c.pkts.clear();
            for (std::size_t k = 0; k < kBlock; ++k) {
                (void)src->send(msg, 0, c);
            }
            i = 0;
            state.ResumeTiming();
        }
        pgm::Packet p;
        (void)pgm::parse(c.pkts[i++], p);
        rcv->on_packet(p, Endpoint{}, 0, sink);
        delivered += rcv->poll(
            4, [](const protocol::Event& e) { benchmark::DoNotOptimize(e.payload.data()); });
    }
    benchmark::DoNotOptimize(delivered);
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RxwInsertDeliver);

// NAK scan: a receiver with N gaps runs its NAK timer once (builds NAK lists).
static void BM_NakScan(benchmark::State& state) {
    auto src = std::move(*protocol::Source::create(source_cfg()));
    Collect c;
    std::vector<std::byte> msg(100, std::byte{7});
    const auto gaps = static_cast<std::size_t>(state.range(0));
    for (std::size_t k = 0; k < 2 * gaps + 1; ++k) {
        (void)src->send(msg, 0, c);
    }
    Collect spm;
    src->open(0, spm);
    NullSink sink;
    for (auto _ : state) {
        state.PauseTiming();
        auto rc = receiver_cfg();
        rc.rxw_sqns = 4096;
        rc.max_tpdu = 256;  // setup (paused) stays cheap; the scan is what is timed
        auto rcv = std::move(*protocol::Receiver::create(rc));
        pgm::Packet p;
        (void)pgm::parse(spm.pkts.back(), p);
        rcv->on_packet(p, Endpoint{}, 0, sink);
        for (std::size_t k = 0; k < c.pkts.size(); k += 2) {  // every other packet lost
            (void)pgm::parse(c.pkts[k], p);
            rcv->on_packet(p, Endpoint{}, 0, sink);
        }
        state.ResumeTiming();
        rcv->on_timer(protocol::kSec, sink);
    }
    state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(gaps));
}
BENCHMARK(BM_NakScan)->Arg(64)->Arg(1024)->Iterations(3000);

// End to end over the memory transport: publish -> batch -> ring -> parse -> window -> deliver.
// Arguments: message size, messages per batch, authentication (0 off, 1 on: every packet
// signed by the publisher's Session and verified by the subscriber's), flow control (0 max,
// 1 min: the subscriber sends status, the publisher keeps to its window).
static void BM_PublishDeliverMemory(benchmark::State& state) {
    memory::MemoryNetwork net(memory::MemoryNetwork::Config{1472, 4096, 64, false});
    auto tp = net.attach();
    auto tr = net.attach();
    pubsub::SessionConfig pc;
    pc.source = source_cfg();
    pubsub::SessionConfig rc;
    rc.receiver = receiver_cfg();
    if (state.range(2) != 0) {
        AuthOptions keys;
        keys.keys.push_back(AuthKey{1, {}});
        pc.auth = *pubsub::Authenticator::create(keys);
        rc.auth = pc.auth;
        pc.source->max_tpdu -= pgm::kAuthOverheadBytes;
    }
    if (state.range(3) != 0) {
        pc.source->flow.strategy = protocol::FlowStrategy::min;
        rc.receiver->send_status = true;
        rc.receiver->receiver_id = 1;
    }
    auto pub = std::move(*pubsub::Session::create(*tp, pc));
    auto sub = std::move(*pubsub::Session::create(*tr, rc));
    const auto batch = static_cast<int>(state.range(1));
    std::vector<std::byte> msg(static_cast<std::size_t>(state.range(0)), std::byte{9});
    std::int64_t now = 0;
    std::uint64_t delivered = 0;
    for (auto _ : state) {
        for (int i = 0; i < batch; ++i) {
            (void)pub->source()->send(msg, now, *pub);
        }
        pub->flush();
        (void)tp->poll_rx({});  // the publisher's own loopback is drained below
        (void)pub->do_work(now);
        (void)sub->do_work(now);
        delivered += sub->receiver()->poll(
            static_cast<std::size_t>(batch) + 4,
            [](const protocol::Event& e) { benchmark::DoNotOptimize(e.payload.data()); });
        ++now;
    }
    state.SetItemsProcessed(state.iterations() * batch);
    state.SetBytesProcessed(state.iterations() * batch * state.range(0));
    state.counters["delivered"] = static_cast<double>(delivered);
}
BENCHMARK(BM_PublishDeliverMemory)
    ->Args({100, 8, 0, 0})
    ->Args({100, 8, 1, 0})
    ->Args({100, 8, 0, 1})
    ->Args({100, 64, 0, 0})
    ->Args({100, 64, 1, 0})
    ->Args({100, 64, 0, 1})
    ->Args({500, 8, 0, 0})
    ->Args({500, 8, 1, 0})
    ->Args({500, 64, 0, 0})
    ->Args({500, 64, 1, 0});

// The protocol core alone, publish -> deliver on one core: Source::send emits into a sink that
// parses (with checksum verification) and feeds the Receiver, which delivers in order.
namespace {
struct Direct final : protocol::PacketSink {
    protocol::Receiver* rcv = nullptr;
    NullSink upstream;
    std::array<std::byte, 2048> buf{};
    void emit(const TxPacket& p) noexcept override {
        const std::size_t n = p.header.size() + p.payload.size();
        std::memcpy(buf.data(), p.header.data(), p.header.size());
        if (!p.payload.empty()) {
            std::memcpy(buf.data() + p.header.size(), p.payload.data(), p.payload.size());
        }
        pgm::Packet pkt;
        if (pgm::parse(std::span<const std::byte>(buf.data(), n), pkt) == pgm::ParseStatus::ok) {
            rcv->on_packet(pkt, Endpoint{}, 0, upstream);
        }
    }
};
}  // namespace

static void BM_CorePublishDeliver(benchmark::State& state) {
    auto src = std::move(*protocol::Source::create(source_cfg()));
    auto rcv = std::move(*protocol::Receiver::create(receiver_cfg()));
    Direct sink;
    sink.rcv = rcv.get();
    std::vector<std::byte> msg(static_cast<std::size_t>(state.range(0)), std::byte{7});
    std::uint64_t delivered = 0;
    for (auto _ : state) {
        (void)src->send(msg, 0, sink);
        delivered += rcv->poll(
            4, [](const protocol::Event& e) { benchmark::DoNotOptimize(e.payload.data()); });
    }
    state.SetItemsProcessed(state.iterations());
    state.counters["delivered"] = static_cast<double>(delivered);
}
BENCHMARK(BM_CorePublishDeliver)->Arg(100)->Arg(500);
