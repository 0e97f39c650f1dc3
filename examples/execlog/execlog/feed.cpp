// SPDX-License-Identifier: Apache-2.0
#include "execlog/feed.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include <fmt/core.h>

namespace execlog {
namespace {

void add(prizma::StreamCounters& to, const prizma::StreamCounters& c) {
    to.records += c.records;
    to.duplicates += c.duplicates;
    to.divergences += c.divergences;
    to.buffered += c.buffered;
    to.loss_events += c.loss_events;
    to.lost_records += c.lost_records;
    to.resets += c.resets;
    to.stale_epoch += c.stale_epoch;
    to.bad_checksum += c.bad_checksum;
    to.foreign += c.foreign;
    to.overflows += c.overflows;
    to.stalls += c.stalls;
    to.other_version += c.other_version;
    to.unconfirmed += c.unconfirmed;
    to.quorum_losses += c.quorum_losses;
    to.disputes += c.disputes;
    to.resolved += c.resolved;
}

}  // namespace

std::string strip_flow_keys(std::string_view uri) {
    const auto q = uri.find('?');
    if (q == std::string_view::npos) {
        return std::string(uri);
    }
    std::string out(uri.substr(0, q));
    std::string_view rest = uri.substr(q + 1);
    char sep = '?';
    while (!rest.empty()) {
        const auto amp = rest.find('&');
        const std::string_view kv = rest.substr(0, amp);
        rest.remove_prefix(amp == std::string_view::npos ? rest.size() : amp + 1);
        const std::string_view key = kv.substr(0, kv.find('='));
        if (key == "flow" || key == "flow_tag" || key == "flow_group" || key == "flow_timeout_ms") {
            continue;
        }
        out += sep;
        out += kv;
        sep = '&';
    }
    return out;
}

namespace {

std::string errno_text(int e) {
    return std::error_code(e, std::system_category()).message();
}

/// The directory `path` names a file in ("." for a bare name).
std::string parent_of(const std::string& path) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos) {
        return ".";
    }
    return slash == 0 ? "/" : path.substr(0, slash);
}

/// Writes all of `content` to `fd`, makes it durable and closes `fd`; an error text or empty.
std::string write_sync_close(int fd, const std::string& name, std::string_view content) {
    std::size_t done = 0;
    while (done < content.size()) {
        const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            const int e = n < 0 ? errno : EIO;
            (void)::close(fd);  // the write failed already: that is the error to report
            return fmt::format("cannot write '{}': {}", name, errno_text(e));
        }
        done += static_cast<std::size_t>(n);
    }
    if (::fdatasync(fd) != 0) {
        const int e = errno;
        (void)::close(fd);  // as above
        return fmt::format("cannot fdatasync '{}': {}", name, errno_text(e));
    }
    // close() can report a write error too (NFS reports them there).
    if (::close(fd) != 0) {
        return fmt::format("cannot close '{}': {}", name, errno_text(errno));
    }
    return {};
}

}  // namespace

std::string sync_directory_of(const std::string& path) {
    const std::string dir = parent_of(path);
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        return fmt::format("cannot open directory '{}': {}", dir, errno_text(errno));
    }
    const int rc = ::fsync(fd);
    const int e = errno;
    (void)::close(fd);  // opened read-only: its close loses nothing
    if (rc != 0) {
        return fmt::format("cannot fsync directory '{}': {}", dir, errno_text(e));
    }
    return {};
}

std::int64_t unix_now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::optional<std::int64_t> read_anchor_file(const std::string& path) {
    std::ifstream f(path);
    std::int64_t anchor = 0;
    if (!(f >> anchor) || anchor <= 0) {
        return std::nullopt;
    }
    return anchor;
}

std::string write_file_atomically(const std::string& path, std::string_view content) {
    // A temporary name of its own beside `path` (the rename must not cross file systems),
    // created by mkostemp with O_CREAT|O_EXCL and mode 0600: an existing name (a file of
    // another writer, a symlink planted at a predictable name) is never opened, let alone
    // truncated, and two writers of one path never share a temporary file.
    std::string tmp = path + ".tmp.XXXXXX";
    const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
    if (fd < 0) {
        return fmt::format("cannot write '{}': cannot create a temporary file beside it: {}", path,
                           errno_text(errno));
    }
    std::string err = write_sync_close(fd, tmp, content);
    if (err.empty() && ::rename(tmp.c_str(), path.c_str()) != 0) {
        err = fmt::format("cannot rename '{}' to '{}': {}", tmp, path, errno_text(errno));
    }
    if (!err.empty()) {
        (void)::unlink(tmp.c_str());  // best effort: the error reported is the one above
        return err;
    }
    // The rename is durable only once the directory is: until then a crash may bring back
    // the previous checkpoint.
    return sync_directory_of(path);
}

