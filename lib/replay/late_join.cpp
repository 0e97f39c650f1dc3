// SPDX-License-Identifier: Apache-2.0
// Late join: live first (buffered, bounded), a replay from the recorder, and the merge of one
// into the other with no gap and no duplicate (docs/STREAMS.md, "Recording and late join").
// The replay server is not trusted: its frames must continue at the next sequence and stay
// within what live has shown.
#include <optional>

#include <prizma/replay.hpp>

#include "lib/replay/late_join_rules.hpp"
#include "lib/replay/tls.hpp"

namespace prizma {
namespace {

/// A live event held while the replay catches up; the payload's capacity is kept, so a full
/// ring is refilled without allocating.
struct Held {
    StreamEvent event;
    std::vector<std::byte> payload;
};

}  // namespace

struct LateJoin::Impl {
    LateJoinOptions opt;
    StreamSubscriber live;
    std::optional<ReplayClient> replay;
    std::vector<ReplayEndpoint> servers;  // replay_address first, then the alternates
    std::size_t server = 0;               // the one tried now
    std::vector<Held> ring;
    std::size_t front = 0;
    std::size_t size = 0;
    std::uint64_t next = 0;
    std::int64_t retry_at_ns = 0;
    // Reconnecting gives up at give_up_ns (0: not set). It is cleared by progress (a replayed
    // event), not by a connection alone: a service that accepts and drops every connection
    // without sending anything must not be retried for ever.
    std::int64_t give_up_ns = 0;
    bool connected_once = false;
    // What live has shown: the end of the furthest event heard, and its epoch.
    std::uint64_t live_end = 0;
    std::optional<std::uint32_t> live_epoch;
    std::optional<std::uint32_t> replay_epoch;  // the last epoch the replay moved to
    std::optional<JournalEntry> pending_reset;  // a replayed reset waiting for live's epoch
    std::string last_refusal;
    bool failed = false;
    std::error_code error;
    std::string error_text;
    LateJoinCounters counters;
    std::vector<std::byte> handed;  // the payload last handed out from the ring

    explicit Impl(StreamSubscriber s) : live(std::move(s)) {}

