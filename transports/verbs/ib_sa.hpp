// SPDX-License-Identifier: Apache-2.0
#pragma once

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
    Result<void, Error> rejoin();

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
};

}  // namespace prizma::verbs
