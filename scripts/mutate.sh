#!/usr/bin/env bash
# Mutation check of the test suite (docs/TESTING.md): realistic one-line bugs in the receiver,
# the source, the codec, the transports, streams, flow control, late join, the replay service,
# the recorder and packet authentication, each of which some test must catch. For each
# mutant: apply it to a copy of the source tree (this tree is never touched), build the copy
# incrementally (one build directory for all mutants), run the tests named for it, and record
# whether one of them failed (caught) or all passed (missed). Prints "caught N of M"; exits 0
# when every mutant is caught, 1 when one is missed or does not apply or build, 2 when the
# unmutated copy fails its own tests.
#
#   scripts/mutate.sh [--work DIR] [--list] [NAME...]
#
# --work DIR: the copy (DIR/src) and its build (DIR/build); default ${TMPDIR:-/tmp}/prizma-mutate,
# kept between runs (a second run rebuilds only what changed). NAME...: only these mutants.
# PRIZMA_MUTATE_JOBS (default 1): ninja and ctest parallelism. Needs bash, perl, cmake, ninja.
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
WORK=${TMPDIR:-/tmp}/prizma-mutate
JOBS=${PRIZMA_MUTATE_JOBS:-1}
LIST_ONLY=0
ONLY=()
while [ $# -gt 0 ]; do
    case $1 in
        --work) WORK=$2; shift 2 ;;
        --list) LIST_ONLY=1; shift ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) ONLY+=("$1"); shift ;;
    esac
done

# ---- the mutants ------------------------------------------------------------------------------
# mutant NAME FILE ORIGINAL MUTATED TESTS
#   ORIGINAL: an exact string that occurs once in FILE ("\n" = a line break, for context);
#   MUTATED: what replaces it; TESTS: a ctest -R regex of the tests expected to catch it.
NAMES=() FILES=() FROMS=() TOS=() TESTS=()
mutant() {
    NAMES+=("$1") FILES+=("$2") FROMS+=("$3") TOS+=("$4") TESTS+=("$5")
}
R=lib/protocol/receiver.cpp
RN=lib/protocol/nak_scheduler.cpp
S=lib/protocol/source.cpp
SR=lib/protocol/source_repair.cpp
P=lib/pgm/packet.cpp

# The eight bugs the suite let through before its boundary tests (docs/TESTING.md); the
# retry limit and the first NAK's back-off each as two.
mutant trail-off-by-one $R \
    'Sqn last_gone = *p.trail - 1;' \
    'Sqn last_gone = *p.trail;' \
    'protocol\.boundary: the trail inside a lost run'
mutant ncf-retries-gt $RN \
    'if (sl.ncf_retries >= t.nak_ncf_retries) {' \
    'if (sl.ncf_retries > t.nak_ncf_retries) {' \
    'protocol\.boundary: exactly nak_ncf_retries'
mutant data-retries-gt $RN \
    'if (sl.data_retries >= t.nak_data_retries) {' \
    'if (sl.data_retries > t.nak_data_retries) {' \
    'protocol\.boundary: exactly nak_data_retries'
mutant spm-not-heard $R \
    '    p.last_heard_ns = now_ns;\n    p.sender = who;' \
    '    p.sender = who;' \
    'protocol\.boundary: a quiet source'
mutant nnak-answered $S \
    'case PacketType::nnak: ++counters_.nnak_received; break;' \
    'case PacketType::nnak: ++counters_.nnak_received; handle_nak(p, from, now_ns, sink); break;' \
    'protocol\.an NNAK for an in-window sqn'
mutant option-past-end $P \
    'if (len < 4 || len > end - p) {' \
    'if (len < 4 || len > end - p + 1) {' \
    'unit\.an option one byte past the end'
mutant undefined-type $P \
    '        case 0x0a:' \
    '        case 0x0a: case 0x0b:' \
    'unit\.every undefined PGM type byte'
mutant gro-last-piece transports/udp/gro_policy.hpp \
    'for (std::size_t off = seg; off < d.size(); off += seg) {' \
    'for (std::size_t off = seg; off + seg < d.size(); off += seg) {' \
    'unit\.GRO split'
mutant nak-at-once-known $RN \
    'const std::int64_t deadline = backoff(now_ns);\n    const std::uint32_t mask = capacity_ - 1;\n    for (Sqn s = p.lead + 1;' \
    'const std::int64_t deadline = p.nla ? now_ns : backoff(now_ns);\n    const std::uint32_t mask = capacity_ - 1;\n    for (Sqn s = p.lead + 1;' \
    'protocol\.boundary: the first NAK waits'

