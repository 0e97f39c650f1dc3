#!/usr/bin/env bash
# Builds prizma and runs its tests, in three tiers (each stage prints its time):
#
#   scripts/test.sh quick   before every commit: the unit, protocol, hostile and header tests
#                           in the ASan + UBSan build (no child processes, no network but
#                           the in-memory one), a few minutes after the build
#   scripts/test.sh         CI (.ci/run, the README's test command): every test once
#     1. clang-format check
#     2. gcc build, warnings as errors, ASan + UBSan: every ctest but the `long` label, those
#        labelled `root` as root, the rest as an unprivileged user (below)
#     3. clang-tidy (.clang-tidy, function-size check included) on lib/, transports/,
#        include/ and the tools, from the ASan build's compile database; files unchanged since
#        a clean check are not checked again (scripts/tidy_run.py)
#     4. ThreadSanitizer build of the cross-thread tests
#     5. clang libFuzzer build: the fuzz corpora replayed, then FUZZ_SECONDS of exploration
#        (two fuzzers at a time, one per core) each for the packet parser, the stateful
#        Source/Receiver fuzzer and the journal
#        readers (JournalReader, the Recorder's recovery, journal::parse) and the replay wire
#     6. Release build: only the tests the sanitizer build skipped or does not have (the
#        install test, the benchmark smoke runs; scripts/ctest_subset.py), then the demos
#     7. verbs tests on real libibverbs: Soft-RoCE (rdma_rxe) in a qemu VM (tests/verbs/vm/run.sh)
#   scripts/test.sh full    CI, then the `long` label in the Release build, long fuzzing
#                           (FUZZ_SECONDS=600) and the mutation run (scripts/mutate.sh)
#
# Installs its own dependencies from Debian packages first (scripts/setup-debian.sh). Builds
# go through ccache (paths relative to the checkout, so a second clone hits the same cache).
set -euo pipefail
cd "$(dirname "$0")/.."
tier=${1:-ci}
case "$tier" in
    quick | ci | full) ;;
    *) echo "usage: scripts/test.sh [quick|ci|full]" >&2; exit 2 ;;
esac
if [ "$tier" = full ]; then
    FUZZ_SECONDS=${FUZZ_SECONDS:-600}
fi
FUZZ_SECONDS=${FUZZ_SECONDS:-45}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export CCACHE_BASEDIR=$PWD
export CCACHE_NOHASHDIR=1
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

t_all=$(date +%s)
t_stage=$t_all
stage_name=""
stage() {  # stage NAME: ends the previous stage (printing its time) and starts NAME
    local now
    now=$(date +%s)
    if [ -n "$stage_name" ]; then
        echo "== ${stage_name}: done in $((now - t_stage)) s"
    fi
    stage_name=$1
    t_stage=$now
    [ -n "$stage_name" ] && echo "== $stage_name"
    return 0
}
launcher=()
if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi

stage "setup (Debian packages)"
scripts/setup-debian.sh

asan_configure() {
    cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
          -DPRIZMA_WARNINGS_AS_ERRORS=ON -DPRIZMA_SANITIZE=address,undefined -DPRIZMA_OWNER_CHECKS=ON \
          -DPRIZMA_BUILD_BENCHMARKS=OFF "${launcher[@]}" >/dev/null
}

if [ "$tier" = quick ]; then
    stage "ASan/UBSan build of the in-process tests"
    asan_configure
    cmake --build build/asan -j 2 --target prizma_unit_tests prizma_protocol_tests \
          prizma_hostile_tests prizma_header_check
    stage "unit, protocol, hostile, header tests"
    ctest --test-dir build/asan -j 2 --output-on-failure --timeout 300 \
          -L '^(unit|protocol|hostile|headers)$' -LE '^(long|integration)$'
    stage ""
    echo "== quick tier passed in $(($(date +%s) - t_all)) s"
    exit 0
fi

