// SPDX-License-Identifier: Apache-2.0
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <prizma/context.hpp>

#include "lib/protocol/config.hpp"
#include "lib/pubsub/session.hpp"
#include "lib/pubsub/stats_file.hpp"
#include "transports/memory/lossy_transport.hpp"
#include "transports/memory/memory_transport.hpp"
#include "transports/udp/udp_transport.hpp"
#if PRIZMA_HAVE_VERBS
#include "transports/verbs/verbs_transport.hpp"
#endif

namespace prizma {
namespace detail {

/// The thread that owns a Context (STYLE §2.6). Checked, when PRIZMA_OWNER_CHECKS is defined
/// (debug builds; the CI's sanitizer build), at every owner-only entry point: the first caller
/// binds it, adopt() hands it over, a call from any other thread aborts with the entry point's
/// name. Compiled out otherwise: nothing on the hot path.
struct OwnerThread {
    std::atomic<std::thread::id> id{};
    void check(const char* what) noexcept {
#ifdef PRIZMA_OWNER_CHECKS
        const std::thread::id me = std::this_thread::get_id();
        std::thread::id cur = id.load(std::memory_order_relaxed);
        if (cur == me
            || (cur == std::thread::id{}
                && id.compare_exchange_strong(cur, me, std::memory_order_relaxed))) {
            return;
        }
        std::fprintf(stderr,
                     "prizma: %s called from a thread that does not own its Context (one owner "
                     "thread; publish from others through a PublishQueue, hand over with "
                     "Context::adopt_owner_thread())\n",
                     what);
        std::abort();
#else
        (void)what;
#endif
    }
};

struct Channel {
    OwnerThread* owner = nullptr;
    std::shared_ptr<memory::MemoryNetwork> net;
    std::unique_ptr<Transport> base;
    std::unique_ptr<memory::LossyTransport> lossy;
    std::unique_ptr<pubsub::Session> session;
    std::int64_t stamp_ns = 0;  ///< the time offered data is stamped with (see offer_stamp)
};

}  // namespace detail

namespace {

// mem:// networks by name, shared by every Context of the process (one thread drives them).
std::shared_ptr<memory::MemoryNetwork> memory_network(const std::string& name) {
    static std::mutex mu;
    static std::map<std::string, std::weak_ptr<memory::MemoryNetwork>> nets;
    const std::lock_guard<std::mutex> lock(mu);
    auto& w = nets[name];
    auto sp = w.lock();
    if (!sp) {
        sp = std::make_shared<memory::MemoryNetwork>(
            memory::MemoryNetwork::Config{1472, 16384, 64, true});
        w = sp;
    }
    return sp;
}

bool parse_u64(std::string_view s, std::uint64_t max, std::uint64_t& out) {
    std::uint64_t v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc{} || p != s.data() + s.size() || v > max) {
        return false;
    }
    out = v;
    return true;
}

pgm::Nla nla_of(const std::string& ip) {
    pgm::Nla n;
    in6_addr a6{};
    if (::inet_pton(AF_INET, ip.c_str(), n.addr.data()) == 1) {
        n.afi = pgm::kAfiIpv4;
    } else if (::inet_pton(AF_INET6, ip.c_str(), &a6) == 1) {
        n.afi = pgm::kAfiIpv6;
        std::memcpy(n.addr.data(), &a6, 16);
    }
    return n;
}

Result<void> fail(std::string* error,
                  std::string msg,
                  std::error_code ec = Errc::invalid_argument) {
    if (error != nullptr) {
        *error = std::move(msg);
    }
    return ec;
}

// A refusal of the protocol layer ("rxw_sqns: 2 to 1048576 packets") in the caller's terms:
// the ChannelOptions name and the value given ("window_sqns = 1: 2 to 1048576 packets").
// Fields no option sets (a transport's max_tpdu, a preset's timers) keep their own names.
std::string explain_refusal(std::string_view why, const ChannelOptions& o) {
    struct Name {
        std::string_view field, option;
        std::string value;  // as the caller set the option
    };
    const Name names[] = {
        {"txw_sqns", "window_sqns", std::to_string(o.window_sqns)},
        {"rxw_sqns", "window_sqns", std::to_string(o.window_sqns)},
        {"max_peers", "max_sources", std::to_string(o.max_sources)},
        {"preallocated_peers", "preallocated_sources", std::to_string(o.preallocated_sources)},
        {"txw_retention_ns", "retention_ns", std::to_string(o.retention_ns)},
        {"max_recover_sqns", "max_recover_sqns", std::to_string(o.max_recover_sqns)},
    };
    std::string text(why);
    for (const auto& n : names) {
        for (auto at = text.find(n.field); at != std::string::npos;
             at = text.find(n.field, at + n.option.size())) {
            text.replace(at, n.field.size(), n.option);
        }
    }
    const std::string_view name = std::string_view(text).substr(0, text.find(": "));
    for (const auto& n : names) {
        if (name == n.option) {
            text.insert(name.size(), " = " + n.value);
            break;
        }
    }
    return text;
}

// Fault-injection keys of udp:// and verbs:// channels (for tests): loss = drop on receive
// (every packet type), tx_loss = drop our own ODATA on send (every receiver misses it),
// seed = the fault generator's seed.
bool fault_key(const std::string& k,
               const std::string& v,
               memory::LossyTransport::Config& fault,
               bool& lossy,
               std::string* error) {
    if (k == "seed") {
        std::uint64_t x = 0;
        if (!parse_u64(v, UINT64_MAX, x)) {
            (void)fail(error, "bad seed '" + v + "'");
            return false;
        }
        fault.seed = x;
        return true;
    }
    char* end = nullptr;
    const double p = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || p < 0 || p >= 1) {
        (void)fail(error, "bad " + k + " '" + v + "' (0 <= p < 1)");
        return false;
    }
    fault.drop = p;
    fault.on_send = k == "tx_loss";
    fault.type_mask = fault.on_send ? 1U << 4U : 0xffffffffU;
    lossy = true;
    return true;
}

}  // namespace

