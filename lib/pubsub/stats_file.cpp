// SPDX-License-Identifier: Apache-2.0
#include "lib/pubsub/stats_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
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
    std::memcpy(dst, s.data(), n);
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
    return d != nullptr && *d != '\0' ? std::string(d) : std::string("/dev/shm/prizma");
}

Writer::~Writer() {
    if (base_ != nullptr) {
        (void)::munmap(base_, kFileSize);
        (void)::unlink(path_.c_str());
    }
}

/// Files left by processes that were killed (no destructor ran): removed by the next writer,
/// so /dev/shm does not fill up with them. A pid that still exists keeps its file.
static void remove_stale(const std::string& dir) noexcept {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        const std::size_t dash = name.find('-');
        if (e.path().extension() != ".stats" || dash == 0 || dash == std::string::npos
            || name.find_first_not_of("0123456789") != dash) {
            continue;
        }
        if (!std::filesystem::exists("/proc/" + name.substr(0, dash), ec)) {
            std::filesystem::remove(e.path(), ec);
        }
    }
}

Result<void, Error> Writer::open(const std::string& dir) {
    (void)::mkdir(dir.c_str(), 01777);  // shared by every user's processes, like /tmp
    remove_stale(dir);
    const auto pid = static_cast<std::uint64_t>(::getpid());
    const std::string path =
        dir + "/" + std::to_string(pid) + "-" + std::to_string(g_files.fetch_add(1)) + ".stats";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        return Error(posix::errno_code(), "cannot create " + path + ": " + posix::errno_text());
    }
    void* p = nullptr;
    if (::ftruncate(fd, static_cast<off_t>(kFileSize)) == 0) {
        p = ::mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    }
    const int saved = errno;
    (void)::close(fd);
    if (p == nullptr || p == MAP_FAILED) {
        (void)::unlink(path.c_str());
        return Error(posix::errno_code(saved),
                     "cannot map " + path + ": " + posix::errno_text(saved));
    }
    base_ = p;
    path_ = path;
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

void Writer::set_channel(std::size_t index, std::string_view uri, bool publisher) noexcept {
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
            s.nak_sent,       s.nak_sqns_sent,  s.loss_events, s.lost_sqns, s.apdus_delivered};
        std::memcpy(o.values, v, sizeof v);
    }
    r->source_count = static_cast<std::uint32_t>(n);
    r->sources_not_shown = static_cast<std::uint32_t>(live > n ? live - n : 0);
}

void Writer::end() noexcept {
    FileHeader* h = header();
    h->updated_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    ++h->updates;
    seq_of(h).fetch_add(1, std::memory_order_release);
}

Result<Snapshot, Error> read(const std::string& path) {
    auto fail = [&](const std::string& why, std::error_code ec) -> Result<Snapshot, Error> {
        return Error(ec, path + ": " + why);
    };
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return fail(posix::errno_text(), std::error_code(errno, std::generic_category()));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != kFileSize) {
        (void)::close(fd);
        return fail("not a prizma stats file (size)", make_error_code(Errc::invalid_argument));
    }
    void* p = ::mmap(nullptr, kFileSize, PROT_READ, MAP_SHARED, fd, 0);
    (void)::close(fd);
    if (p == MAP_FAILED) {
        return fail(posix::errno_text(), std::error_code(errno, std::generic_category()));
    }
    auto* h = static_cast<FileHeader*>(p);
    if (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0 || h->version != kVersion) {
        (void)::munmap(p, kFileSize);
        return fail("not a prizma stats file (magic/version)",
                    make_error_code(Errc::invalid_argument));
    }
    std::vector<std::uint64_t> words(kFileSize / 8);
    bool consistent = false;
    for (int attempt = 0; attempt < 1000 && !consistent; ++attempt) {
        const std::uint64_t s1 = seq_of(h).load(std::memory_order_acquire);
        if ((s1 & 1U) != 0) {
            std::this_thread::yield();
            continue;
        }
        // Word by word with acquire loads: the second sequence read cannot move above them.
        const auto* src = static_cast<const std::uint64_t*>(p);
        for (std::size_t w = 0; w < kFileSize / 8; ++w) {
            words[w] = __atomic_load_n(src + w, __ATOMIC_ACQUIRE);
        }
        consistent = seq_of(h).load(std::memory_order_relaxed) == s1;
    }
    (void)::munmap(p, kFileSize);
    const char* copy = reinterpret_cast<const char*>(words.data());
    const auto* ch = reinterpret_cast<const FileHeader*>(copy);
    if (!consistent) {
        return fail("the writer kept it busy (no consistent copy)",
                    make_error_code(Errc::back_pressured));
    }
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
        c.publisher = r->role == 1;
        for (std::size_t k = 0; k < std::min<std::size_t>(r->count, kMaxCounters); ++k) {
            c.counters.emplace_back(str_of(r->names[k], kNameLen), r->values[k]);
        }
        for (std::size_t s = 0; s < std::min<std::size_t>(r->source_count, kMaxSources); ++s) {
            const SourceRecord& sr = r->sources[s];
            Snapshot::Channel::Source src;
            static constexpr char kHex[] = "0123456789abcdef";
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
