// SPDX-License-Identifier: Apache-2.0
// A hostile network against the receiver: every packet here is checksum-valid and uses only
// what anyone on the group can read (TSI, sequence numbers, NLA). Each case asserts what the
// attack can no longer do, as counts under a manual clock: messages delivered, loss events,
// NAKs and SPMRs sent, timer runs, reassembly steps, storage held.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "tests/support/rx_harness.hpp"

using namespace prizma;           // NOLINT(google-build-using-namespace): test file
using namespace prizma::testing;  // NOLINT(google-build-using-namespace): test file

TEST_CASE("one ODATA with its trail 2^31 ahead moves nothing", "[hostile][receiver]") {
    for (const Endpoint& from : {kAttacker, kSource}) {
        INFO("from host " << int(from.addr[3]));
        Rx rx;
        Stream st;
        st.open(rx);
        st.send(rx, 100);
        const Sqn far = st.next + (1U << 31U) - 10;
        const auto junk = testing::make_message(999999, 100);
        rx.feed(st.f.data(far, far, junk), from);          // sqn and trail far ahead
        rx.feed(st.f.data(st.next + 5, far, junk), from);  // trail past its own sqn
        st.send(rx, 4900);
        (void)rx.run_for(kSec);
        require_all_delivered(rx, 5000);
        CHECK(rx.counters().lost_sqns == 0);
        CHECK(rx.counters().refused + rx.counters().outside_window >= 2);
    }
}

