// SPDX-License-Identifier: Apache-2.0
#include "codec.hpp"

#include <array>
#include <cerrno>
#include <cstring>
#include <system_error>

namespace md {

namespace {

constexpr std::array<char, 8> kFileMagic{'M', 'D', 'R', 'E', 'C', '0', '0', '1'};
constexpr std::size_t kMaxRecordBytes = 65'536;

template <typename T>
void put(std::byte*& p, T v) noexcept {
    std::memcpy(p, &v, sizeof v);  // little-endian hosts only (x86-64, aarch64)
    p += sizeof v;
}

template <typename T>
T get(const std::byte*& p) noexcept {
    T v{};
    std::memcpy(&v, p, sizeof v);
    p += sizeof v;
    return v;
}

std::byte* put_header(std::vector<std::byte>& out, const MsgHeader& h, std::size_t rec_bytes) {
    out.resize(kHeaderBytes + rec_bytes * h.count);
    std::byte* p = out.data();
    put(p, kMagic);
    put(p, static_cast<std::uint16_t>(h.kind));
    put(p, h.count);
    put(p, h.feed_id);
    put(p, h.send_ns);
    return p;
}

}  // namespace

std::size_t records_per_message(MsgKind kind, std::size_t max_bytes) noexcept {
    const std::size_t rec = kind == MsgKind::ticks ? kTickBytes : kInstrumentBytes;
    if (max_bytes <= kHeaderBytes + rec) {
        return 1;
    }
    return std::min<std::size_t>((max_bytes - kHeaderBytes) / rec, 0xffff);
}

void encode_ticks(std::vector<std::byte>& out, const MsgHeader& h, std::span<const Tick> ticks) {
    MsgHeader hh = h;
    hh.kind = MsgKind::ticks;
    hh.count = static_cast<std::uint16_t>(ticks.size());
    std::byte* p = put_header(out, hh, kTickBytes);
    for (const Tick& t : ticks) {
        put(p, t.channel_seq);
        put(p, t.symbol_seq);
        put(p, t.code);
        put(p, t.date);
        put(p, t.time_ms);
        put(p, t.price);
        put(p, t.flags);
        put(p, t.volume);
    }
}

void encode_instruments(std::vector<std::byte>& out,
                        const MsgHeader& h,
                        std::span<const Instrument> instruments) {
    MsgHeader hh = h;
    hh.kind = MsgKind::instruments;
    hh.count = static_cast<std::uint16_t>(instruments.size());
    std::byte* p = put_header(out, hh, kInstrumentBytes);
    for (const Instrument& i : instruments) {
        put(p, i.code);
        put(p, i.date);
        put(p, i.prev_close);
        put(p, i.limit_up);
        put(p, i.limit_down);
    }
}

bool decode(std::span<const std::byte> msg,
            MsgHeader& h,
            std::vector<Tick>& ticks,
            std::vector<Instrument>& instruments) {
    if (msg.size() < kHeaderBytes) {
        return false;
    }
    const std::byte* p = msg.data();
    if (get<std::uint32_t>(p) != kMagic) {
        return false;
    }
    const auto kind = get<std::uint16_t>(p);
    h.count = get<std::uint16_t>(p);
    h.feed_id = get<std::uint64_t>(p);
    h.send_ns = get<std::int64_t>(p);
    if (kind == static_cast<std::uint16_t>(MsgKind::ticks)) {
        h.kind = MsgKind::ticks;
        if (msg.size() != kHeaderBytes + std::size_t{h.count} * kTickBytes) {
            return false;
        }
        for (std::uint16_t i = 0; i < h.count; ++i) {
            Tick t;
            t.channel_seq = get<std::uint64_t>(p);
            t.symbol_seq = get<std::uint32_t>(p);
            t.code = get<std::uint32_t>(p);
            t.date = get<std::uint32_t>(p);
            t.time_ms = get<std::uint32_t>(p);
            t.price = get<std::int32_t>(p);
            t.flags = get<std::uint32_t>(p);
            t.volume = get<std::int64_t>(p);
            ticks.push_back(t);
        }
        return true;
    }
    if (kind == static_cast<std::uint16_t>(MsgKind::instruments)) {
        h.kind = MsgKind::instruments;
        if (msg.size() != kHeaderBytes + std::size_t{h.count} * kInstrumentBytes) {
            return false;
        }
        for (std::uint16_t i = 0; i < h.count; ++i) {
            Instrument in;
            in.code = get<std::uint32_t>(p);
            in.date = get<std::uint32_t>(p);
            in.prev_close = get<std::int32_t>(p);
            in.limit_up = get<std::int32_t>(p);
            in.limit_down = get<std::int32_t>(p);
            instruments.push_back(in);
        }
        return true;
    }
    return false;
}

RecordWriter::~RecordWriter() {
    (void)close();
}

std::string RecordWriter::open(const std::string& path) {
    (void)close();
    f_ = std::fopen(path.c_str(), "wb");
    if (f_ == nullptr) {
        return "cannot create " + path + ": " + std::system_category().message(errno);
    }
    if (std::fwrite(kFileMagic.data(), 1, kFileMagic.size(), f_) != kFileMagic.size()) {
        return "cannot write " + path;
    }
    return {};
}

bool RecordWriter::write(std::span<const std::byte> msg) {
    const auto n = static_cast<std::uint32_t>(msg.size());
    return f_ != nullptr && std::fwrite(&n, sizeof n, 1, f_) == 1
           && std::fwrite(msg.data(), 1, msg.size(), f_) == msg.size();
}

bool RecordWriter::close() {
    if (f_ == nullptr) {
        return true;
    }
    const bool ok = std::fclose(f_) == 0;
    f_ = nullptr;
    return ok;
}

RecordReader::~RecordReader() {
    if (f_ != nullptr) {
        (void)std::fclose(f_);
    }
}

std::string RecordReader::open(const std::string& path) {
    f_ = std::fopen(path.c_str(), "rb");
    if (f_ == nullptr) {
        return "cannot open " + path + ": " + std::system_category().message(errno);
    }
    std::array<char, 8> magic{};
    if (std::fread(magic.data(), 1, magic.size(), f_) != magic.size() || magic != kFileMagic) {
        return path + " is not a market-data recording (no MDREC001 magic)";
    }
    return {};
}

bool RecordReader::next(std::vector<std::byte>& msg) {
    std::uint32_t n = 0;
    if (f_ == nullptr || std::fread(&n, sizeof n, 1, f_) != 1) {
        return false;
    }
    if (n > kMaxRecordBytes) {
        error_ = "record of " + std::to_string(n) + " bytes (at most 65536)";
        return false;
    }
    msg.resize(n);
    if (std::fread(msg.data(), 1, n, f_) != n) {
        error_ = "recording cut short";
        return false;
    }
    return true;
}

}  // namespace md
