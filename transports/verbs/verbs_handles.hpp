// SPDX-License-Identifier: Apache-2.0
#pragma once
// RAII for libibverbs objects: one deleter template. The order in which an owner declares
// them encodes the teardown order libibverbs requires (children before parents).

#include <infiniband/verbs.h>

#include <cassert>
#include <memory>

namespace prizma::verbs {

template <auto DestroyFn>
struct VerbsDeleter {
    template <typename T>
    void operator()(T* object) const noexcept {
        [[maybe_unused]] const int rc = DestroyFn(object);
        assert(rc == 0 && "verbs object destroyed out of order (EBUSY) or twice");
    }
};
using ContextPtr = std::unique_ptr<ibv_context, VerbsDeleter<&ibv_close_device>>;
using ChannelPtr = std::unique_ptr<ibv_comp_channel, VerbsDeleter<&ibv_destroy_comp_channel>>;
using PdPtr = std::unique_ptr<ibv_pd, VerbsDeleter<&ibv_dealloc_pd>>;
using MrPtr = std::unique_ptr<ibv_mr, VerbsDeleter<&ibv_dereg_mr>>;
using CqPtr = std::unique_ptr<ibv_cq, VerbsDeleter<&ibv_destroy_cq>>;
using QpPtr = std::unique_ptr<ibv_qp, VerbsDeleter<&ibv_destroy_qp>>;
using AhPtr = std::unique_ptr<ibv_ah, VerbsDeleter<&ibv_destroy_ah>>;

}  // namespace prizma::verbs
