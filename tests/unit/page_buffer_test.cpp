// SPDX-License-Identifier: Apache-2.0
#include "lib/runtime/page_buffer.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/catch.hpp"

using prizma::runtime::PageBuffer;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20U;

// How many of the 4 KiB pages of [p, p + len) are present; -1 when any part is unmapped.
long resident_pages(const std::byte* p, std::size_t len) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> vec((len + page - 1) / page);
    if (::mincore(const_cast<std::byte*>(p), len, vec.data()) != 0) {
        return errno == ENOMEM ? -1 : -2;
    }
    return std::count_if(vec.begin(), vec.end(), [](unsigned char c) { return (c & 1U) != 0; });
}

// What /proc/self/smaps says of the mapping that holds p.
struct Vma {
    long anon_huge_kb = -1;  // AnonHugePages
    std::string flags;       // VmFlags: "hg" = MADV_HUGEPAGE, "nh" = MADV_NOHUGEPAGE
};

Vma vma_of(const std::byte* p) {
    std::ifstream smaps("/proc/self/smaps");
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    std::string line;
    bool in = false;
    Vma v;
    while (std::getline(smaps, line)) {
        std::uintptr_t lo = 0;
        std::uintptr_t hi = 0;
        char dash = 0;
        std::istringstream head(line);
        if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
            if (in) {
                break;  // the next mapping
            }
            in = lo <= addr && addr < hi;
        } else if (in && line.rfind("AnonHugePages:", 0) == 0) {
            v.anon_huge_kb = std::stol(line.substr(14));
        } else if (in && line.rfind("VmFlags:", 0) == 0) {
            v.flags = line.substr(8) + " ";
        }
    }
    return v;
}

// The kernel has transparent huge pages (whatever their mode): madvise() takes the advice.
bool thp_built() {
    return std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good();
}

}  // namespace

TEST_CASE("page buffer: prefaulted storage is zeroed, 2 MiB aligned and present", "[unit][pages]") {
    const std::size_t len = 3 * kMiB + 5;
    const PageBuffer b(len, true);
    REQUIRE(b.data() != nullptr);
    CHECK(b.size() == len);
    CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % PageBuffer::kHugePage == 0);
    // Before anything reads it: a read of an absent page maps the shared zero page.
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    CHECK(resident_pages(b.data(), len) == static_cast<long>((len + page - 1) / page));
    CHECK(std::all_of(b.data(), b.data() + len, [](std::byte x) { return x == std::byte{0}; }));
    b.data()[len - 1] = std::byte{0x5a};  // writable to the last byte
    CHECK(b.data()[len - 1] == std::byte{0x5a});
    if (thp_built()) {
        const Vma v = vma_of(b.data());
        CHECK_THAT(v.flags, Catch::Contains(" hg "));  // advised onto huge pages
        // Whether the kernel found free 2 MiB pages depends on the machine's state.
        if (v.anon_huge_kb < 2048) {
            WARN("no huge page given to a fresh 4 MiB mapping (AnonHugePages " << v.anon_huge_kb
                                                                               << " kB)");
        }
    }
}

TEST_CASE("page buffer: a small prefaulted buffer is pages, present and zeroed", "[unit][pages]") {
    const std::size_t len = 100 * 1024 + 1;
    const PageBuffer b(len, true);
    REQUIRE(b.data() != nullptr);
    CHECK(b.size() == len);
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % page == 0);
    CHECK(resident_pages(b.data(), len) == static_cast<long>((len + page - 1) / page));
    CHECK(std::all_of(b.data(), b.data() + len, [](std::byte x) { return x == std::byte{0}; }));
}

TEST_CASE("page buffer: lazy storage has no page until it is written", "[unit][pages]") {
    const PageBuffer b(4 * kMiB, false);
    REQUIRE(b.data() != nullptr);
    CHECK(resident_pages(b.data(), b.size()) == 0);
    b.data()[kMiB] = std::byte{1};
    CHECK(resident_pages(b.data(), b.size()) >= 1);
    CHECK(resident_pages(b.data(), b.size()) < 16);  // a 4 KiB page, never a 2 MiB one
    if (thp_built()) {
        CHECK_THAT(vma_of(b.data()).flags, Catch::Contains(" nh "));
    }
    CHECK(b.data()[0] == std::byte{0});
}

TEST_CASE("page buffer: moves carry the mapping, and a replaced one is unmapped", "[unit][pages]") {
    const PageBuffer empty(0, true);
    CHECK(empty.data() == nullptr);
    CHECK(empty.size() == 0);

    PageBuffer a(kMiB, true);
    std::byte* const first = a.data();
    first[7] = std::byte{7};
    PageBuffer b(std::move(a));
    CHECK(a.data() == nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
    CHECK(a.size() == 0);
    CHECK(b.data() == first);
    CHECK(b.size() == kMiB);
    CHECK(b.data()[7] == std::byte{7});

    b = PageBuffer(2 * kMiB, true);
    CHECK(b.size() == 2 * kMiB);
    CHECK(resident_pages(first, kMiB) == -1);  // the first mapping was given back
    {
        const PageBuffer c(std::move(b));
        CHECK(c.size() == 2 * kMiB);
    }
    CHECK(b.data() == nullptr);  // NOLINT(bugprone-use-after-move)
}
