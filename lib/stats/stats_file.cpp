// SPDX-License-Identifier: Apache-2.0
#include "lib/stats/stats_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "lib/posix/errors.hpp"

namespace prizma::stats {

namespace {

std::atomic<std::uint64_t> g_files{0};

std::atomic_ref<std::uint64_t> seq_of(FileHeader* h) noexcept {
    return std::atomic_ref<std::uint64_t>(h->seq);
}

void copy_str(char* dst, std::size_t cap, std::string_view s) noexcept {
    const std::size_t n = std::min(cap - 1, s.size());
    if (n != 0) {  // an empty view may have no data pointer at all
        std::memcpy(dst, s.data(), n);
    }
    std::memset(dst + n, 0, cap - n);
}

std::string str_of(const char* s, std::size_t cap) {
    return {s, strnlen(s, cap)};
}

}  // namespace

std::size_t flatten(const ChannelCounters& c, std::span<NamedCounter> out) noexcept {
    const std::size_t n = std::min(out.size(), kChannelCounterFields.size());
    for (std::size_t i = 0; i < n; ++i) {
        out[i] = {kChannelCounterFields[i].name, c.*kChannelCounterFields[i].member};
    }
    return n;
}

std::string default_dir() {
    const char* d = posix::env("PRIZMA_STATS_DIR");
    return d != nullptr && *d != '\0' ? std::string(d)
                                      : "/dev/shm/prizma-" + std::to_string(::geteuid());
}

Writer::~Writer() {
    if (base_ != nullptr) {
        (void)::munmap(base_, kFileSize);
        (void)::unlinkat(dir_fd_.get(), name_.c_str(), 0);
    }
}

namespace {

/// Files left by processes that were killed (no destructor ran): removed by the next writer,
/// so /dev/shm does not fill up with them. A pid that still exists keeps its file. (`dir` is
/// listed, `dir_fd` is where the names are removed: the directory checked by open_dir.)
void remove_stale(const std::string& dir, int dir_fd) noexcept {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        const std::size_t dash = name.find('-');
        if (e.path().extension() != ".stats" || dash == 0 || dash == std::string::npos
            || name.find_first_not_of("0123456789") != dash) {
            continue;
        }
        if (!std::filesystem::exists("/proc/" + name.substr(0, dash), ec)) {
            (void)::unlinkat(dir_fd, name.c_str(), 0);
        }
    }
}

/// Why a directory (as opened: never through a symbolic link) is no place for our stats
/// files, or empty when it is ours alone.
std::string unsafe_dir(const struct stat& st) {
    const uid_t me = ::geteuid();
    if (!S_ISDIR(st.st_mode)) {
        return "not a directory";
    }
    if (st.st_uid != me) {
        return "owned by uid " + std::to_string(st.st_uid) + ", not by this process's uid "
               + std::to_string(me);
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        char mode[8];
        (void)std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777U);
        return std::string("writable by other users (mode ") + mode + ")";
    }
    return {};
}

/// Opens `dir` for the stats files, made (0700) if missing: a directory owned by us that no
/// one else can write to, not a symbolic link. Else an error that says why. Checked on the
/// open descriptor, and the file is made through it: nothing can be swapped in between.
Result<posix::UniqueFd, Error> open_dir(const std::string& dir) {
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
        return Error(posix::errno_code(),
                     "cannot create the stats directory " + dir + ": " + posix::errno_text());
    }
    posix::UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
        const int err = errno;  // why, from the entry itself (lstat does not follow it)
        const std::string why = ::lstat(dir.c_str(), &st) != 0 ? posix::errno_text(err)
                                : S_ISLNK(st.st_mode)          ? "a symbolic link"
                                                               : unsafe_dir(st);
        return Error(posix::errno_code(err), "stats directory " + dir + " refused: "
                                                 + (why.empty() ? posix::errno_text(err) : why));
    }
    if (const std::string why = unsafe_dir(st); !why.empty()) {
        return Error(std::make_error_code(std::errc::permission_denied),
                     "stats directory " + dir + " refused: " + why
                         + " (fix or remove it, or set PRIZMA_STATS_DIR)");
    }
    return fd;
}

