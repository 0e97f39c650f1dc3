// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include <prizma/transport.hpp>

namespace prizma::udp {

/// gro=auto for one receive socket, as a rule without the socket (unit-tested on its own):
/// when to switch UDP_GRO on and off, and when a datagram read without a segment size may
/// still hold several the kernel merged.
///
/// A burst needs GRO to stay cheap; a socket with UDP_GRO makes each datagram sent to it from
/// this host cost the sender more. So: a batch read of kOnBatch datagrams or more (or of a
/// whole read batch, when the batch is smaller) switches it on; kOffReads reads in a row of
/// one unmerged datagram each switch it off. The one-datagram read after an empty poll never
/// counts as a burst. Each switch is one setsockopt() by the caller; a failed one leaves the
/// state as it was and is tried again only after as many reads again.
class GroPolicy {
public:
    static constexpr std::size_t kOnBatch = 8;
    static constexpr std::uint32_t kOffReads = 256;

    enum class Action : std::uint8_t { none, switch_on, switch_off };

    /// The state a socket starts in (gro=1: on; gro=auto: off, or on when the support probe
    /// had to set it).
    void reset(bool on, bool seen) noexcept {
        on_ = on;
        seen_ = seen || on;
        lone_reads_ = 0;
    }

    /// After a read that brought `datagrams` (a batch read when `batch`, with room for
    /// `batch_capacity`), `merged` when any of them came merged: what to do now.
    [[nodiscard]] Action after_read(bool batch,
                                    std::size_t datagrams,
                                    bool merged,
                                    std::size_t batch_capacity) noexcept {
        if (!on_) {
            const bool burst = batch && datagrams >= std::min(kOnBatch, batch_capacity);
            return burst ? Action::switch_on : Action::none;
        }
        if (datagrams != 1 || merged) {
            lone_reads_ = 0;
            return Action::none;
        }
        if (++lone_reads_ < kOffReads) {
            return Action::none;
        }
        lone_reads_ = 0;  // a failed switch-off is tried again only after kOffReads more
        return Action::switch_off;
    }

    /// The caller's setsockopt() for `action` succeeded (`ok`) or failed.
    void switched(Action action, bool ok) noexcept {
        if (!ok || action == Action::none) {
            return;
        }
        on_ = action == Action::switch_on;
        seen_ = seen_ || on_;
        lone_reads_ = 0;
    }

    /// A datagram read without a segment size may hold several merged ones: GRO is or was on
    /// and the read could not say so (a recvfrom() read has no control message; after a
    /// switch-off, one merged before may still be queued, however many reads later). A
    /// recvmmsg read with GRO on always brings the segment size of a merged datagram.
    [[nodiscard]] bool maybe_merged(bool single_read) const noexcept {
        return seen_ && (single_read || !on_);
    }
    [[nodiscard]] bool on() const noexcept { return on_; }
    [[nodiscard]] bool seen() const noexcept { return seen_; }

private:
    bool on_ = false;
    bool seen_ = false;  // UDP_GRO has been on at some point
    std::uint32_t lone_reads_ = 0;
};

/// A datagram read without its UDP_GRO control message may be several same-size datagrams
/// merged by the kernel (the last one may be shorter). The layer above knows its packets'
/// lengths (UdpConfig::frame_length): the first packet's is the segment size if every piece
/// after it agrees, the last one included; otherwise, or without a frame_length, it is one
/// datagram (whose junk the layer above refuses and counts). Returns the segment size.
[[nodiscard]] inline std::size_t gro_segment_size(FrameLength frame_length,
                                                  std::span<const std::byte> d) noexcept {
    if (frame_length == nullptr) {
        return d.size();
    }
    const std::size_t seg = frame_length(d);
    if (seg == 0 || seg >= d.size()) {
        return d.size();
    }
    for (std::size_t off = seg; off < d.size(); off += seg) {
        if (frame_length(d.subspan(off)) != std::min(seg, d.size() - off)) {
            return d.size();
        }
    }
    return seg;
}

}  // namespace prizma::udp
