// SPDX-License-Identifier: Apache-2.0
#include "transports/verbs/port_refcount.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "lib/posix/errors.hpp"

namespace prizma::verbs {
namespace {

using posix::UniqueFd;

Error fail(const std::string& what) {
    return {std::make_error_code(std::errc::io_error), what + ": " + posix::errno_text()};
}

/// The key lock, held for a scope.
class KeyLock {
public:
    static Result<KeyLock, Error> take(const std::string& dir, const std::string& key) {
        if (::mkdir(dir.c_str(), 01777) == 0) {
            (void)::chmod(dir.c_str(), 01777);  // past the umask: every user shares it
        } else if (errno != EEXIST) {
            return fail("cannot create the membership directory " + dir);
        }
        const std::string path = dir + "/" + key + ".lock";
        UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666));
        if (!fd.valid()) {
            return fail("cannot open " + path);
        }
        (void)::fchmod(fd.get(), 0666);
        while (::flock(fd.get(), LOCK_EX) != 0) {
            if (errno != EINTR) {
                return fail("flock " + path);
            }
        }
        return KeyLock(std::move(fd));
    }

private:
    explicit KeyLock(UniqueFd fd) : fd_(std::move(fd)) {}
    UniqueFd fd_;  // closing it unlocks
};

/// Live member files of `key` (the caller holds the key lock); stale ones are removed.
int count_live(const std::string& dir, const std::string& key, const std::string& except) {
    const std::string prefix = key + ".m.";
    std::vector<std::string> paths;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        if (e.path().filename().string().compare(0, prefix.size(), prefix) == 0) {
            paths.push_back(e.path().string());
        }
    }
    int live = 0;
    for (const auto& path : paths) {
        if (path == except) {
            continue;
        }
        UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
        if (!fd.valid()) {
            continue;
        }
        if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) {
            (void)::unlink(path.c_str());  // its owner died without leaving
        } else {
            ++live;
        }
    }
    return live;
}

}  // namespace

std::string PortMembership::default_dir() {
    if (const char* d = posix::env("PRIZMA_SA_LOCK_DIR"); d != nullptr && *d != '\0') {
        return d;
    }
    return "/tmp/prizma-sa";
}

Result<int, Error> PortMembership::count(const std::string& dir, const std::string& key) {
    auto lock = KeyLock::take(dir, key);
    if (!lock) {
        return lock.error();
    }
    return count_live(dir, key, {});
}

Result<std::unique_ptr<PortMembership>, Error> PortMembership::enter(
    const std::string& dir,
    const std::string& key,
    const std::function<Result<void, Error>(bool first)>& join) {
    auto lock = KeyLock::take(dir, key);
    if (!lock) {
        return lock.error();
    }
    const bool first = count_live(dir, key, {}) == 0;
    static std::atomic<unsigned> serial{0};
    const std::string file = dir + "/" + key + ".m." + std::to_string(::getpid()) + "."
                             + std::to_string(serial.fetch_add(1));
    UniqueFd fd(::open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
    if (!fd.valid()) {
        return fail("cannot create " + file);
    }
    (void)::fchmod(fd.get(), 0666);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        (void)::unlink(file.c_str());
        return fail("flock " + file);
    }
    if (auto r = join(first); !r) {
        (void)::unlink(file.c_str());
        return r.error();
    }
    return std::unique_ptr<PortMembership>(new PortMembership(dir, key, file, std::move(fd)));
}

void PortMembership::leave(const std::function<void(bool last)>& leave_fn) {
    if (!fd_.valid()) {
        return;
    }
    auto lock = KeyLock::take(dir_, key_);
    (void)::unlink(file_.c_str());
    fd_.reset();
    // Without the key lock (cannot happen short of a broken /tmp) count as not last: a
    // membership left behind is aged out by the SM, one dropped under a live member is not.
    const bool last = lock.has_value() && count_live(dir_, key_, file_) == 0;
    leave_fn(last);
}

PortMembership::~PortMembership() {
    leave([](bool) {});
}

}  // namespace prizma::verbs
