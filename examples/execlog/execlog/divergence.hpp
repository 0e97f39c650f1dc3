// SPDX-License-Identifier: Apache-2.0
// The archiver's divergence policy (docs/EXECLOG.md, "Divergence"): every copy of recent records
// as heard on the channel (a passive tap), so that when two cores' copies of a record differ
// the archive keeps both, with a marker; and the halt until an operator decides.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <prizma/prizma.hpp>

namespace execlog {

/// The copies of the last `slots` sequence numbers, up to four sources each (a restarted core
/// is a new source). Owner thread only.
class CopyTap {
public:
    CopyTap(std::uint32_t stream_id, std::size_t slots);
    /// Files every data message `sub` has now (never NAKs, never holds anything back).
    void read(prizma::Subscriber& sub);
    /// The whole record (header + payload) of `sequence` from `source`, if heard and still kept.
    [[nodiscard]] std::optional<std::span<const std::byte>> copy(std::uint64_t sequence,
                                                                 const prizma::Tsi& source) const;

private:
    struct Copy {
        prizma::Tsi source{};
        std::vector<std::byte> bytes;
    };
    struct Slot {
        std::uint64_t sequence = UINT64_MAX;
        std::uint32_t epoch = 0;
        std::vector<Copy> copies;  // at most kCopies
    };
    static constexpr std::size_t kCopies = 4;
    std::uint32_t stream_id_;
    std::vector<Slot> slots_;
};

/// One divergence waiting for its marker: the journaled copy came from `journaled`, the copy
/// from `differing` differs.
struct Divergence {
    std::uint64_t sequence = 0;
    prizma::Tsi journaled{};
    prizma::Tsi differing{};
    std::int64_t seen_ns = 0;
};

/// The marker line for `d` (`divergence record S journaled SRC HEX differing SRC HEX`, a copy
/// not captured written as `-`).
std::string divergence_marker(const Divergence& d,
                              std::optional<std::span<const std::byte>> journaled,
                              std::optional<std::span<const std::byte>> differing);

/// Appends `line` to `path` (created 0600) and fsyncs it. Returns an error text, empty on
/// success.
std::string append_durably(const std::string& path, const std::string& line);

/// The marker line of a dispute (`dispute record S copy SRC CHECKSUM HEX ...`, the first heard
/// first): the copies of a record that disagree with no quorum, none journaled yet.
std::string dispute_marker(std::uint64_t sequence, std::span<const prizma::DisputedCopy> copies);

/// The operator's decision for a halt at `sequence`, read from `path`:
/// - "continue SEQ": go on (after a divergence: keep the journaled copy; in a dispute: journal
///   the copy heard first);
/// - "use SEQ WHICH": in a dispute, journal the copy WHICH names: its checksum (16 hex digits)
///   or its source (as printed: a core's name or gsi-hex, then .port);
/// - "stop SEQ": end the archiver; the session is restarted on a new epoch.
/// nullopt while there is none for this sequence.
enum class Decision : std::uint8_t { go_on, use, stop };
struct OperatorDecision {
    Decision what = Decision::go_on;
    std::string which;  ///< use: the copy named
};
std::optional<OperatorDecision> read_decision(const std::string& path, std::uint64_t sequence);

/// The copy of `copies` that `which` names (checksum in hex, or source text); nullopt if none.
std::optional<std::uint64_t> pick_copy(std::span<const prizma::DisputedCopy> copies,
                                       const std::string& which);

}  // namespace execlog