/// Creates `name` in `dir_fd` (a new regular file of ours: never a symbolic link or a file
/// someone else made) and maps it. Removes it again on failure.
Result<void*, Error> map_new_file(int dir_fd, const std::string& name, const std::string& path) {
    // A file of ours by that name is an earlier process's that had our pid (and was killed):
    // replaced. Only we (and root) can make files in our directory.
    (void)::unlinkat(dir_fd, name.c_str(), 0);
    const posix::UniqueFd fd(
        ::openat(dir_fd, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd.valid()) {
        return Error(posix::errno_code(), "cannot create " + path + ": " + posix::errno_text());
    }
    struct stat st {};
    std::string why;
    int err = 0;
    void* p = MAP_FAILED;
    if (::fstat(fd.get(), &st) != 0) {
        err = errno;
        why = posix::errno_text(err);
    } else if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || st.st_nlink != 1) {
        err = EPERM;
        why = "not a new regular file of this user";
    } else if (::ftruncate(fd.get(), static_cast<off_t>(kFileSize)) != 0
               || (p = ::mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                              fd.get(), 0))
                      == MAP_FAILED) {
        err = errno;
        why = "cannot map it: " + posix::errno_text(err);
    }
    if (p == MAP_FAILED) {
        (void)::unlinkat(dir_fd, name.c_str(), 0);
        return Error(posix::errno_code(err), path + ": " + why);
    }
    return p;
}

}  // namespace

Result<void, Error> Writer::open(const std::string& dir) {
    auto dir_fd = open_dir(dir);
    if (!dir_fd) {
        return dir_fd.error();
    }
    remove_stale(dir, dir_fd->get());
    const auto pid = static_cast<std::uint64_t>(::getpid());
    std::string name = std::to_string(pid) + "-" + std::to_string(g_files.fetch_add(1)) + ".stats";
    std::string path = dir + "/" + name;
    auto p = map_new_file(dir_fd->get(), name, path);
    if (!p) {
        return p.error();
    }
    // The mapping is shared: a file truncated under it would kill this process (SIGBUS) at
    // its next update. Only its owner can truncate it: the file is new, made by us, 0644, in
    // a directory only we can write to (open_dir). Root could; nobody else.
    base_ = *p;
    dir_fd_ = std::move(*dir_fd);
    name_ = std::move(name);
    path_ = std::move(path);
    FileHeader* h = header();
    std::memcpy(h->magic, kMagic, sizeof kMagic);
    h->version = kVersion;
    h->pid = pid;
    h->max_channels = kMaxChannels;
    return {};
}

ChannelRecord* Writer::record(std::size_t i) const noexcept {
    return reinterpret_cast<ChannelRecord*>(static_cast<char*>(base_) + sizeof(FileHeader)
                                            + i * sizeof(ChannelRecord));
}

void Writer::set_channel(std::size_t index,
                         std::string_view uri,
                         bool publisher,
                         std::string_view transport) noexcept {
    if (base_ == nullptr) {
        return;
    }
    begin();
    FileHeader* h = header();
    if (index >= kMaxChannels) {
        h->channels_not_shown = static_cast<std::uint32_t>(index + 1 - kMaxChannels);
    } else {
        ChannelRecord* r = record(index);
        copy_str(r->uri, kUriLen, uri);
        copy_str(r->transport, kTransportLen, transport);
        r->role = publisher ? 1U : 2U;
        r->count = 0;
        h->channel_count = std::max(h->channel_count, static_cast<std::uint32_t>(index + 1));
    }
    end();
}

void Writer::set_channel_count(std::size_t count) noexcept {
    if (base_ == nullptr) {
        return;
    }
    begin();
    FileHeader* h = header();
    h->channel_count = static_cast<std::uint32_t>(std::min(count, kMaxChannels));
    h->channels_not_shown =
        count > kMaxChannels ? static_cast<std::uint32_t>(count - kMaxChannels) : 0;
    end();
}

void Writer::begin() noexcept {
    if (base_ == nullptr) {
        return;
    }
    // Odd from here on; acq_rel keeps the data stores that follow after it. (No fences:
    // ThreadSanitizer builds reject std::atomic_thread_fence.)
    seq_of(header()).fetch_add(1, std::memory_order_acq_rel);
}

