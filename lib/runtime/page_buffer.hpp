// SPDX-License-Identifier: Apache-2.0
#pragma once
#include <cstddef>

namespace prizma::runtime {

/// A buffer straight from the kernel (an anonymous mapping of whole 4 KiB pages), zeroed, as
/// every fresh mapping is. For the window rings: up to hundreds of MiB written in sequence.
class PageBuffer {
public:
    static constexpr std::size_t kHugePage = std::size_t{2} << 20U;

    PageBuffer() noexcept = default;
    /// `prefault`: every page is made present now, in one call (MADV_POPULATE_WRITE; a write
    /// per 4 KiB where the kernel lacks it), and a buffer of kHugePage or more starts on a
    /// 2 MiB boundary and is advised onto transparent huge pages (MADV_HUGEPAGE, where the
    /// kernel has them): on the hot path a new page is then a TLB miss every 2 MiB, not every
    /// 4 KiB (in a virtual machine each miss walks two page tables). Without it the pages
    /// come at their first use and stay 4 KiB (MADV_NOHUGEPAGE): such a fault zeroes 4 KiB,
    /// where a huge page would stall the hot path for the zeroing of 2 MiB (~0.1 ms; more
    /// when the kernel must compact memory first). Throws std::bad_alloc when the kernel
    /// refuses the mapping or, prefaulting, the memory, as operator new would.
    PageBuffer(std::size_t size, bool prefault);
    ~PageBuffer();
    PageBuffer(PageBuffer&& o) noexcept;
    PageBuffer& operator=(PageBuffer&& o) noexcept;
    PageBuffer(const PageBuffer&) = delete;
    PageBuffer& operator=(const PageBuffer&) = delete;

    [[nodiscard]] std::byte* data() const noexcept { return data_; }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }

private:
    void release() noexcept;

    std::byte* data_ = nullptr;
    std::size_t size_ = 0;    // as asked for
    std::size_t mapped_ = 0;  // size_ rounded up to whole pages: what munmap() gets back
};

}  // namespace prizma::runtime
