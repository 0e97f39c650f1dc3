// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <prizma/result.hpp>
#include <prizma/transport.hpp>

namespace prizma::memory {

/// Endpoint::family of memory-transport addresses; the id is in addr[0..3] (little endian).
inline constexpr std::uint16_t kFamily = 0x4d45;  // "ME"

class MemoryTransport;

/// An in-process multicast network: every downstream packet reaches every attached endpoint
/// (including the sender, as multicast loopback does); unicast reaches one. Each endpoint has
/// a preallocated inbound ring; a full ring drops (counted), as a socket buffer would.
/// Single-threaded: all endpoints are driven from one thread.
class MemoryNetwork {
public:
    struct Config {
        std::size_t max_datagram = 1472;
        std::size_t ring_slots = 8192;  ///< inbound packets held per endpoint
        std::size_t max_tx_batch = 64;
        bool loopback = true;  ///< downstream packets also reach their sender (multicast loop)
    };
    MemoryNetwork() : MemoryNetwork(Config{}) {}
    explicit MemoryNetwork(const Config& cfg) : cfg_(cfg) {}
    ~MemoryNetwork();
    MemoryNetwork(const MemoryNetwork&) = delete;
    MemoryNetwork& operator=(const MemoryNetwork&) = delete;
    MemoryNetwork(MemoryNetwork&&) = delete;
    MemoryNetwork& operator=(MemoryNetwork&&) = delete;

    /// A new endpoint on this network. The network must outlive it.
    std::unique_ptr<MemoryTransport> attach();
    [[nodiscard]] const Config& config() const noexcept { return cfg_; }
    /// Packets dropped because an inbound ring was full.
    [[nodiscard]] std::uint64_t overflow_drops() const noexcept { return overflow_; }

private:
    friend class MemoryTransport;
    void deliver(std::uint32_t from, const TxPacket& p) noexcept;
    void detach(MemoryTransport* t) noexcept;
    Config cfg_;
    std::vector<MemoryTransport*> endpoints_;
    std::uint32_t next_id_ = 1;
    std::uint64_t overflow_ = 0;
};

/// One endpoint of a MemoryNetwork.
class MemoryTransport final : public Transport {
public:
    ~MemoryTransport() override;
    MemoryTransport(const MemoryTransport&) = delete;
    MemoryTransport& operator=(const MemoryTransport&) = delete;
    MemoryTransport(MemoryTransport&&) = delete;
    MemoryTransport& operator=(MemoryTransport&&) = delete;

    [[nodiscard]] std::string_view name() const noexcept override { return "mem"; }
    [[nodiscard]] TransportCaps caps() const noexcept override;
    [[nodiscard]] Result<std::size_t> send_batch(
        std::span<const TxPacket> packets) noexcept override;
    [[nodiscard]] Result<std::size_t> poll_rx(std::span<RxPacket> out) noexcept override;
    void release_rx(std::size_t count) noexcept override;
    [[nodiscard]] int wakeup_fd() const noexcept override { return -1; }
    [[nodiscard]] Result<bool> arm_wakeup() noexcept override { return Errc::unsupported; }

    [[nodiscard]] std::uint32_t id() const noexcept { return id_; }
    [[nodiscard]] Endpoint address() const noexcept;
    static Endpoint address_of(std::uint32_t id) noexcept;
    /// Packets waiting in the inbound ring.
    [[nodiscard]] std::size_t pending() const noexcept { return count_; }
    /// Keeps `net` (this endpoint's network) alive as long as this endpoint: for endpoints
    /// handed out alone, as the "mem" factory does.
    void hold(std::shared_ptr<MemoryNetwork> net) noexcept { held_ = std::move(net); }

private:
    friend class MemoryNetwork;
    MemoryTransport(MemoryNetwork& net, std::uint32_t id);
    bool push(std::uint32_t from, const TxPacket& p) noexcept;

    MemoryNetwork* net_;
    std::uint32_t id_;
    std::size_t stride_;
    std::vector<std::byte> ring_;
    std::vector<std::uint32_t> lengths_;
    std::vector<std::uint32_t> senders_;
    std::size_t head_ = 0;
    std::size_t count_ = 0;
    std::size_t lent_ = 0;
    std::shared_ptr<MemoryNetwork> held_;  // released after the destructor has detached
};

}  // namespace prizma::memory