void Writer::values(std::size_t index, std::span<const NamedCounter> counters) noexcept {
    if (base_ == nullptr || index >= kMaxChannels) {
        return;
    }
    ChannelRecord* r = record(index);
    const std::size_t n = std::min(counters.size(), kMaxCounters);
    for (std::size_t i = 0; i < n; ++i) {
        if (i >= r->count) {  // names are static: written once
            copy_str(r->names[i], kNameLen, counters[i].name);
        }
        r->values[i] = counters[i].value;
    }
    r->count = static_cast<std::uint32_t>(std::max<std::size_t>(r->count, n));
}

void Writer::sources(std::size_t index,
                     std::span<const protocol::PeerCounters> sources,
                     std::size_t live) noexcept {
    if (base_ == nullptr || index >= kMaxChannels) {
        return;
    }
    ChannelRecord* r = record(index);
    const std::size_t n = std::min(sources.size(), kMaxSources);
    for (std::size_t i = 0; i < n; ++i) {
        const protocol::PeerCounters& s = sources[i];
        SourceRecord& o = r->sources[i];
        std::memcpy(o.gsi, s.tsi.gsi.bytes.data(), sizeof o.gsi);
        o.sport = s.tsi.sport;
        const std::uint64_t v[kSourceCounters] = {
            s.odata_received, s.rdata_received, s.duplicates,  s.repaired,  s.ncf_received,
            s.nak_sent,       s.nak_sqns_sent,  s.loss_events, s.lost_sqns, s.apdus_delivered,
            s.parity_dropped, s.fec_group_size, s.fec_modes};
        std::memcpy(o.values, v, sizeof v);
    }
    r->source_count = static_cast<std::uint32_t>(n);
    r->sources_not_shown = static_cast<std::uint32_t>(live > n ? live - n : 0);
}

void Writer::receivers(std::size_t index,
                       std::span<const protocol::FlowReceiver> receivers,
                       const protocol::FlowConfig& flow,
                       Sqn next,
                       std::int64_t now_ns) noexcept {
    if (base_ == nullptr || index >= kMaxChannels) {
        return;
    }
    ChannelRecord* r = record(index);
    const std::size_t n = std::min(receivers.size(), kMaxSources);
    for (std::size_t i = 0; i < n; ++i) {
        const protocol::FlowReceiver& x = receivers[i];
        SourceRecord& o = r->sources[i];
        std::memset(&o, 0, sizeof o);
        const bool counted =
            x.admitted && (flow.strategy != protocol::FlowStrategy::tagged || x.tag == flow.tag);
        const std::uint64_t v[std::size(kReceiverFieldNames)] = {
            x.id,
            x.tag,
            x.consumed.value,
            x.window,
            std::uint64_t{next.value - x.consumed.value},
            static_cast<std::uint64_t>(std::max<std::int64_t>(now_ns - x.last_heard_ns, 0))
                / 1'000'000U,
            counted ? 1U : 0U};
        std::memcpy(o.values, v, sizeof v);
    }
    r->source_count = static_cast<std::uint32_t>(n);
    r->sources_not_shown =
        static_cast<std::uint32_t>(receivers.size() > n ? receivers.size() - n : 0);
}

void Writer::end() noexcept {
    if (base_ == nullptr) {
        return;
    }
    FileHeader* h = header();
    h->updated_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    ++h->updates;
    seq_of(h).fetch_add(1, std::memory_order_release);
}

namespace {

constexpr std::size_t kSeqAt = offsetof(FileHeader, seq);
constexpr auto kSeqOffset = static_cast<off_t>(kSeqAt);
static_assert(kSeqAt % 8 == 0);

/// Reads `n` bytes at `offset`: 0, or -1 when the file ends first (truncated), or the errno.
int pread_all(int fd, void* out, std::size_t n, off_t offset) noexcept {
    auto* p = static_cast<char*>(out);
    while (n > 0) {
        const ssize_t r = ::pread(fd, p, n, offset);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            return r == 0 ? -1 : errno;
        }
        p += r;
        n -= static_cast<std::size_t>(r);
        offset += r;
    }
    return 0;
}

