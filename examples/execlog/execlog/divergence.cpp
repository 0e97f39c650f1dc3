// SPDX-License-Identifier: Apache-2.0
#include "execlog/divergence.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <system_error>

#include <fmt/core.h>

#include "execlog/feed.hpp"

namespace execlog {

CopyTap::CopyTap(std::uint32_t stream_id, std::size_t slots)
    : stream_id_(stream_id), slots_(slots) {}

void CopyTap::read(prizma::Subscriber& sub) {
    prizma::Message m;
    while (sub.next(m)) {
        prizma::RecordHeader h;
        if (m.kind != prizma::MessageKind::data || !prizma::RecordHeader::read(m.payload, h)
            || h.stream_id != stream_id_) {
            continue;
        }
        Slot& s = slots_[h.sequence % slots_.size()];
        if (s.sequence != h.sequence || s.epoch != h.epoch) {
            s.sequence = h.sequence;
            s.epoch = h.epoch;
            s.copies.clear();
        }
        bool known = false;
        for (const Copy& c : s.copies) {
            known = known || c.source == m.tsi;
        }
        if (!known && s.copies.size() < kCopies) {
            s.copies.push_back(Copy{m.tsi, {m.payload.begin(), m.payload.end()}});
        }
    }
}

std::optional<std::span<const std::byte>> CopyTap::copy(std::uint64_t sequence,
                                                        const prizma::Tsi& source) const {
    const Slot& s = slots_[sequence % slots_.size()];
    if (s.sequence != sequence) {
        return std::nullopt;
    }
    for (const Copy& c : s.copies) {
        if (c.source == source) {
            return std::span<const std::byte>(c.bytes);
        }
    }
    return std::nullopt;
}

namespace {

std::string hex(std::optional<std::span<const std::byte>> bytes) {
    if (!bytes) {
        return "-";
    }
    std::string s;
    s.reserve(bytes->size() * 2);
    for (const std::byte b : *bytes) {
        s += fmt::format("{:02x}", static_cast<unsigned>(b));
    }
    return s;
}

}  // namespace

std::string divergence_marker(const Divergence& d,
                              std::optional<std::span<const std::byte>> journaled,
                              std::optional<std::span<const std::byte>> differing) {
    return fmt::format("divergence record {} journaled {} {} differing {} {}\n", d.sequence,
                       tsi_text(d.journaled), hex(journaled), tsi_text(d.differing),
                       hex(differing));
}

std::string append_durably(const std::string& path, const std::string& line) {
    const int fd =
        ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        return fmt::format("cannot open '{}': {}", path,
                           std::error_code(errno, std::system_category()).message());
    }
    std::size_t done = 0;
    std::string err;
    while (done < line.size() && err.empty()) {
        const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            err = std::error_code(n < 0 ? errno : EIO, std::system_category()).message();
        } else {
            done += static_cast<std::size_t>(n);
        }
    }
    if (err.empty() && ::fsync(fd) != 0) {
        err = std::error_code(errno, std::system_category()).message();
    }
    if (::close(fd) != 0 && err.empty()) {
        err = std::error_code(errno, std::system_category()).message();
    }
    return err.empty() ? err : fmt::format("'{}': {}", path, err);
}

std::string dispute_marker(std::uint64_t sequence, std::span<const prizma::DisputedCopy> copies) {
    std::string line = fmt::format("dispute record {}", sequence);
    for (const auto& c : copies) {
        line += fmt::format(" copy {} {:016x} {}", tsi_text(c.source), c.checksum, hex(c.record));
    }
    return line + "\n";
}

std::optional<OperatorDecision> read_decision(const std::string& path, std::uint64_t sequence) {
    std::ifstream f(path);
    std::string word;
    std::uint64_t at = 0;
    if (!(f >> word >> at) || at != sequence) {
        return std::nullopt;
    }
    if (word == "continue") {
        return OperatorDecision{Decision::go_on, {}};
    }
    if (word == "stop") {
        return OperatorDecision{Decision::stop, {}};
    }
    std::string which;
    if (word == "use" && f >> which) {
        return OperatorDecision{Decision::use, which};
    }
    return std::nullopt;
}

std::optional<std::uint64_t> pick_copy(std::span<const prizma::DisputedCopy> copies,
                                       const std::string& which) {
    for (const auto& c : copies) {
        if (fmt::format("{:016x}", c.checksum) == which || tsi_text(c.source) == which) {
            return c.checksum;
        }
    }
    return std::nullopt;
}

}  // namespace execlog
