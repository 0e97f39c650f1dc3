// SPDX-License-Identifier: Apache-2.0
// The FIX 4.4 drop copy of ExecLog records: which application messages a record makes, for
// which account's session, with which fields (docs/EXECLOG.md has the mapping). The session
// layer (logon, MsgSeqNum, SendingTime, the store) is QuickFIX's: execlog/fix_acceptor.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "execlog/record.hpp"

namespace execlog {

/// One application message before the session frames it: the account whose session carries
/// it (TargetCompID "A<account>"), its MsgType and its body fields, in order.
struct FixMessage {
    char msg_type = '8';  ///< '8' ExecutionReport, '9' OrderCancelReject
    std::uint32_t account = 0;
    std::vector<std::pair<int, std::string>> fields;
};

/// Appends record `sequence`'s messages to `out`: none for the session end, two for a trade
/// (the aggressor's, then the resting order's), one otherwise. Returns how many.
std::size_t fix_messages(std::uint64_t sequence, const Record& r, std::vector<FixMessage>& out);

/// FIX 4.4 OrdRejReason(103) of a rejected new order; CxlRejReason(102) of a rejected cancel
/// or replace.
int ord_rej_reason(Reject why) noexcept;
int cxl_rej_reason(Reject why) noexcept;

/// "YYYYMMDD-HH:MM:SS.mmm" (UTC) of a time in ns since the Unix epoch.
std::string fix_time(std::uint64_t time_ns);
/// A price in ticks (1/100) as "units.hh".
std::string fix_price(std::int64_t ticks);
/// AvgPx(6): notional / cum in units (100 ticks), rounded half away from zero to 4 decimals
/// ("0" when cum is 0); exact at any notional an int64 holds.
std::string fix_avg_px(std::int64_t notional, std::uint32_t cum);

}  // namespace execlog
