// SPDX-License-Identifier: Apache-2.0
#include "lib/protocol/config.hpp"

#include <bit>
#include <cstdint>
#include <string>

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

Result<void, Error> validate(const Timers& t) {
    auto fail = [](std::string_view f) -> Result<void, Error> {
        return Error(Errc::invalid_argument, std::string(f));
    };
    constexpr std::int64_t kMaxIvl = 3600 * kSec;
    auto bad_ivl = [](std::int64_t v) {
        return v <= 0 || v > kMaxIvl;
    };
    if (bad_ivl(t.nak_bo_ivl_ns)) {
        return fail("timers.nak_backoff: more than 0, at most 1 h");
    }
    if (bad_ivl(t.nak_rpt_ivl_ns)) {
        return fail("timers.nak_repeat: more than 0, at most 1 h");
    }
    if (bad_ivl(t.nak_rdata_ivl_ns)) {
        return fail("timers.nak_rdata: more than 0, at most 1 h");
    }
    if (t.nak_ncf_retries == 0 || t.nak_ncf_retries > 255) {
        return fail("timers.nak_ncf_retries: 1 to 255");
    }
    if (t.nak_data_retries == 0 || t.nak_data_retries > 255) {
        return fail("timers.nak_data_retries: 1 to 255");
    }
    if (bad_ivl(t.spmr_expiry_ns)) {
        return fail("timers.spmr_expiry: more than 0, at most 1 h");
    }
    if (bad_ivl(t.peer_expiry_ns) || t.peer_expiry_ns <= t.nak_bo_ivl_ns) {
        return fail("timers.peer_expiry: more than nak_backoff, at most 1 h");
    }
    if (bad_ivl(t.ambient_spm_ns)) {
        return fail("timers.ambient_spm: more than 0, at most 1 h");
    }
    if (t.peer_expiry_ns <= t.ambient_spm_ns) {
        return fail("timers.peer_expiry: more than ambient_spm");
    }
    for (auto v : t.heartbeat_spm_ns) {
        if (v < 0 || v > kMaxIvl) {
            return fail("timers.heartbeat_spm: each 0 to 1 h");
        }
    }
    if (t.nak_elimination_ns < 0 || t.nak_elimination_ns > kMaxIvl) {
        return fail("timers.nak_elimination: 0 to 1 h");
    }
    if (t.spmr_answer_ivl_ns < 0 || t.spmr_answer_ivl_ns > kMaxIvl) {
        return fail("timers.spmr_answer: 0 to 1 h");
    }
    return {};
}

namespace {

Result<void, Error> refuse(std::string_view text) {
    return Error(Errc::invalid_argument, std::string(text));
}

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
    if (c.txw_sqns == 0 || c.txw_sqns > (1U << 24)) {
        return refuse("txw_sqns: 1 to 16777216 packets");
    }
    if (c.max_tpdu < pgm::kDataHeaderBytes + pgm::kFragmentOptionBytes + 8 || c.max_tpdu > 65535) {
        return refuse("max_tpdu: room for a fragment header and 8 bytes, at most 65535");
    }
    if (txw_ring_bytes(c) > UINT32_MAX) {  // packet offsets in the ring are 32-bit
        return refuse("txw_sqns: at most 4 GiB of packets (window x largest packet)");
    }
    if (c.max_fragments == 0 || c.max_fragments > 4096 || c.max_fragments > c.txw_sqns) {
        return refuse("max_fragments: 1 to 4096, and at most txw_sqns");
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
    if (c.txw_retention_ns < 0) {
        return refuse("txw_retention_ns: not negative");
    }
    return {};
}

Result<void, Error> validate(const ReceiverConfig& c) {
    if (auto r = validate(c.timers); !r) {
        return r;
    }
    if (c.rxw_sqns < 2 || c.rxw_sqns > (1U << 20)) {
        return refuse("rxw_sqns: 2 to 1048576 packets");
    }
    if (c.max_tpdu < pgm::kDataHeaderBytes + 8 || c.max_tpdu > 65535) {
        return refuse("max_tpdu: room for a data header and 8 bytes, at most 65535");
    }
    if (rxw_ring_bytes(c) > UINT32_MAX) {  // payload offsets in the ring are 32-bit
        return refuse("rxw_sqns: at most 4 GiB of packets (window x largest packet)");
    }
    if (c.max_peers == 0 || c.max_peers > 4096) {
        return refuse("max_peers: 1 to 4096");
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
