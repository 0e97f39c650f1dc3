// SPDX-License-Identifier: Apache-2.0
#include "lib/runtime/page_buffer.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <new>
#include <utility>

namespace prizma::runtime {

PageBuffer::PageBuffer(std::size_t size, bool prefault) : size_(size) {
    if (size == 0) {
        return;
    }
    mapped_ = (size + kHugePage - 1) & ~(kHugePage - 1);
    // One huge page more than needed, so that a 2 MiB boundary lies inside; the ends
    // before and after the aligned range are given back at once.
    const std::size_t span = mapped_ + kHugePage;
    void* m = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        throw std::bad_alloc();
    }
    const auto base = reinterpret_cast<std::uintptr_t>(m);
    const std::uintptr_t aligned = (base + kHugePage - 1) & ~(std::uintptr_t{kHugePage} - 1);
    if (aligned != base) {
        (void)::munmap(m, aligned - base);
    }
    const std::uintptr_t end = aligned + mapped_;
    if (end != base + span) {
        (void)::munmap(reinterpret_cast<void*>(end), base + span - end);
    }
    data_ = reinterpret_cast<std::byte*>(aligned);
    if (!prefault) {
        // Even where THP is "always": a first write must not stall for a 2 MiB page.
        (void)::madvise(data_, mapped_, MADV_NOHUGEPAGE);
    } else {
        // Advice only: without THP (or with it off) the pages are 4 KiB and work alike.
        (void)::madvise(data_, mapped_, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
        if (::madvise(data_, mapped_, MADV_POPULATE_WRITE) == 0) {
            return;
        }
#endif
        for (std::size_t off = 0; off < mapped_; off += 4096) {
            data_[off] = std::byte{0};
        }
    }
}

PageBuffer::~PageBuffer() {
    release();
}

PageBuffer::PageBuffer(PageBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      mapped_(std::exchange(o.mapped_, 0)) {}

PageBuffer& PageBuffer::operator=(PageBuffer&& o) noexcept {
    if (this != &o) {
        release();
        data_ = std::exchange(o.data_, nullptr);
        size_ = std::exchange(o.size_, 0);
        mapped_ = std::exchange(o.mapped_, 0);
    }
    return *this;
}

void PageBuffer::release() noexcept {
    if (data_ != nullptr) {
        (void)::munmap(data_, mapped_);
        data_ = nullptr;
    }
}

}  // namespace prizma::runtime