# The process and example tests run as an unprivileged user with Linux's default limits (1,024
# open files, 8 MiB of locked memory, socket buffers capped by net.core.rmem_max), as most
# users run prizma; only the tests labelled `root` run as root, each saying why (network
# namespaces, iptables, packet capture), those labelled `tree` as the checkout's owner (they
# write the build tree), and the cases the user's run skipped for want of root once more. As root the script creates that user (prizma-ci) and
# makes the checkout's parent directories traversable for it; a user running the script is
# that user already.
as_user() { "$@"; }
if [ "$(id -u)" -eq 0 ]; then
    ci_user=prizma-ci
    id -u "$ci_user" >/dev/null 2>&1 ||
        useradd --system --create-home --shell /usr/sbin/nologin "$ci_user"
    dirs=()
    d=$PWD
    while [ "$d" != / ]; do dirs=("$d" "${dirs[@]}"); d=$(dirname "$d"); done
    for d in "${dirs[@]}"; do
        if ! runuser -u "$ci_user" -- test -x "$d"; then
            chmod o+x "$d"
            echo "test.sh: made $d traversable (o+x) for $ci_user"
        fi
    done
    as_user() {
        mkdir -p build/asan/Testing build/release/Testing
        chown -R "$ci_user" build/asan/Testing build/release/Testing
        runuser -u "$ci_user" -- bash -c 'ulimit -S -n 1024 && ulimit -l 8192 && exec "$@"' as_user "$@"
    }
fi

stage "clang-format"
git ls-files '*.cpp' '*.hpp' | xargs clang-format --dry-run -Werror

stage "ASan/UBSan build + every test (long: scripts/test.sh full)"
asan_configure
cmake --build build/asan -j 2
ctest --test-dir build/asan -j 2 --output-on-failure --timeout 900 -L '^(root|tree)$' -LE long \
    2>&1 | tee "$logs/asan.log"
test "${PIPESTATUS[0]}" -eq 0
as_user ctest --test-dir build/asan -j 2 --output-on-failure --timeout 900 \
    -LE '^(long|root|tree)$' 2>&1 | tee -a "$logs/asan.log"
test "${PIPESTATUS[0]}" -eq 0
# What the user's run skipped because it needs root (a case says so: PRIZMA_SKIP), as root.
skipped=$(scripts/ctest_subset.py "$logs/asan.log" build/asan build/asan long)
if [ -n "$skipped" ] && [ "$(id -u)" -eq 0 ]; then
    ctest --test-dir build/asan -j 2 --output-on-failure --timeout 900 -I "$skipped" 2>&1 |
        tee -a "$logs/asan.log"
    test "${PIPESTATUS[0]}" -eq 0
fi

stage "clang-tidy"
scripts/tidy.sh build/asan

stage "ThreadSanitizer: the cross-thread pieces (AgentRunner, PublishQueue, Recorder, AhCache)"
cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPRIZMA_SANITIZE=thread \
      -DPRIZMA_WARNINGS_AS_ERRORS=ON -DPRIZMA_BUILD_BENCHMARKS=OFF -DPRIZMA_BUILD_EXAMPLES=OFF \
      "${launcher[@]}" >/dev/null
cmake --build build/tsan -j 2 --target prizma_unit_tests
TSAN_OPTIONS=halt_on_error=1 build/tsan/tests/prizma_unit_tests "[runner]"
TSAN_OPTIONS=halt_on_error=1 build/tsan/tests/prizma_unit_tests "[recorder]"
TSAN_OPTIONS=halt_on_error=1 build/tsan/tests/prizma_unit_tests "[ahcache]"

stage "fuzz: corpora replayed, then 4 x ${FUZZ_SECONDS}s of exploration, two at a time"
cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
      -DPRIZMA_BUILD_FUZZERS=ON -DPRIZMA_BUILD_TESTS=OFF -DPRIZMA_BUILD_BENCHMARKS=OFF \
      -DPRIZMA_BUILD_EXAMPLES=OFF -DPRIZMA_WARNINGS_AS_ERRORS=ON "${launcher[@]}" >/dev/null
cmake --build build/fuzz -j 2
mkdir -p build/fuzz/corpus build/fuzz/corpus_stateful build/fuzz/corpus_journal \
      build/fuzz/corpus_replay
