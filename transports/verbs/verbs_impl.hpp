// SPDX-License-Identifier: Apache-2.0
#pragma once
// The state of one VerbsTransport, shared by its files (private to transports/verbs/):
//   verbs_config.cpp    the verbs:// grammar, GID and GRH helpers, describe()
//   verbs_setup.cpp     create()'s steps: device, port, GID, SA join, resources, QP, group
//   verbs_datapath.cpp  send_batch, poll_rx, release_rx, arm_wakeup; QP recovery
//   verbs_control.cpp   the control thread (AHs, SA re-joins) and the async-event listener
//   verbs_transport.cpp the Transport face: create(), counters, events, addresses
//   ah_cache.cpp        the unicast AH cache between the owner and the control thread

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "lib/posix/unique_fd.hpp"
#include "transports/verbs/ah_cache.hpp"
#include "transports/verbs/device_policy.hpp"
#include "transports/verbs/device_share.hpp"
#include "transports/verbs/ib_sa.hpp"
#include "transports/verbs/port_refcount.hpp"
#include "transports/verbs/verbs_counters.hpp"
#include "transports/verbs/verbs_handles.hpp"
#include "transports/verbs/verbs_transport.hpp"

namespace prizma::verbs {

using Gid = std::array<std::uint8_t, 16>;
using posix::UniqueFd;

// ---- helpers (verbs_config.cpp) ----
std::string gid_text(const Gid& g);
bool is_v4_mapped(const Gid& g) noexcept;
/// IP text (IPv4, IPv6 with or without brackets) -> GID bytes (IPv4 as ::ffff:a.b.c.d).
bool ip_to_gid(std::string_view text, Gid& out) noexcept;

inline std::error_code err(std::errc e) noexcept {
    return std::make_error_code(e);
}
template <typename T = void>
Result<T, Error> fail(std::string msg, std::error_code code = Errc::invalid_argument) {
    return Error(code, std::move(msg));
}
template <typename T>
Result<T, Error> fail(std::string msg, std::errc code) {
    return Error(std::make_error_code(code), std::move(msg));
}

// ---- helpers (verbs_control.cpp) ----
ibv_ah_attr to_attr(const policy::AhFields& f) noexcept;
/// Wakes the control thread (an eventfd write: one system call, nothing else).
void wake(int fd) noexcept;

constexpr std::size_t kSlotAlign = 64;
// Each receive slot: the GRH ends at a cache-line boundary, so the PGM packet is aligned.
constexpr std::size_t kRxGrhOffset = kSlotAlign - kGrhBytes;
// A QP replaced this many times within kRebuildWindowNs is not replaced again: the device or
// the configuration is at fault, the transport becomes fatal (said by the event and counters).
constexpr std::size_t kMaxRebuilds = 4;
constexpr std::int64_t kRebuildWindowNs = 1'000'000'000;

/// What create()'s steps hand on to the later ones.
struct CreateState {
    bool by_addr = false;  // the device was named by a local address, not by name
    ibv_port_attr pa{};
    std::uint16_t pkey = 0xffff;
    Gid dest{};        // the group's (or unicast peer's) GID
    Gid plain_dest{};  // the group address as written, as a GID (IPv4-mapped for IPv4)
    bool multicast = false;
    bool v4 = false;
    ibv_gid_entry ge{};  // the local GID chosen
    policy::DeviceLimits limits;
    policy::MembershipPlan plan;
};

struct FreeDeleter {
    void operator()(void* p) const noexcept { std::free(p); }  // NOLINT(*-no-malloc)
};

struct VerbsTransport::Impl {
    // create()'s steps, in order (verbs_setup.cpp).
    Result<void, Error> open_device(CreateState& st);  // by name/addr
    Result<void, Error> query_port(CreateState& st);   // limits, group
    Result<void, Error> choose_gid(CreateState& st);   // GID, MTU
    Result<void, Error> join_sa(CreateState& st);      // IB: SA membership (every role), MLID
    Result<void, Error> create_resources();            // PD, pool, MR, CQs, then create_qp()
    Result<void, Error> create_qp();                   // the UD QP, its states, the receive ring
    Result<void, Error> open_qp();                     // ibv_create_qp, inline stepped down
    Result<void, Error> join_group(const CreateState& st);  // IP join, attach, group AH
    Result<void, Error> start_control();                    // the control thread (verbs_control)

    Impl() = default;
    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;
    Impl(Impl&&) = delete;
    Impl& operator=(Impl&&) = delete;
    ~Impl();  // verbs_setup.cpp: the teardown, in libibverbs' order

    // ---- Device resources. Declaration order = reverse teardown order (children below
    // parents). The context and the PD are the device's, shared with the process's other
    // channels on it (§1.1). Made by create(); the QP is replaced by the owner thread
    // (rebuild_qp), the group AH by the control thread (rejoin_sa).
    std::shared_ptr<DeviceShare> dev;
    std::uint64_t listen_id = 0;  // our listener of the device's async events
    ChannelPtr channel;
    std::unique_ptr<void, FreeDeleter> pool;  // rx slots then tx slots, page aligned
    MrPtr mr;
    CqPtr send_cq;
    CqPtr recv_cq;
    QpPtr qp;
    AhPtr group_ah;                  // downstream destination (multicast group or unicast peer)
    std::vector<AhPtr> retired_ahs;  // replaced group AHs: WRs may still use them
    // Group membership: attached QP + IP-level join (RoCE) or SA membership (IB).
    bool attached = false;
    Gid mgid{};
    UniqueFd ip_join;
    std::unique_ptr<SaMembership> sa;
    std::unique_ptr<PortMembership> port_member;  // the host-wide count behind `sa` (§6.3)

