// SPDX-License-Identifier: Apache-2.0
#pragma once
// The verbs transport's counters, from one list: the struct (VerbsCounters), the atomics the
// control and event threads write (ControlCounters), the copy between them and the names
// (named_counters(), prizma-stat) are all generated from PRIZMA_VERBS_COUNTERS, so a counter
// added there is counted, copied and named, and nowhere else is one listed.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include <prizma/counters.hpp>

// OWN(name): written by the owner thread (the data path; ah_cache_size is computed there).
// CTL(name): written by the control thread or the device's event thread (atomics), copied
// out by the owner thread. The order is the order of named_counters().
#define PRIZMA_VERBS_COUNTERS(OWN, CTL)                                                         \
    OWN(rx_datagrams)                                                                           \
    OWN(rx_ring_low)  /* polls that found the receive ring < 1/8 full */                        \
    OWN(rx_reposts)   /* ibv_post_recv calls (each a chain) */                                  \
    OWN(rx_truncated) /* datagrams longer than a receive slot (the port MTU) */                 \
    OWN(tx_datagrams)                                                                           \
    OWN(tx_inline)                                                                              \
    OWN(tx_posts)          /* ibv_post_send calls (doorbells) */                                \
    OWN(tx_sq_full)        /* send_batch found the send queue full */                           \
    OWN(tx_oversize)       /* larger than the MTU: dropped (a core bug) */                      \
    OWN(tx_no_route)       /* unicast to a peer without an address handle */                    \
    OWN(completion_errors) /* CQEs with a status other than success */                          \
    CTL(ah_created)                                                                             \
    OWN(ah_cache_size) /* unicast handles ready */                                              \
    CTL(ah_failed)     /* AH creations that failed (retried with back-off) */                   \
    OWN(ah_pending)    /* unicast sends dropped: the peer's AH not made yet */                  \
    OWN(ah_table_full) /* new peers without a table slot */                                     \
    CTL(async_events)                                                                           \
    CTL(rejoins)         /* IB SA re-joins after a client re-register */                        \
    CTL(rejoin_failures) /* SA re-joins that failed (retried) */                                \
    CTL(mlid_changes)    /* a re-join brought a new MLID: a new group AH */                     \
    CTL(port_err)        /* IBV_EVENT_PORT_ERR (link down) */                                   \
    CTL(port_active)     /* IBV_EVENT_PORT_ACTIVE (link up again) */                            \
    CTL(port_down)       /* 1 while the port is down (last event PORT_ERR) */                   \
    CTL(lid_change)                                                                             \
    CTL(sm_change)                                                                              \
    CTL(gid_change)                                                                             \
    CTL(pkey_change)                                                                            \
    CTL(client_reregister)                                                                      \
    CTL(device_fatal) /* the device died or a CQ overran: every call fails now */               \
    CTL(qp_fatal)     /* async QP error events on our QP (it is rebuilt, below) */              \
    /* Send-queue errors (QP in SQE) brought back to RTS; QPs in the error state replaced by */ \
    /* a new QP (re-attached, receives posted again: the QPN changes); replacements that */     \
    /* failed (the transport is then fatal); work requests flushed by such an error. */         \
    OWN(qp_recovered)                                                                           \
    OWN(qp_rebuilt)                                                                             \
    OWN(qp_rebuild_failures)                                                                    \
    OWN(wr_flushed)                                                                             \
    CTL(path_fallbacks) /* IB NAK routes without the SA's path: the SL seen used */             \
    /* Cached unicast handles dropped after a LID, SM, client-reregister or GID event; */       \
    /* those dropped because their source was heard on another route (LID, SL). */              \
    CTL(ah_flushed)                                                                             \
    OWN(ah_route_changes)                                                                       \
    CTL(ah_shared) /* unicast handles another channel of this process had made (§1.1) */       \
    /* AH services that found the retire list full: evicted handles kept (§7) */               \
    CTL(ah_retire_full)                                                                         \
    OWN(pinned_bytes) /* memory pinned for this transport (estimate) */

namespace prizma::verbs {

struct VerbsCounters {
#define PRIZMA_VERBS_FIELD(name) std::uint64_t name = 0;
    PRIZMA_VERBS_COUNTERS(PRIZMA_VERBS_FIELD, PRIZMA_VERBS_FIELD)
#undef PRIZMA_VERBS_FIELD
    const char* last_completion_error = "";  ///< ibv_wc_status_str of the last failed CQE
};

/// One counter of the list: its name and where it is in VerbsCounters.
struct VerbsCounterField {
    std::string_view name;
    std::uint64_t VerbsCounters::*member;
    bool control;  ///< written by the control or event thread (a ControlCounters atomic)
};

#define PRIZMA_VERBS_OWN_FIELD(name) VerbsCounterField{#name, &VerbsCounters::name, false},
#define PRIZMA_VERBS_CTL_FIELD(name) VerbsCounterField{#name, &VerbsCounters::name, true},
inline constexpr VerbsCounterField kVerbsCounterFields[] = {
    PRIZMA_VERBS_COUNTERS(PRIZMA_VERBS_OWN_FIELD, PRIZMA_VERBS_CTL_FIELD)};
#undef PRIZMA_VERBS_OWN_FIELD
#undef PRIZMA_VERBS_CTL_FIELD

// Every counter field of VerbsCounters is in the list (the struct has nothing else but the
// last error's text).
static_assert(sizeof(VerbsCounters)
              == std::size(kVerbsCounterFields) * sizeof(std::uint64_t) + sizeof(const char*));

/// The counters the control thread and the device's event thread write.
struct ControlCounters {
#define PRIZMA_VERBS_NO_FIELD(name)
// NOLINTNEXTLINE(bugprone-macro-parentheses): `name` is a member's name, not an expression
#define PRIZMA_VERBS_ATOMIC(name) std::atomic<std::uint64_t> name{0};
    PRIZMA_VERBS_COUNTERS(PRIZMA_VERBS_NO_FIELD, PRIZMA_VERBS_ATOMIC)
#undef PRIZMA_VERBS_ATOMIC

    /// Their values into `c` (relaxed loads; the owner thread).
    void copy_to(VerbsCounters& c) const noexcept {
// NOLINTNEXTLINE(bugprone-macro-parentheses): `name` is a member's name, not an expression
#define PRIZMA_VERBS_COPY(name) c.name = name.load(std::memory_order_relaxed);
        PRIZMA_VERBS_COUNTERS(PRIZMA_VERBS_NO_FIELD, PRIZMA_VERBS_COPY)
#undef PRIZMA_VERBS_COPY
    }
#undef PRIZMA_VERBS_NO_FIELD
};

/// Every counter by name, in the list's order, into `out` (as far as it goes); -> how many
/// there are.
inline std::size_t name_counters(const VerbsCounters& c, std::span<NamedCounter> out) noexcept {
    std::size_t i = 0;
    for (const VerbsCounterField& f : kVerbsCounterFields) {
        if (i < out.size()) {
            out[i] = NamedCounter{f.name, c.*f.member};
        }
        ++i;
    }
    return i;
}

}  // namespace prizma::verbs
