#!/usr/bin/env bash
# clang-tidy (.clang-tidy at the top, function-size check included) over the library, the
# transports, the public headers (through the files that include them) and the tools, with
# the compile database of BUILD_DIR (default build/asan). Every finding fails the run. A file
# whose preprocessed text, compile command and the tidy config are unchanged since a clean
# check is not checked again (scripts/tidy_run.py: the cache, like ccache's, in ~/.cache).
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
exec scripts/tidy_run.py "$build" "${files[@]}"
