// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>

#include <prizma/context.hpp>
#include <prizma/error.hpp>
#include <prizma/result.hpp>

namespace prizma {

/// Publishing from other threads: a bounded, lock-free multi-producer / single-consumer queue
/// of message copies. Any thread may offer(); the Context's owner thread calls drain() (e.g.
/// from an AgentRunner duty), which hands the messages to a Publisher in order (FIFO per
/// producer). All memory is allocated by the constructor; offer() and drain() never allocate,
/// lock or throw.
class PublishQueue {
public:
    /// `slots` is rounded up to a power of two; messages up to `max_message` bytes.
    PublishQueue(std::size_t slots, std::size_t max_message)
        : mask_(round_up(slots) - 1),
          stride_(max_message),
          slots_(new Slot[mask_ + 1]),
          data_(new std::byte[(mask_ + 1) * max_message]) {
        for (std::size_t i = 0; i <= mask_; ++i) {
            slots_[i].seq.store(i, std::memory_order_relaxed);
        }
    }

    /// Any thread. Errors: Errc::back_pressured (queue full: retry), message_too_large.
    Result<void> offer(std::span<const std::byte> message) noexcept {
        if (message.size() > stride_) {
            return Errc::message_too_large;
        }
        std::uint64_t pos = tail_.load(std::memory_order_relaxed);
        Slot* slot = nullptr;
        for (;;) {
            slot = &slots_[pos & mask_];
            const std::uint64_t seq = slot->seq.load(std::memory_order_acquire);
            const auto diff = static_cast<std::int64_t>(seq - pos);
            if (diff == 0) {
                if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
                    break;
                }
            } else if (diff < 0) {
                return Errc::back_pressured;
            } else {
                pos = tail_.load(std::memory_order_relaxed);
            }
        }
        if (!message.empty()) {
            std::memcpy(data_.get() + (pos & mask_) * stride_, message.data(), message.size());
        }
        slot->len = message.size();
        slot->seq.store(pos + 1, std::memory_order_release);
        return {};
    }

    /// Owner thread only. Offers up to `limit` queued messages to `pub`; stops early, keeping
    /// the message, when the publisher is back-pressured or rate limited. A message refused for
    /// good (e.g. too large for the channel) is dropped and counted in dropped(). Returns the
    /// number handed over.
    std::size_t drain(Publisher& pub, std::size_t limit) noexcept {
        std::size_t n = 0;
        while (n < limit) {
            Slot& slot = slots_[head_ & mask_];
            if (slot.seq.load(std::memory_order_acquire) != head_ + 1) {
                break;  // empty
            }
            auto r = pub.offer(
                std::span<const std::byte>(data_.get() + (head_ & mask_) * stride_, slot.len));
            if (!r && is_transient(r.error())) {
                break;
            }
            if (!r) {
                ++dropped_;
            }
            slot.seq.store(head_ + mask_ + 1, std::memory_order_release);
            ++head_;
            ++n;
        }
        return n;
    }

    /// Messages the publisher refused for good (owner thread).
    [[nodiscard]] std::uint64_t dropped() const noexcept { return dropped_; }

private:
    struct Slot {
        std::atomic<std::uint64_t> seq{0};
        std::size_t len = 0;
    };
    static std::size_t round_up(std::size_t n) noexcept {
        std::size_t p = 1;
        while (p < n) {
            p <<= 1U;
        }
        return p;
    }
    std::size_t mask_;
    std::size_t stride_;
    std::unique_ptr<Slot[]> slots_;
    std::unique_ptr<std::byte[]> data_;
    alignas(64) std::atomic<std::uint64_t> tail_{0};
    alignas(64) std::uint64_t head_ = 0;
    std::uint64_t dropped_ = 0;
};

}  // namespace prizma
