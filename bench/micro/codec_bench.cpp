// SPDX-License-Identifier: Apache-2.0
#include <vector>

#include <benchmark/benchmark.h>

#include "lib/pgm/checksum.hpp"
#include "lib/pgm/packet.hpp"

using namespace prizma::pgm;  // NOLINT(google-build-using-namespace): benchmark file

static void BM_Checksum(benchmark::State& state) {
    std::vector<std::byte> buf(static_cast<std::size_t>(state.range(0)), std::byte{0xa5});
    for (auto _ : state) {
        benchmark::DoNotOptimize(csum_partial(buf));
    }
    state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Checksum)->Arg(64)->Arg(100)->Arg(124)->Arg(1024)->Arg(8192);

static void BM_ChecksumReference(benchmark::State& state) {
    std::vector<std::byte> buf(static_cast<std::size_t>(state.range(0)), std::byte{0xa5});
    for (auto _ : state) {
        benchmark::DoNotOptimize(csum_reference(buf));
    }
    state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_ChecksumReference)->Arg(64)->Arg(1024)->Arg(8192);

namespace {
std::vector<std::byte> odata(std::size_t payload, bool fragment) {
    const FragmentInfo f{Sqn{1}, 0, 5000};
    PacketSpec s;
    s.type = PacketType::odata;
    s.sport = 1;
    s.dport = 2;
    s.sqn = Sqn{1};
    s.tsdu_length = static_cast<std::uint16_t>(payload);
    s.fragment = fragment ? &f : nullptr;
    std::vector<std::byte> b(encoded_size(s) + payload, std::byte{0x33});
    (void)encode(b, s);
    store_checksum(std::span<std::byte>(b.data(), encoded_size(s)),
                   csum_partial(std::span<const std::byte>(b).subspan(encoded_size(s))));
    return b;
}
}  // namespace

static void BM_ParseOdata(benchmark::State& state) {
    const auto b = odata(static_cast<std::size_t>(state.range(0)), state.range(1) != 0);
    Packet p;
    for (auto _ : state) {
        benchmark::DoNotOptimize(parse(b, p));
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ParseOdata)->Args({100, 0})->Args({1400, 1});

static void BM_EncodeOdataHeader(benchmark::State& state) {
    std::vector<std::byte> out(64);
    PacketSpec s;
    s.type = PacketType::odata;
    s.sport = 1;
    s.dport = 2;
    s.tsdu_length = 100;
    std::uint32_t n = 0;
    for (auto _ : state) {
        s.sqn = Sqn{n++};
        benchmark::DoNotOptimize(encode(out, s));
        store_checksum(std::span<std::byte>(out.data(), 24), 0x1234);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EncodeOdataHeader);
