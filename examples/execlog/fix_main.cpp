// SPDX-License-Identifier: Apache-2.0
// execlog-fix: renders the ExecLog as FIX 4.4 ExecutionReports (35=8), tag=value with SOH or
// '|', to a file or stdout. The output file is its own state: a restarted renderer cuts the
// file back to its last complete record (whole messages, checksums verified), resumes at the
// next sequence, and so never writes a record twice.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

#include "execlog/consumer.hpp"
#include "execlog/fix.hpp"
#include "execlog/record.hpp"

namespace {

constexpr const char* kTool = "execlog-fix";

std::string errno_text(int e) {
    return std::error_code(e, std::system_category()).message();
}

bool write_all(int fd, std::string& buf) {
    std::size_t done = 0;
    while (done < buf.size()) {
        const ssize_t n = ::write(fd, buf.data() + done, buf.size() - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            fmt::print(stderr, "{}: write: {}\n", kTool, errno_text(n < 0 ? errno : EIO));
            return false;
        }
        done += static_cast<std::size_t>(n);
    }
    buf.clear();
    return true;
}

/// The whole of `fd` from its current offset into `out`; false (reported) on a read error:
/// a file read in part must not be cut back to what was read.
bool read_all(int fd, const std::string& path, std::string& out) {
    std::array<char, 65536> chunk{};
    for (;;) {
        const ssize_t n = ::read(fd, chunk.data(), chunk.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            fmt::print(stderr, "{}: cannot read '{}': {}\n", kTool, path, errno_text(errno));
            return false;
        }
        if (n == 0) {
            return true;
        }
        out.append(chunk.data(), static_cast<std::size_t>(n));
    }
}

/// Opens the output, cut back to its last complete record; fills `rec`. -1 on error (reported).
int open_output(const std::string& path, char delim, execlog::FixRecovery& rec) {
    if (path == "-") {
        return STDOUT_FILENO;
    }
    // O_NOFOLLOW: a symlink planted at the output's name is refused, not written through;
    // 0600: executions are nobody else's business.
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        fmt::print(stderr, "{}: cannot open '{}': {}\n", kTool, path, errno_text(errno));
        return -1;
    }
    struct stat st {};
    std::string content;
    const bool stat_ok = ::fstat(fd, &st) == 0;
    if (!stat_ok || !S_ISREG(st.st_mode)) {
        fmt::print(stderr, "{}: '{}': {}\n", kTool, path,
                   stat_ok ? "not a regular file" : errno_text(errno));
        (void)::close(fd);  // nothing written: nothing to lose
        return -1;
    }
    if (!read_all(fd, path, content)) {
        (void)::close(fd);  // as above
        return -1;
    }
    rec = execlog::recover_fix(content, delim);
    if (rec.keep_bytes != content.size()) {
        fmt::print(stderr,
                   "{}: '{}': {} at byte {}: keeping {} messages ({} bytes, records before {}), "
                   "discarding the {} bytes after them\n",
                   kTool, path, rec.problem, rec.problem_at, rec.messages, rec.keep_bytes,
                   rec.next_sequence, content.size() - rec.keep_bytes);
    }
    // The cut, and the file's name if it was just made, durable before anything is appended.
    std::string err;
    if (::ftruncate(fd, static_cast<off_t>(rec.keep_bytes)) != 0 || ::lseek(fd, 0, SEEK_END) < 0
        || ::fsync(fd) != 0) {
        err = errno_text(errno);
    } else {
        err = execlog::sync_directory_of(path);
    }
    if (!err.empty()) {
        fmt::print(stderr, "{}: '{}': {}\n", kTool, path, err);
        (void)::close(fd);  // the error is reported above; the file is cut at most
        return -1;
    }
    return fd;
}

struct Stats {
    std::uint64_t messages = 0;
    std::uint64_t unknown = 0;
    std::uint64_t lost = 0;
    std::uint64_t divergences = 0;
    bool ended = false;
};