# More of the same kind.
mutant backoff-zero $RN \
    'return now_ns + 1 + static_cast<std::int64_t>(r % ivl);' \
    'return now_ns + static_cast<std::int64_t>(r % ivl);' \
    'protocol\.boundary: the first NAK waits'
mutant unpark-at-once $RN \
    'const std::int64_t deadline = backoff(now_ns);\n    for (Sqn s = p.next; p.in_range(s); ++s) {' \
    'const std::int64_t deadline = now_ns;\n    for (Sqn s = p.next; p.in_range(s); ++s) {' \
    'protocol\.boundary: the first NAK waits'
mutant trail-cursor $R \
    'p.trail_done = last_gone + 1;' \
    'p.trail_done = last_gone + 2;' \
    'protocol\.boundary: the trail inside a lost run'
mutant opt-length-past-end $P \
    'if (total < 8 || d.size() < off + total) {' \
    'if (total < 8 || d.size() + 1 < off + total) {' \
    'unit\.an option one byte past the end'
mutant expiry-gt $R \
    'if (!p.expired() && now_ns - p.last_heard_ns >= cfg_.timers.peer_expiry_ns) {' \
    'if (!p.expired() && now_ns - p.last_heard_ns > cfg_.timers.peer_expiry_ns) {' \
    'hostile\.a source that never sends an SPM'
mutant spmr-cap-gt $R \
    'if (p.spmrs >= kMaxSpmrs) {' \
    'if (p.spmrs > kMaxSpmrs) {' \
    'hostile\.a source that never sends an SPM'
mutant peer-nak-holds-forever $RN \
    'if (sl.state == SlotState::back_off && !sl.yielded) {' \
    'if (sl.state == SlotState::back_off) {' \
    'hostile\.forged NCFs and NAKs every millisecond'
mutant rxw-edge $R \
    'if (distance(p.next, s) >= static_cast<std::int32_t>(capacity_)) {' \
    'if (distance(p.next, s) > static_cast<std::int32_t>(capacity_)) {' \
    'protocol\.boundary: data one window ahead'
mutant ncf-rxw-edge $RN \
    'if (precedes(s, p.next) || distance(p.next, s) >= static_cast<std::int32_t>(capacity_)) {' \
    'if (precedes(s, p.next) || distance(p.next, s) > static_cast<std::int32_t>(capacity_)) {' \
    'protocol\.boundary: an NCF one window ahead'
mutant repairs-per-sqn-gt $SR \
    'if (sl.rdata_count >= cfg_.max_repairs_per_sqn) {' \
    'if (sl.rdata_count > cfg_.max_repairs_per_sqn) {' \
    'hostile\.the same sqn NAKed every millisecond'
mutant txw-contains-next $S \
    'return next_ != trail_ && precedes_or_equal(trail_, s) && precedes(s, next_);' \
    'return next_ != trail_ && precedes_or_equal(trail_, s) && precedes_or_equal(s, next_);' \
    'protocol\.a NAK for the sqn after the lead'
mutant spm-lead-next $S \
    'spec.lead = next_ - 1;' \
    'spec.lead = next_;' \
    'protocol\.source opens with 3 SPMs'
mutant fragment-option-len $P \
    'if (len != 16 || o.has_fragment) {' \
    'if (len < 16 || o.has_fragment) {' \
    'unit\.option lengths other than their own'
mutant fragment-past-apdu $P \
    'if (f.apdu_length == 0 || f.offset > f.apdu_length || rest > f.apdu_length - f.offset) {' \
    'if (f.apdu_length == 0 || f.offset > f.apdu_length || rest > f.apdu_length - f.offset + 1) {' \
    'unit\.a fragment ending exactly at its APDU'
mutant memory-max-datagram transports/memory/memory_transport.cpp \
    'if (count_ == n || len > stride_) {' \
    'if (count_ == n || len >= stride_) {' \
    'unit\.memory network: a packet of exactly max_datagram'

# The newer code: streams, flow control, late join, the replay service, the recorder and packet
# authentication; their boundary tests were written for these (docs/TESTING.md).
ST=lib/streams/stream.cpp
FC=lib/protocol/flow_control.cpp
RS=lib/replay/server.cpp
RC=lib/streams/recorder.cpp
AU=lib/pubsub/auth.cpp
mutant stream-gap-timeout-gt $ST \
    'gap_since >= 0 && clock() - gap_since >= opt.gap_timeout.count();' \
    'gap_since >= 0 && clock() - gap_since > opt.gap_timeout.count();' \
    'unit\.stream boundary: a gap some copy can fill'