struct Checkpointer::Impl {
    std::string path;
    std::mutex m;
    std::condition_variable cv;
    std::function<std::string()> pending;
    std::string err;
    bool stop = false;
    std::thread writer;

    void run() {
        std::unique_lock lk(m);
        for (;;) {
            cv.wait(lk, [&] { return stop || static_cast<bool>(pending); });
            if (!pending) {
                return;  // stopped, nothing left
            }
            auto make = std::move(pending);
            pending = nullptr;
            lk.unlock();
            std::string e = write_file_atomically(path, make());
            lk.lock();
            if (!e.empty() && err.empty()) {
                err = std::move(e);
            }
        }
    }
    /// Stops the thread once it has written what is pending (unless `drop_pending`).
    void join(bool drop_pending) {
        if (!writer.joinable()) {
            return;
        }
        {
            const std::lock_guard lk(m);
            if (drop_pending) {
                pending = nullptr;
            }
            stop = true;
        }
        cv.notify_one();
        writer.join();
    }
};

Checkpointer::Checkpointer(std::string path) : impl_(std::make_unique<Impl>()) {
    impl_->path = std::move(path);
    impl_->writer = std::thread([p = impl_.get()] { p->run(); });
}

Checkpointer::~Checkpointer() {
    impl_->join(false);
}

void Checkpointer::submit(std::string content) {
    submit([c = std::move(content)]() mutable { return std::move(c); });
}

void Checkpointer::submit(std::function<std::string()> make) {
    {
        const std::lock_guard lk(impl_->m);
        impl_->pending = std::move(make);
    }
    impl_->cv.notify_one();
}

std::string Checkpointer::error() {
    const std::lock_guard lk(impl_->m);
    return impl_->err;
}

std::string Checkpointer::finish(std::string_view content) {
    impl_->join(true);  // what is pending is superseded by the final state
    std::string e = write_file_atomically(impl_->path, content);
    return !impl_->err.empty() ? impl_->err : e;
}

std::optional<std::pair<std::string, std::uint16_t>> parse_host_port(std::string_view text) {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
        return std::nullopt;
    }
    const std::string_view port = text.substr(colon + 1);
    std::uint16_t p = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc{} || end != port.data() + port.size()) {
        return std::nullopt;
    }
    return std::make_pair(std::string(text.substr(0, colon)), p);
}

std::optional<prizma::Gsi> core_gsi(std::string_view name) {
    prizma::Gsi g{};
    if (name.empty() || name.size() > g.bytes.size()) {
        return std::nullopt;
    }
    for (std::size_t i = 0; i < name.size(); ++i) {
        const char ch = name[i];
        const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')
                        || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_';
        if (!ok) {
            return std::nullopt;
        }
        g.bytes[i] = static_cast<std::uint8_t>(ch);
    }
    return g;
}

std::string tsi_text(const prizma::Tsi& tsi) {
    // A core's GSI is its name (core_gsi): the name's bytes, then NULs.
    const auto& bytes = tsi.gsi.bytes;
    std::size_t len = bytes.size();
    while (len > 0 && bytes[len - 1] == 0) {
        --len;
    }
    const std::string name(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len));
    if (const auto g = core_gsi(name); g && *g == tsi.gsi) {
        return fmt::format("{}.{}", name, tsi.sport);
    }
    std::string s;
    for (const auto b : tsi.gsi.bytes) {
        s += fmt::format("{:02x}", b);
    }
    return s + fmt::format(".{}", tsi.sport);
}

prizma::ChannelOptions consumer_channel_options(std::uint32_t window, bool passive) {
    prizma::ChannelOptions o;
    o.window_sqns = window;
    o.preallocated_sources = 2;
    o.recover_history = !passive;
    o.max_recover_sqns = window > 1 ? window - 1 : 1;
    o.passive = passive;
    return o;
}

Feed::Feed(prizma::Context& ctx, FeedOptions options, prizma::Subscriber sub, std::uint64_t next)
    : ctx_(&ctx),
      opt_(std::move(options)),
      sub_(sub),
      next_(next),
      heard_ns_(prizma::Context::now_ns()) {}

Feed::~Feed() {
    live_.reset();
    late_.reset();
    (void)ctx_->remove(sub_);
}