Error read_error(const std::string& path, int r) {
    if (r < 0) {
        return {make_error_code(Errc::invalid_argument), path + ": truncated while being read"};
    }
    return {posix::errno_code(r), path + ": " + posix::errno_text(r)};
}

/// A consistent copy of the whole file into `words`: the sequence lock even before the copy
/// and unchanged after it. Copied with pread(), not through a mapping: a file truncated
/// meanwhile is an error, never a SIGBUS. (The file's pages are the ones the writer's mapping
/// stores to; each pread is one pass over them, ordered by the system calls.)
Result<void, Error> copy_consistent(int fd,
                                    std::vector<std::uint64_t>& words,
                                    const std::string& path) {
    for (int attempt = 0; attempt < 1000; ++attempt) {
        std::uint64_t s1 = 0;
        std::uint64_t s2 = 0;
        int r = pread_all(fd, &s1, sizeof s1, kSeqOffset);
        if (r == 0 && (s1 & 1U) != 0) {
            std::this_thread::yield();
            continue;
        }
        if (r == 0) {
            r = pread_all(fd, words.data(), kFileSize, 0);
        }
        if (r == 0) {
            r = pread_all(fd, &s2, sizeof s2, kSeqOffset);
        }
        if (r != 0) {
            return read_error(path, r);
        }
        if (s1 == s2 && words[kSeqAt / 8] == s1) {
            return {};
        }
    }
    return Error(make_error_code(Errc::back_pressured),
                 path + ": the writer kept it busy (no consistent copy)");
}

/// Whether `pid` runs as `owner` (its effective or file-system uid, /proc/PID/status).
ProcessState process_state(std::uint64_t pid, uid_t owner) {
    if (pid == 0 || pid > 0x7fffffffU) {
        return ProcessState::exited;
    }
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("Uid:", 0) == 0) {
            std::istringstream in(line.substr(4));
            std::uint64_t real = 0;
            std::uint64_t effective = 0;
            std::uint64_t saved = 0;
            std::uint64_t fs = 0;
            in >> real >> effective >> saved >> fs;
            return in && (effective == owner || fs == owner) ? ProcessState::running
                                                             : ProcessState::other_user;
        }
    }
    return ProcessState::exited;
}

/// The snapshot in a consistent copy of a file.
Snapshot to_snapshot(const char* copy) {
    const auto* ch = reinterpret_cast<const FileHeader*>(copy);
    Snapshot out;
    out.pid = ch->pid;
    out.updated_unix_ns = ch->updated_unix_ns;
    out.updates = ch->updates;
    out.channels_not_shown = ch->channels_not_shown;
    const std::size_t n = std::min<std::size_t>(ch->channel_count, kMaxChannels);
    for (std::size_t i = 0; i < n; ++i) {
        const auto* r = reinterpret_cast<const ChannelRecord*>(copy + sizeof(FileHeader)
                                                               + i * sizeof(ChannelRecord));
        Snapshot::Channel c;
        c.uri = str_of(r->uri, kUriLen);
        c.transport = str_of(r->transport, kTransportLen);
        c.publisher = r->role == 1;
        for (std::size_t k = 0; k < std::min<std::size_t>(r->count, kMaxCounters); ++k) {
            c.counters.emplace_back(str_of(r->names[k], kNameLen), r->values[k]);
        }
        for (std::size_t s = 0; s < std::min<std::size_t>(r->source_count, kMaxSources); ++s) {
            const SourceRecord& sr = r->sources[s];
            Snapshot::Channel::Source src;
            static constexpr char kHex[] = "0123456789abcdef";
            if (c.publisher) {  // a flow-control receiver
                src.tsi = "receiver";
                for (std::size_t k = 0; k < std::size(kReceiverFieldNames); ++k) {
                    src.counters.emplace_back(std::string(kReceiverFieldNames[k]), sr.values[k]);
                }
                c.sources.push_back(std::move(src));
                continue;
            }
            for (const std::uint8_t b : sr.gsi) {
                src.tsi += kHex[b >> 4U];
                src.tsi += kHex[b & 0x0fU];
            }
            src.tsi += '.';  // (not "." + ...: a g++ 12 -Wrestrict false positive at -O3)
            src.tsi += std::to_string(sr.sport);
            for (std::size_t k = 0; k < kSourceCounters; ++k) {
                src.counters.emplace_back(std::string(kSourceCounterNames[k]), sr.values[k]);
            }
            c.sources.push_back(std::move(src));
        }
        c.sources_not_shown = r->sources_not_shown;
        out.channels.push_back(std::move(c));
    }
    return out;
}

}  // namespace