    // ---- Between the threads: written by the control thread or the device's event thread,
    // read by the owner thread (or the other way round, where said).
    std::atomic<ibv_ah*> live_group_ah{nullptr};  // what send_batch uses (swapped after a new
                                                  // MLID)
    std::atomic<std::uint16_t> mlid{0};           // changed after a re-join
    std::atomic<bool> fatal{false};
    // The QP failed (a send error, a flushed work request, a QP error event): the owner thread
    // brings it back (SQE -> RTS) or replaces it (ERR) before its next send or poll.
    std::atomic<bool> qp_broken{false};
    std::atomic<bool> rejoin_wanted{false};  // a fabric event asked the control thread
    std::atomic<ibv_qp*> live_qp{nullptr};   // `qp` (owner-written), for the event check
    ControlCounters ctl_counters;
    AhCache ahs;  // upstream destinations (NAK/SPMR), by (GID, QPN): its own protocol

    // ---- The control thread: address handles, async events, SA re-joins (never the data
    // path). Its own state lives on its stack (control_loop).
    struct Control {
        std::thread thread;
        UniqueFd wake;  // eventfd
        std::atomic<bool> stop{false};
    } ctl;

    // ---- Fixed at creation (read by every thread after).
    VerbsConfig cfg;
    VerbsInfo info;
    policy::LocalPort local_port;
    Gid local_gid{};
    std::uint16_t pkey = 0xffff;  // the port's first P_Key (IB PathRecord queries)
    std::uint32_t dest_qpn = kMulticastQpn;
    std::size_t mtu = 0;     // what we send (mtu=, the group's, the port's)
    std::size_t rx_mtu = 0;  // what a receive slot takes: the port's active MTU
    std::size_t max_inline = 0;

    // ---- Owner thread only: the data path.
    struct Tx {
        std::byte* base = nullptr;
        std::size_t stride = 0;
        // Send queue accounting: seq numbers of posted WRs; completion of a signalled WR
        // (wr_id = its seq) retires every WR up to it.
        std::uint64_t posted = 0;
        std::uint64_t done = 0;
        std::size_t signal_every = 1;
        std::vector<ibv_send_wr> wr;
        std::vector<ibv_sge> sge;              // 2 per WR
        std::vector<std::uint32_t> wr_packet;  // WR index -> index of its packet in the chunk
    } tx;
    struct Rx {
        std::byte* base = nullptr;
        std::size_t stride = 0;
        std::size_t posted = 0;
        std::vector<ibv_wc> wc;       // polled completions
        std::size_t stash_begin = 0;  // completions polled by arm_wakeup, not yet handed out
        std::size_t stash_end = 0;
        std::vector<std::uint32_t> handed;  // slots handed out by the last poll_rx
        std::size_t handed_count = 0;
        std::vector<std::uint32_t> repost;  // slots waiting to be re-posted
        std::size_t repost_count = 0;
        std::vector<ibv_recv_wr> wr;
        std::vector<ibv_sge> sge;
        unsigned unacked_events = 0;
    } rx;
    std::array<std::int64_t, kMaxRebuilds> rebuild_ns{};  // the last replacements' times
    std::size_t rebuilds = 0;
    mutable VerbsCounters counters;
    // take_events(): the counters behind each event kind as last reported.
    std::array<std::uint64_t, 8> events_seen{};

    // ---- Owner thread (verbs_datapath.cpp).
    void post_receives(const std::uint32_t* ids, std::size_t n) noexcept;
    void note_source(const Endpoint& peer, const policy::SourceRoute& route) noexcept;
    ibv_ah* unicast_ah(const Endpoint& peer) noexcept;
    void count(AhCache::Note note) noexcept;  // its counter; wakes the control thread
    void reap_send() noexcept;
    // Before a send of `n`: completions reaped, a failed QP recovered. False: fatal.
    bool send_ready(std::size_t n) noexcept;
    // After qp_broken: -> false when the QP could not be brought back (then `fatal` is set).
    // Receive completions still stashed are handed out first.
    bool recover_qp() noexcept;
    bool rebuild_qp() noexcept;
    void refresh_counters() const noexcept;

    // ---- Set-up and rebuild (verbs_setup.cpp).
    // The UD QP's creation attributes (CQs, depths, 2 send SGEs), asking for `inline_bytes`.
    [[nodiscard]] ibv_qp_init_attr qp_attr(std::size_t inline_bytes) const noexcept;
    // INIT, RTR, RTS: nullptr, or the state the QP failed to reach.
    const char* bring_up(ibv_qp* q) const noexcept;

    // ---- Control thread (verbs_control.cpp).
    void stop_control() noexcept;
    void control_loop() noexcept;
    class AhMaker;               // ibv_create_ah for the AhCache
    int service_ahs() noexcept;  // -> ms until the next retry, -1 = none
    // The device's event thread (DeviceShare): counts, flags a rejoin or a broken QP, flushes
    // the AH slots, wakes the control thread. Never blocks.
    void on_async(const ibv_async_event& ev) noexcept;
    bool rejoin_sa() noexcept;
};

}  // namespace prizma::verbs
