// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <prizma/result.hpp>
#include <prizma/transport.hpp>

#include "lib/runtime/rng.hpp"

namespace prizma::memory {

/// Fault-injecting decorator for any Transport: drops, duplicates, reorders and delays the
/// packets it receives, with its own seeded RNG (no global state, reproducible per seed).
/// Rules apply to the PGM types selected by `type_mask` (bit n = PGM type n); explicit drops
/// name (type, sqn) pairs. Faults are applied on receive, so each receiver of a multicast
/// loses independently; `on_send` applies the same rules to outgoing packets instead.
class LossyTransport final : public Transport {
public:
    struct Rule {
        std::uint8_t type;    ///< PGM packet type (e.g. 0x04 ODATA)
        std::uint32_t sqn;    ///< data / requested sqn
        std::uint32_t times;  ///< how many matching packets to drop
    };
    struct Config {
        std::uint64_t seed = 1;
        double drop = 0.0;       ///< probability
        double duplicate = 0.0;  ///< probability
        double reorder = 0.0;    ///< probability a packet is held back by reorder_ns
        std::int64_t reorder_ns = 100'000;
        std::int64_t delay_ns = 0;  ///< added to every packet
        std::uint32_t type_mask = 0xffffffffU;
        std::vector<Rule> drop_rules;  ///< deterministic drops, checked before `drop`
        std::size_t held_slots = 8192;
        bool on_send = false;
    };
    struct Stats {
        std::uint64_t seen = 0;
        std::uint64_t dropped = 0;
        std::uint64_t duplicated = 0;
        std::uint64_t reordered = 0;
        std::uint64_t overflow = 0;
    };

    /// `clock` gives the current time for delays and reordering; without one they are off.
    LossyTransport(Transport& inner, Config cfg, std::function<std::int64_t()> clock = {});
    /// The same, owning `inner` (the fault-injection registry decorator's form).
    LossyTransport(std::unique_ptr<Transport> inner,
                   Config cfg,
                   std::function<std::int64_t()> clock = {});
    ~LossyTransport() override;
    LossyTransport(const LossyTransport&) = delete;
    LossyTransport& operator=(const LossyTransport&) = delete;
    LossyTransport(LossyTransport&&) = delete;
    LossyTransport& operator=(LossyTransport&&) = delete;

    [[nodiscard]] std::string_view name() const noexcept override { return inner_.name(); }
    [[nodiscard]] TransportCaps caps() const noexcept override { return inner_.caps(); }
    [[nodiscard]] Result<std::size_t> send_batch(
        std::span<const TxPacket> packets) noexcept override;
    [[nodiscard]] Result<std::size_t> poll_rx(std::span<RxPacket> out) noexcept override;
    void release_rx(std::size_t count) noexcept override;
    [[nodiscard]] int wakeup_fd() const noexcept override { return inner_.wakeup_fd(); }
    [[nodiscard]] Result<bool> arm_wakeup() noexcept override { return inner_.arm_wakeup(); }
    void forget(const Endpoint& peer) noexcept override { inner_.forget(peer); }
    [[nodiscard]] Endpoint local_endpoint() const noexcept override {
        return inner_.local_endpoint();
    }
    [[nodiscard]] std::string local_address_text() const override {
        return inner_.local_address_text();
    }
    [[nodiscard]] std::string description() const override { return inner_.description(); }
    /// The inner transport's counters, then fault_dropped, fault_duplicated and
    /// fault_reordered (room is kept for these three when `out` has it).
    std::size_t named_counters(std::span<NamedCounter> out) const noexcept override;
    std::size_t take_events(std::span<TransportEvent> out) noexcept override {
        return inner_.take_events(out);
    }

    [[nodiscard]] const Stats& stats() const noexcept { return stats_; }
    [[nodiscard]] std::uint64_t seed() const noexcept { return cfg_.seed; }
    Config& config() noexcept { return cfg_; }

private:
    struct Held {
        std::int64_t ready_ns = 0;
        std::uint64_t order = 0;
        std::uint32_t slot = 0;
        std::uint32_t len = 0;
        Endpoint from;
    };
    enum class Verdict : std::uint8_t { pass, drop, duplicate, reorder };
    Verdict judge(std::span<const std::byte> pkt) noexcept;
    double uniform() noexcept;
    bool hold(std::span<const std::byte> data,
              const Endpoint& from,
              std::int64_t ready_ns) noexcept;
    [[nodiscard]] std::int64_t now() const { return clock_ ? clock_() : 0; }

    std::unique_ptr<Transport> owned_;  ///< inner_, when owned: destroyed last
    Transport& inner_;
    Config cfg_;
    std::function<std::int64_t()> clock_;
    runtime::Rng rng_;
    std::size_t stride_;
    std::vector<std::byte> pool_;
    std::vector<std::uint32_t> free_;
    std::vector<Held> held_;
    std::vector<RxPacket> inner_rx_;
    std::vector<std::uint32_t> lent_slots_;
    std::vector<TxPacket> tx_keep_;
    std::vector<std::byte> tx_dup_;
    std::uint64_t order_ = 0;
    Stats stats_;
};

}  // namespace prizma::memory
