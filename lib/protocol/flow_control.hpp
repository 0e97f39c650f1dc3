// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <prizma/transport.hpp>

#include "lib/pgm/packet.hpp"

namespace prizma::protocol {

using pgm::Sqn;

/// How a publisher paces itself by its receivers' status (docs/PROTOCOL.md, "Flow control").
enum class FlowStrategy : std::uint8_t {
    max,     ///< never wait (PGM as it is; the default)
    min,     ///< never run more than the slowest live receiver's window ahead
    tagged,  ///< min over receivers carrying `tag`; optionally wait for `min_group` of them
};

struct FlowConfig {
    FlowStrategy strategy = FlowStrategy::max;
    std::uint64_t tag = 0;        ///< tagged: the group counted
    std::uint32_t min_group = 0;  ///< tagged: offers wait until this many tagged receivers
    std::int64_t timeout_ns = 5'000'000'000;  ///< silent (or stalled) receivers are dropped
    std::uint32_t max_receivers = 64;         ///< receivers tracked at once
    std::uint32_t max_per_address = 4;        ///< receivers tracked at once from one address
};

struct FlowCounters {
    std::uint64_t status_received = 0;  ///< status messages taken
    std::uint64_t status_refused = 0;   ///< another address for a known id, table full, bad value
    std::uint64_t blocked = 0;          ///< sends refused: a receiver's window is full
    std::uint64_t evicted = 0;          ///< receivers dropped: silent or stalled for the timeout
    std::uint64_t left = 0;             ///< receivers that said they leave
    std::uint64_t not_admitted = 0;     ///< status of a receiver too far behind to be counted
    std::uint64_t address_refused = 0;  ///< new receivers from an address at max_per_address
                                        ///< (also in status_refused)
    std::uint64_t laggards = 0;         ///< evictions of a receiver that alone held the
                                        ///< publisher back (also in evicted)
};

/// One tracked receiver, as Publisher::flow_receivers() reports it.
struct FlowReceiver {
    std::uint64_t id = 0;
    std::uint64_t tag = 0;
    Sqn consumed{};            ///< the next sequence number it will deliver
    std::uint32_t window = 0;  ///< its receive window
    std::int64_t last_heard_ns = 0;
    bool admitted = false;  ///< counted in the limit (false: too far behind, catching up)
};

/// The source's table of flow-controlled receivers and the send limit it gives. Sans-I/O, one
/// owner thread; no allocation after construction. A receiver id is bound to the address (not
/// the port) of its first status message; the table is bounded, and so is each address's share
/// of it; a receiver that is silent, or that holds the publisher back without moving, for
/// `timeout_ns` is dropped; a receiver whose window does not reach the source's next sequence
/// number is not counted until it does.
///
/// The laggard rule (docs/PROTOCOL.md, "Flow control"): while the publisher is blocked and one
/// receiver alone holds it (every other counted receiver has room), that receiver's score grows
/// with the time; at any other time it shrinks as fast. At `timeout_ns` it is evicted and its
/// address is benched: no receiver from it is counted for timeout_ns, doubling with each
/// repeat (up to 64 times). A receiver slower than the rest more than half of the time cannot
/// hold the group to its pace; one that is slowest now and then, or alone, is never touched.
class FlowLimiter {
public:
    explicit FlowLimiter(const FlowConfig& cfg);  // throws std::bad_alloc (the table)

