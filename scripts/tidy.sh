#!/usr/bin/env bash
# clang-tidy (.clang-tidy at the top, function-size check included) over the library, the
# transports, the public headers (through the files that include them) and the tools, with
# the compile database of BUILD_DIR (default build/asan). Every finding fails the run.
#   scripts/tidy.sh [BUILD_DIR] [FILE...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/asan}
shift || true
[ -f "$build/compile_commands.json" ] || { echo "tidy: no $build/compile_commands.json"; exit 2; }
if [ $# -gt 0 ]; then
    files=("$@")
else
    mapfile -t files < <(git ls-files 'lib/*.cpp' 'transports/*.cpp' 'examples/tools/*.cpp')
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
printf '%s\n' "${files[@]}" | xargs -P 2 -n 1 clang-tidy -p "$build" --quiet \
    --warnings-as-errors='*' >"$log" 2>&1 || true
if grep -qE '(warning|error): ' "$log"; then
    grep -E -A3 '(warning|error): ' "$log"
    echo "tidy: $(grep -cE '(warning|error): ' "$log") findings in ${#files[@]} files"
    exit 1
fi
echo "tidy: ${#files[@]} files clean"
