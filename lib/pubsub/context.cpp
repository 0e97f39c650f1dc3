// SPDX-License-Identifier: Apache-2.0
// Context: channels made from URIs (or given transports) over the registry, and the owner
// thread. The duty cycle and waits are in context_wait.cpp, the counters in counters.cpp,
// the handles in publisher.cpp and subscriber.cpp.
#include <sys/epoll.h>
#include <sys/timerfd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <prizma/context.hpp>

#include "lib/pgm/packet.hpp"
#include "lib/posix/errors.hpp"
#include "lib/protocol/config.hpp"
#include "lib/pubsub/auth.hpp"
#include "lib/pubsub/channel_keys.hpp"
#include "lib/pubsub/context_impl.hpp"
#include "lib/pubsub/options_convert.hpp"
#include "lib/pubsub/session.hpp"
#include "lib/stats/stats_file.hpp"

namespace prizma {

namespace {

pgm::Nla nla_of(const IpAddress& ip) {
    pgm::Nla n;
    if (ip.version == 6) {
        n.afi = pgm::kAfiIpv6;
        std::memcpy(n.addr.data(), ip.bytes.data(), 16);
    } else {
        n.afi = pgm::kAfiIpv4;  // a transport without IP addresses announces 0.0.0.0
        std::memcpy(n.addr.data(), ip.bytes.data(), 4);
    }
    return n;
}

/// The channel's data-destination port: the one its transport named, else PGM's 7500.
std::uint16_t dport_of(const TransportChannel& tc) noexcept {
    return tc.port != 0 ? tc.port : 7500;
}

std::string scheme_list(const TransportRegistry& r) {
    std::string out;
    for (const auto& s : r.schemes()) {
        out += (out.empty() ? "" : ", ") + s + "://";
    }
    return out.empty() ? "none registered" : out;
}

}  // namespace

Result<detail::Channel*, Error> Context::Impl::add(std::string_view uri,
                                                   const ChannelOptions& o,
                                                   bool publisher) {
    auto parsed = ChannelUri::parse(uri);
    if (!parsed) {
        return parsed.error();
    }
    auto keys = pubsub::take_channel_keys(*parsed);  // the rest is the transport's
    if (!keys) {
        return keys.error();
    }
    const TransportFactory* make = registry.find(parsed->scheme);
    if (make == nullptr) {
        return Error(Errc::unsupported, "unsupported channel scheme '" + parsed->scheme + "' in '"
                                            + std::string(uri) + "' (this Context has "
                                            + scheme_list(registry) + ")");
    }
    const TransportRequest req{
        *parsed, publisher ? ChannelRole::publisher : ChannelRole::subscriber, &pgm::wire_length};
    auto tc = (*make)(req);
    if (!tc) {
        return tc.error();
    }
    if (!tc->transport) {
        return Error(Errc::invalid_argument, "the '" + parsed->scheme
                                                 + "' factory made no transport for '"
                                                 + std::string(uri) + "'");
    }
    return add(std::move(*tc), o, publisher, std::string(uri), *keys);
}

protocol::SourceConfig Context::Impl::source_config(const TransportChannel& tc,
                                                    const Transport& t,
                                                    const ChannelOptions& o,
                                                    const protocol::Timers& timers) {
    protocol::SourceConfig c;
    const std::uint16_t dport = dport_of(tc);
    c.tsi.gsi = o.gsi ? *o.gsi : gsi;
    c.tsi.sport = o.source_port;
    while (c.tsi.sport == 0 || c.tsi.sport == dport) {
        c.tsi.sport = static_cast<std::uint16_t>(1024 + rng() % 64000);
    }
    c.dport = dport;
    c.nla = nla_of(tc.local.version != 0 ? tc.local : tc.group);
    c.group = nla_of(tc.group);
    c.txw_sqns = o.window_sqns;
    // An APDU's fragments must all fit in the window: a window of fewer than 16 packets
    // (OpenPGM's fragment limit) sends smaller APDUs instead of being refused.
    c.max_fragments = std::min<std::size_t>(c.max_fragments, std::max(1U, o.window_sqns));
    c.txw_retention_ns = o.retention.count();
    c.max_tpdu = t.caps().max_datagram;
    c.odata_rate_bytes_per_sec = o.rate_bytes_per_sec;
    c.rdata_rate_bytes_per_sec = o.repair_rate_bytes_per_sec;
    c.repair_budget_percent = o.repair_budget_percent;
    c.requester_budget_percent = o.requester_budget_percent;
    c.max_repairs_per_sqn = o.max_repairs_per_sqn;
    if (o.close_quiet.count() >= 0) {
        c.close_quiet_ns = o.close_quiet.count();
    } else if (tc.openpgm_peers) {
        // OpenPGM receivers may listen: serve repairs as long as their usual timers need.
        const auto wan = protocol::preset(protocol::Preset::wan);
        c.close_quiet_ns = std::max(protocol::quiet_ns(timers), protocol::quiet_ns(wan));
        c.close_cap_ns =
            std::max(protocol::repair_limit_ns(timers), protocol::repair_limit_ns(wan));
    }
    c.flow.strategy = o.flow.strategy == FlowControl::min      ? protocol::FlowStrategy::min
                      : o.flow.strategy == FlowControl::tagged ? protocol::FlowStrategy::tagged
                                                               : protocol::FlowStrategy::max;
    c.flow.tag = o.flow.tag;
    c.flow.min_group = o.flow.min_group;
    c.flow.timeout_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(o.flow.timeout).count();
    c.flow.max_receivers = o.flow.max_receivers;
    c.flow.max_per_address = o.flow.max_receivers_per_address;
    c.timers = timers;
    return c;
}

protocol::ReceiverConfig Context::Impl::receiver_config(const TransportChannel& tc,
                                                        const Transport& t,
                                                        const ChannelOptions& o,
                                                        const protocol::Timers& timers) {
    protocol::ReceiverConfig c;
    c.dport = dport_of(tc);
    c.group = nla_of(tc.group);
    c.rxw_sqns = o.window_sqns;
    c.max_tpdu = t.caps().rx_datagram();
    c.max_peers = o.max_sources;
    c.preallocated_peers = o.preallocated_sources;
    c.join =
        o.recover_history ? protocol::JoinPolicy::from_trail : protocol::JoinPolicy::first_packet;
    c.max_recover_sqns = std::min(o.max_recover_sqns, o.window_sqns - 1);
    c.passive = o.passive;
    c.storage_budget_bytes = o.memory_budget_bytes;
    c.allowed_gsis = o.allowed_sources;
    // Flow keys mean status, passive or not: passive only never asks for repairs.
    c.send_status = o.flow.strategy != FlowControl::max;
    c.receiver_id = rng() | 1U;
    c.status_tag = o.flow.tag;
    c.status_ivl_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(o.flow.status_interval).count();
    c.seed = rng();
    c.timers = timers;
    return c;
}

Result<detail::Channel*, Error> Context::Impl::add(TransportChannel tc,
                                                   const ChannelOptions& given,
                                                   bool publisher,
                                                   std::string name,
                                                   const pubsub::ChannelKeys& keys) {
    if (!tc.transport) {
        return Error(Errc::invalid_argument, "no transport given for channel '" + name + "'");
    }
    auto with_keys = pubsub::apply_channel_keys(given, keys, name);
    if (!with_keys) {
        return with_keys.error();
    }
    const ChannelOptions& o = *with_keys;
    const protocol::Timers timers = pubsub::timers_of(o);
    auto ch = std::make_unique<detail::Channel>();
    ch->owner = &owner;
    ch->name = std::move(name);
    ch->publisher = publisher;
    ch->transport = std::move(tc.transport);
    Transport& t = *ch->transport;
    pubsub::SessionConfig sc;
    if (o.auth) {  // from ChannelOptions::auth or key_file=
        auto a = pubsub::Authenticator::create(*o.auth);
        if (!a) {
            return Error(a.error().code(),
                         "bad channel options for '" + ch->name + "': " + a.error().detail());
        }
        sc.auth = *a;
    }
    if (publisher) {
        sc.source = source_config(tc, t, o, timers);
        if (sc.auth) {
            sc.source->max_tpdu -= pgm::kAuthOverheadBytes;  // room for the auth option
        }
        if (t.caps().poll_is_syscall) {
            // A publisher only hears NAKs and SPMRs: it polls its transport at most every
            // 10 us (a quarter of the NAK back-off, if shorter) while it is quiet, so that a
            // busy-polling party spends its syscalls on the channels it waits for data on.
            sc.upstream_poll_ns = std::min<std::int64_t>(10'000, timers.nak_bo_ivl_ns / 4);
        }
    } else {
        sc.receiver = receiver_config(tc, t, o, timers);
        sc.receiver->detect_conflicts = o.detect_conflicts && !sc.auth;  // key: source signs
    }
    // The windows' storage is made here (a subscriber's preallocated sources included): too
    // much of it is an error for the caller, not an exception through a Result API.
    Result<std::unique_ptr<pubsub::Session>, Error> s = Errc::invalid_argument;
    try {
        s = pubsub::Session::create(t, sc);
    } catch (const std::bad_alloc&) {
        return Error(std::make_error_code(std::errc::not_enough_memory),
                     "cannot allocate the window storage for '" + ch->name
                         + "' (window_sqns x largest packet, per preallocated source): out of "
                           "memory");
    }
    if (!s) {
        const Error& e = s.error();
        return Error(e.code(), "bad channel options for '" + ch->name + "': "
                                   + (e.detail().empty() ? e.message()
                                                         : pubsub::explain_refusal(e.detail(), o)));
    }
    ch->session = std::move(*s);
    if (publisher) {
        ch->session->source()->open(Context::now_ns(), *ch->session);
        ch->session->flush();
    }
    const int wfd = t.wakeup_fd();
    if (wfd < 0) {
        ++busy_only;
    } else if (epoll.valid()) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = wfd;
        if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wfd, &ev) != 0) {
            return Error(std::error_code(errno, std::system_category()),
                         "cannot watch the transport of '" + ch->name + "' (epoll_ctl)");
        }
    }
    channels.push_back(std::move(ch));
    stats.set_channel(channels.size() - 1, channels.back()->name, publisher,
                      channels.back()->transport->description());
    stats_next_ns = 0;  // show the new channel at the next poll
    return channels.back().get();
}