Result<Snapshot, Error> read(const std::string& path) {
    auto invalid = [&](const char* why) -> Result<Snapshot, Error> {
        return Error(make_error_code(Errc::invalid_argument),
                     path + ": not a prizma stats file (" + why + ")");
    };
    // Not through a symbolic link; O_NONBLOCK: a FIFO planted in the directory cannot block us.
    const posix::UniqueFd fd(
        ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
    if (!fd.valid()) {
        return read_error(path, errno);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        return read_error(path, errno);
    }
    if (!S_ISREG(st.st_mode)) {
        return invalid("not a regular file");
    }
    if (static_cast<std::size_t>(st.st_size) != kFileSize) {
        return invalid("size");
    }
    FileHeader h{};
    if (const int r = pread_all(fd.get(), &h, sizeof h, 0); r != 0) {
        return read_error(path, r);
    }
    if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kVersion) {
        return invalid("magic/version");
    }
    std::vector<std::uint64_t> words(kFileSize / 8);
    if (auto copied = copy_consistent(fd.get(), words, path); !copied) {
        return copied.error();
    }
    Snapshot out = to_snapshot(reinterpret_cast<const char*>(words.data()));
    out.file_uid = st.st_uid;
    out.process = process_state(out.pid, st.st_uid);
    return out;
}

std::string printable(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (const char c : s) {
        const auto b = static_cast<unsigned char>(c);
        if (b >= 0x20 && b < 0x7f) {
            out += c;
        } else {
            static constexpr char kHex[] = "0123456789abcdef";
            out += "\\x";
            out += kHex[b >> 4U];
            out += kHex[b & 0x0fU];
        }
    }
    return out;
}

std::vector<std::string> readable_dirs() {
    if (const char* d = posix::env("PRIZMA_STATS_DIR"); d != nullptr && *d != '\0') {
        return {d};
    }
    const std::string own = default_dir();
    std::vector<std::string> out;
    std::vector<std::string> others;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
        const std::string name = e.path().filename().string();
        std::error_code type_ec;
        if (name.rfind("prizma-", 0) != 0 || name.size() == 7
            || name.find_first_not_of("0123456789", 7) != std::string::npos
            || !e.is_directory(type_ec) || e.is_symlink(type_ec)
            || ::faccessat(AT_FDCWD, e.path().c_str(), R_OK | X_OK, AT_EACCESS) != 0) {
            continue;
        }
        (e.path().string() == own ? out : others).push_back(e.path().string());
    }
    std::sort(others.begin(), others.end());
    out.insert(out.end(), others.begin(), others.end());
    return out;
}

Result<std::vector<std::string>, Error> list_files(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(dir, ec);
    if (st.type() == fs::file_type::none) {
        return Error(ec, "cannot read " + dir + ": " + ec.message());
    }
    if (st.type() == fs::file_type::not_found) {
        return Error(std::make_error_code(std::errc::no_such_file_or_directory),
                     "no stats directory " + dir);
    }
    if (!fs::is_directory(st)) {
        return Error(std::make_error_code(std::errc::not_a_directory), dir + " is not a directory");
    }
    std::vector<std::string> files;
    fs::directory_iterator it(dir, ec);
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
        std::error_code type_ec;
        if (it->path().extension() == ".stats" && !it->is_directory(type_ec)) {
            files.push_back(it->path().string());
        }
    }
    if (ec) {
        return Error(ec, "cannot read " + dir + ": " + ec.message());
    }
    std::sort(files.begin(), files.end());
    return files;
}

}  // namespace prizma::stats