struct Context::Impl {
    detail::OwnerThread owner;
    std::vector<std::unique_ptr<detail::Channel>> channels;
    Gsi gsi{};
    std::mt19937_64 rng{std::random_device{}()};
    int epoll_fd = -1;
    bool busy_only = false;
    stats::Writer stats;             // counters for prizma-stat (shared-memory file)
    std::int64_t stats_next_ns = 0;  // next update of it
    void write_stats() noexcept;

    Result<detail::Channel*> add(std::string_view uri,
                                 const ChannelOptions& o,
                                 bool publisher,
                                 std::string* error);
};

Result<detail::Channel*> Context::Impl::add(std::string_view uri,
                                            const ChannelOptions& o,
                                            bool publisher,
                                            std::string* error) {
    auto ch = std::make_unique<detail::Channel>();
    ch->owner = &owner;
    auto timers = protocol::preset(o.preset);
    if (!timers) {
        (void)fail(error, "unknown preset '" + o.preset + "' (wan, lan, rdma)");
        return Errc::invalid_argument;
    }
    std::uint16_t dport = 7500;
    pgm::Nla nla;
    pgm::Nla group;
    pubsub::SessionConfig sc;
    memory::LossyTransport::Config fault;
    bool lossy = false;
    if (uri.starts_with("udp://")) {
        std::vector<std::pair<std::string, std::string>> extra;
        const std::string_view known[] = {"dport", "loss", "tx_loss", "seed"};
        auto cfg = udp::parse_uri(uri, error, &extra, known);
        if (!cfg) {
            return cfg.error();
        }
        for (const auto& [k, v] : extra) {
            std::uint64_t x = 0;
            if (k == "dport") {
                if (!parse_u64(v, 65535, x) || x == 0) {
                    (void)fail(error, "bad dport '" + v + "' (1-65535)");
                    return Errc::invalid_argument;
                }
                dport = static_cast<std::uint16_t>(x);
            } else if (!fault_key(k, v, fault, lossy, error)) {
                return Errc::invalid_argument;
            }
        }
        cfg->bind_unicast = publisher;
        cfg->join = !publisher;
        auto t = udp::UdpTransport::create(*cfg, error);
        if (!t) {
            return t.error();
        }
        group = nla_of(cfg->group);
        nla = cfg->iface.empty() ? nla_of(cfg->group) : nla_of(cfg->iface);
        sc.unicast_port = cfg->port;
        ch->base = std::move(*t);
        if (lossy) {
            ch->lossy =
                std::make_unique<memory::LossyTransport>(*ch->base, fault, &Context::now_ns);
        }
    } else if (uri.starts_with("verbs://")) {
#if PRIZMA_HAVE_VERBS
        std::vector<std::pair<std::string, std::string>> extra;
        const std::string_view known[] = {"loss", "tx_loss", "seed"};
        auto cfg = verbs::parse_uri(uri, dport, error, &extra, known);
        if (!cfg) {
            return cfg.error();
        }
        for (const auto& [k, v] : extra) {
            if (!fault_key(k, v, fault, lossy, error)) {
                return Errc::invalid_argument;
            }
        }
        cfg->attach = !publisher;
        auto t = verbs::VerbsTransport::create(*cfg, error);
        if (!t) {
            return t.error();
        }
        const auto a = (*t)->nla_addr();
        nla.afi = (*t)->nla_afi();
        std::memcpy(nla.addr.data(), a.data(), nla.afi == pgm::kAfiIpv4 ? 4 : 16);
        group = nla_of(cfg->group);
        ch->base = std::move(*t);
        if (lossy) {
            ch->lossy =
                std::make_unique<memory::LossyTransport>(*ch->base, fault, &Context::now_ns);
        }
#else
        (void)fail(error,
                   "this build of prizma has no verbs transport (libibverbs-dev and "
                   "libibumad-dev were missing at build time)",
                   Errc::unsupported);
        return Errc::unsupported;
#endif
    } else if (uri.starts_with("mem://")) {
        std::string_view rest = uri.substr(6);
        std::string_view query;
        if (const auto q = rest.find('?'); q != std::string_view::npos) {
            query = rest.substr(q + 1);
            rest = rest.substr(0, q);
        }
        const auto colon = rest.rfind(':');
        std::uint64_t x = 0;
        if (colon == std::string_view::npos || colon == 0
            || !parse_u64(rest.substr(colon + 1), 65535, x) || x == 0) {
            (void)fail(error, "expected mem://NAME:DPORT, got '" + std::string(uri) + "'");
            return Errc::invalid_argument;
        }
        dport = static_cast<std::uint16_t>(x);
        ch->net = memory_network(std::string(rest.substr(0, colon)));
        ch->base = ch->net->attach();
        memory::LossyTransport::Config& lc = fault;
        while (!query.empty()) {
            const auto amp = query.find('&');
            const std::string_view kv = query.substr(0, amp);
            query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
            const auto eq = kv.find('=');
            const std::string_view k = kv.substr(0, eq);
            const std::string v(eq == std::string_view::npos ? std::string_view{}
                                                             : kv.substr(eq + 1));
            if (k == "loss") {
                char* end = nullptr;
                lc.drop = std::strtod(v.c_str(), &end);
                if (v.empty() || *end != '\0' || lc.drop < 0 || lc.drop >= 1) {
                    (void)fail(error, "bad loss '" + v + "' (0 <= loss < 1)");
                    return Errc::invalid_argument;
                }
                lossy = true;
            } else if (k == "seed" && parse_u64(v, UINT64_MAX, x)) {
                lc.seed = x;
            } else {
                (void)fail(error, "unknown or bad key '" + std::string(kv) + "' in '"
                                      + std::string(uri) + "'");
                return Errc::invalid_argument;
            }
        }
        if (lossy) {
            ch->lossy = std::make_unique<memory::LossyTransport>(*ch->base, lc, &Context::now_ns);
        }
        nla = pgm::Nla::ipv4(127, 0, 0, 1);
        group = pgm::Nla::ipv4(239, 0, 0, 1);
    } else {
        (void)fail(
            error,
            "unsupported channel scheme in '" + std::string(uri) + "' (udp://, verbs://, mem://)",
            Errc::unsupported);
        return Errc::unsupported;
    }
    Transport& t = ch->lossy ? static_cast<Transport&>(*ch->lossy) : *ch->base;
    if (publisher) {
        protocol::SourceConfig c;
        c.tsi.gsi = gsi;
        c.tsi.sport = o.source_port;
        while (c.tsi.sport == 0 || c.tsi.sport == dport) {
            c.tsi.sport = static_cast<std::uint16_t>(1024 + rng() % 64000);
        }
        c.dport = dport;
        c.nla = nla;
        c.group = group;
        c.txw_sqns = o.window_sqns;
        // An APDU's fragments must all fit in the window: a window of fewer than 16 packets
        // (OpenPGM's fragment limit) sends smaller APDUs instead of being refused.
        c.max_fragments = std::min<std::size_t>(c.max_fragments, std::max(1U, o.window_sqns));
        c.txw_retention_ns = o.retention_ns;
        c.max_tpdu = t.caps().max_datagram;
        c.odata_rate_bytes_per_sec = o.rate_bytes_per_sec;
        c.rdata_rate_bytes_per_sec = o.repair_rate_bytes_per_sec;
        c.timers = *timers;
        sc.source = c;
    } else {
        protocol::ReceiverConfig c;
        c.dport = dport;
        c.group = group;
        c.rxw_sqns = o.window_sqns;
        c.max_tpdu = t.caps().max_datagram;
        c.max_peers = o.max_sources;
        c.preallocated_peers = o.preallocated_sources;
        c.join = o.recover_history ? protocol::JoinPolicy::from_trail
                                   : protocol::JoinPolicy::first_packet;
        c.max_recover_sqns = std::min(o.max_recover_sqns, o.window_sqns - 1);
        c.passive = o.passive;
        c.seed = rng();
        c.timers = *timers;
        sc.receiver = c;
    }
    if (publisher && uri.starts_with("udp://")) {
        // A publisher only hears NAKs and SPMRs: it polls its socket at most every 10 us
        // (a quarter of the NAK back-off, if shorter) while the socket is quiet, so that a
        // busy-polling party spends its syscalls on the channels it waits for data on.
        sc.upstream_poll_ns = std::min<std::int64_t>(10'000, sc.source->timers.nak_bo_ivl_ns / 4);
    }
    // The windows' storage is made here (a subscriber's preallocated sources included): too
    // much of it is an error for the caller, not an exception through a Result API.
    Result<std::unique_ptr<pubsub::Session>> s = Errc::invalid_argument;
    std::string_view why;  // the option refused, if that was the reason
    try {
        s = pubsub::Session::create(t, sc, &why);
    } catch (const std::bad_alloc&) {
        (void)fail(error,
                   "cannot allocate the window storage for '" + std::string(uri)
                       + "' (window_sqns x largest packet, per preallocated source): out of memory",
                   std::make_error_code(std::errc::not_enough_memory));
        return std::make_error_code(std::errc::not_enough_memory);
    }
    if (!s) {
        (void)fail(error, "bad channel options for '" + std::string(uri) + "': "
                              + (why.empty() ? s.error().message() : explain_refusal(why, o)));
        return s.error();
    }
    ch->session = std::move(*s);
    if (publisher) {
        ch->session->source()->open(Context::now_ns(), *ch->session);
        ch->session->flush();
    }
    const int wfd = t.wakeup_fd();
    if (wfd < 0) {
        busy_only = true;
    } else if (epoll_fd >= 0) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = wfd;
        (void)::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wfd, &ev);
    }
    channels.push_back(std::move(ch));
    stats.set_channel(channels.size() - 1, uri, publisher);
    stats_next_ns = 0;  // show the new channel at the next poll
    return channels.back().get();
}