    void hold(const StreamEvent& e) {
        if (size == ring.size()) {
            front = (front + 1) % ring.size();  // drop the oldest: the replay brings it
            --size;
            ++counters.buffer_overflows;
        }
        live_end = std::max(live_end, end_of(e));
        live_epoch = e.kind == StreamEventKind::reset || e.kind == StreamEventKind::record
                         ? std::optional<std::uint32_t>(e.epoch)
                         : live_epoch;
        Held& h = ring[(front + size) % ring.size()];
        h.event = e;
        h.payload.assign(e.payload.begin(), e.payload.end());
        h.event.payload = h.payload;
        ++size;
    }
    void pump_live() {
        StreamEvent e;
        while (live.next(e)) {
            hold(e);
        }
    }
    static std::uint64_t end_of(const StreamEvent& e) noexcept { return detail::event_end(e); }
    [[nodiscard]] bool stale(const StreamEvent& e) const noexcept {
        return detail::event_stale(e, next);
    }
    bool try_merge() noexcept;
    Result<bool> from_ring(StreamEvent& out) noexcept;
    Result<bool> from_replay(StreamEvent& out) noexcept;
    /// Why a replayed entry cannot be right (empty: it can), or "wait" for a reset that must
    /// wait for live's epoch.
    [[nodiscard]] std::string check(const JournalEntry& e) const;
    /// Ends the attempt: the position stays, the next server is tried after retry_interval.
    Result<bool> drop_attempt(std::int64_t now, std::string why) noexcept;
    /// The replay service is gone: retry after retry_interval, or fail once give_up_ns passed.
    Result<bool> retry_or_fail(std::int64_t now, const std::string& why) noexcept;
    Result<bool> fail(std::error_code ec, std::string text) noexcept {
        failed = true;
        error = ec;
        error_text = std::move(text);
        return ec;
    }
};

// The replay has reached the held live edge: live takes over from `next`.
bool LateJoin::Impl::try_merge() noexcept {
    const bool reached = size > 0
                             ? ring[front].event.sequence <= next
                             : live.next_sequence().has_value() && *live.next_sequence() <= next;
    if (!reached) {
        return false;
    }
    counters.merged = true;
    counters.merge_sequence = next;
    replay.reset();
    return true;
}

Result<bool> LateJoin::Impl::from_ring(StreamEvent& out) noexcept {
    while (size > 0) {
        Held& h = ring[front];
        front = (front + 1) % ring.size();
        --size;
        if (stale(h.event)) {
            continue;  // already replayed
        }
        // The caller's bytes live in `handed` until the next call; the slot takes the old
        // buffer (its capacity is reused).
        std::swap(handed, h.payload);
        out = h.event;
        out.payload = handed;
        if (out.kind == StreamEventKind::loss && out.sequence < next) {
            out.count -= next - out.sequence;
            out.sequence = next;
        }
        next = std::max(next, end_of(out));
        counters.live += out.kind == StreamEventKind::record ? 1U : 0U;
        return true;
    }
    return false;
}

std::string LateJoin::Impl::check(const JournalEntry& e) const {
    // How far a replay may reach: what live has shown, plus one live buffer.
    const std::uint64_t edge = std::max(live_end, next);
    const std::uint64_t limit =
        edge > UINT64_MAX - opt.live_buffer_records ? UINT64_MAX : edge + opt.live_buffer_records;
    const auto at = [](std::uint64_t v) {
        return std::to_string(v);
    };
    switch (e.kind) {
        case StreamEventKind::record:
            // Records cannot run ahead of live: the merge ends the replay at the live edge.
            if (e.sequence != next) {
                return "a record at " + at(e.sequence) + " where " + at(next) + " was due";
            }
            return {};
        case StreamEventKind::loss:
            if (e.count == 0 || e.sequence > next || e.count > UINT64_MAX - e.sequence
                || e.sequence + e.count <= next) {
                return "a loss [" + at(e.sequence) + ", +" + at(e.count) + ") that does not "
                       "continue at " + at(next);
            }
            if (e.sequence + e.count > limit) {
                return "a loss up to " + at(e.sequence + e.count) + ", past the live edge "
                       + at(edge) + " + live_buffer_records";
            }
            return {};
        case StreamEventKind::reset:
            if (e.sequence > limit) {
                return "a reset at " + at(e.sequence) + ", past the live edge " + at(edge);
            }
            if (!live_epoch) {
                return "wait";
            }
            if (e.epoch > *live_epoch || (replay_epoch && e.epoch <= *replay_epoch)) {
                return "a reset to epoch " + at(e.epoch) + " (live is at epoch " + at(*live_epoch)
                       + ")";
            }
            return {};
        default: break;
    }
    return "an entry of an unknown kind";
}

Result<bool> LateJoin::Impl::drop_attempt(std::int64_t now, std::string why) noexcept {
    replay.reset();
    pending_reset.reset();
    server = (server + 1) % servers.size();
    auto r = retry_or_fail(now, why);
    last_refusal = std::move(why);
    return r;
}

Result<bool> LateJoin::Impl::from_replay(StreamEvent& out) noexcept {
    const std::int64_t now = Context::now_ns();
    if (!replay) {
        if (now < retry_at_ns) {
            return false;
        }
        ReplayRequest rq;
        rq.stream_id = opt.stream.stream_id;
        rq.from = next;
        rq.follow = true;
        const ReplayEndpoint& ep = servers[server];
        auto c = ReplayClient::connect(ep.address, ep.port, rq, opt.client);
        if (!c) {
            return drop_attempt(now, c.error().message());
        }
        counters.reconnects += connected_once ? 1U : 0U;
        connected_once = true;
        replay.emplace(std::move(*c));
    }
    JournalEntry e;
    for (;;) {
        if (pending_reset) {
            e = *pending_reset;
        } else if (auto r = replay->next(e); !r) {
            if (replay->server_error()) {
                return fail(r.error(), "late join: " + replay->error_text());
            }
            if (r.error() == std::errc::permission_denied) {
                ++counters.handshake_refusals;  // not the server configured: the next one
            }
            return drop_attempt(now, replay->error_text());
        } else if (!*r) {
            return false;
        }
        const std::string bad = check(e);
        if (bad == "wait") {
            pending_reset = e;  // live has not shown its epoch yet
            return false;
        }
        pending_reset.reset();
        if (!bad.empty()) {
            ++counters.refused_frames;
            return drop_attempt(now, "the replay server sent " + bad);
        }
        out = StreamEvent{};
        out.kind = e.kind;
        out.epoch = e.epoch;
        out.sequence = e.sequence;
        out.count = e.kind == StreamEventKind::loss ? e.count : 0;
        out.payload = e.payload();
        if (out.kind == StreamEventKind::loss && out.sequence < next) {
            out.count -= next - out.sequence;
            out.sequence = next;
        }
        replay_epoch = e.kind == StreamEventKind::reset ? std::optional(e.epoch) : replay_epoch;
        next = std::max(next, Impl::end_of(out));
        counters.replayed += e.kind == StreamEventKind::record ? 1U : 0U;
        give_up_ns = 0;  // progress: a later loss of the service gets a full recorder_timeout
        return true;
    }
}

Result<bool> LateJoin::Impl::retry_or_fail(std::int64_t now, const std::string& why) noexcept {
    give_up_ns = give_up_ns == 0 ? now + opt.recorder_timeout.count() : give_up_ns;
    if (now >= give_up_ns) {
        return fail(std::make_error_code(std::errc::timed_out),
                    "late join: the replay service stayed unreachable or made no progress for "
                    "recorder_timeout ("
                        + why + "); resume from " + std::to_string(next));
    }
    retry_at_ns = now + opt.retry_interval.count();
    return false;
}

Result<LateJoin, Error> LateJoin::create(const LateJoinOptions& options) {
    if (options.live_buffer_records == 0 || options.replay_port == 0) {
        return Error(Errc::invalid_argument,
                     "late join: live_buffer_records > 0 and replay_port are required");
    }
    StreamOptions so = options.stream;
    so.start_sequence.reset();
    auto s = StreamSubscriber::create(so);
    if (!s) {
        return s.error();
    }
    for (const ReplayEndpoint& ep : options.alternates) {
        if (ep.port == 0) {
            return Error(Errc::invalid_argument, "late join: an alternate without a port");
        }
    }
    auto impl = std::make_unique<Impl>(std::move(*s));
    impl->opt = options;
    impl->servers.push_back({options.replay_address, options.replay_port});
    impl->servers.insert(impl->servers.end(), options.alternates.begin(), options.alternates.end());
    for (const ReplayEndpoint& ep : impl->servers) {
        // Settings that can never work fail now, not after recorder_timeout.
        if (auto t = replay::TlsConfig::make(options.client.security, false,
                                             replay::is_loopback(ep.address));
            !t) {
            return t.error();
        }
    }
    impl->ring.resize(options.live_buffer_records);
    impl->next = options.from;
    return LateJoin(std::move(impl));
}

Result<void, Error> LateJoin::add(Subscriber& subscriber) {
    return impl_->live.add(subscriber);
}

Result<bool> LateJoin::next(StreamEvent& out) noexcept {
    Impl& m = *impl_;
    if (m.failed) {
        return m.error;
    }
    if (m.counters.merged) {
        if (auto r = m.from_ring(out); r && *r) {
            return true;
        }
        while (m.live.next(out)) {
            if (m.stale(out)) {
                continue;  // the replay went further than this live copy had come
            }
            m.next = std::max(m.next, Impl::end_of(out));
            m.counters.live += out.kind == StreamEventKind::record ? 1U : 0U;
            return true;
        }
        return false;
    }
    m.pump_live();
    if (m.try_merge()) {
        return next(out);
    }
    return m.from_replay(out);
}

std::uint64_t LateJoin::next_sequence() const noexcept {
    return impl_->next;
}
const LateJoinCounters& LateJoin::counters() const noexcept {
    return impl_->counters;
}
const std::string& LateJoin::error_text() const noexcept {
    return impl_->error_text;
}
const std::string& LateJoin::last_refusal() const noexcept {
    return impl_->last_refusal;
}

LateJoin::LateJoin(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
LateJoin::LateJoin(LateJoin&& other) noexcept = default;
LateJoin& LateJoin::operator=(LateJoin&& other) noexcept = default;
LateJoin::~LateJoin() = default;

}  // namespace prizma