void apply(const prizma::StreamEvent& e, execlog::FixRenderer& fix, std::string& out, Stats& st) {
    if (e.kind == prizma::StreamEventKind::loss) {
        st.lost += e.count;
        fmt::print(stderr, "{}: LOSS: records [{}, {}) are lost for good\n", kTool, e.sequence,
                   e.sequence + e.count);
        return;
    }
    if (e.kind == prizma::StreamEventKind::stall) {
        fmt::print(stderr, "{}: STALL: records from {} on may be lost (no archiver to ask)\n",
                   kTool, e.sequence);
        return;
    }
    if (e.kind == prizma::StreamEventKind::divergence) {
        ++st.divergences;
        fmt::print(stderr, "{}: DIVERGENCE: a copy of record {} from source {} differs\n", kTool,
                   e.sequence, execlog::tsi_text(e.source));
        return;
    }
    if (e.kind != prizma::StreamEventKind::record) {
        return;
    }
    execlog::Record r;
    if (execlog::decode(e.payload, r) != execlog::DecodeStatus::ok) {
        if (st.unknown++ < 10) {
            fmt::print(stderr, "{}: record {}: unknown record type {} ({} bytes; skipped)\n", kTool,
                       e.sequence, execlog::type_byte(e.payload), e.payload.size());
        }
        return;
    }
    st.ended = st.ended || r.type == execlog::RecordType::session_end;
    st.messages += fix.render(e.sequence, r, out);
}

int run(int argc, char** argv) {
    CLI::App app{"", kTool};
    prizma::tools::init(app, "execlog-fix URI [--output FILE|-] [--delimiter soh|pipe] [options]",
                        "FIX 4.4 ExecutionReports from the ExecLog.");
    execlog::ConsumerArgs a;
    execlog::add_consumer_options(app, a);
    std::string output = "-";
    std::string delim = "soh";
    app.add_option("--output", output, "Output file (its own resume point), or - for stdout");
    app.add_option("--delimiter", delim, "Field delimiter (default soh)")
        ->check(prizma::tools::one_of({"soh", "pipe"}));
    if (const int rc = prizma::tools::parse(app, argc, argv); rc >= 0) {
        return rc;
    }
    if (!execlog::finish_consumer_args(kTool, a)) {
        return 2;
    }
    const char d = delim == "pipe" ? '|' : '\x01';
    execlog::FixRecovery rec;
    const int fd = open_output(output, d, rec);
    if (fd < 0) {
        return 1;
    }
    execlog::install_stop_signals();
    auto ctx = prizma::tools::make_context(kTool);
    if (!ctx) {
        return 1;
    }
    auto feed = execlog::Feed::open(*ctx, a.feed, rec.next_sequence);
    if (!feed) {
        fmt::print(stderr, "{}: {}\n", kTool, feed.error().message());
        return 1;
    }
    execlog::Feed& f = **feed;
    fmt::print(stderr, "{}: from sequence {} ({} messages kept)\n", kTool, rec.next_sequence,
               rec.messages);
    execlog::FixRenderer fix(d, rec.next_msg_seq);
    std::string out;
    Stats st;
    prizma::StreamEvent e;
    while (!execlog::stop_requested() && !(a.exit_at_end && st.ended)) {
        const int work = ctx->poll();
        int n = 0;
        while (n < 1024 && f.next(e)) {
            apply(e, fix, out, st);
            ++n;
        }
        if (!out.empty() && !write_all(fd, out)) {
            return 1;
        }
        if (work == 0 && n == 0) {
            execlog::idle(*ctx, f, a.spin);
        }
    }
    if (fd != STDOUT_FILENO && (::fsync(fd) != 0 || ::close(fd) != 0)) {
        fmt::print(stderr, "{}: '{}': {}\n", kTool, output, errno_text(errno));
        return 1;
    }
    fmt::print(stderr,
               "{}: final: next {}, messages {} (+{} kept), applied {}, skipped {}, late joins {}, "
               "lost {}, divergences {}, unknown types {}\n",
               kTool, f.next_sequence(), st.messages, rec.messages, f.counters().delivered,
               f.counters().skipped, f.counters().late_joins, st.lost, st.divergences, st.unknown);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main(kTool, run, argc, argv);
}
