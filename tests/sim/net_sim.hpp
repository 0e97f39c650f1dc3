// SPDX-License-Identifier: Apache-2.0
#pragma once
// A deterministic simulator of one PGM source and its receivers (docs/TESTING.md,
// "The simulator"): the sans-I/O Source and Receiver under a virtual clock, on a modelled
// network with finite socket buffers (bytes, as the kernel accounts them, and a drain rate),
// loss, duplication, reordering, a link of finite rate, receivers on shared hosts, joins before
// and after the source starts, source restarts and close. Its oracle is the delivery
// guarantee: every message once and in order, or a loss event covering it, never a silent gap;
// inside the documented envelope (Scenario::in_envelope) nothing is lost at all.
//
// Every run is a pure function of its Scenario: a seed draws one (draw()), and a failing run
// prints the one line that reproduces it (repro()).

#include <cstdint>
#include <string>
#include <vector>

#include "lib/protocol/config.hpp"

namespace prizma::sim {

struct Scenario {
    std::uint64_t seed = 1;
    std::size_t msg_bytes = 1000;   ///< every message's size (fragmented above the TSDU)
    std::uint32_t messages = 1000;  ///< how many the publisher sends
    std::uint32_t window_sqns = 65536;
    std::uint32_t hosts = 1;            ///< receiver hosts
    std::uint32_t per_host = 1;         ///< receivers on each host (one NAK address)
    std::size_t rcvbuf_bytes = 212992;  ///< SO_RCVBUF granted (the kernel doubles it)
    double rx_pps = 1.0e6;              ///< one receiver's drain rate alone on its host
    std::uint32_t host_cores = 2;       ///< receivers on a host share these cores
    double link_bytes_per_sec = 1.0e9;  ///< the publisher's send rate (unpaced: this)
    double pace_msgs_per_sec = 0;       ///< 0 = one unpaced burst
    double loss = 0;                    ///< independent loss, each packet at each receiver
    double upstream_loss = 0;           ///< NAKs and status on their way to the source
    double dup = 0;                     ///< a packet arrives twice
    double reorder = 0;                 ///< a packet is delayed by up to reorder_ns
    std::int64_t reorder_ns = 200'000;
    std::uint32_t head_drop_bytes = 0;  ///< receiver 0 drops the first bytes sent to it
    std::int64_t late_join_ns = -1;     ///< receiver 0 listens only from then (-1: from the start)
    std::uint32_t restart_at = 0;       ///< the source restarts (new TSI) after this message; 0 no
    bool recover_history = false;
    protocol::Preset preset = protocol::Preset::lan;

    /// What the guarantee promises no loss for (docs/PROTOCOL.md §3.1): bursts up to a
    /// window, any buffer from a stock host's, 1-4 receivers on a host, up to 10% loss, no
    /// restart, every receiver listening before the source starts.
    [[nodiscard]] bool in_envelope() const noexcept;
};

/// One receiver's outcome against the oracle.
struct ReceiverOutcome {
    std::uint32_t delivered = 0;
    std::uint32_t reported_lost = 0;  ///< messages inside a loss event
    std::uint32_t before_start = 0;   ///< messages before the start its `joined` event names
    std::uint32_t silent = 0;         ///< neither: the guarantee broken
    /// Messages of a session it heard nothing of, or past the last sqn it heard of from a
    /// source that died without a FIN: no receiver can know of them.
    std::uint32_t unknowable = 0;
    std::uint64_t kernel_drops = 0;  ///< its socket buffer was full
    std::uint64_t naks = 0;
    std::uint64_t loss_events = 0;
    std::int64_t done_ns = -1;  ///< when its last message came (or was reported)
};

struct Outcome {
    bool ok = true;
    std::string why;  ///< the first broken rule, empty when ok
    std::vector<ReceiverOutcome> receivers;
    std::uint64_t rdata_sent = 0;
    std::uint64_t odata_sent = 0;
    std::uint64_t requester_limited = 0;
    std::uint64_t budget_limited = 0;
    std::uint64_t repeat_limited = 0;
    std::int64_t burst_end_ns = 0;  ///< when the publisher's last message left
    std::int64_t repaired_ns = 0;   ///< when the last receiver had everything (or a verdict)
};

/// A scenario drawn from `seed`: `wide` spans the whole envelope (whole-window bursts
/// included); otherwise bursts stay small enough for a few seconds of CI per hundred seeds.
Scenario draw(std::uint64_t seed, bool wide);
/// Runs it to the end (the source closed, every receiver done or out of time).
Outcome run(const Scenario& s);
/// The command line that runs `s` again: `prizma_sim --seed ... --msg-bytes ...`.
std::string repro(const Scenario& s);
/// Parses what repro() prints (after the program name); false on a bad argument.
bool parse_args(const std::vector<std::string>& args, Scenario& s, std::string& error);

}  // namespace prizma::sim