mutant stream-gone-still-able $ST \
    '        if (cp.gone) {\n            return false;\n        }\n' \
    '' \
    'unit\.stream boundary: a gap no copy can fill'
mutant stream-high-not-kept $ST \
    '    cp.has_high = true;\n    if (h.sequence < next) {' \
    '    if (h.sequence < next) {' \
    'unit\.stream boundary: a gap no copy can fill'
mutant stream-overflow-ge $ST \
    'if (s.gap_lost(out, s.held.size() > s.opt.buffer_records)) {' \
    'if (s.gap_lost(out, s.held.size() >= s.opt.buffer_records)) {' \
    'unit\.stream boundary: buffer_records held wait'
mutant stream-reset-keeps-held $ST \
    '    held.clear();\n    gap_since = -1;' \
    '    gap_since = -1;' \
    'unit\.stream boundary: an epoch reset clears'
mutant stream-reset-keeps-high $ST \
    '        cp.has_high = false;\n        cp.loss_pending = false;' \
    '        cp.loss_pending = false;' \
    'unit\.stream boundary: an epoch reset clears'
mutant stream-reset-keeps-history $ST \
    '    std::fill(hist_seq.begin(), hist_seq.end(), UINT64_MAX);\n' \
    '' \
    'unit\.stream boundary: an epoch reset forgets'
mutant stream-divergence-any-seq $ST \
    'if (hist_seq[i] == h.sequence && hist_sum[i] != h.checksum) {' \
    'if (hist_sum[i] != h.checksum) {' \
    'unit\.stream boundary: a divergence is a checksum'
mutant stream-held-not-remembered $ST \
    '    remember(next, h.checksum);\n    out = StreamEvent{StreamEventKind::record, epoch, next, 0, payload, from};' \
    '    out = StreamEvent{StreamEventKind::record, epoch, next, 0, payload, from};' \
    'unit\.stream boundary: a divergence is a checksum'
mutant flow-stall-ignores-progress $FC \
    '                             && now_ns - e.progress_ns >= cfg_.timeout_ns;' \
    '                             ;' \
    'protocol\.flow boundary: a receiver that moved just inside'
mutant flow-stall-progress-gt $FC \
    '                             && now_ns - e.progress_ns >= cfg_.timeout_ns;' \
    '                             && now_ns - e.progress_ns > cfg_.timeout_ns;' \
    'protocol\.flow boundary: a receiver that moved just inside'
mutant flow-progress-not-noted $FC \
    '        e->r.consumed = st.consumed;\n        e->progress_ns = now_ns;' \
    '        e->r.consumed = st.consumed;' \
    'protocol\.flow boundary: a receiver that moved just inside'
mutant flow-blocked-gt $FC \
    'blocked_since_ns_ >= 0 && now_ns - blocked_since_ns_ >= cfg_.timeout_ns;' \
    'blocked_since_ns_ >= 0 && now_ns - blocked_since_ns_ > cfg_.timeout_ns;' \
    'protocol\.flow boundary: a receiver that moved just inside'
mutant flow-per-address-gt $FC \
    'static_cast<std::uint32_t>(same) >= cfg_.max_per_address' \
    'static_cast<std::uint32_t>(same) > cfg_.max_per_address' \
    'protocol\.flow boundary: max_per_address'
mutant flow-laggard-gt $FC \
    'const bool laggard = e.held_ns >= cfg_.timeout_ns;' \
    'const bool laggard = e.held_ns > cfg_.timeout_ns;' \
    'protocol\.flow boundary: a laggard goes'
mutant flow-bench-le $FC \
    'return now_ns < b.until_ns ? &b : nullptr;' \
    'return now_ns <= b.until_ns ? &b : nullptr;' \
    'protocol\.flow boundary: a laggard goes'
mutant flow-laggard-alone $FC \
    'holder_ = group >= 2 && at_min == 1 ? slowest : nullptr;' \
    'holder_ = at_min == 1 ? slowest : nullptr;' \
    'protocol\.flow laggard: a receiver slowest now and then'
mutant late-loss-end-stale-lt lib/replay/late_join_rules.hpp \
    'case StreamEventKind::loss: return event_end(e) <= next;' \
    'case StreamEventKind::loss: return event_end(e) < next;' \
    'unit\.late join: an event is stale when'
mutant late-stall-at-next-stale lib/replay/late_join_rules.hpp \
    'case StreamEventKind::stall: return e.sequence < next;' \
    'case StreamEventKind::stall: return e.sequence <= next;' \
    'unit\.late join: an event is stale when'
