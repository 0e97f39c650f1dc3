// SPDX-License-Identifier: Apache-2.0
// gro=auto's switching rule on its own, without sockets (transports/udp/gro_policy.hpp).
#include "transports/udp/gro_policy.hpp"

#include <vector>

#include "lib/pgm/checksum.hpp"
#include "lib/pgm/packet.hpp"
#include "tests/support/catch.hpp"

using prizma::udp::gro_segment_size;
using prizma::udp::GroPolicy;
using Action = GroPolicy::Action;

TEST_CASE("GRO policy: a burst switches on, kOffReads lone reads switch off", "[unit][gro]") {
    GroPolicy p;
    CHECK_FALSE(p.on());
    CHECK_FALSE(p.maybe_merged(true));  // never on: nothing can be merged
    // The one-datagram read after an empty poll is never a burst, however full.
    CHECK(p.after_read(false, 64, false, 64) == Action::none);
    // A batch read of kOnBatch - 1 is not a burst; of kOnBatch it is.
    CHECK(p.after_read(true, GroPolicy::kOnBatch - 1, false, 64) == Action::none);
    REQUIRE(p.after_read(true, GroPolicy::kOnBatch, false, 64) == Action::switch_on);
    p.switched(Action::switch_on, true);
    CHECK(p.on());
    CHECK(p.seen());
    CHECK(p.maybe_merged(true));         // recvfrom() brings no segment size
    CHECK_FALSE(p.maybe_merged(false));  // recvmmsg with GRO on always does
    // kOffReads - 1 lone unmerged reads keep it on; a merged or multi-datagram read restarts
    // the count.
    for (std::uint32_t i = 0; i + 1 < GroPolicy::kOffReads; ++i) {
        REQUIRE(p.after_read(false, 1, false, 64) == Action::none);
    }
    CHECK(p.after_read(true, 2, false, 64) == Action::none);  // restart
    for (std::uint32_t i = 0; i + 1 < GroPolicy::kOffReads; ++i) {
        REQUIRE(p.after_read(false, 1, false, 64) == Action::none);
    }
    CHECK(p.after_read(false, 1, true, 64) == Action::none);  // a merged one: restart
    for (std::uint32_t i = 0; i + 1 < GroPolicy::kOffReads; ++i) {
        REQUIRE(p.after_read(false, 1, false, 64) == Action::none);
    }
    REQUIRE(p.after_read(false, 1, false, 64) == Action::switch_off);  // exactly the kOffReads-th
    p.switched(Action::switch_off, true);
    CHECK_FALSE(p.on());
    CHECK(p.seen());  // was on: a datagram merged before may still be queued
    CHECK(p.maybe_merged(false));
    CHECK(p.maybe_merged(true));
}

TEST_CASE("GRO policy: small read batches, failed switches", "[unit][gro]") {
    GroPolicy p;
    // A read batch under kOnBatch: a batch read that fills it is a burst.
    CHECK(p.after_read(true, 3, false, 4) == Action::none);
    CHECK(p.after_read(true, 4, false, 4) == Action::switch_on);
    // A failed setsockopt leaves it off; the next burst asks again.
    p.switched(Action::switch_on, false);
    CHECK_FALSE(p.on());
    CHECK_FALSE(p.seen());
    CHECK(p.after_read(true, 4, false, 4) == Action::switch_on);
    p.switched(Action::switch_on, true);
    // A failed switch-off keeps it on and is retried only after kOffReads more lone reads.
    for (std::uint32_t i = 0; i + 1 < GroPolicy::kOffReads; ++i) {
        REQUIRE(p.after_read(false, 1, false, 4) == Action::none);
    }
    REQUIRE(p.after_read(false, 1, false, 4) == Action::switch_off);
    p.switched(Action::switch_off, false);
    CHECK(p.on());
    for (std::uint32_t i = 0; i + 1 < GroPolicy::kOffReads; ++i) {
        REQUIRE(p.after_read(false, 1, false, 4) == Action::none);
    }
    CHECK(p.after_read(false, 1, false, 4) == Action::switch_off);
    // gro=1 / the probe's start states.
    GroPolicy q;
    q.reset(true, false);
    CHECK(q.on());
    CHECK(q.seen());
    q.reset(false, true);
    CHECK_FALSE(q.on());
    CHECK(q.maybe_merged(false));
}

namespace {

namespace pgm = prizma::pgm;

/// A checksum-valid ODATA packet of 24 + `payload` bytes.
std::vector<std::byte> odata(std::uint32_t sqn, std::size_t payload) {
    pgm::PacketSpec s;
    s.type = pgm::PacketType::odata;
    s.sport = 1000;
    s.dport = 7500;
    s.sqn = pgm::Sqn{sqn};
    s.tsdu_length = static_cast<std::uint16_t>(payload);
    std::vector<std::byte> b(pgm::encoded_size(s) + payload, std::byte{0x5a});
    REQUIRE(pgm::encode(b, s) == pgm::encoded_size(s));
    pgm::store_checksum(
        std::span<std::byte>(b.data(), pgm::encoded_size(s)),
        pgm::csum_partial(std::span<const std::byte>(b).subspan(pgm::encoded_size(s))));
    return b;
}

std::vector<std::byte> merged(std::initializer_list<std::vector<std::byte>> pieces) {
    std::vector<std::byte> d;
    for (const auto& p : pieces) {
        d.insert(d.end(), p.begin(), p.end());
    }
    return d;
}

}  // namespace

TEST_CASE("GRO split: only when every piece is a packet of the first one's length",
          "[unit][gro][boundary]") {
    // A datagram read without its segment size is cut at the first packet's length (as the
    // Context's udp:// channels frame it: pgm::wire_length) only when every piece after it,
    // the last one included, is framed as a packet of that length (the last may be shorter).
    // Otherwise it goes up whole, and the layer above refuses it as one malformed datagram.
    const auto a = odata(1, 76);  // 100 bytes
    const auto b = odata(2, 76);
    const auto c = odata(3, 30);  // shorter: a last segment
    REQUIRE(a.size() == 100);
    const std::vector<std::byte> junk(100, std::byte{0xee});
    const std::vector<std::byte> short_junk(46, std::byte{0xee});
    const auto split = [](const std::vector<std::byte>& d) {
        return gro_segment_size(&pgm::wire_length, d);
    };
    // Packets only: split.
    CHECK(split(merged({a, b})) == 100);
    CHECK(split(merged({a, b, c})) == 100);
    CHECK(split(a) == 100);  // one packet: itself
    // A valid packet followed by junk of the same size, or shorter, or after several good
    // pieces: one datagram, never a good packet plus a junk one.
    for (const auto& d : {merged({a, junk}), merged({a, short_junk}), merged({a, b, junk}),
                          merged({a, b, short_junk}), merged({a, junk, b})}) {
        INFO(d.size() << " bytes");
        CHECK(split(d) == d.size());
        pgm::Packet p;
        CHECK(pgm::parse(d, p) != pgm::ParseStatus::ok);  // counted malformed above
    }
    // A last piece framed as longer than what is left, or pieces of another length.
    auto cut = merged({a, b});
    cut.resize(cut.size() - 1);
    CHECK(split(cut) == cut.size());
    const auto acb = merged({a, c, b});
    CHECK(split(acb) == acb.size());
    // Without a frame length nothing is split.
    CHECK(gro_segment_size(nullptr, merged({a, b})) == 200);
}
