// SPDX-License-Identifier: Apache-2.0
#include "lib/protocol/config.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <utility>

#include "lib/protocol/limits.hpp"

namespace prizma::protocol {

Timers preset(Preset p) noexcept {
    Timers t;
    switch (p) {
        case Preset::wan: break;
        case Preset::lan:
            t.nak_bo_ivl_ns = 2 * kMs;
            t.nak_rpt_ivl_ns = 10 * kMs;
            t.nak_rdata_ivl_ns = 10 * kMs;
            t.nak_ncf_retries = 20;
            t.nak_data_retries = 20;
            t.spmr_expiry_ns = 10 * kMs;
            t.peer_expiry_ns = 30 * kSec;
            t.ambient_spm_ns = 1 * kSec;
            t.heartbeat_spm_ns = {1 * kMs,  2 * kMs,   4 * kMs,  8 * kMs, 16 * kMs,
                                  64 * kMs, 256 * kMs, 1 * kSec, 0,       0};
            t.nak_elimination_ns = 1 * kMs;
            t.spmr_answer_ivl_ns = 1 * kMs;
            break;
        case Preset::rdma:
            t.nak_bo_ivl_ns = 20 * kUs;
            t.nak_rpt_ivl_ns = 100 * kUs;
            t.nak_rdata_ivl_ns = 100 * kUs;
            t.nak_ncf_retries = 30;
            t.nak_data_retries = 30;
            t.spmr_expiry_ns = 200 * kUs;
            t.peer_expiry_ns = 10 * kSec;
            t.ambient_spm_ns = 100 * kMs;
            t.heartbeat_spm_ns = {20 * kUs, 50 * kUs, 100 * kUs, 200 * kUs, 500 * kUs,
                                  1 * kMs,  10 * kMs, 100 * kMs, 0,         0};
            t.nak_elimination_ns = 20 * kUs;
            t.spmr_answer_ivl_ns = 20 * kUs;
            break;
    }
    return t;
}

Result<Timers> preset(std::string_view name) noexcept {
    if (name == "wan") {
        return preset(Preset::wan);
    }
    if (name == "lan") {
        return preset(Preset::lan);
    }
    if (name == "rdma") {
        return preset(Preset::rdma);
    }
    return Errc::invalid_argument;
}

// Built with += throughout: GCC 12 at -O3 warns (-Wrestrict, a false positive) on
// `"literal" + std::string` chains here.
std::string Bound::text() const {
    std::string t;
    if (kind == Kind::count) {
        t += std::to_string(min);
        t += " to ";
        t += std::to_string(max);
        if (!unit.empty()) {
            t += ' ';
            t += unit;
        }
        return t;
    }
    if (max == static_cast<std::uint64_t>(INT64_MAX)) {
        t += min == 0 ? "not negative" : "more than 0";
        return t;
    }
    if (min == 1) {
        t += "more than 0, at most ";
    } else if (min != 0 && min % 1'000'000 == 0) {
        t += std::to_string(min / 1'000'000);
        t += " ms to ";
    } else {
        t += std::to_string(min);
        t += " to ";
    }
    if (max == kHourNs) {
        t += "1 h";
    } else {
        t += std::to_string(max);
        t += " ns";
    }
    return t;
}

std::string Bound::refusal() const {
    std::string r(field);
    r += ": ";
    r += text();
    return r;
}

namespace {

Result<void, Error> refuse(std::string_view text) {
    return Error(Errc::invalid_argument, std::string(text));
}

Result<void, Error> refuse(const Bound& b) {
    return refuse(b.refusal());
}

}  // namespace

std::int64_t repair_limit_ns(const Timers& t) noexcept {
    const std::int64_t per_try = t.nak_bo_ivl_ns + std::max(t.nak_rpt_ivl_ns, t.nak_rdata_ivl_ns);
    const auto tries = static_cast<std::int64_t>(t.nak_ncf_retries)
                       + static_cast<std::int64_t>(t.nak_data_retries);
    return t.nak_bo_ivl_ns + tries * per_try;
}

std::int64_t quiet_ns(const Timers& t) noexcept {
    return 2 * (t.nak_bo_ivl_ns + std::max(t.nak_rpt_ivl_ns, t.nak_rdata_ivl_ns))
           + t.heartbeat_spm_ns[0] + t.heartbeat_spm_ns[1];
}

Result<void, Error> validate(const Timers& t) {
    struct Interval {
        const Bound& bound;
        std::int64_t value;
    };
    const Interval intervals[] = {
        {kNakBackoff, t.nak_bo_ivl_ns},          {kNakRepeat, t.nak_rpt_ivl_ns},
        {kNakRdata, t.nak_rdata_ivl_ns},         {kSpmrExpiry, t.spmr_expiry_ns},
        {kPeerExpiry, t.peer_expiry_ns},         {kAmbientSpm, t.ambient_spm_ns},
        {kNakElimination, t.nak_elimination_ns}, {kSpmrAnswer, t.spmr_answer_ivl_ns},
    };
    for (const auto& i : intervals) {
        if (!i.bound.holds_ns(i.value)) {
            return refuse(i.bound);
        }
    }
    if (!kNcfRetries.holds(t.nak_ncf_retries)) {
        return refuse(kNcfRetries);
    }
    if (!kDataRetries.holds(t.nak_data_retries)) {
        return refuse(kDataRetries);
    }
    if (t.peer_expiry_ns <= t.nak_bo_ivl_ns) {
        return refuse("timers.peer_expiry: more than nak_backoff, at most 1 h");
    }
    if (t.peer_expiry_ns <= t.ambient_spm_ns) {
        return refuse("timers.peer_expiry: more than ambient_spm");
    }
    for (auto v : t.heartbeat_spm_ns) {
        if (!kHeartbeatSpm.holds_ns(v)) {
            return refuse(kHeartbeatSpm);
        }
    }
    return {};
}

namespace {

bool bad_afi(const pgm::Nla& n) noexcept {
    return n.afi != pgm::kAfiIpv4 && n.afi != pgm::kAfiIpv6;
}

}  // namespace

std::size_t txw_ring_bytes(const SourceConfig& c) noexcept {
    return (std::size_t{std::bit_ceil(c.txw_sqns)} + 1) * ((c.max_tpdu + 63) & ~std::size_t{63});
}

std::size_t rxw_ring_bytes(const ReceiverConfig& c) noexcept {
    const std::size_t tsdu = c.max_tpdu - pgm::kDataHeaderBytes;
    return (std::size_t{std::bit_ceil(c.rxw_sqns)} + 1) * ((tsdu + 63) & ~std::size_t{63});
}

Result<void, Error> validate(const SourceConfig& c) {
    if (auto r = validate(c.timers); !r) {
        return r;
    }
    if (!kTxwSqns.holds(c.txw_sqns)) {
        return refuse(kTxwSqns);
    }
    if (c.max_tpdu < pgm::kDataHeaderBytes + pgm::kFragmentOptionBytes + 8 || c.max_tpdu > 65535) {
        return refuse("max_tpdu: room for a fragment header and 8 bytes, at most 65535");
    }
    if (txw_ring_bytes(c) > UINT32_MAX) {  // packet offsets in the ring are 32-bit
        return refuse("txw_sqns: at most 4 GiB of packets (window x largest packet)");
    }
    if (!kMaxFragments.holds(c.max_fragments) || c.max_fragments > c.txw_sqns) {
        return refuse(kMaxFragments.refusal() + ", and at most txw_sqns");
    }
    if (bad_afi(c.nla)) {
        return refuse("nla: an IPv4 or IPv6 address");
    }
    if (bad_afi(c.group)) {
        return refuse("group: an IPv4 or IPv6 address");
    }
    if (c.tsi.sport == c.dport) {  // OpenPGM refuses sport == dport (docs/PROTOCOL.md §8.13)
        return refuse("tsi.sport: not equal to dport");
    }
    if (!kRetention.holds_ns(c.txw_retention_ns)) {
        return refuse(kRetention);
    }
    if ((c.close_quiet_ns != -1 && !kCloseQuiet.holds_ns(c.close_quiet_ns))
        || (c.close_cap_ns != -1 && !kCloseQuiet.holds_ns(c.close_cap_ns))) {
        return refuse(kCloseQuiet);
    }
    const std::pair<const Bound&, std::uint64_t> repair_limits[] = {
        {kRepairBudget, c.repair_budget_percent},
        {kRequesterBudget, c.requester_budget_percent},
        {kRepairBurst, c.repair_burst_bytes},
        {kMaxRepairsPerSqn, c.max_repairs_per_sqn},
    };
    for (const auto& [bound, value] : repair_limits) {
        if (!bound.holds(value)) {
            return refuse(bound);
        }
    }
    return {};
}

Result<void, Error> validate(const ReceiverConfig& c) {
    if (auto r = validate(c.timers); !r) {
        return r;
    }
    if (!kRxwSqns.holds(c.rxw_sqns)) {
        return refuse(kRxwSqns);
    }
    if (c.max_tpdu < pgm::kDataHeaderBytes + 8 || c.max_tpdu > 65535) {
        return refuse("max_tpdu: room for a data header and 8 bytes, at most 65535");
    }
    if (rxw_ring_bytes(c) > UINT32_MAX) {  // payload offsets in the ring are 32-bit
        return refuse("rxw_sqns: at most 4 GiB of packets (window x largest packet)");
    }
    if (!kMaxPeers.holds(c.max_peers)) {
        return refuse(kMaxPeers);
    }
    if (!kAllowedGsis.holds(c.allowed_gsis.size())) {
        return refuse(kAllowedGsis);
    }
    if (c.preallocated_peers > c.max_peers) {
        return refuse("preallocated_peers: at most max_peers");
    }
    if (bad_afi(c.group)) {
        return refuse("group: an IPv4 or IPv6 address");
    }
    if (c.max_recover_sqns == 0 || c.max_recover_sqns >= c.rxw_sqns) {
        return refuse("max_recover_sqns: 1 to rxw_sqns - 1");
    }
    return {};
}

}  // namespace prizma::protocol
