// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include <prizma/result.hpp>

#include "transports/verbs/sa_mad.hpp"

namespace prizma::verbs {

/// A full-member multicast group membership obtained from the InfiniBand Subnet
/// Administrator through libibumad (/dev/infiniband/umadN). The destructor leaves the group.
/// Only for IB link layers: RoCE has no SA (the IP-level join does that job there).
class SaMembership {
public:
    /// Joins (creating the group if needed) and returns the SA's record (MLID, SL, ...).
    /// Errors say what failed (umad device access, no SM, SA refusal, timeout).
    static Result<std::unique_ptr<SaMembership>, Error> join(const std::string& ca,
                                                             int port,
                                                             const sa::McMemberRecord& want);
    ~SaMembership();
    SaMembership(const SaMembership&) = delete;
    SaMembership& operator=(const SaMembership&) = delete;
    SaMembership(SaMembership&&) = delete;
    SaMembership& operator=(SaMembership&&) = delete;

    [[nodiscard]] const sa::McMemberRecord& record() const noexcept { return rec_; }
    /// Joins again (after an IBV_EVENT_CLIENT_REREGISTER, when the SM forgot its records).
    /// Called from the transport's control thread only (it blocks up to ~1 s per try).
    Result<void, Error> rejoin();
    /// Whether the destructor sends the leave (SubnAdmDelete): only the host's last member of
    /// the group on this port does (PortMembership counts them).
    void set_leave_on_close(bool leave) noexcept;

private:
    SaMembership(std::string ca, int port, int fd, int agent) noexcept;
    Result<sa::Response, Error> transact(std::uint8_t method,
                                         std::uint64_t mask,
                                         const sa::McMemberRecord& rec);

    std::string ca_;
    int port_ = 0;
    int fd_ = -1;
    int agent_ = -1;
    std::uint64_t tid_ = 0;
    sa::McMemberRecord want_;
    sa::McMemberRecord rec_;
    bool leave_on_close_ = true;
};

/// The SA's PathRecord from `sgid` to `dgid` (LID, SL, MTU of the path): for a one-to-one
/// publisher on InfiniBand that was given no `dlid=`. Blocks up to ~1 s (set-up only).
Result<sa::PathRecord, Error> query_path(const std::string& ca,
                                         int port,
                                         const std::array<std::uint8_t, 16>& sgid,
                                         const std::array<std::uint8_t, 16>& dgid,
                                         std::uint16_t pkey);

}  // namespace prizma::verbs
