// SPDX-License-Identifier: Apache-2.0
// The replay wire from a hostile peer, both ends: the server's request parser (any 32 bytes),
// the client's frame reader fed a stream in the chunks the input chooses (lengths checked
// before anything is sized; entries well-formed), and the allow-list parser.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "lib/replay/wire.hpp"
#include "lib/streams/recorder_format.hpp"

namespace {

void fuzz_request(const std::uint8_t* data, std::size_t size) {
    if (size < prizma::replay::kRequestBytes) {
        return;
    }
    prizma::ReplayRequest r;
    if (prizma::replay::decode_request(reinterpret_cast<const std::byte*>(data), r)) {
        // What decodes encodes back to the same bytes.
        std::byte again[prizma::replay::kRequestBytes];
        prizma::replay::encode_request(again, r);
        if (std::memcmp(again, data, sizeof again) != 0) {
            __builtin_trap();
        }
    }
}

void fuzz_frames(const std::uint8_t* data, std::size_t size) {
    prizma::replay::FrameReader reader;
    std::size_t at = 0;
    std::size_t fed = 0;
    while (at < size) {
        // The first byte of each step: how many of the next bytes arrive (1 to 256).
        const std::size_t chunk = std::min<std::size_t>(size - at - 1, data[at] + 1U);
        ++at;
        const auto room = reader.space();
        if (room.empty()
            || room.size() > prizma::journal::kFrameHeader + prizma::journal::kMaxBody) {
            __builtin_trap();  // never sized past the largest frame
        }
        const std::size_t n = std::min(chunk, room.size());
        std::memcpy(room.data(), data + at, n);
        reader.commit(n);
        at += n;
        fed += n;
        for (;;) {
            prizma::JournalEntry e;
            std::uint64_t code = 0;
            std::string text;
            const auto r = reader.next(e, code, text);
            if (r == prizma::replay::FrameReader::Next::entry) {
                if (e.kind == prizma::StreamEventKind::record
                    && e.record.size() < prizma::RecordHeader::kBytes) {
                    __builtin_trap();  // a record entry always carries its header
                }
                continue;
            }
            if (r == prizma::replay::FrameReader::Next::need_more) {
                break;
            }
            return;  // end, error or malformed: the connection ends there
        }
    }
    (void)fed;
}

void fuzz_allow(const std::uint8_t* data, std::size_t size) {
    std::vector<std::string> entries;
    std::string cur;
    for (std::size_t i = 0; i < size && i < 512; ++i) {
        if (data[i] == ',') {
            entries.push_back(cur);
            cur.clear();
        } else {
            cur.push_back(static_cast<char>(data[i]));
        }
    }
    entries.push_back(cur);
    auto r = prizma::replay::parse_allow_list(entries);
    if (r) {
        prizma::replay::PeerAddress a;
        a.family = 2;  // AF_INET
        for (const auto& p : *r) {
            (void)p.contains(a);
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) {
        return 0;
    }
    switch (data[0] % 3U) {
        case 0: fuzz_request(data + 1, size - 1); break;
        case 1: fuzz_frames(data + 1, size - 1); break;
        default: fuzz_allow(data + 1, size - 1); break;
    }
    return 0;
}