prizma::Result<std::unique_ptr<Feed>, prizma::Error> Feed::open(prizma::Context& ctx,
                                                                const FeedOptions& options,
                                                                std::uint64_t next) {
    auto co = consumer_channel_options(options.window, options.passive);
    // With an archiver, a consumer behind asks it (one TCP stream), not the cores: PGM history
    // recovery costs every core a repair of each packet recovered, and the cores' repair
    // budget is better kept for a restarted archiver, which has no one else to ask.
    co.recover_history = co.recover_history && options.replay_host.empty();
    if (!co.recover_history) {
        // Only a young stream's head (a consumer that started with the cores but lost their
        // first packets) is taken from them then, not a window of it.
        co.max_recover_sqns =
            std::min(co.max_recover_sqns, prizma::ChannelOptions{}.max_recover_sqns);
    }
    if (options.max_recover != 0) {
        co.max_recover_sqns = std::min(options.max_recover, co.max_recover_sqns);
    }
    auto t = prizma::Timers::of(co.preset);
    t.nak_ncf_retries = options.nak_retries;
    t.nak_data_retries = options.nak_retries;
    co.timers = t;
    auto sub = ctx.add_subscriber(options.uri, co);
    if (!sub) {
        return sub.error();
    }
    FeedOptions o = options;
    if (o.gap_timeout.count() == 0) {
        // Without an archiver a gap waits while PGM asks (the retries), plus 100 ms.
        const auto asking =
            std::max(t.nak_repeat, t.nak_rdata) * static_cast<std::int64_t>(o.nak_retries);
        o.gap_timeout = o.replay_host.empty()
                            ? std::chrono::milliseconds(100)
                                  + std::chrono::duration_cast<std::chrono::milliseconds>(asking)
                            : std::chrono::milliseconds(500);
    }
    std::unique_ptr<Feed> f(new Feed(ctx, o, *sub, next));
    // A restarted consumer asks the archiver first: it may be far behind the live edge.
    const bool late = !options.replay_host.empty() && next > 0;
    if (late ? !f->start_late("resuming") : !f->start_live()) {
        return prizma::Error(prizma::Errc::invalid_argument, "cannot read the stream");
    }
    return f;
}

bool Feed::start_live() {
    late_.reset();
    if (live_) {
        add(live_counters_, live_->counters());
    }
    live_.reset();
    prizma::StreamOptions so;
    so.stream_id = opt_.stream_id;
    so.start_sequence = next_;
    so.gap_timeout = opt_.gap_timeout;
    so.buffer_records = opt_.buffer_records;
    so.arbitration = opt_.arbitration;
    so.quorum = opt_.quorum;
    so.quorum_timeout = opt_.quorum_timeout;
    // With an archiver, a record whose quorum does not come in time is read from the archive
    // (what the archiver settled), never applied unconfirmed.
    so.quorum_timeout_loss = !opt_.replay_host.empty();
    auto s = prizma::StreamSubscriber::create(so);
    if (!s || !s->add(sub_)) {
        return false;
    }
    live_.emplace(std::move(*s));
    return true;
}

bool Feed::start_late(const char* why) {
    if (live_) {
        add(live_counters_, live_->counters());
    }
    live_.reset();
    late_.reset();
    prizma::LateJoinOptions lo;
    lo.stream.stream_id = opt_.stream_id;
    lo.stream.gap_timeout = opt_.gap_timeout;
    lo.stream.arbitration = opt_.arbitration;
    lo.stream.quorum = opt_.quorum;
    lo.stream.quorum_timeout = opt_.quorum_timeout;
    lo.stream.quorum_timeout_loss = true;
    lo.replay_address = opt_.replay_host;
    lo.replay_port = opt_.replay_port;
    lo.client.security = opt_.replay_security;
    lo.from = next_;
    lo.recorder_timeout = std::chrono::seconds(2);
    auto j = prizma::LateJoin::create(lo);
    if (!j || !j->add(sub_)) {
        return false;
    }
    fmt::print(stderr, "{}: {}: catching up from the archiver at {}, from sequence {}\n", opt_.name,
               why, opt_.replay_port, next_);
    late_.emplace(std::move(*j));
    ++counters_.late_joins;
    late_started_ns_ = prizma::Context::now_ns();
    late_replayed_ = 0;
    return true;
}

bool Feed::catching_up() const noexcept {
    return late_ && !late_->counters().merged;
}

prizma::StreamCounters Feed::stream_counters() const noexcept {
    prizma::StreamCounters c = live_counters_;
    if (live_) {
        add(c, live_->counters());
    }
    return c;
}