    [[nodiscard]] bool active() const noexcept { return cfg_.strategy != FlowStrategy::max; }
    /// A status message from `from`. `next`: the source's next sequence number; `txw`: its
    /// transmit window capacity (the limit never passes what it can still repair).
    void on_status(const pgm::StatusInfo& st,
                   const Endpoint& from,
                   Sqn next,
                   std::uint32_t txw,
                   std::int64_t now_ns) noexcept;
    /// Whether `n` more sequence numbers from `next` may be sent now.
    [[nodiscard]] bool allows(Sqn next, std::uint32_t n) const noexcept {
        if (gate_closed_) {
            return false;
        }
        return !limited_
               || static_cast<std::int64_t>(static_cast<std::int32_t>(limit_.value - next.value))
                      >= static_cast<std::int64_t>(n);
    }
    /// tagged with min_group: fewer tagged receivers counted than that.
    [[nodiscard]] bool gate_closed() const noexcept { return gate_closed_; }
    /// Records a refused send (counted; starts the stall clock of the receivers holding it).
    void note_blocked(std::int64_t now_ns) noexcept;
    /// Drops silent and stalled receivers; returns when to call again.
    std::int64_t on_timer(Sqn next, std::uint32_t txw, std::int64_t now_ns) noexcept;
    [[nodiscard]] std::int64_t next_deadline() const noexcept { return next_sweep_ns_; }
    /// A counted receiver at this address (family and address, any port) has not consumed
    /// `s` yet: the source is waiting for it.
    [[nodiscard]] bool waits_for(std::uint16_t family,
                                 const std::array<std::uint8_t, 16>& addr,
                                 Sqn s) const noexcept;
    /// A counted receiver at this address holds the source back now: its window ends at or
    /// before `next` (`txw`: the transmit window), so nothing more goes out until it consumes.
    [[nodiscard]] bool holds_back(std::uint16_t family,
                                  const std::array<std::uint8_t, 16>& addr,
                                  Sqn next,
                                  std::uint32_t txw) const noexcept;
    /// Every counted receiver has consumed everything before `next` (true when none is).
    [[nodiscard]] bool all_consumed(Sqn next) const noexcept;
    /// Receivers admitted now (tagged or not).
    [[nodiscard]] std::size_t admitted() const noexcept { return admitted_; }
    /// Receivers counted in the limit now (tagged: admitted with the tag).
    [[nodiscard]] std::size_t counted() const noexcept { return counted_; }
    std::size_t receivers(std::span<FlowReceiver> out) const noexcept;
    [[nodiscard]] const FlowCounters& counters() const noexcept { return counters_; }
    [[nodiscard]] const FlowConfig& config() const noexcept { return cfg_; }

private:
    struct Entry {
        FlowReceiver r;
        std::array<std::uint8_t, 16> addr{};
        std::uint16_t family = 0;
        bool used = false;
        std::int64_t progress_ns = 0;  // when `consumed` last moved
        std::int64_t held_ns = 0;      // the laggard score
    };
    /// An address whose receiver was evicted as a laggard: not counted until `until_ns`.
    struct Bench {
        std::array<std::uint8_t, 16> addr{};
        std::uint16_t family = 0;
        std::uint32_t strikes = 0;
        std::int64_t until_ns = 0;
    };
    [[nodiscard]] static bool same_address(const Entry& e, const Endpoint& from) noexcept {
        return e.family == from.family && e.addr == from.addr;
    }
    [[nodiscard]] const Bench* benched(std::uint16_t family,
                                       const std::array<std::uint8_t, 16>& addr,
                                       std::int64_t now_ns) const noexcept;
    void bench(const Entry& e, std::int64_t now_ns) noexcept;
    /// Moves the laggard scores on to `now_ns`.
    void account(std::int64_t now_ns) noexcept;
    Entry* admit_new(const pgm::StatusInfo& st, const Endpoint& from, std::int64_t now_ns) noexcept;
    [[nodiscard]] bool counts(const Entry& e) const noexcept {
        return cfg_.strategy == FlowStrategy::min || e.r.tag == cfg_.tag;
    }
    [[nodiscard]] static Sqn reach(const Entry& e, std::uint32_t txw) noexcept {
        return e.r.consumed + std::min(e.r.window, txw);
    }
    void drop(Entry& e) noexcept;
    void recompute(Sqn next, std::uint32_t txw) noexcept;

    FlowConfig cfg_;
    std::vector<Entry> table_;
    std::size_t admitted_ = 0;
    std::size_t counted_ = 0;
    bool limited_ = false;
    bool gate_closed_ = false;
    Sqn limit_{};
    std::int64_t blocked_since_ns_ = -1;  // first refused send since the limit last moved
    std::int64_t next_sweep_ns_ = INT64_MAX;
    std::vector<Bench> benches_;
    const Entry* holder_ = nullptr;  // the one receiver holding the limit, others having room
    std::int64_t accounted_ns_ = -1;
    bool blocked_in_interval_ = false;  // a send refused since the last account()
    FlowCounters counters_;
};

}  // namespace prizma::protocol
