// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace prizma {

/// Per-channel settings. Channel URIs carry the addressing; these carry the protocol.
struct ChannelOptions {
    /// Timer preset: "wan" (OpenPGM's usual values), "lan" (default) or "rdma".
    std::string preset = "lan";
    /// Transmit / receive window, packets. A publisher's message spans at most 16 of them
    /// (OpenPGM's fragment limit), or window_sqns when that is smaller.
    std::uint32_t window_sqns = 1U << 16U;
    /// Publisher: keep each packet repairable at least this long; a full window then returns
    /// Errc::back_pressured instead of dropping history. 0 = always advance.
    std::int64_t retention_ns = 0;
    std::uint64_t rate_bytes_per_sec = 0;         ///< ODATA budget, 0 = unlimited
    std::uint64_t repair_rate_bytes_per_sec = 0;  ///< RDATA budget, 0 = unlimited
    /// Subscriber late join: false = start at the first packet seen (OpenPGM), true = recover
    /// back to the source's trail (at most max_recover_sqns).
    bool recover_history = false;
    std::uint32_t max_recover_sqns = 1024;
    std::size_t max_sources = 16;
    /// Subscriber: sources whose receive storage (window_sqns slots and a payload ring of
    /// window_sqns x the largest packet payload, ~96 MiB at the defaults on UDP) is allocated
    /// and paged in when the channel is added. A source beyond them gets its storage at its
    /// first packet: an allocation on the owner thread and page faults over the ring's first
    /// pass (the storage is then reused by later sources). Set it to the sources expected at
    /// once, e.g. 2 for a hot-standby pair. At most max_sources.
    std::size_t preallocated_sources = 1;
    bool passive = false;           ///< subscriber never NAKs
    std::uint16_t source_port = 0;  ///< PGM TSI source port; 0 = random
};

}  // namespace prizma