bool Feed::accept(prizma::StreamEvent& e) noexcept {
    switch (e.kind) {
        case prizma::StreamEventKind::record:
            if (e.sequence < next_) {
                ++counters_.skipped;
                return false;
            }
            next_ = e.sequence + 1;
            ++counters_.delivered;
            return true;
        case prizma::StreamEventKind::loss:
            if (e.sequence + e.count <= next_) {
                return false;
            }
            if (e.sequence < next_) {
                e.count -= next_ - e.sequence;
                e.sequence = next_;
            }
            next_ = e.sequence + e.count;
            return true;
        case prizma::StreamEventKind::reset: next_ = e.sequence; return true;
        case prizma::StreamEventKind::stall:
        case prizma::StreamEventKind::dispute: return e.sequence >= next_;
        case prizma::StreamEventKind::divergence: return true;
    }
    return true;
}

// A loss past our position, or a stall at it (lost data and nothing after it): the archiver
// has what is missing. A dispute at it (the cores' copies differ, no quorum): the archive
// holds the copy the operator chose once they have chosen (until then the late join waits
// for it, or fails and is tried again).
bool Feed::is_gap(const prizma::StreamEvent& e) const noexcept {
    return (e.kind == prizma::StreamEventKind::loss && e.sequence + e.count > next_)
           || ((e.kind == prizma::StreamEventKind::stall
                || e.kind == prizma::StreamEventKind::dispute)
               && e.sequence >= next_);
}

void Feed::note_dispute(const prizma::StreamEvent& e) {
    if (e.kind != prizma::StreamEventKind::dispute || e.sequence == dispute_said_) {
        return;
    }
    dispute_said_ = e.sequence;
    ++counters_.disputes;
    fmt::print(stderr,
               "{}: HALTED at record {}: the cores' {} copies differ and none has the quorum; "
               "the archive decides (the operator's choice)\n",
               opt_.name, e.sequence, e.count);
}

prizma::Result<void, prizma::Error> Feed::resolve(std::uint64_t sequence, std::uint64_t checksum) {
    if (!live_) {
        return prizma::Error(prizma::Errc::invalid_argument, "resolve: reading the archiver");
    }
    return live_->resolve(sequence, checksum);
}

bool Feed::next_late(prizma::StreamEvent& out) {
    for (;;) {
        auto r = late_->next(out);
        if (!r) {
            ++counters_.late_join_failures;
            fmt::print(stderr, "{}: archiver: {} ({}); reading live from {} meanwhile\n", opt_.name,
                       late_->error_text(), r.error().message(), next_);
            retry_late_at_ns_ = prizma::Context::now_ns() + 500'000'000;
            (void)start_live();
            return false;
        }
        if (!*r) {
            return false;
        }
        const bool merged = late_->counters().merged;
        if (merged && is_gap(out)) {
            note_dispute(out);
            ++counters_.live_gaps;
            (void)start_late("live gap after the merge");
            continue;
        }
        if (out.kind == prizma::StreamEventKind::record && !merged) {
            ++counters_.replayed;
            ++late_replayed_;
        } else if (merged && late_started_ns_ != 0) {
            counters_.catchup_records = late_replayed_;
            counters_.catchup_ns = prizma::Context::now_ns() - late_started_ns_;
            late_started_ns_ = 0;
        }
        if (accept(out)) {
            return true;
        }
    }
}

bool Feed::next(prizma::StreamEvent& out) {
    const bool got = late_ ? next_late(out) : next_live(out);
    const std::int64_t now = prizma::Context::now_ns();
    if (got) {
        heard_ns_ = now;
        return true;
    }
    // Live silent (not while a late join is still catching up: it reads the archiver).
    if (opt_.silence_probe.count() > 0 && !opt_.replay_host.empty() && !catching_up()
        && now - heard_ns_ > std::chrono::nanoseconds(opt_.silence_probe).count()
        && now >= retry_late_at_ns_) {
        heard_ns_ = now;
        ++counters_.silence_probes;
        (void)start_late("live silent");
        return next_late(out);
    }
    return false;
}

bool Feed::next_live(prizma::StreamEvent& out) {
    while (live_->next(out)) {
        if (is_gap(out) && !opt_.replay_host.empty()) {
            note_dispute(out);
            const std::int64_t now = prizma::Context::now_ns();
            if (now < retry_late_at_ns_) {
                // The archiver refused a moment ago: wait, then ask again (the live reader
                // already moved past the gap, so a fresh one restarts at our position).
                (void)start_live();
                return false;
            }
            ++counters_.live_gaps;
            (void)start_late("live gap");
            return next_late(out);
        }
        if (accept(out)) {
            return true;
        }
    }
    return false;
}

}  // namespace execlog
