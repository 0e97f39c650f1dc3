// SPDX-License-Identifier: Apache-2.0
#include "lib/protocol/config.hpp"

#include <string_view>

#include "lib/protocol/receiver.hpp"
#include "lib/protocol/source.hpp"
#include "tests/support/catch.hpp"

using namespace prizma::protocol;  // NOLINT(google-build-using-namespace): test file
using prizma::Errc;

TEST_CASE("timer presets are valid and ordered wan > lan > rdma", "[unit][config]") {
    for (auto p : {Preset::wan, Preset::lan, Preset::rdma}) {
        CHECK(validate(preset(p)).has_value());
    }
    CHECK(preset(Preset::rdma).nak_bo_ivl_ns <= 100 * kUs);  // microsecond-scale repair
    CHECK(preset(Preset::rdma).nak_bo_ivl_ns < preset(Preset::lan).nak_bo_ivl_ns);
    CHECK(preset(Preset::lan).nak_bo_ivl_ns < preset(Preset::wan).nak_bo_ivl_ns);
    CHECK(preset("rdma").has_value());
    CHECK(preset("fast").error() == Errc::invalid_argument);
}

TEST_CASE("a bad timer value is refused and named", "[unit][config]") {
    Timers t = preset(Preset::lan);
    t.nak_rpt_ivl_ns = 0;
    CHECK(validate(t).error() == Errc::invalid_argument);
    CHECK(validate(t).error().detail() == "timers.nak_repeat: more than 0, at most 1 h");
    t = preset(Preset::lan);
    t.nak_data_retries = 0;
    CHECK(validate(t).error().detail() == "timers.nak_data_retries: 1 to 255");
    t = preset(Preset::lan);
    t.peer_expiry_ns = t.ambient_spm_ns;
    CHECK_FALSE(validate(t).has_value());
}

TEST_CASE("source and receiver factories refuse bad configurations", "[unit][config]") {
    SourceConfig sc;
    sc.nla = prizma::pgm::Nla::ipv4(127, 0, 0, 1);
    sc.group = prizma::pgm::Nla::ipv4(239, 1, 1, 1);
    sc.tsi.sport = 1234;
    REQUIRE(Source::create(sc).has_value());
    auto bad = sc;
    bad.tsi.sport = bad.dport;
    CHECK(Source::create(bad).error() == Errc::invalid_argument);
    // The refused field and its bounds, as the error's detail.
    auto why = [](const auto& cfg) {
        return validate(cfg).error().detail();
    };
    CHECK_FALSE(validate(bad).has_value());
    CHECK(why(bad) == "tsi.sport: not equal to dport");
    bad = sc;
    bad.max_tpdu = 10;
    CHECK_FALSE(Source::create(bad).has_value());
    bad = sc;
    bad.nla = {};
    CHECK_FALSE(Source::create(bad).has_value());
    bad = sc;
    bad.txw_sqns = 0;
    CHECK_FALSE(Source::create(bad).has_value());
    CHECK_FALSE(validate(bad).has_value());
    CHECK(why(bad).starts_with("txw_sqns: "));
    bad = sc;
    bad.txw_sqns = 1U << 22U;  // 4 M packets of up to 1472 bytes: offsets past 32 bits
    CHECK_FALSE(validate(bad).has_value());
    CHECK(why(bad) == "txw_sqns: at most 4 GiB of packets (window x largest packet)");
    bad.txw_sqns = 1U << 21U;  // 3 GiB: still addressable
    CHECK(validate(bad).has_value());
    CHECK(txw_ring_bytes(bad) == ((1U << 21U) + 1) * std::size_t{1472});  // 23 cache lines
    bad = sc;
    bad.timers.nak_rpt_ivl_ns = 0;
    CHECK_FALSE(validate(bad).has_value());
    CHECK(why(bad) == "timers.nak_repeat: more than 0, at most 1 h");

    ReceiverConfig rc;
    rc.group = sc.group;
    REQUIRE(Receiver::create(rc).has_value());
    auto rbad = rc;
    rbad.rxw_sqns = 1;
    CHECK_FALSE(Receiver::create(rbad).has_value());
    rbad = rc;
    rbad.max_recover_sqns = rc.rxw_sqns;
    CHECK_FALSE(Receiver::create(rbad).has_value());
    rbad = rc;
    rbad.timers.nak_bo_ivl_ns = -5;
    CHECK_FALSE(Receiver::create(rbad).has_value());
    rbad = rc;
    rbad.preallocated_peers = rc.max_peers + 1;
    CHECK(Receiver::create(rbad).error() == Errc::invalid_argument);
    CHECK_FALSE(validate(rbad).has_value());
    CHECK(why(rbad) == "preallocated_peers: at most max_peers");
    rbad.preallocated_peers = 0;
    rbad.max_peers = 0;
    CHECK_FALSE(validate(rbad).has_value());
    CHECK(why(rbad).starts_with("max_peers: "));
    rbad = rc;
    rbad.rxw_sqns = 1;
    CHECK_FALSE(validate(rbad).has_value());
    CHECK(why(rbad).starts_with("rxw_sqns: "));
    rbad.rxw_sqns = 1U << 20U;
    rbad.max_tpdu = 4096 + prizma::pgm::kDataHeaderBytes;  // an RDMA MTU: 1 M slots x 4 KiB > 4 GiB
    CHECK_FALSE(validate(rbad).has_value());
    CHECK(why(rbad) == "rxw_sqns: at most 4 GiB of packets (window x largest packet)");
    rbad.max_tpdu = 1472;
    CHECK(validate(rbad).has_value());
    // 1448-byte TSDUs (1472 less the 24-byte data header) in 1472-byte (cache-line) slots.
    CHECK(rxw_ring_bytes(rbad) == ((1U << 20U) + 1) * std::size_t{1472});
    rbad = rc;
    rbad.preallocated_peers = rc.max_peers;
    rbad.rxw_sqns = 64;  // small storage: max_peers of them are made at once
    rbad.max_recover_sqns = 32;
    CHECK(Receiver::create(rbad).has_value());
}