Result<void, Error> Context::Impl::remove(detail::Channel* ch) {
    const auto it = std::find_if(channels.begin(), channels.end(),
                                 [&](const auto& c) { return c.get() == ch; });
    if (ch == nullptr || it == channels.end()) {
        return Error(Errc::invalid_argument, "not a live channel of this Context");
    }
    if (auto* src = ch->session->source()) {
        src->close(Context::now_ns(), *ch->session);  // FIN SPMs: receivers see it leave
        ch->session->flush();
    }
    if (auto* rcv = ch->session->receiver()) {
        rcv->leave(*ch->session);  // flow control: no source waits for us any more
        ch->session->flush();
    }
    const int wfd = ch->session->transport().wakeup_fd();
    if (wfd < 0) {
        --busy_only;
    } else if (epoll.valid()) {
        (void)::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, wfd, nullptr);
    }
    channels.erase(it);
    publish_channel_names();
    return {};
}

void Context::Impl::publish_channel_names() noexcept {
    for (std::size_t i = 0; i < channels.size(); ++i) {
        stats.set_channel(i, channels[i]->name, channels[i]->publisher,
                          channels[i]->transport->description());
    }
    stats.set_channel_count(channels.size());
    stats_next_ns = 0;
}

Context::Context(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
Context::~Context() = default;
Context::Context(Context&& other) noexcept = default;
Context& Context::operator=(Context&& other) noexcept = default;

Result<Context, Error> Context::create(TransportRegistry transports) {
    auto impl = std::make_unique<Impl>();
    impl->registry = std::move(transports);
    for (auto& b : impl->gsi.bytes) {
        b = static_cast<std::uint8_t>(impl->rng());
    }
    impl->epoll.reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!impl->epoll.valid()) {
        return Error(std::error_code(errno, std::system_category()),
                     "cannot create the Context's epoll fd");
    }
    // wait()'s timeout (no timer: epoll's own timeout, as before).
    impl->timer.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
    if (impl->timer.valid()) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = impl->timer.get();
        if (::epoll_ctl(impl->epoll.get(), EPOLL_CTL_ADD, impl->timer.get(), &ev) != 0) {
            impl->timer.reset();
        }
    }
    if (const char* on = posix::env("PRIZMA_STATS"); on == nullptr || std::string_view(on) != "0") {
        if (auto r = impl->stats.open(stats::default_dir()); !r) {
            // No file: prizma-stat cannot see us; the Context works on, and says why.
            impl->stats_error =
                r.error().detail().empty() ? r.error().message() : r.error().detail();
        }
    }
    return Context(std::move(impl));
}

