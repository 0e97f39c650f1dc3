// SPDX-License-Identifier: Apache-2.0
// VerbsTransport's face beyond the data path: counters (one list: verbs_counters.hpp),
// events, addresses, the description; create() is in verbs_setup.cpp.
#include "transports/verbs/verbs_transport.hpp"

#include <cstring>

#include "transports/verbs/verbs_impl.hpp"
#include "transports/verbs/verbs_testing.hpp"

namespace prizma::verbs {

VerbsTransport::VerbsTransport(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
VerbsTransport::~VerbsTransport() = default;

void VerbsTransport::Impl::refresh_counters() const noexcept {
    ctl_counters.copy_to(counters);
    counters.ah_cache_size = ahs.ready_count();
}

std::string VerbsTransport::description() const {
    return describe(impl_->info, impl_->cfg.qkey);
}

std::string VerbsTransport::local_address_text() const {
    return gid_text(impl_->local_gid) + " qpn=" + std::to_string(impl_->info.qpn);
}

Endpoint VerbsTransport::local_endpoint() const noexcept {
    Endpoint e;
    e.family = kFamilyVerbs;
    e.id = impl_->info.qpn;
    e.addr = impl_->local_gid;
    return e;
}

std::size_t VerbsTransport::take_events(std::span<TransportEvent> out) noexcept {
    const ControlCounters& c = impl_->ctl_counters;
    const auto get = [](const std::atomic<std::uint64_t>& a) {
        return a.load(std::memory_order_relaxed);
    };
    using K = TransportEvent::Kind;
    const VerbsCounters& o = impl_->counters;  // the owner thread's own
    const std::array<std::uint64_t, 8> now = {
        get(c.port_err),
        get(c.port_active),
        get(c.lid_change) + get(c.gid_change) + get(c.pkey_change),
        get(c.sm_change) + get(c.client_reregister),
        get(c.rejoins),
        get(c.rejoin_failures),
        get(c.device_fatal) + o.qp_rebuild_failures,
        o.qp_recovered + o.qp_rebuilt};
    constexpr std::array<K, 8> kinds = {K::link_down,      K::link_up,        K::address_changed,
                                        K::fabric_changed, K::group_rejoined, K::rejoin_failed,
                                        K::fatal,          K::qp_recovered};
    std::size_t n = 0;
    for (std::size_t i = 0; i < now.size() && n < out.size(); ++i) {
        if (now[i] != impl_->events_seen[i]) {
            out[n++] = TransportEvent{kinds[i], now[i] - impl_->events_seen[i]};
            impl_->events_seen[i] = now[i];
        }
    }
    return n;
}

std::size_t VerbsTransport::named_counters(std::span<NamedCounter> out) const noexcept {
    impl_->refresh_counters();
    return name_counters(impl_->counters, out);
}

const VerbsCounters& VerbsTransport::counters() const noexcept {
    impl_->refresh_counters();
    return impl_->counters;
}

const VerbsInfo& VerbsTransport::info() const noexcept {
    return impl_->info;
}

IpAddress VerbsTransport::local_ip() const noexcept {
    IpAddress a;
    if (is_v4_mapped(impl_->local_gid)) {
        a.version = 4;
        std::memcpy(a.bytes.data(), &impl_->local_gid[12], 4);
    } else {
        a.version = 6;
        a.bytes = impl_->local_gid;
    }
    return a;
}

int VerbsTransportTesting::force_qp_error(VerbsTransport& t) noexcept {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    return ibv_modify_qp(t.impl_->qp.get(), &a, IBV_QP_STATE);
}

}  // namespace prizma::verbs