TEST_CASE("one SPM far ahead moves nothing, three that agree move the window, the range lost",
          "[hostile][receiver]") {
    Rx rx;
    Stream st;
    st.open(rx);
    st.send(rx, 100);
    Forge evil = st.f;  // the same TSI and NLA, even the source's own address
    evil.spm_sqn = st.f.spm_sqn + (1U << 30U);
    rx.feed(evil.spm(Sqn{1U << 20U}, Sqn{(1U << 20U) + 10}), kSourceOtherSocket);
    CHECK(rx.counters().refused == 1);
    st.send(rx, 100);
    (void)rx.run_for(kSec);
    require_all_delivered(rx, 200);
    CHECK(rx.count(Kind::loss) == 0);
    // A receiver that was stopped while the source moved on: the source's SPMs agree.
    const Sqn trail{300'000};
    for (int i = 0; i < protocol::Receiver::kConfirmSpms; ++i) {
        CHECK(rx.counters().resyncs == 0);
        rx.feed(st.f.spm(trail, trail + 10), kSourceOtherSocket);
    }
    CHECK(rx.counters().resyncs == 1);
    REQUIRE(rx.count(Kind::loss) == 1);
    const auto& loss = *std::find_if(rx.got.begin(), rx.got.end(),
                                     [](const Got& g) { return g.kind == Kind::loss; });
    CHECK(loss.sqn == 200);
    CHECK(loss.count == 300'000 - 200);
    CHECK(rx.counters().lost_sqns == 300'000 - 200);
    // The lead (trail + 10) is missing now and NAKed; data from the trail on is delivered.
    for (std::uint32_t s = 300'000; s <= 300'010; ++s) {
        rx.feed(st.f.data(Sqn{s}, trail, testing::make_message(s, 100)), kSource);
    }
    const auto d = rx.data_indices();
    REQUIRE(d.size() == 211);
    CHECK(d.back() == 300'010);
}

TEST_CASE("data far past the lead opens no gap: the source's own SPM is asked for",
          "[hostile][receiver]") {
    auto c = testing::receiver_config(7);
    c.rxw_sqns = 1U << 16U;  // ChannelOptions' default window
    Rx rx(c);
    Stream st;
    st.open(rx);
    st.send(rx, 100);
    const std::uint32_t max_gap = rx.r->max_gap();
    REQUIRE(max_gap == 4096);  // a sixteenth of the window
    // Forged, 60,000 ahead (from the source's address: pinning alone would not stop it).
    rx.feed(st.f.data(st.next + 60'000, st.next, testing::make_message(7, 100)), kSource);
    CHECK(rx.counters().refused == 1);
    st.send(rx, 100);
    (void)rx.run_for(2 * kSec);
    require_all_delivered(rx, 200);
    CHECK(rx.net.count(PacketType::nak) == 0);
    CHECK(rx.net.count(PacketType::spmr) <= 2);  // one SPMR: to the group and to the source
    // An honest burst loss longer than max_gap: the SPM asked for opens the gap, then NAKs.
    const std::size_t spmrs = rx.net.count(PacketType::spmr);
    const Sqn resume = st.next + (max_gap + 500);
    rx.now += 100 * kMs;
    rx.feed(st.f.data(resume, Sqn{0}, testing::make_message(resume.value, 100)), kSource);
    (void)rx.run_for(kMs);
    CHECK(rx.net.count(PacketType::spmr) > spmrs);
    rx.feed(st.f.spm(Sqn{0}, resume), kSourceOtherSocket);
    // Paced (nak_burst_sqns, 512 per NAK_RPT_IVL of 10 ms): all of it within ~100 ms.
    (void)rx.run_for(150 * kMs);
    CHECK(rx.counters().nak_sqns_sent >= max_gap + 500);
}

TEST_CASE("forged data: refused from another host, counted as a conflict from the source's",
          "[hostile][receiver]") {
    for (const Endpoint& from : {kAttacker, kSource}) {
        INFO("from host " << int(from.addr[3]));
        Rx rx;
        Stream st;
        st.open(rx);
        st.send(rx, 10);
        // 50 ahead, fake payload, before the real one.
        rx.feed(st.f.data(st.next + 50, Sqn{0}, testing::make_message(424242, 100)), from);
        st.send(rx, 100);
        if (from == kAttacker) {
            CHECK(rx.counters().refused == 1);
            require_all_delivered(rx, 110);
            CHECK(rx.counters().conflicts == 0);
        } else {
            CHECK(rx.counters().conflicts == 1);  // never silent
        }
    }
}

TEST_CASE("an SPM from another host with another NLA does not redirect NAKs",
          "[hostile][receiver]") {
    Rx rx;
    Stream st;
    st.open(rx);
    st.send(rx, 10);
    Forge evil = st.f;
    evil.nla = pgm::Nla::ipv4(6, 6, 6, 6);
    evil.spm_sqn = st.f.spm_sqn + (1U << 30U);
    rx.feed(evil.spm(Sqn{0}, st.next - 1), kAttacker);
    CHECK(rx.counters().refused == 1);
    st.send(rx, 10, 15);  // sqn 15 lost
    (void)rx.run_for(50 * kMs);
    REQUIRE(rx.net.count(PacketType::nak) >= 1);
    for (const auto& s : rx.net.sent) {
        if (s.type == PacketType::nak) {
            CHECK(s.nla == st.f.nla);
            CHECK(s.to == kSourceOtherSocket);  // the SPM sender's address
        }
    }
    st.repair(rx, Sqn{15});
    require_all_delivered(rx, 20);
}

TEST_CASE("a source that never sends an SPM costs a few timer runs and at most 4 SPMRs",
          "[hostile][receiver]") {
    Rx rx;
    Stream real;
    real.open(rx);
    Forge ghost;
    ghost.tsi.sport = 2000;
    const auto m = testing::make_message(1, 100);
    rx.feed(ghost.data(Sqn{0}, Sqn{0}, m), kAttacker);
    rx.feed(ghost.data(Sqn{1000}, Sqn{0}, m), kAttacker);  // a gap of 999 that never fills
    real.send(rx, 100);
    const std::size_t runs = rx.run_for(20 * kSec);
    CHECK(runs <= 20);  // before: the gap re-armed every back-off, for ever
    CHECK(rx.net.count(PacketType::spmr) <= 2 * protocol::Receiver::kMaxSpmrs);
    CHECK(rx.net.count(PacketType::nak) == 0);
    // It expires like any silent source: its gap reported as loss, then it leaves.
    (void)rx.run_for(20 * kSec);
    std::size_t ghost_loss = 0;
    for (const auto& g : rx.got) {
        ghost_loss += g.kind == Kind::loss && g.tsi == ghost.tsi ? g.count : 0;
    }
    CHECK(ghost_loss == 999);
    const auto d = rx.data_indices();
    CHECK(std::count(d.begin(), d.end(), 1U) >= 1);  // the ghost's own two packets
    CHECK(rx.counters().peers_left >= 1);
}

TEST_CASE("forged NCFs and NAKs every millisecond do not hold a repair back",
          "[hostile][receiver]") {
    Rx rx;
    Stream st;
    st.open(rx);
    st.send(rx, 30, 10);  // sqn 10 lost
    const auto& t = rx.r->config().timers;
    const std::int64_t start = rx.now;
    std::size_t naks_for_10 = 0;
    std::int64_t lost_at = 0;
    for (std::int64_t ms = 0; ms < 2000 && lost_at == 0; ++ms) {
        rx.feed(st.f.ncf(Sqn{10}), kSourceOtherSocket);  // even from the source's address
        rx.feed(st.f.nak(Sqn{10}), host(77));
        (void)rx.run_for(kMs);
        naks_for_10 = 0;
        for (const auto& s : rx.net.sent) {
            naks_for_10 += s.type == PacketType::nak ? 1U : 0U;
        }
        if (rx.count(Kind::loss) != 0) {
            lost_at = rx.now;
        }
    }
    // Our own NAKs still go out (a forged NCF or NAK holds one back once per round)...
    CHECK(naks_for_10 >= 2);
    // ...and with no RDATA ever, the loss is reported by the absolute deadline.
    REQUIRE(lost_at != 0);
    const std::int64_t slack =
        t.nak_bo_ivl_ns + std::max(t.nak_rpt_ivl_ns, t.nak_rdata_ivl_ns) + 2 * kMs;
    CHECK(lost_at - start <= rx.r->repair_limit_ns() + slack);
    const auto d = rx.data_indices();
    CHECK(d.size() == 29);
}

TEST_CASE("an APDU of many small fragments: reassembly work grows with fragments, not polls",
          "[hostile][receiver]") {
    Rx rx;
    Stream st;
    st.open(rx);
    const std::uint32_t n = 3000;
    const std::byte one{0x5a};
    for (std::uint32_t i = 0; i + 1 < n; ++i) {  // the last fragment never comes
        const pgm::FragmentInfo fi{Sqn{0}, i, n};
        rx.feed(st.f.data(Sqn{i}, Sqn{0}, std::span<const std::byte>(&one, 1), &fi), kSource);
    }
    const std::uint64_t after_feed = rx.counters().reassembly_steps;
    CHECK(after_feed <= 2 * n);
    for (int i = 0; i < 10'000; ++i) {
        rx.drain();
    }
    CHECK(rx.counters().reassembly_steps - after_feed <= 10'000);  // was 3,000 per poll
    // More fragments than any sender makes: the APDU is reported lost, not scanned for ever.
    Rx big;
    Stream bs;
    bs.open(big);
    const std::uint32_t too_many = protocol::Receiver::kMaxApduFragments + 10;
    for (std::uint32_t i = 0; i < too_many; ++i) {
        const pgm::FragmentInfo fi{Sqn{0}, i, 60'000};
        big.feed(bs.f.data(Sqn{i}, Sqn{0}, std::span<const std::byte>(&one, 1), &fi), kSource);
    }
    CHECK(big.counters().bad_fragment >= 1);
    CHECK(big.count(Kind::loss) >= 1);
    CHECK(big.counters().reassembly_steps <= 3 * std::uint64_t{too_many});
}

TEST_CASE("one forged RST or FIN does not end a live source", "[hostile][receiver]") {
    Rx rx;
    Stream st;
    st.open(rx);
    st.send(rx, 20, 10);  // sqn 10 under repair
    Forge evil = st.f;
    rx.feed(evil.spm(Sqn{0}, st.next - 1, false, true), kSourceOtherSocket);  // one RST
    st.repair(rx, Sqn{10});
    CHECK(rx.count(Kind::loss) == 0);
    rx.feed(st.f.spm(Sqn{0}, st.next - 1, true), kSourceOtherSocket);  // a FIN...
    st.send(rx, 20);                                                   // ...and data goes on
    (void)rx.run_for(kSec);
    CHECK(rx.count(Kind::left) == 0);
    require_all_delivered(rx, 40);
}

TEST_CASE("after a FIN, what is still missing is reported within fin_limit",
          "[hostile][receiver]") {
    Rx rx;
    Stream st;
    st.open(rx);
    st.send(rx, 20, 19);  // the last message lost
    rx.feed(st.f.spm(Sqn{0}, st.next - 1, true), kSourceOtherSocket);
    const std::int64_t fin_at = rx.now;
    std::int64_t lost_at = 0;
    while (lost_at == 0 && rx.now - fin_at < 10 * kSec) {
        (void)rx.run_for(kMs);
        if (rx.count(Kind::loss) != 0) {
            lost_at = rx.now;
        }
    }
    REQUIRE(lost_at != 0);
    const auto& t = rx.r->config().timers;
    CHECK(lost_at - fin_at <= rx.r->fin_limit_ns() + t.nak_rpt_ivl_ns + t.nak_rdata_ivl_ns);
    (void)rx.run_for(kSec);
    CHECK(rx.count(Kind::left) == 1);
}

TEST_CASE("spoofed sources cannot hold more than the storage budget, a new source still joins",
          "[hostile][receiver][memory]") {
    auto c = testing::receiver_config(3);
    c.rxw_sqns = 1024;  // small storage, same rules
    c.max_recover_sqns = 512;
    c.max_peers = 16;
    Rx rx(c);
    const std::size_t budget = 4 * rx.r->peer_bytes();  // the default: 4 sources' storage
    const auto m = testing::make_message(1, 100);
    for (std::uint16_t k = 0; k < 40; ++k) {
        Forge ghost;
        ghost.tsi.sport = static_cast<std::uint16_t>(3000 + k);
        rx.feed(ghost.data(Sqn{0}, Sqn{0}, m), kAttacker);
        rx.feed(ghost.data(Sqn{5}, Sqn{0}, m), kAttacker);  // holds a gap
        rx.now += 100 * kMs;
        (void)rx.run_for(kMs);
        CHECK(rx.r->storage_used() <= budget);
    }
    CHECK(rx.counters().peers_refused > 0);
    CHECK(rx.counters().peers_evicted > 0);
    // A real (e.g. restarted) source: its first packets may be refused while a ghost leaves.
    Stream real;
    real.f.tsi.sport = 999;
    for (int i = 0; i < 50; ++i) {
        real.open(rx);
        real.send(rx, 10);
        (void)rx.run_for(10 * kMs);
    }
    std::uint64_t real_data = 0;
    std::uint64_t real_loss = 0;
    for (const auto& g : rx.got) {
        if (g.tsi == real.f.tsi) {
            real_data += g.kind == Kind::data ? 1U : 0U;
            real_loss += g.kind == Kind::loss ? 1U : 0U;
        }
    }
    CHECK(real_data >= 400);
    CHECK(real_loss == 0);
    CHECK(rx.r->storage_used() <= budget);
}

// Under an address-space limit the storage of a new source cannot be had: the receiver
// refuses the source and counts it (std::bad_alloc used to escape a noexcept path and end
// the process). Run in a child process, whose limit cannot hurt the test runner.
TEST_CASE("storage the system refuses: the source is refused and counted, no crash",
          "[hostile][receiver][memory]") {
#if defined(__SANITIZE_ADDRESS__)
    PRIZMA_SKIP("ASan reserves its shadow memory: an address-space limit breaks it");
#endif
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        auto c = receiver_config(3);
        c.rxw_sqns = 1U << 16U;  // ~100 MB of storage per source
        c.max_peers = 8;
        c.storage_budget_bytes = std::size_t{8} << 30U;  // the budget does not stop it first
        Rx rx(c);
        // Room for what exists and a little more, not for another source's storage.
        rlimit lim{};
        REQUIRE(::getrlimit(RLIMIT_AS, &lim) == 0);
        std::size_t vm = 0;
        {
            std::ifstream st("/proc/self/statm");
            st >> vm;
        }
        lim.rlim_cur = vm * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)) + (48U << 20U);
        REQUIRE(::setrlimit(RLIMIT_AS, &lim) == 0);
        const auto m = make_message(1, 100);
        for (std::uint16_t k = 0; k < 6; ++k) {
            Forge f;
            f.tsi.sport = static_cast<std::uint16_t>(5000 + k);
            rx.feed(f.data(Sqn{0}, Sqn{0}, m), kSource);
        }
        // The first source had preallocated storage; later ones are refused when the system
        // refuses theirs (an unconfirmed one is made to leave, so some join after it).
        const bool ok = rx.counters().alloc_failures >= 1 && rx.counters().peers_refused >= 1
                        && rx.counters().peers_joined >= 1;
        std::_Exit(ok ? 0 : 3);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));  // not killed by std::terminate
    CHECK(WEXITSTATUS(status) == 0);
}