Context::Context() noexcept = default;

Context::~Context() {
    if (impl_ && impl_->epoll_fd >= 0) {
        (void)::close(impl_->epoll_fd);
    }
}

Result<std::unique_ptr<Context>> Context::create() {
    std::unique_ptr<Context> c(new Context());
    c->impl_ = std::make_unique<Impl>();
    for (auto& b : c->impl_->gsi.bytes) {
        b = static_cast<std::uint8_t>(c->impl_->rng());
    }
    c->impl_->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    if (const char* on = std::getenv("PRIZMA_STATS");
        on == nullptr || std::string_view(on) != "0") {
        (void)c->impl_->stats.open(stats::default_dir());  // no file: prizma-stat cannot see us
    }
    return c;
}

std::int64_t Context::now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

Result<Publisher> Context::add_publisher(std::string_view uri,
                                         const ChannelOptions& options,
                                         std::string* error) {
    impl_->owner.check("Context::add_publisher");
    auto ch = impl_->add(uri, options, true, error);
    if (!ch) {
        return ch.error();
    }
    return Publisher(*ch);
}

Result<Subscriber> Context::add_subscriber(std::string_view uri,
                                           const ChannelOptions& options,
                                           std::string* error) {
    impl_->owner.check("Context::add_subscriber");
    auto ch = impl_->add(uri, options, false, error);
    if (!ch) {
        return ch.error();
    }
    return Subscriber(*ch);
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

int Context::poll() noexcept {
    impl_->owner.check("Context::poll");
    const std::int64_t now = now_ns();
    int work = 0;
    for (auto& ch : impl_->channels) {
        work += ch->session->do_work(now);
    }
    if (now >= impl_->stats_next_ns && impl_->stats.enabled()) {
        impl_->write_stats();
        impl_->stats_next_ns = now + 100'000'000;  // 10 updates a second
    }
    return work;
}

std::int64_t Context::next_deadline_ns() const noexcept {
    std::int64_t d = INT64_MAX;
    for (const auto& ch : impl_->channels) {
        d = std::min(d, ch->session->next_deadline());
    }
    return d;
}

void Context::wait(std::chrono::nanoseconds max_wait) noexcept {
    impl_->owner.check("Context::wait");
    if (impl_->busy_only || impl_->epoll_fd < 0) {
        return;
    }
    const std::int64_t now = now_ns();
    std::int64_t until = now + max_wait.count();
    until = std::min(until, next_deadline_ns());
    if (until <= now) {
        return;
    }
    // Arm every transport; one with datagrams already waiting means no sleep at all.
    for (const auto& ch : impl_->channels) {
        auto armed = ch->session->transport().arm_wakeup();
        if (armed && !*armed) {
            return;
        }
    }
    const std::int64_t left = std::min<std::int64_t>(until - now, 60'000'000'000);
    epoll_event ev{};
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
    // Nanosecond timeout (Linux 5.11+): an rdma-preset timer is not overslept by up to 1 ms.
    timespec ts{};
    ts.tv_sec = left / 1'000'000'000;
    ts.tv_nsec = left % 1'000'000'000;
    if (::epoll_pwait2(impl_->epoll_fd, &ev, 1, &ts, nullptr) >= 0 || errno != ENOSYS) {
        return;
    }
#endif
    const auto ms = static_cast<int>((left + 999'999) / 1'000'000);
    (void)::epoll_wait(impl_->epoll_fd, &ev, 1, ms);
}

namespace {
ChannelCounters snapshot(const detail::Channel& ch) {
    ChannelCounters c;
    const auto& s = ch.session->counters();
    c.packets_sent = s.tx_packets;
    c.packets_received = s.rx_packets;
    c.bytes_sent = s.tx_bytes;
    c.bytes_received = s.rx_bytes;
    c.malformed = s.malformed_total();
    c.short_sends = s.tx_short;
    if (const auto* src = ch.session->source()) {
        const auto& k = src->counters();
        c.odata_sent = k.odata_sent;
        c.rdata_sent = k.rdata_sent;
        c.spm_sent = k.spm_sent;
        c.ncf_sent = k.ncf_sent;
        c.naks_received = k.nak_received;
        c.back_pressured = k.back_pressured;
        c.rate_limited = k.rate_limited;
    }
    if (const auto* rcv = ch.session->receiver()) {
        const auto& k = rcv->counters();
        c.messages_delivered = k.apdus_delivered;
        c.bytes_delivered = k.bytes_delivered;
        c.odata_received = k.odata_received;
        c.rdata_received = k.rdata_received;
        c.naks_sent = k.nak_sent;
        c.naks_suppressed = k.nak_suppressed;
        c.ncf_received = k.ncf_received;
        c.repaired = k.repaired;
        c.duplicates = k.duplicates;
        c.loss_events = k.loss_events;
        c.lost_sqns = k.lost_sqns;
        c.window_full = k.outside_window;
        c.sources = rcv->peer_count();
    }
    return c;
}

/// The channel's transport counters (and the fault decorator's, when one wraps it) into
/// `out`, without allocating; returns how many were written.
std::size_t fill_transport_counters(const detail::Channel& ch,
                                    std::span<NamedCounter> out) noexcept {
    const std::size_t fault = ch.lossy && out.size() >= 3 ? 3 : 0;  // room kept for them
    const auto room = out.first(out.size() - fault);
    std::size_t n = std::min(room.size(), ch.base->named_counters(room));
    if (fault != 0) {
        const auto& f = ch.lossy->stats();
        out[n++] = {"fault_dropped", f.dropped};
        out[n++] = {"fault_duplicated", f.duplicated};
        out[n++] = {"fault_reordered", f.reordered};
    }
    return n;
}

std::vector<NamedCounter> transport_counters_of(const detail::Channel& ch) {
    std::vector<NamedCounter> out(35);  // 32 transport counters + 3 fault counters
    out.resize(fill_transport_counters(ch, out));
    return out;
}
}  // namespace

// Into the stats file: no allocation (the mapping is pre-faulted); the UDP transports' counters
// cost one getsockopt(SO_MEMINFO) per socket, 10 times a second.
void Context::Impl::write_stats() noexcept {
    std::array<NamedCounter, stats::kMaxCounters> buf{};
    stats.begin();
    for (std::size_t i = 0; i < channels.size() && i < stats::kMaxChannels; ++i) {
        const detail::Channel& ch = *channels[i];
        std::size_t n = stats::flatten(snapshot(ch), buf);
        n += fill_transport_counters(ch, std::span(buf).subspan(n));
        stats.values(i, std::span(buf).first(n));
        if (const auto* rcv = ch.session->receiver()) {
            std::array<protocol::PeerCounters, stats::kMaxSources> src{};
            const std::size_t k = rcv->source_counters(src);
            stats.sources(i, std::span(src).first(k), rcv->peer_count());
        }
    }
    stats.end();
}

std::string_view Context::stats_file() const noexcept {
    return impl_->stats.path();
}

ChannelCounters Context::counters() const noexcept {
    ChannelCounters sum;
    for (const auto& ch : impl_->channels) {
        const ChannelCounters c = snapshot(*ch);
        // Every field, in declaration order (counters.hpp).
        for (auto [to, from] : {std::pair{&sum.packets_sent, c.packets_sent},
                                {&sum.packets_received, c.packets_received},
                                {&sum.bytes_sent, c.bytes_sent},
                                {&sum.bytes_received, c.bytes_received},
                                {&sum.malformed, c.malformed},
                                {&sum.short_sends, c.short_sends},
                                {&sum.odata_sent, c.odata_sent},
                                {&sum.rdata_sent, c.rdata_sent},
                                {&sum.spm_sent, c.spm_sent},
                                {&sum.ncf_sent, c.ncf_sent},
                                {&sum.naks_received, c.naks_received},
                                {&sum.back_pressured, c.back_pressured},
                                {&sum.rate_limited, c.rate_limited},
                                {&sum.messages_delivered, c.messages_delivered},
                                {&sum.bytes_delivered, c.bytes_delivered},
                                {&sum.odata_received, c.odata_received},
                                {&sum.rdata_received, c.rdata_received},
                                {&sum.naks_sent, c.naks_sent},
                                {&sum.naks_suppressed, c.naks_suppressed},
                                {&sum.ncf_received, c.ncf_received},
                                {&sum.repaired, c.repaired},
                                {&sum.duplicates, c.duplicates},
                                {&sum.loss_events, c.loss_events},
                                {&sum.lost_sqns, c.lost_sqns},
                                {&sum.sources, c.sources}}) {
            *to += from;
        }
    }
    return sum;
}

// ---- Publisher / Claim / Subscriber ----------------------------------------------------------

namespace {

/// The time offered data is stamped with. A clock read costs ~40 ns on this kind of machine,
/// a sixth of a 100-byte message's whole cost at 3 M msgs/s, so the offers that fill one
/// send batch share the time read at its first. A source whose rate limit or retention
/// needs exact times reads the clock every time. The stamp otherwise only schedules the
/// heartbeat SPMs after the data, which leave with the batch, at most a batch later.
std::int64_t offer_stamp(detail::Channel& ch) noexcept {
    if (ch.session->tx_batch_start() || ch.session->source()->needs_exact_time()) {
        ch.stamp_ns = Context::now_ns();
    }
    return ch.stamp_ns;
}

}  // namespace

Result<std::uint32_t> Publisher::offer(std::span<const std::byte> message) noexcept {
    // Queued in the channel's batch: it leaves at the next Context::poll() or when the batch
    // is full, so bursts go out in one sendmmsg / GSO send.
    ch_->owner->check("Publisher::offer");
    auto r = ch_->session->source()->send(message, offer_stamp(*ch_), *ch_->session);
    if (!r) {
        return r.error();
    }
    return r->value;
}

Result<Claim> Publisher::try_claim(std::size_t n) noexcept {
    ch_->owner->check("Publisher::try_claim");
    auto r = ch_->session->source()->claim(n, offer_stamp(*ch_));
    if (!r) {
        return r.error();
    }
    return Claim(ch_, *r);
}

void Publisher::flush() noexcept {
    ch_->owner->check("Publisher::flush");
    ch_->session->flush();
}

void Publisher::close() noexcept {
    ch_->owner->check("Publisher::close");
    ch_->session->source()->close(Context::now_ns(), *ch_->session);
    ch_->session->flush();
}

std::size_t Publisher::max_message_size() const noexcept {
    return ch_->session->source()->max_apdu();
}
std::size_t Publisher::max_packet_payload() const noexcept {
    return ch_->session->source()->max_tsdu();
}
Tsi Publisher::tsi() const noexcept {
    return ch_->session->source()->config().tsi;
}
ChannelCounters Publisher::counters() const noexcept {
    return snapshot(*ch_);
}
std::vector<NamedCounter> Publisher::transport_counters() const {
    return transport_counters_of(*ch_);
}

Claim& Claim::operator=(Claim&& o) noexcept {
    if (this != &o) {
        if (ch_ != nullptr) {
            ch_->session->source()->abort_claim();
        }
        ch_ = std::exchange(o.ch_, nullptr);
        buf_ = o.buf_;
    }
    return *this;
}

Claim::~Claim() {
    if (ch_ != nullptr) {
        ch_->session->source()->abort_claim();
    }
}

Result<std::uint32_t> Claim::commit(std::size_t used) noexcept {
    if (ch_ == nullptr) {
        return Errc::invalid_argument;
    }
    auto* ch = std::exchange(ch_, nullptr);
    ch->owner->check("Claim::commit");
    auto r = ch->session->source()->commit(used, offer_stamp(*ch), *ch->session);
    ch->session->flush();
    if (!r) {
        return r.error();
    }
    return r->value;
}

bool Subscriber::next(Message& out) noexcept {
    ch_->owner->check("Subscriber::poll");
    protocol::Event ev;
    if (!ch_->session->receiver()->next_event(ev)) {
        return false;
    }
    // The payload span through two registers: next_event() stored its pointer and size
    // separately, and the 16-byte load the compiler merges them into stalls on store
    // forwarding (three quarters of this function's time at 5 M msgs/s).
    // Likewise sqn and count (two 4-byte stores, one merged 8-byte load).
    const std::byte* data = ev.payload.data();
    std::size_t size = ev.payload.size();
    std::uint32_t sqn = ev.sqn.value;
    std::uint32_t count = ev.count;
    // NOLINTNEXTLINE(hicpp-no-assembler): an empty compiler barrier, no instruction
    asm("" : "+r"(data), "+r"(size), "+r"(sqn), "+r"(count));
    out.kind = static_cast<MessageKind>(ev.kind);
    out.tsi = ev.tsi;
    out.sqn = sqn;
    out.count = count;
    out.payload = std::span<const std::byte>(data, size);
    return true;
}

std::string Subscriber::local_address() const {
    const Endpoint e = ch_->base->local_endpoint();
    if (e.family == 0) {
        return {};
    }
    char text[INET6_ADDRSTRLEN] = {};
    (void)::inet_ntop(AF_INET6, e.addr.data(), text, sizeof text);
    return std::string(text) + " qpn=" + std::to_string(e.qpn);
}

ChannelCounters Subscriber::counters() const noexcept {
    return snapshot(*ch_);
}

std::vector<NamedCounter> Subscriber::transport_counters() const {
    return transport_counters_of(*ch_);
}

}  // namespace prizma
