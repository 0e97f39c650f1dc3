// SPDX-License-Identifier: Apache-2.0
// Packet authentication's cost per packet: prizma's sign and verify (SipHash-2-4 with a
// 128-bit tag, plus the option and the checksum made again), and the MACs it was chosen over,
// all from libsodium, on PGM-sized packets.
#include <sodium.h>

#include <array>
#include <vector>

#include <benchmark/benchmark.h>

#include "lib/pgm/checksum.hpp"
#include "lib/pubsub/auth.hpp"

using namespace prizma;  // NOLINT(google-build-using-namespace): benchmark file

namespace {

std::vector<std::byte> odata(std::size_t payload) {
    pgm::PacketSpec s;
    s.type = pgm::PacketType::odata;
    s.sport = 1000;
    s.dport = 7500;
    s.tsdu_length = static_cast<std::uint16_t>(payload);
    std::vector<std::byte> b(pgm::encoded_size(s) + payload, std::byte{7});
    (void)pgm::encode(b, s);
    pgm::store_checksum(b, 0);
    return b;
}

pubsub::Authenticator auth() {
    AuthOptions o;
    o.keys.push_back(AuthKey{1, {}});
    return *pubsub::Authenticator::create(o);
}

}  // namespace

// Session::emit's signing: option added, MAC, checksum again (the copy is one emit does anyway).
static void BM_AuthSign(benchmark::State& state) {
    const auto a = auth();
    const auto p = odata(static_cast<std::size_t>(state.range(0)));
    const std::size_t hlen = p.size() - static_cast<std::size_t>(state.range(0));
    std::vector<std::byte> out(p.size() + pgm::kAuthOverheadBytes);
    const auto now = pubsub::Authenticator::wall_now_ms();
    for (auto _ : state) {
        benchmark::DoNotOptimize(
            a.sign(std::span<const std::byte>(p.data(), hlen),
                   std::span<const std::byte>(p.data() + hlen, p.size() - hlen), out, now));
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AuthSign)->Arg(100)->Arg(1400);

// Session::dispatch's check of a parsed packet.
static void BM_AuthVerify(benchmark::State& state) {
    const auto a = auth();
    const auto p = odata(static_cast<std::size_t>(state.range(0)));
    const std::size_t hlen = p.size() - static_cast<std::size_t>(state.range(0));
    std::vector<std::byte> signed_packet(p.size() + pgm::kAuthOverheadBytes);
    const auto now = pubsub::Authenticator::wall_now_ms();
    signed_packet.resize(a.sign(std::span<const std::byte>(p.data(), hlen),
                                std::span<const std::byte>(p.data() + hlen, p.size() - hlen),
                                signed_packet, now));
    pgm::Packet pkt;
    (void)pgm::parse(signed_packet, pkt);
    std::vector<std::byte> scratch(2048);
    for (auto _ : state) {
        benchmark::DoNotOptimize(a.verify(pkt, scratch, now));
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AuthVerify)->Arg(100)->Arg(1400);

// The MAC alone, and the alternatives: keyed BLAKE2b (16-byte tag), HMAC-SHA-512/256.
static void BM_MacSipHashX24(benchmark::State& state) {
    std::vector<unsigned char> m(static_cast<std::size_t>(state.range(0)), 7);
    std::array<unsigned char, crypto_shorthash_siphashx24_KEYBYTES> k{};
    std::array<unsigned char, crypto_shorthash_siphashx24_BYTES> tag{};
    for (auto _ : state) {
        crypto_shorthash_siphashx24(tag.data(), m.data(), m.size(), k.data());
        benchmark::DoNotOptimize(tag);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MacSipHashX24)->Arg(140)->Arg(1440);

static void BM_MacBlake2b(benchmark::State& state) {
    std::vector<unsigned char> m(static_cast<std::size_t>(state.range(0)), 7);
    std::array<unsigned char, 16> k{};
    std::array<unsigned char, 16> tag{};
    for (auto _ : state) {
        crypto_generichash(tag.data(), tag.size(), m.data(), m.size(), k.data(), k.size());
        benchmark::DoNotOptimize(tag);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MacBlake2b)->Arg(140)->Arg(1440);

static void BM_MacHmacSha512256(benchmark::State& state) {
    std::vector<unsigned char> m(static_cast<std::size_t>(state.range(0)), 7);
    std::array<unsigned char, crypto_auth_hmacsha512256_KEYBYTES> k{};
    std::array<unsigned char, crypto_auth_hmacsha512256_BYTES> tag{};
    for (auto _ : state) {
        crypto_auth_hmacsha512256(tag.data(), m.data(), m.size(), k.data());
        benchmark::DoNotOptimize(tag);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MacHmacSha512256)->Arg(140)->Arg(1440);
