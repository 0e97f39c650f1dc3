// SPDX-License-Identifier: Apache-2.0
// Helpers of the recorder, replay and late-join tests: a temporary directory, and an append
// that retries while the recorder's hand-off buffer is full.
#pragma once

#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <prizma/prizma.hpp>

#include "tests/support/catch.hpp"
#include "tests/support/temp_dir.hpp"

namespace prizma::test {

/// Recorder::append, retried while it reports back-pressure (any other error fails the test).
inline void append(Recorder& rec, const StreamEvent& e, std::span<const std::byte> record = {}) {
    for (;;) {
        const auto r = rec.append(e, record);
        if (r) {
            return;
        }
        REQUIRE(r.error() == Errc::back_pressured);
        std::this_thread::yield();
    }
}

/// The payload of record `i` in the replay and late-join tests: `size` bytes that depend on
/// the sequence, so a record delivered under the wrong sequence is seen.
inline std::vector<std::byte> record_body(std::uint64_t i, std::size_t size = 100) {
    std::vector<std::byte> b(size);
    for (std::size_t k = 0; k < size; ++k) {
        b[k] = static_cast<std::byte>((i * 31 + k) & 0xffU);
    }
    return b;
}

/// `p` is record `seq`'s payload (as record_body made it).
inline bool record_body_ok(std::uint64_t seq, std::span<const std::byte> p) {
    const auto want = record_body(seq, p.size());
    return !p.empty() && std::memcmp(p.data(), want.data(), p.size()) == 0;
}

/// A journal of stream 42, epoch 1, records [0, n) of `size`-byte payloads.
inline void make_journal(const std::string& dir, std::uint64_t n, std::size_t size = 100) {
    RecorderOptions o;
    o.directory = dir;
    o.stream_id = 42;
    o.segment_bytes = std::size_t{4} << 20U;
    auto rec = Recorder::open(o);
    REQUIRE(rec.has_value());
    for (std::uint64_t i = 0; i < n; ++i) {
        const auto b = record_body(i, size);
        StreamEvent e;
        e.epoch = 1;
        e.sequence = i;
        e.payload = b;
        append(*rec, e);
    }
    REQUIRE(rec->flush().has_value());
}

}  // namespace prizma::test
