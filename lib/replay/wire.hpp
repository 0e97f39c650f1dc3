// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <prizma/replay.hpp>

// The replay service's request (docs/STREAMS.md, "The replay protocol"), its addresses and its
// allow-list; the frames are the journal's (lib/streams/recorder_format.hpp).
namespace prizma::replay {

constexpr std::size_t kRequestBytes = 32;
constexpr std::uint32_t kMagic = 0x50525A52;  // "PRZR"
/// 2: the answer's frames are journal format 2 (XXH3 checks, recorder_format.hpp). Version 1
/// peers (format 1 frames) are refused by name, not read as garbage.
constexpr std::uint8_t kProtocolVersion = 2;

void encode_request(std::byte* out, const ReplayRequest& r) noexcept;
/// False for anything but a well-formed request (magic, version, reserved bytes zero).
bool decode_request(const std::byte* in, ReplayRequest& r) noexcept;
/// The protocol version of a request that starts with the magic, 0 for other bytes.
unsigned request_version(const std::byte* in) noexcept;
/// Why a request of `version` (not ours) is refused: both versions named.
std::string version_refusal(unsigned version);

/// The client's side of the frame stream: bytes in, journal entries out. Every length is
/// checked (at most journal::kMaxBody) before any memory is sized from it.
class FrameReader {
public:
    enum class Next : std::uint8_t { entry, end, error_frame, need_more, malformed };

    FrameReader() : buf_(std::size_t{1} << 20U) {}
    /// The next frame: an entry (its record valid until the next call), the end frame, the
    /// server's error frame (code in `error_code`, its text in `error`), or need_more.
    /// malformed: a bad header, or a length past kMaxBody (`error` says which).
    Next next(JournalEntry& out, std::uint64_t& error_code, std::string& error);
    /// Where the next bytes go (compacts, and grows for a large frame whose length was
    /// checked); never empty after need_more.
    std::span<std::byte> space() noexcept;
    void commit(std::size_t n) noexcept { len_ += n; }

private:
    std::vector<std::byte> buf_;
    std::size_t begin_ = 0;
    std::size_t len_ = 0;
};

/// A numeric IPv4 or IPv6 address and a port. Errors: Errc::invalid_argument.
Result<std::pair<sockaddr_storage, socklen_t>, Error> socket_address(std::string_view address,
                                                                     std::uint16_t port);

/// A peer's address as a family and 16 bytes (IPv4 and IPv4-mapped IPv6 alike as IPv4).
struct PeerAddress {
    int family = AF_UNSPEC;
    std::uint8_t bytes[16]{};
    friend bool operator==(const PeerAddress& a, const PeerAddress& b) noexcept;
};
PeerAddress peer_address(const sockaddr_storage& sa) noexcept;

/// An allow-list entry: "10.1.0.0/16", "fd00::/8", or a bare address (all its bits).
struct Prefix {
    PeerAddress net;
    unsigned bits = 0;
    [[nodiscard]] bool contains(const PeerAddress& a) const noexcept;
};
/// Errors: Errc::invalid_argument naming the entry.
Result<std::vector<Prefix>, Error> parse_allow_list(const std::vector<std::string>& entries);

}  // namespace prizma::replay
