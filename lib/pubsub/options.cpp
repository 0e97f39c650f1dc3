// SPDX-License-Identifier: Apache-2.0
#include <prizma/options.hpp>

#include "lib/pubsub/options_convert.hpp"

namespace prizma {

std::string_view to_string(TimerPreset preset) noexcept {
    switch (preset) {
        case TimerPreset::wan: return "wan";
        case TimerPreset::lan: return "lan";
        case TimerPreset::rdma: return "rdma";
    }
    return "?";
}

std::optional<TimerPreset> parse_timer_preset(std::string_view name) noexcept {
    for (const auto p : {TimerPreset::wan, TimerPreset::lan, TimerPreset::rdma}) {
        if (name == to_string(p)) {
            return p;
        }
    }
    return std::nullopt;
}

Timers Timers::of(TimerPreset preset) noexcept {
    return pubsub::from_protocol(protocol::preset(pubsub::to_protocol(preset)));
}

namespace pubsub {

protocol::Preset to_protocol(TimerPreset p) noexcept {
    switch (p) {
        case TimerPreset::wan: return protocol::Preset::wan;
        case TimerPreset::rdma: return protocol::Preset::rdma;
        case TimerPreset::lan: break;
    }
    return protocol::Preset::lan;
}

protocol::Timers to_protocol(const Timers& t) noexcept {
    protocol::Timers p;
    p.nak_bo_ivl_ns = t.nak_backoff.count();
    p.nak_rpt_ivl_ns = t.nak_repeat.count();
    p.nak_rdata_ivl_ns = t.nak_rdata.count();
    p.nak_ncf_retries = t.nak_ncf_retries;
    p.nak_data_retries = t.nak_data_retries;
    p.spmr_expiry_ns = t.spmr_expiry.count();
    p.peer_expiry_ns = t.peer_expiry.count();
    p.ambient_spm_ns = t.ambient_spm.count();
    for (std::size_t i = 0; i < p.heartbeat_spm_ns.size(); ++i) {
        p.heartbeat_spm_ns[i] = t.heartbeat_spm[i].count();
    }
    p.nak_elimination_ns = t.nak_elimination.count();
    p.spmr_answer_ivl_ns = t.spmr_answer.count();
    return p;
}

Timers from_protocol(const protocol::Timers& p) noexcept {
    using ns = std::chrono::nanoseconds;
    Timers t;
    t.nak_backoff = ns(p.nak_bo_ivl_ns);
    t.nak_repeat = ns(p.nak_rpt_ivl_ns);
    t.nak_rdata = ns(p.nak_rdata_ivl_ns);
    t.nak_ncf_retries = p.nak_ncf_retries;
    t.nak_data_retries = p.nak_data_retries;
    t.spmr_expiry = ns(p.spmr_expiry_ns);
    t.peer_expiry = ns(p.peer_expiry_ns);
    t.ambient_spm = ns(p.ambient_spm_ns);
    for (std::size_t i = 0; i < p.heartbeat_spm_ns.size(); ++i) {
        t.heartbeat_spm[i] = ns(p.heartbeat_spm_ns[i]);
    }
    t.nak_elimination = ns(p.nak_elimination_ns);
    t.spmr_answer = ns(p.spmr_answer_ivl_ns);
    return t;
}

protocol::Timers timers_of(const ChannelOptions& o) noexcept {
    return o.timers ? to_protocol(*o.timers) : protocol::preset(to_protocol(o.preset));
}

}  // namespace pubsub
}  // namespace prizma
