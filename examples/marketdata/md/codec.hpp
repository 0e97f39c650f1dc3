// SPDX-License-Identifier: Apache-2.0
// The feed's wire format (one prizma message = a header and up to ~30 records, all
// little-endian) and the recording file (docs/MARKETDATA.md#wire-format):
//   header (24 bytes): u32 magic "MDT1", u16 kind (1 ticks, 2 instruments), u16 count,
//                      u64 feed id (the stream's identity), i64 send time (CLOCK_REALTIME ns)
//   tick (40 bytes):   u64 channel seq, u32 symbol seq, u32 code, u32 date YYYYMMDD,
//                      u32 time (ms of the exchange day), i32 price (0.01 ticks),
//                      u32 flags, i64 volume (shares)
//   instrument (20):   u32 code, u32 date, i32 previous close, i32 limit up, i32 limit down
// A recording is "MDREC001" and then each message as u32 length + its bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "core.hpp"

namespace md {

inline constexpr std::uint32_t kMagic = 0x3154444DU;  // "MDT1"
inline constexpr std::size_t kHeaderBytes = 24;
inline constexpr std::size_t kTickBytes = 40;
inline constexpr std::size_t kInstrumentBytes = 20;
/// The lossless stream (prizma::StreamPublisher) md-feed writes by default.
inline constexpr std::uint32_t kDefaultStreamId = 1;

enum class MsgKind : std::uint16_t { ticks = 1, instruments = 2 };

/// Tick flags.
inline constexpr std::uint32_t kTickAuction = 1;    // a call-auction match
inline constexpr std::uint32_t kTickLimitUp = 2;    // traded at the day's upper limit
inline constexpr std::uint32_t kTickLimitDown = 4;  // traded at the day's lower limit

struct Tick {
    std::uint64_t channel_seq = 0;  // 1, 2, ... over the whole feed
    std::uint32_t symbol_seq = 0;   // 1, 2, ... per code per feed
    Code code = 0;
    std::uint32_t date = 0;     // YYYYMMDD
    std::uint32_t time_ms = 0;  // exchange time of day
    std::int32_t price = 0;     // in 0.01
    std::uint32_t flags = 0;
    std::int64_t volume = 0;  // shares (lots of 100)
    friend bool operator==(const Tick&, const Tick&) = default;
};

struct Instrument {
    Code code = 0;
    std::uint32_t date = 0;
    std::int32_t prev_close = 0;
    std::int32_t limit_up = 0;
    std::int32_t limit_down = 0;
    friend bool operator==(const Instrument&, const Instrument&) = default;
};

struct MsgHeader {
    MsgKind kind = MsgKind::ticks;
    std::uint16_t count = 0;
    std::uint64_t feed_id = 0;
    std::int64_t send_ns = 0;
};

/// Records of a kind that fit in `max_bytes` (at least 1).
std::size_t records_per_message(MsgKind kind, std::size_t max_bytes) noexcept;

/// Writes a message into `out` (resized): the header and the records.
void encode_ticks(std::vector<std::byte>& out, const MsgHeader& h, std::span<const Tick> ticks);
void encode_instruments(std::vector<std::byte>& out,
                        const MsgHeader& h,
                        std::span<const Instrument> instruments);

/// Reads a message: false when it is not one (bad magic, kind, or length); then nothing is
/// appended. Appends its records to `ticks` or `instruments`.
bool decode(std::span<const std::byte> msg,
            MsgHeader& h,
            std::vector<Tick>& ticks,
            std::vector<Instrument>& instruments);

/// A recording being written.
class RecordWriter {
public:
    RecordWriter() = default;
    RecordWriter(const RecordWriter&) = delete;
    RecordWriter& operator=(const RecordWriter&) = delete;
    RecordWriter(RecordWriter&&) = delete;
    RecordWriter& operator=(RecordWriter&&) = delete;
    ~RecordWriter();
    /// Creates (truncates) `path`; the error text, empty on success.
    std::string open(const std::string& path);
    /// Appends one message; false on a write error.
    bool write(std::span<const std::byte> msg);
    /// Flushes and closes; false on a write error.
    bool close();

private:
    std::FILE* f_ = nullptr;
};

/// A recording being read.
class RecordReader {
public:
    RecordReader() = default;
    RecordReader(const RecordReader&) = delete;
    RecordReader& operator=(const RecordReader&) = delete;
    RecordReader(RecordReader&&) = delete;
    RecordReader& operator=(RecordReader&&) = delete;
    ~RecordReader();
    /// Opens `path` and checks the magic; the error text, empty on success.
    std::string open(const std::string& path);
    /// The next message into `msg`: false at the end, or when the file is cut short or holds
    /// a record over 64 KiB (error() then says so).
    bool next(std::vector<std::byte>& msg);
    [[nodiscard]] const std::string& error() const noexcept { return error_; }

private:
    std::FILE* f_ = nullptr;
    std::string error_;
};

}  // namespace md
