// SPDX-License-Identifier: Apache-2.0
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <prizma/options.hpp>

#include "lib/protocol/limits.hpp"
#include "lib/pubsub/channel_keys.hpp"
#include "lib/pubsub/options_convert.hpp"
#include "lib/runtime/uri_keys.hpp"

namespace prizma {

std::string_view to_string(TimerPreset preset) noexcept {
    switch (preset) {
        case TimerPreset::wan: return "wan";
        case TimerPreset::lan: return "lan";
        case TimerPreset::rdma: return "rdma";
    }
    return "?";
}

std::string_view to_string(FlowControl strategy) noexcept {
    switch (strategy) {
        case FlowControl::max: return "max";
        case FlowControl::min: return "min";
        case FlowControl::tagged: return "tagged";
    }
    return "?";
}

std::optional<FlowControl> parse_flow_control(std::string_view name) noexcept {
    for (const auto f : {FlowControl::max, FlowControl::min, FlowControl::tagged}) {
        if (name == to_string(f)) {
            return f;
        }
    }
    return std::nullopt;
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

namespace {

std::string text(bool v) {
    return v ? "true" : "false";
}

template <typename T>
std::string text(T v) {
    return std::to_string(v);
}

std::string hex(const Gsi& g) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s;
    for (const auto b : g.bytes) {
        s += kDigits[b >> 4U];
        s += kDigits[b & 0xfU];
    }
    return s;
}

/// A row of the option table and the protocol-level fields it becomes (for refusals).
struct Row {
    OptionInfo info;
    std::string_view field_a{};  // the protocol's name for it, as validate() refuses it
    std::string_view field_b{};  // a second one (window_sqns is txw_sqns or rxw_sqns)
};

// The rows in ChannelOptions order, in two parts (a function fits on a screen).
std::vector<Row> first_rows() {
    using protocol::kCloseQuiet;
    using protocol::kMaxRepairsPerSqn;
    using protocol::kRepairBudget;
    using protocol::kRequesterBudget;
    using protocol::kRetention;
    using protocol::kRxwSqns;
    using protocol::kTxwSqns;
    using O = const ChannelOptions&;
    std::vector<Row> rows = {
        {{"preset", "both", "wan, lan or rdma",
          [](O o) {
              return std::string(to_string(o.preset));
          }}},
        {{"timers", "both", "each timer within the bounds its field names",
          [](O o) {
              return std::string(o.timers ? "set" : "unset");
          }}},
        {{"window_sqns", "both", "publisher " + kTxwSqns.text() + ", subscriber " + kRxwSqns.text(),
          [](O o) {
              return text(o.window_sqns);
          }},
         kTxwSqns.field,
         kRxwSqns.field},
        {{"retention", "publisher", kRetention.text(),
          [](O o) {
              return text(o.retention.count()) + " ns";
          }},
         kRetention.field},
        {{"rate_bytes_per_sec", "publisher", "any",
          [](O o) {
              return text(o.rate_bytes_per_sec);
          }}},
        {{"repair_rate_bytes_per_sec", "publisher", "any",
          [](O o) {
              return text(o.repair_rate_bytes_per_sec);
          }}},
        {{"repair_budget_percent", "publisher", kRepairBudget.text(),
          [](O o) {
              return text(o.repair_budget_percent);
          }},
         kRepairBudget.field},
        {{"requester_budget_percent", "publisher", kRequesterBudget.text(),
          [](O o) {
              return text(o.requester_budget_percent);
          }},
         kRequesterBudget.field},
        {{"max_repairs_per_sqn", "publisher", kMaxRepairsPerSqn.text(),
          [](O o) {
              return text(o.max_repairs_per_sqn);
          }},
         kMaxRepairsPerSqn.field},
        {{"close_quiet", "publisher", "negative (the default) or " + kCloseQuiet.text(),
          [](O o) {
              return text(o.close_quiet.count()) + " ns";
          }},
         kCloseQuiet.field},
    };
    return rows;
}

std::vector<Row> second_rows() {
    using protocol::kAllowedGsis;
    using protocol::kMaxPeers;
    using O = const ChannelOptions&;
    std::vector<Row> rows = {
        {{"recover_history", "subscriber", "true or false",
          [](O o) {
              return text(o.recover_history);
          }}},
        {{"max_recover_sqns", "subscriber", "1 to window_sqns - 1 (larger: window_sqns - 1)",
          [](O o) {
              return text(o.max_recover_sqns);
          }},
         "max_recover_sqns"},
        {{"max_sources", "subscriber", kMaxPeers.text(),
          [](O o) {
              return text(o.max_sources);
          }},
         kMaxPeers.field},
        {{"preallocated_sources", "subscriber", "at most max_sources",
          [](O o) {
              return text(o.preallocated_sources);
          }},
         "preallocated_peers"},
        {{"memory_budget_bytes", "subscriber",
          "any (less than preallocated_sources need is taken as that)",
          [](O o) {
              return text(o.memory_budget_bytes);
          }}},
        {{"detect_conflicts", "subscriber", "true or false",
          [](O o) {
              return text(o.detect_conflicts);
          }}},
        {{"passive", "subscriber", "true or false",
          [](O o) {
              return text(o.passive);
          }}},
        {{"auth", "both", "1 to 4 keys of distinct ids; max_clock_skew 1 s to 1 h",
          [](O o) {
              return o.auth ? std::to_string(o.auth->keys.size()) + " keys" : std::string("unset");
          }}},
        {{"gsi", "publisher", "any 6 bytes",
          [](O o) {
              return o.gsi ? hex(*o.gsi) : std::string("the Context's");
          }}},
        {{"allowed_sources", "subscriber", kAllowedGsis.text(),
          [](O o) {
              return o.allowed_sources.empty() ? std::string("any")
                                               : std::to_string(o.allowed_sources.size()) + " GSIs";
          }},
         kAllowedGsis.field},
        {{"source_port", "publisher", "0 to 65535",
          [](O o) {
              return text(o.source_port);
          }}},
        {{"flow", "both",
          "strategy max, min or tagged (tagged: tag not 0); min_group at most max_receivers; "
          "timeout "
              + protocol::kFlowTimeout.text() + "; max_receivers " + protocol::kFlowReceivers.text()
              + "; max_receivers_per_address 1 to max_receivers; status_interval "
              + protocol::kFlowStatusIvl.text(),
          [](O o) {
              return std::string(to_string(o.flow.strategy));
          }}},
    };
    return rows;
}

std::vector<Row> make_rows() {
    std::vector<Row> rows = first_rows();
    for (auto& r : second_rows()) {
        rows.push_back(std::move(r));
    }
    return rows;
}

const std::vector<Row>& rows() {
    static const std::vector<Row> table = make_rows();
    return table;
}

const std::vector<OptionInfo>& infos() {
    static const std::vector<OptionInfo> table = [] {
        std::vector<OptionInfo> v;
        for (const auto& r : rows()) {
            v.push_back(r.info);
        }
        return v;
    }();
    return table;
}

void rename_all(std::string& text, std::string_view from, std::string_view to) {
    if (from.empty()) {
        return;
    }
    for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
        text.replace(at, from.size(), to);
    }
}

}  // namespace

