// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <prizma/result.hpp>

#include "lib/posix/unique_fd.hpp"

namespace prizma::verbs {

/// A host-wide reference count of one port's membership in one multicast group, shared by the
/// processes of this host (docs/RDMA.md §6.3). The SA keeps one record per port GID, so the
/// first process joins and the last one leaves; the kernel's SA client counts this way for
/// the RDMA CM, which prizma does not use.
///
/// Each member holds an exclusive flock on a file of its own (KEY.m.PID.N in `dir`); the count
/// is the number of such files whose lock is held, taken under the lock of KEY.lock. A member
/// killed with -9 loses its flock with its last file descriptor: the next count finds its
/// file unlocked, removes it and does not count it.
class PortMembership {
public:
    /// How long a member waits for the key lock (another member's join or leave) before
    /// failing with Errc timed_out: never an unbounded wait.
    static constexpr std::chrono::milliseconds kPatience{10'000};

    /// Enters under the key lock and calls `join(first)` there (first: no live member
    /// before us). A failed join leaves no member file behind.
    static Result<std::unique_ptr<PortMembership>, Error> enter(
        const std::string& dir,
        const std::string& key,
        const std::function<Result<void, Error>(bool first)>& join,
        std::chrono::milliseconds patience = kPatience);
    /// The default directory: $PRIZMA_SA_LOCK_DIR; else /run/prizma-sa for root, or for a
    /// user who may write it (an admin made it for a group: `install -d -m 2770 -g GROUP
    /// /run/prizma-sa`); else $XDG_RUNTIME_DIR/prizma-sa, else /tmp/prizma-sa-UID (that
    /// user's processes only). A directory is created 0770 and used only when it belongs to
    /// this user or root and no one outside its group may write it; files are 0660.
    static std::string default_dir();

    /// Leaves under the key lock and calls `leave(last)` there (last: no live member after
    /// us). Idempotent; the destructor calls it with a no-op if nobody did.
    void leave(const std::function<void(bool last)>& leave_fn);
    ~PortMembership();
    PortMembership(const PortMembership&) = delete;
    PortMembership& operator=(const PortMembership&) = delete;
    PortMembership(PortMembership&&) = delete;
    PortMembership& operator=(PortMembership&&) = delete;

    /// Live members of `key` in `dir` now (stale files of dead processes removed).
    static Result<int, Error> count(const std::string& dir, const std::string& key);

private:
    PortMembership(std::string dir,
                   std::string key,
                   std::string file,
                   posix::UniqueFd fd,
                   std::chrono::milliseconds patience)
        : dir_(std::move(dir)),
          key_(std::move(key)),
          file_(std::move(file)),
          fd_(std::move(fd)),
          patience_(patience) {}
    std::string dir_;
    std::string key_;
    std::string file_;
    posix::UniqueFd fd_;
    std::chrono::milliseconds patience_;  // the key lock's, for leave() as for enter()
};

}  // namespace prizma::verbs