mutant late-loss-end-off-by-one lib/replay/late_join_rules.hpp \
    ': e.kind == StreamEventKind::loss ? e.sequence + e.count' \
    ': e.kind == StreamEventKind::loss ? e.sequence + e.count - 1' \
    'unit\.late join: an event is stale when'
mutant server-request-timeout-whole $RS \
    'if (!c.closing && c.request_len < kRequestBytes && late) {' \
    'if (!c.closing && late) {' \
    'unit\.replay: a follow client idle'
mutant server-stall-unblocked $RS \
    'opt.stall_timeout.count() > 0 && c.blocked && now - c.moved_ns' \
    'opt.stall_timeout.count() > 0 && now - c.moved_ns' \
    'unit\.replay: a follow client idle'
mutant server-follow-ends $RS \
    'if (!r.follow && r.to == std::numeric_limits<std::uint64_t>::max()) {' \
    'if (r.to == std::numeric_limits<std::uint64_t>::max()) {' \
    'unit\.replay: a follow client idle'
mutant server-range-past-to $RS \
    'if (c.reader->position() >= c.req.to) {' \
    'if (c.reader->position() > c.req.to) {' \
    'unit\.replay: a range, and two clients'
mutant wire-follow-dropped lib/replay/wire.cpp \
    'r.follow = in[5] == std::byte{1};' \
    'r.follow = false;' \
    'unit\.replay: a follow client idle'
mutant recorder-group-writable $RC \
    '(st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && !o.allow_shared_directory' \
    '(st.st_mode & S_IWOTH) != 0 && !o.allow_shared_directory' \
    'unit\.recorder: a directory others can write to'
mutant recorder-record-gap $RC \
    ': e.sequence == m.next);' \
    ': e.sequence >= m.next);' \
    'unit\.recorder: loss and reset entries are journaled'
mutant recorder-loss-wrap $RC \
    'if (!in_order || Frame{kind, e.sequence, count, {}}.end() < e.sequence\n' \
    'if (!in_order\n' \
    'unit\.recorder: a position past 2'
mutant auth-skew-past-le $AU \
    'if (sent < now - skew_ms_ || sent > now + skew_ms_) {' \
    'if (sent <= now - skew_ms_ || sent > now + skew_ms_) {' \
    'unit\.auth boundary: a packet exactly max_clock_skew'
mutant auth-skew-ahead-ge $AU \
    'if (sent < now - skew_ms_ || sent > now + skew_ms_) {' \
    'if (sent < now - skew_ms_ || sent >= now + skew_ms_) {' \
    'unit\.auth boundary: a packet exactly max_clock_skew'
mutant auth-key-file-mode $AU \
    'if (st.st_uid != ::geteuid() || (st.st_mode & 077U) != 0) {' \
    'if (st.st_uid != ::geteuid()) {' \
    'unit\.auth: a key file is read only'
mutant auth-verify-checksum-kept $AU \
    '    pgm::store_be16(scratch.data() + 6, 0);\n    std::memset' \
    '    std::memset' \
    'unit\.auth: a changed byte'
mutant spm-other-nla-same $R \
    'const bool other = p.sender && (who != *p.sender || pkt.nla != p.nla);' \
    'const bool other = p.sender && who != *p.sender;' \
    'protocol\.boundary: an SPM from the pinned address'
mutant spm-pinned-alive-le $R \
    'if (other && now_ns - p.pinned_spm_ns < 2 * cfg_.timers.ambient_spm_ns) {' \
    'if (other && now_ns - p.pinned_spm_ns <= 2 * cfg_.timers.ambient_spm_ns) {' \
    'protocol\.boundary: an SPM from the pinned address'

if [ "$LIST_ONLY" = 1 ]; then
    for i in "${!NAMES[@]}"; do
        printf '%-24s %-40s %s\n' "${NAMES[$i]}" "${FILES[$i]}" "${TESTS[$i]}"
    done
    exit 0