std::int64_t Context::now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

Result<Publisher, Error> Context::add_publisher(std::string_view uri,
                                                const ChannelOptions& options) {
    impl_->owner.check("Context::add_publisher");
    auto ch = impl_->add(uri, options, true);
    if (!ch) {
        return ch.error();
    }
    return Publisher(*ch);
}

Result<Subscriber, Error> Context::add_subscriber(std::string_view uri,
                                                  const ChannelOptions& options) {
    impl_->owner.check("Context::add_subscriber");
    auto ch = impl_->add(uri, options, false);
    if (!ch) {
        return ch.error();
    }
    return Subscriber(*ch);
}

Result<Publisher, Error> Context::add_publisher(TransportChannel channel,
                                                const ChannelOptions& options,
                                                std::string_view name) {
    impl_->owner.check("Context::add_publisher");
    auto ch = impl_->add(std::move(channel), options, true, std::string(name), {});
    if (!ch) {
        return ch.error();
    }
    return Publisher(*ch);
}

Result<Subscriber, Error> Context::add_subscriber(TransportChannel channel,
                                                  const ChannelOptions& options,
                                                  std::string_view name) {
    impl_->owner.check("Context::add_subscriber");
    auto ch = impl_->add(std::move(channel), options, false, std::string(name), {});
    if (!ch) {
        return ch.error();
    }
    return Subscriber(*ch);
}

Result<void, Error> Context::remove(Publisher& publisher) {
    impl_->owner.check("Context::remove");
    auto r = impl_->remove(publisher.ch_);
    if (r) {
        publisher.ch_ = nullptr;
    }
    return r;
}

Result<void, Error> Context::remove(Subscriber& subscriber) {
    impl_->owner.check("Context::remove");
    auto r = impl_->remove(subscriber.ch_);
    if (r) {
        subscriber.ch_ = nullptr;
    }
    return r;
}

const TransportRegistry& Context::transports() const noexcept {
    return impl_->registry;
}

void Context::adopt_owner_thread() noexcept {
    impl_->owner.id.store(std::this_thread::get_id(), std::memory_order_relaxed);
}

void Context::release_owner_thread() noexcept {
    impl_->owner.id.store(std::thread::id{}, std::memory_order_relaxed);
}

bool Context::owner_checks_enabled() noexcept {
#ifdef PRIZMA_OWNER_CHECKS
    return true;
#else
    return false;
#endif
}

}  // namespace prizma
