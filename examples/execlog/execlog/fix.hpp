// SPDX-License-Identifier: Apache-2.0
// FIX 4.4 ExecutionReports (35=8) from ExecLog records, tag=value with SOH or '|', and the
// recovery of a renderer's output file after a crash (docs/EXECLOG.md has the mapping).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "execlog/record.hpp"

namespace execlog {

class FixRenderer {
public:
    explicit FixRenderer(char delimiter, std::uint64_t next_msg_seq = 1)
        : delim_(delimiter), msg_seq_(next_msg_seq) {}
    /// Appends record `sequence`'s messages (none for session_end, two for a trade) to `out`;
    /// returns how many.
    std::size_t render(std::uint64_t sequence, const Record& r, std::string& out);
    [[nodiscard]] std::uint64_t next_msg_seq() const noexcept { return msg_seq_; }

private:
    struct Leg;
    void message(const Leg& leg, std::string& out);
    char delim_;
    std::uint64_t msg_seq_;
    std::string body_;
};

/// What a renderer's output file holds: the prefix to keep (whole messages, the last of them
/// completing its record), the record to resume from, the next MsgSeqNum; and, when the file
/// holds more than that prefix, why the rest is not kept.
struct FixRecovery {
    std::uint64_t keep_bytes = 0;
    std::uint64_t next_sequence = 0;
    std::uint64_t next_msg_seq = 1;
    std::uint64_t messages = 0;    ///< kept
    std::string problem;           ///< why the scan stopped short of the end; empty: it did not
    std::uint64_t problem_at = 0;  ///< the byte where the first message not kept starts
};
/// Scans `content` (a renderer's output). Messages are checked (BodyLength against the bytes
/// left, CheckSum, ExecID, MsgSeqNum); the scan stops at the first incomplete or bad one. Never
/// throws on any content.
FixRecovery recover_fix(std::string_view content, char delimiter);

/// "YYYYMMDD-HH:MM:SS.mmm" (UTC) of a time in ns since the Unix epoch.
std::string fix_time(std::uint64_t time_ns);

}  // namespace execlog
