#!/usr/bin/env bash
# Hot-standby failover stall, real processes over UDP multicast on loopback (lan preset):
# runs tests/tools/stream_failover.sh for TRIALS kill -9 trials and prints, per trial, the
# greatest lateness of a delivered record against the pair's shared schedule (the failover
# stall plus this host's scheduling noise), then its median and p99 over the trials.
#   bench/stream_failover.sh [BUILD=build/release] [TRIALS=50] [SEED]
# Run it on a quiet machine: other busy processes show up as lateness.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
trials=${2:-50}
cmake --build "$build" --target stream_peer >/dev/null
tests/tools/stream_failover.sh "$build/tests/stream_peer" "$trials" ${3:+"$3"}
