#!/usr/bin/env bash
# Builds prizma and runs the whole test suite, as CI does:
#   1. clang-format check
#   2. gcc build, warnings as errors, ASan + UBSan: unit, protocol, headers tests (ctest)
#   3. ThreadSanitizer build of the cross-thread tests
#   4. clang libFuzzer build of the packet parser + state machines, run for FUZZ_SECONDS
#   5. Release build: benchmark smoke run and the demo
#   6. verbs tests on real libibverbs: Soft-RoCE (rdma_rxe) in a qemu VM (tests/verbs/vm/run.sh)
# Installs its own dependencies from Debian packages first (scripts/setup-debian.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

scripts/setup-debian.sh

echo "== clang-format"
git ls-files '*.cpp' '*.hpp' | xargs clang-format --dry-run -Werror

echo "== ASan/UBSan build + tests"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPRIZMA_WARNINGS_AS_ERRORS=ON -DPRIZMA_SANITIZE=address,undefined -DPRIZMA_OWNER_CHECKS=ON \
      -DPRIZMA_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build/asan -j 2
ctest --test-dir build/asan -j 2 --output-on-failure --timeout 900

echo "== ThreadSanitizer: the cross-thread pieces (AgentRunner, PublishQueue)"
cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPRIZMA_SANITIZE=thread \
      -DPRIZMA_WARNINGS_AS_ERRORS=ON -DPRIZMA_BUILD_BENCHMARKS=OFF -DPRIZMA_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build/tsan -j 2 --target prizma_unit_tests
TSAN_OPTIONS=halt_on_error=1 build/tsan/tests/prizma_unit_tests "[runner]"

echo "== fuzz (${FUZZ_SECONDS}s)"
cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
      -DPRIZMA_BUILD_FUZZERS=ON -DPRIZMA_BUILD_TESTS=OFF -DPRIZMA_BUILD_BENCHMARKS=OFF \
      -DPRIZMA_BUILD_EXAMPLES=OFF -DPRIZMA_WARNINGS_AS_ERRORS=ON >/dev/null
cmake --build build/fuzz -j 2
mkdir -p build/fuzz/corpus
cp -n tests/fuzz/corpus/* build/fuzz/corpus/
build/fuzz/tests/fuzz/prizma_packet_fuzz -max_total_time="${FUZZ_SECONDS}" -max_len=2048 \
      -print_final_stats=1 build/fuzz/corpus 2>&1 | tail -n 12

echo "== Release build: benchmark smoke + demo"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DPRIZMA_WARNINGS_AS_ERRORS=ON >/dev/null
cmake --build build/release -j 2
build/release/examples/prizma-demo --messages 5000
ctest --test-dir build/release -L bench-smoke --output-on-failure

echo "== verbs UD on Soft-RoCE (qemu VM, rdma_rxe)"
PRIZMA_VM_BUILD=build/release tests/verbs/vm/run.sh
