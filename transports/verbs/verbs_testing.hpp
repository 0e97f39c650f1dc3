// SPDX-License-Identifier: Apache-2.0
#pragma once
// Fault injection into a live VerbsTransport, for the tests that run on a real device (the
// Soft-RoCE VM): what a device error does to the QP, done by the test, so that the recovery
// that follows is the transport's real one. Not for applications.

#include "transports/verbs/verbs_transport.hpp"

namespace prizma::verbs {

struct VerbsTransportTesting {
    /// Moves the transport's QP to the error state (ibv_modify_qp to IBV_QPS_ERR), as a fatal
    /// QP error on a real HCA does: its posted receives and sends are flushed. 0 or errno.
    static int force_qp_error(VerbsTransport& t) noexcept;
};

}  // namespace prizma::verbs
