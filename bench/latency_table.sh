#!/bin/bash
# bench/latency_table.sh - issue 34's figures from one run, each beside its target: ping-pong
# RTT against raw UDP in both wait modes (rtt_modes.sh), the ExecLog figures against their raw
# one-way baseline, the archiver rate and failover (execlog.sh, root), and 100-byte throughput
# against raw UDP and OpenPGM (compare.sh). One after the other on a quiet machine (~12 min).
#
#   bench/latency_table.sh [--rounds N] [--trials N] [--reps N]
# Output: every step's own table, then the three tables together in $OUT/table.md (default
# build/release/latency-table-YYYYmmdd-HHMMSS).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=9
TRIALS=50
REPS=3
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) ROUNDS=$2; shift 2 ;;
	--trials) TRIALS=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	-h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "latency_table.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
	esac
done
BUILD=${PRIZMA_BUILD:-build/release}
OUT=${OUT:-$BUILD/latency-table-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
table=$OUT/table.md
{
	echo "# issue 34 figures, $(date -u +%FT%TZ), $(nproc) CPUs, $(uname -r)"
	echo
	echo "## Ping-pong RTT, 140 B, closed loop (targets: spin p50 ≤ 1.05× raw, p99 ≤ 1.2×;"
	echo "## blocking p50 ≤ 1.10× raw, p99 ≤ 1.3×)"
	echo
} >"$table"
OUT=$OUT/rtt bench/rtt_modes.sh --rounds "$ROUNDS" | tee "$OUT/rtt.log"
grep '^|' "$OUT/rtt.log" >>"$table"
{
	echo
	echo "## ExecLog (target: core → risk p50 ≤ 1.5× raw one-way; archiver ≥ 1 M records/s)"
	echo
} >>"$table"
bench/execlog.sh "$BUILD" --trials "$TRIALS" | tee "$OUT/execlog.log"
sed -n '/^== table/,$p' "$OUT/execlog.log" | grep '^|' >>"$table"
{
	echo
	echo "## 100 B throughput, one publisher → one subscriber (target ≥ 10 M msgs/s lossless)"
	echo
} >>"$table"
OUT=$OUT/compare bench/compare.sh --reps "$REPS" --sizes 100 | tee "$OUT/compare.log"
grep '^|' "$OUT/compare.log" >>"$table"
echo
cat "$table"
