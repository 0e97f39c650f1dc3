#!/usr/bin/env bash
# Mutation check of the test suite (docs/TESTING.md): realistic one-line bugs in the receiver,
# the source, the codec and the transports, each of which some test must catch. For each
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
S=lib/protocol/source.cpp
P=lib/pgm/packet.cpp

# The eight bugs the suite let through before its boundary tests (docs/TESTING.md); the
# retry limit and the first NAK's back-off each as two.
mutant trail-off-by-one $R \
    'Sqn last_gone = p.trail - 1;' \
    'Sqn last_gone = p.trail;' \
    'protocol\.boundary: the trail inside a lost run'
mutant ncf-retries-gt $R \
    'if (sl.ncf_retries >= t.nak_ncf_retries) {' \
    'if (sl.ncf_retries > t.nak_ncf_retries) {' \
    'protocol\.boundary: exactly nak_ncf_retries'
mutant data-retries-gt $R \
    'if (sl.data_retries >= t.nak_data_retries) {' \
    'if (sl.data_retries > t.nak_data_retries) {' \
    'protocol\.boundary: exactly nak_data_retries'
mutant spm-not-heard $R \
    '    p.last_heard_ns = now_ns;\n    p.pinned = true;' \
    '    p.pinned = true;' \
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
mutant nak-at-once-known $R \
    'const std::int64_t deadline = backoff(now_ns);\n    const std::uint32_t mask = capacity_ - 1;\n    for (Sqn s = p.lead + 1;' \
    'const std::int64_t deadline = p.has_nla ? now_ns : backoff(now_ns);\n    const std::uint32_t mask = capacity_ - 1;\n    for (Sqn s = p.lead + 1;' \
    'protocol\.boundary: the first NAK waits'

# More of the same kind.
mutant backoff-zero $R \
    'return now_ns + 1 + static_cast<std::int64_t>(r % ivl);' \
    'return now_ns + static_cast<std::int64_t>(r % ivl);' \
    'protocol\.boundary: the first NAK waits'
mutant unpark-at-once $R \
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
    'if (!p.expired && now_ns - p.last_heard_ns >= cfg_.timers.peer_expiry_ns) {' \
    'if (!p.expired && now_ns - p.last_heard_ns > cfg_.timers.peer_expiry_ns) {' \
    'hostile\.a source that never sends an SPM'
mutant spmr-cap-gt $R \
    'if (p.spmrs >= kMaxSpmrs) {' \
    'if (p.spmrs > kMaxSpmrs) {' \
    'hostile\.a source that never sends an SPM'
mutant peer-nak-holds-forever $R \
    'if (sl.state == SlotState::back_off && !sl.yielded) {' \
    'if (sl.state == SlotState::back_off) {' \
    'hostile\.forged NCFs and NAKs every millisecond'
mutant rxw-edge $R \
    'if (distance(p.next, s) >= static_cast<std::int32_t>(capacity_)) {' \
    'if (distance(p.next, s) > static_cast<std::int32_t>(capacity_)) {' \
    'protocol\.boundary: data one window ahead'
mutant ncf-rxw-edge $R \
    'if (precedes(s, p.next) || distance(p.next, s) >= static_cast<std::int32_t>(capacity_)) {' \
    'if (precedes(s, p.next) || distance(p.next, s) > static_cast<std::int32_t>(capacity_)) {' \
    'protocol\.boundary: an NCF one window ahead'
mutant repairs-per-sqn-gt $S \
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