fi
selected=()
for i in "${!NAMES[@]}"; do
    if [ ${#ONLY[@]} -eq 0 ] || [[ " ${ONLY[*]} " == *" ${NAMES[$i]} "* ]]; then
        selected+=("$i")
    fi
done
[ ${#selected[@]} -gt 0 ] || { echo "no such mutant: ${ONLY[*]}" >&2; exit 1; }

# ---- the copy and its build -------------------------------------------------------------------
COPY=$WORK/src
BUILD=$WORK/build
mkdir -p "$COPY" "$BUILD"
# Files that differ from the tree are copied with a fresh mtime (so ninja rebuilds them, also
# after an interrupted run left a mutant behind); the build dirs and .git are left out.
echo "== syncing $SRC -> $COPY"
(cd "$SRC" && find . \( -path ./build -o -path ./.git \) -prune -o -type f -print0) |
    while IFS= read -r -d '' f; do
        if ! cmp -s "$SRC/$f" "$COPY/$f" 2>/dev/null; then
            mkdir -p "$COPY/$(dirname "$f")"
            cp "$SRC/$f" "$COPY/$f"
        fi
    done
cmake -S "$COPY" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPRIZMA_BUILD_EXAMPLES=OFF -DPRIZMA_BUILD_BENCHMARKS=OFF -DPRIZMA_WARNINGS_AS_ERRORS=OFF \
      >"$WORK/cmake.log" 2>&1 || { cat "$WORK/cmake.log"; exit 2; }
TARGETS=(prizma_unit_tests prizma_protocol_tests prizma_hostile_tests)

build() {
    ninja -C "$BUILD" -j "$JOBS" "${TARGETS[@]}" >"$WORK/build.log" 2>&1
}
# run_tests REGEX: 0 when every test matching REGEX passed, 1 when one failed, 3 when none
# matched. The failed tests' names go to $WORK/failed.txt.
run_tests() {
    local out rc=0
    out=$(ctest --test-dir "$BUILD" -R "$1" -j "$JOBS" --timeout 120 --no-tests=error 2>&1) || rc=$?
    printf '%s\n' "$out" >"$WORK/ctest.log"
    if grep -q "No tests were found" <<<"$out"; then
        return 3
    fi
    sed -n '/The following tests FAILED:/,$p' <<<"$out" | sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (.*)$/\1/p' \
        >"$WORK/failed.txt"
    [ "$rc" = 0 ] && return 0
    return 1
}
# apply FILE FROM TO: replaces the one occurrence of FROM in the copy's FILE (kept first, for
# restore: the tree may have changed since the sync, the copy stays one snapshot).
apply() {
    cp "$COPY/$1" "$WORK/original"
    MUT_FROM=$2 MUT_TO=$3 perl -0777 -e '
        my ($from, $to) = map { s/\\n/\n/gr } @ENV{qw(MUT_FROM MUT_TO)};
        local $/; my $text = <STDIN>;
        my $n = () = $text =~ /\Q$from\E/g;
        if ($n != 1) { print STDERR "found $n times\n"; exit 3; }
        $text =~ s/\Q$from\E/$to/;
        print $text;' <"$COPY/$1" >"$COPY/$1.mutant" && mv "$COPY/$1.mutant" "$COPY/$1"
}
restore() {
    rm -f "$COPY/$1.mutant"
    cp "$WORK/original" "$COPY/$1"  # a fresh mtime: rebuilt
}

echo "== baseline: the unmutated copy builds and passes every test named below"
build || { tail -n 40 "$WORK/build.log"; echo "baseline build failed" >&2; exit 2; }
all_tests=$(for i in "${selected[@]}"; do printf '%s\n' "${TESTS[$i]}"; done | sort -u | paste -sd'|')
if ! run_tests "$all_tests"; then
    cat "$WORK/ctest.log"
    echo "baseline: the unmutated copy fails (or lacks) the tests named for the mutants" >&2
    exit 2
fi

caught=0
total=0
bad=0
results=()
for i in "${selected[@]}"; do
    name=${NAMES[$i]} file=${FILES[$i]}
    total=$((total + 1))
    t0=$(date +%s)
    printf '== %-24s %s ... ' "$name" "$file"
    verdict=""
    if ! apply "$file" "${FROMS[$i]}" "${TOS[$i]}" 2>"$WORK/apply.log"; then
        verdict="NOT APPLIED ($(cat "$WORK/apply.log"); the line changed?)"
        bad=$((bad + 1))
    elif ! build; then
        verdict="DID NOT BUILD (see $WORK/build.log)"
        bad=$((bad + 1))
        cp "$WORK/build.log" "$WORK/build-$name.log"
    else
        rc=0
        run_tests "${TESTS[$i]}" || rc=$?
        case $rc in
            0) verdict="MISSED" ;;
            1) verdict="caught by: $(paste -sd';' "$WORK/failed.txt")"; caught=$((caught + 1)) ;;
            *) verdict="NO TESTS match '${TESTS[$i]}'"; bad=$((bad + 1)) ;;
        esac
    fi
    restore "$file"
    echo "$verdict ($(($(date +%s) - t0)) s)"
    results+=("$(printf '%-24s %s' "$name" "$verdict")")
done
build || true  # leave the copy's build unmutated

echo
echo "== results"
printf '%s\n' "${results[@]}"
echo "caught $caught of $total"
[ "$caught" = "$total" ] && [ "$bad" = 0 ]