std::span<const OptionInfo> channel_option_table() {
    return infos();
}

namespace pubsub {

std::string explain_refusal(std::string_view why, const ChannelOptions& o) {
    std::string text(why);
    for (const auto& r : rows()) {
        rename_all(text, r.field_a, r.info.name);
        rename_all(text, r.field_b, r.info.name);
    }
    const std::string_view whole = text;
    const std::string_view name = whole.substr(0, text.find(": "));
    for (const auto& r : rows()) {
        if (name == r.info.name && !r.field_a.empty()) {
            text.insert(name.size(), " = " + r.info.value(o));
            break;
        }
    }
    return text;
}

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

// ---- the URI keys every scheme takes: ChannelOptions overrides ---------------------------

namespace {

/// The keys every scheme takes (docs/URI.md, "Keys common to every scheme").
constexpr runtime::UriKey<pubsub::ChannelKeys> kChannelKeys[] = {
    {"key_file", "a path",
     [](pubsub::ChannelKeys& k, std::string_view v) {
         k.key_file = std::string(v);  // read once the query is taken
         return true;
     }},
    {"flow", "max, min or tagged",
     [](pubsub::ChannelKeys& k, std::string_view v) {
         k.flow = parse_flow_control(v);
         return k.flow.has_value();
     }},
    {"flow_tag", "1-2^64-1", &runtime::set_uint<&pubsub::ChannelKeys::flow_tag, 1, UINT64_MAX>},
    {"flow_group", "0-4096", &runtime::set_uint<&pubsub::ChannelKeys::flow_group, 0, 4096>},
    {"flow_timeout_ms", "1-3600000",
     &runtime::set_uint<&pubsub::ChannelKeys::flow_timeout_ms, 1, 3'600'000>},
};

/// ChannelOptions::flow with the URI's flow keys over it, checked.
Result<FlowOptions, Error> flow_options(const ChannelOptions& o,
                                        const pubsub::ChannelKeys& keys,
                                        const std::string& name) {
    FlowOptions f = o.flow;
    f.strategy = keys.flow.value_or(f.strategy);
    f.tag = keys.flow_tag.value_or(f.tag);
    f.min_group = keys.flow_group.value_or(f.min_group);
    if (keys.flow_timeout_ms) {
        f.timeout = std::chrono::milliseconds(*keys.flow_timeout_ms);
    }
    const auto refuse = [&](std::string_view what) {
        std::string msg = "bad channel options for '" + name + "': ";
        msg += what;
        return Error(Errc::invalid_argument, std::move(msg));
    };
    const auto ns = [](auto d) {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    };
    if (f.strategy == FlowControl::tagged && f.tag == 0) {
        return refuse("flow: tagged flow control needs a tag (flow_tag=, not 0)");
    }
    if (!protocol::kFlowReceivers.holds(f.max_receivers)) {
        return refuse(protocol::kFlowReceivers.refusal());
    }
    if (f.min_group > f.max_receivers) {
        return refuse("flow.min_group: at most flow.max_receivers");
    }
    if (f.max_receivers_per_address == 0 || f.max_receivers_per_address > f.max_receivers) {
        return refuse("flow.max_receivers_per_address: 1 to flow.max_receivers");
    }
    if (!protocol::kFlowTimeout.holds_ns(ns(f.timeout))) {
        return refuse(protocol::kFlowTimeout.refusal());
    }
    if (!protocol::kFlowStatusIvl.holds_ns(ns(f.status_interval))
        || f.status_interval >= f.timeout) {
        return refuse(protocol::kFlowStatusIvl.refusal() + ", less than flow.timeout");
    }
    return f;
}

}  // namespace

namespace pubsub {

Result<ChannelKeys, Error> take_channel_keys(ChannelUri& uri) {
    ChannelKeys k;
    auto& ps = uri.params;
    for (auto it = ps.begin(); it != ps.end();) {
        auto taken = runtime::take_key<ChannelKeys>(kChannelKeys, k, *it, uri.text);
        if (!taken) {
            return taken.error();
        }
        it = *taken ? ps.erase(it) : it + 1;
    }
    if (k.key_file) {
        auto keys = read_key_file(*k.key_file);
        if (!keys) {
            return Error(keys.error().code(), keys.error().detail() + " (in '" + uri.text + "')");
        }
        k.auth = std::move(*keys);
    }
    return k;
}

Result<ChannelOptions, Error> apply_channel_keys(const ChannelOptions& given,
                                                 const ChannelKeys& keys,
                                                 const std::string& name) {
    auto flow = flow_options(given, keys, name);
    if (!flow) {
        return flow.error();
    }
    if (keys.auth && given.auth) {
        return Error(Errc::invalid_argument,
                     "'" + name
                         + "': the keys come from key_file= or from ChannelOptions::auth, "
                           "not both");
    }
    ChannelOptions o = given;
    o.flow = *flow;
    if (keys.auth) {
        o.auth = keys.auth;
    }
    return o;
}

}  // namespace pubsub

namespace detail {
std::vector<std::string_view> channel_uri_key_names() {
    return runtime::key_names<pubsub::ChannelKeys>(kChannelKeys);
}
}  // namespace detail
}  // namespace prizma
