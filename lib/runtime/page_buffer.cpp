// SPDX-License-Identifier: Apache-2.0
#include "lib/runtime/page_buffer.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <new>
#include <utility>

namespace prizma::runtime {

namespace {

constexpr std::size_t kPage = 4096;

}  // namespace

PageBuffer::PageBuffer(std::size_t size, bool prefault) : size_(size) {
    if (size == 0) {
        return;
    }
    mapped_ = (size + kPage - 1) & ~(kPage - 1);
    // A buffer of a huge page or more starts on a 2 MiB boundary (one huge page more is
    // mapped, and the ends before and after the aligned range are given back at once), so
    // that every whole 2 MiB of it can be a huge page; a smaller one is just pages.
    const bool huge = prefault && size >= kHugePage;
    const std::size_t span = mapped_ + (huge ? kHugePage : 0);
    void* m = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        throw std::bad_alloc();
    }
    const auto base = reinterpret_cast<std::uintptr_t>(m);
    std::uintptr_t start = base;
    if (huge) {
        start = (base + kHugePage - 1) & ~(std::uintptr_t{kHugePage} - 1);
        if (start != base) {
            (void)::munmap(m, start - base);
        }
        if (start + mapped_ != base + span) {
            // NOLINTNEXTLINE(performance-no-int-to-ptr): aligning a mapping is address arithmetic
            (void)::munmap(reinterpret_cast<void*>(start + mapped_), base + span - start - mapped_);
        }
    }
    data_ = reinterpret_cast<std::byte*>(start);  // NOLINT(performance-no-int-to-ptr): as above
    if (!prefault) {
        // Even where THP is "always": a first write must not stall for a 2 MiB page.
        (void)::madvise(data_, mapped_, MADV_NOHUGEPAGE);
        return;
    }
    if (huge) {
        // Advice only: without THP (or with it off) the pages are 4 KiB and work alike.
        (void)::madvise(data_, mapped_, MADV_HUGEPAGE);
    }
#ifdef MADV_POPULATE_WRITE
    for (;;) {
        if (::madvise(data_, mapped_, MADV_POPULATE_WRITE) == 0) {
            return;
        }
        if (errno == EINTR || errno == EAGAIN) {
            continue;
        }
        if (errno != EINVAL) {  // out of memory (a cgroup limit, say): not a page more
            release();
            throw std::bad_alloc();
        }
        break;  // a kernel older than 5.14: touch every page instead
    }
#endif
    for (std::size_t off = 0; off < mapped_; off += kPage) {
        data_[off] = std::byte{0};
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
