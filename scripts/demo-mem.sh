#!/usr/bin/env bash
# Builds prizma (Release) and runs the in-memory demo (prizma-demo, one process): one publisher, two subscribers on the in-memory
# multicast network with 5% injected loss; PGM repairs it and both get every message in order.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-debian.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j 2 --target prizma-demo
build/release/examples/prizma-demo "$@"
