// SPDX-License-Identifier: Apache-2.0
#include "transports/verbs/port_refcount.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "lib/posix/errors.hpp"

namespace prizma::verbs {
namespace {

using posix::UniqueFd;

Error fail(const std::string& what) {
    return {std::make_error_code(std::errc::io_error), what + ": " + posix::errno_text()};
}

/// Creates `dir` (0770: the members' group may share it) or checks the one there: a
/// directory, owned by this user or root, writable by no one outside its group. Another
/// user able to write it could hold the key lock and stall every create(), or plant files.
Result<void, Error> check_dir(const std::string& dir) {
    if (::mkdir(dir.c_str(), 0770) == 0) {
        (void)::chmod(dir.c_str(), 0770);  // past the umask
    } else if (errno != EEXIST) {
        return fail("cannot create the membership directory " + dir);
    }
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) {
        return fail("cannot stat the membership directory " + dir);
    }
    const auto refuse = [&](const std::string& why) {
        return Error(std::make_error_code(std::errc::permission_denied),
                     "the membership directory " + dir + " " + why
                         + " (docs/RDMA-HARDWARE.md: PRIZMA_SA_LOCK_DIR)");
    };
    if (!S_ISDIR(st.st_mode)) {
        return refuse("is not a directory");
    }
    if (st.st_uid != ::geteuid() && st.st_uid != 0) {
        return refuse("belongs to another user (uid " + std::to_string(st.st_uid) + ")");
    }
    if ((st.st_mode & S_IWOTH) != 0) {
        return refuse("is writable by every user");
    }
    return {};
}

/// The key lock, held for a scope.
class KeyLock {
public:
    static Result<KeyLock, Error> take(const std::string& dir,
                                       const std::string& key,
                                       std::chrono::milliseconds patience) {
        if (auto ok = check_dir(dir); !ok) {
            return ok.error();
        }
        const std::string path = dir + "/" + key + ".lock";
        UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0660));
        if (!fd.valid()) {
            return fail("cannot open " + path);
        }
        (void)::fchmod(fd.get(), 0660);
        // Never an unbounded wait: a holder that is stuck gets a clear error, not a hang.
        const auto until = std::chrono::steady_clock::now() + patience;
        while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
            if (errno != EWOULDBLOCK && errno != EINTR) {
                return fail("flock " + path);
            }
            if (std::chrono::steady_clock::now() > until) {
                return Error(std::make_error_code(std::errc::timed_out),
                             path + " stayed locked for " + std::to_string(patience.count())
                                 + " ms: another member's join or leave is stuck");
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
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
        UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
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
    // /run, not /tmp: a service with systemd's PrivateTmp sees the host's /run. Usable there:
    // root creates it; another user uses it when root (or an admin, for a shared group)
    // made it and it is writable to them.
    std::string shared = "/run/prizma-sa";
    if (::geteuid() == 0 || ::access(shared.c_str(), W_OK | X_OK) == 0) {
        return shared;
    }
    if (const char* x = posix::env("XDG_RUNTIME_DIR"); x != nullptr && *x == '/') {
        return std::string(x) + "/prizma-sa";  // this user's processes only
    }
    return "/tmp/prizma-sa-" + std::to_string(::geteuid());
}

Result<int, Error> PortMembership::count(const std::string& dir, const std::string& key) {
    auto lock = KeyLock::take(dir, key, kPatience);
    if (!lock) {
        return lock.error();
    }
    return count_live(dir, key, {});
}

Result<std::unique_ptr<PortMembership>, Error> PortMembership::enter(
    const std::string& dir,
    const std::string& key,
    const std::function<Result<void, Error>(bool first)>& join,
    std::chrono::milliseconds patience) {
    auto lock = KeyLock::take(dir, key, patience);
    if (!lock) {
        return lock.error();
    }
    const bool first = count_live(dir, key, {}) == 0;
    static std::atomic<unsigned> serial{0};
    const std::string file = dir + "/" + key + ".m." + std::to_string(::getpid()) + "."
                             + std::to_string(serial.fetch_add(1));
    UniqueFd fd(::open(file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0660));
    if (!fd.valid()) {
        return fail("cannot create " + file);
    }
    (void)::fchmod(fd.get(), 0660);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        (void)::unlink(file.c_str());
        return fail("flock " + file);
    }
    if (auto r = join(first); !r) {
        (void)::unlink(file.c_str());
        return r.error();
    }
    return std::unique_ptr<PortMembership>(
        new PortMembership(dir, key, file, std::move(fd), patience));
}

void PortMembership::leave(const std::function<void(bool last)>& leave_fn) {
    if (!fd_.valid()) {
        return;
    }
    auto lock = KeyLock::take(dir_, key_, patience_);
    (void)::unlink(file_.c_str());
    fd_.reset();
    // Without the key lock (a member stuck past the patience) count as not last: a
    // membership left behind is aged out by the SM, one dropped under a live member is not.
    const bool last = lock.has_value() && count_live(dir_, key_, file_) == 0;
    leave_fn(last);
}

PortMembership::~PortMembership() {
    leave([](bool) {});
}

}  // namespace prizma::verbs