cp -n tests/fuzz/corpus/* build/fuzz/corpus/
cp -n tests/fuzz/corpus_stateful/* build/fuzz/corpus_stateful/
cp -n tests/fuzz/corpus_journal/* build/fuzz/corpus_journal/
cp -n tests/fuzz/corpus_replay/* build/fuzz/corpus_replay/
# Every input of the checked-in corpora once (the bugs found before, as regression tests).
build/fuzz/tests/fuzz/prizma_packet_fuzz -runs=0 -max_len=2048 tests/fuzz/corpus 2>&1 | tail -n 2
build/fuzz/tests/fuzz/prizma_stateful_fuzz -runs=0 -max_len=4096 tests/fuzz/corpus_stateful \
      2>&1 | tail -n 2
build/fuzz/tests/fuzz/prizma_journal_fuzz -runs=0 -max_len=8192 tests/fuzz/corpus_journal \
      2>&1 | tail -n 2
build/fuzz/tests/fuzz/prizma_replay_fuzz -runs=0 -max_len=16384 tests/fuzz/corpus_replay \
      2>&1 | tail -n 2
# Exploration: libFuzzer runs one thread, so two fuzzers at a time (one per core), each
# for FUZZ_SECONDS; a crash fails the stage after both of the pair have finished.
explore() {  # explore NAME FUZZER ARGS...: in the background, its log in $logs/NAME.log
    local name=$1
    shift
    "$@" >"$logs/$name.log" 2>&1 &
    fuzz_pids+=($!)
    fuzz_names+=("$name")
}
explored() {  # waits for the pair, prints each one's final stats, fails on any crash
    local i rc=0
    for i in "${!fuzz_pids[@]}"; do
        if ! wait "${fuzz_pids[$i]}"; then
            rc=1
            echo "fuzz: ${fuzz_names[$i]} FAILED:"
            tail -n 40 "$logs/${fuzz_names[$i]}.log"
        else
            echo "fuzz: ${fuzz_names[$i]}:"
            tail -n 12 "$logs/${fuzz_names[$i]}.log"
        fi
    done
    fuzz_pids=()
    fuzz_names=()
    return $rc
}
fuzz_pids=()
fuzz_names=()
explore packet build/fuzz/tests/fuzz/prizma_packet_fuzz -max_total_time="${FUZZ_SECONDS}" \
      -max_len=2048 -print_final_stats=1 build/fuzz/corpus
# Packet sequences against a Source and a Receiver, invariants checked after every step
# (tests/fuzz/stateful_fuzz.cpp; its known_* inputs are the bugs it found, now fixed). Entropic
# scheduling off: its per-feature bookkeeping took two thirds of the time of these long runs.
explore stateful build/fuzz/tests/fuzz/prizma_stateful_fuzz -max_total_time="${FUZZ_SECONDS}" \
      -max_len=4096 -entropic=0 -print_final_stats=1 build/fuzz/corpus_stateful
explored
# Any bytes as a journal segment and index (tests/fuzz/journal_fuzz.cpp): read, recovered. A
# length read from the file that sized a buffer before its bytes were checked would pass the
# malloc limit.
explore journal build/fuzz/tests/fuzz/prizma_journal_fuzz -max_total_time="${FUZZ_SECONDS}" \
      -max_len=8192 -rss_limit_mb=2048 -malloc_limit_mb=64 -print_final_stats=1 \
      build/fuzz/corpus_journal
# The replay wire, both ends (tests/fuzz/replay_fuzz.cpp): a frame length sizing a buffer
# before it was checked would pass the malloc limit (the largest frame is 16 MiB + 32).
explore replay build/fuzz/tests/fuzz/prizma_replay_fuzz -max_total_time="${FUZZ_SECONDS}" \
      -max_len=16384 -rss_limit_mb=2048 -malloc_limit_mb=32 -print_final_stats=1 \
      build/fuzz/corpus_replay
explored

stage "Release build + what the sanitizer build could not run + the demos"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DPRIZMA_WARNINGS_AS_ERRORS=ON \
      "${launcher[@]}" >/dev/null
cmake --build build/release -j 2
subset=$(scripts/ctest_subset.py "$logs/asan.log" build/asan build/release long)
if [ -n "$subset" ]; then
    ctest --test-dir build/release -j 2 --output-on-failure --timeout 900 -I "$subset" \
        -L '^(root|tree)$'
    as_user ctest --test-dir build/release -j 2 --output-on-failure --timeout 900 -I "$subset" \
        -LE '^(root|tree)$'

fi
scripts/demo.sh 5000  # it configures and builds build/release: as the checkout's owner
as_user build/release/examples/prizma-demo --messages 5000

if [ "$tier" = full ]; then
    stage "long tests (Release), the mutation run"
    ctest --test-dir build/release --output-on-failure --timeout 3600 -L long
fi

stage "verbs UD on Soft-RoCE (qemu VM, rdma_rxe)"
PRIZMA_VM_BUILD=build/release tests/verbs/vm/run.sh

stage ""
echo "== all stages of the $tier tier passed in $(($(date +%s) - t_all)) s"
