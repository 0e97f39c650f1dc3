#!/bin/bash
# bench/rtt_modes.sh - ping-pong round trips, prizma against raw UDP in the same wait mode, in
# one run: closed loop, loopback multicast, ping on CPU 0 and pong on CPU 1.
#
#   bench/rtt_modes.sh [--rounds N] [--count N] [--size BYTES] [--modes "spin block"]
#
#   spin:  raw UDP busy-polls recv(MSG_DONTWAIT); prizma-ping/-pong --wait spin
#   block: raw UDP recv(MSG_DONTWAIT), then epoll_wait when empty; prizma --wait block
# Both sides of both systems set a 1 us timer slack. Each round runs the four pairs with the
# systems' order reversed every other round; a system's p50 and p99 are divided by raw UDP's of
# the same round and mode, and the table gives the medians of those ratios over the rounds
# (default 5) beside the median absolute figures. JSON and the table go to $OUT (default
# build/rtt-modes-YYYYmmdd-HHMMSS); the table is also printed. Needs a quiet machine.
set -u
cd "$(dirname "$0")/.."
ROUNDS=5
COUNT=20000
SIZE=140
MODES="spin block"
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) ROUNDS=$2; shift 2 ;;
	--count) COUNT=$2; shift 2 ;;
	--size) SIZE=$2; shift 2 ;;
	--modes) MODES=$2; shift 2 ;;
	-h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "rtt_modes.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
	esac
done
for v in "$ROUNDS" "$COUNT" "$SIZE"; do
	case $v in '' | *[!0-9]* | 0) echo "rtt_modes.sh: counts must be positive numbers" >&2; exit 2 ;; esac
done
BUILD=${PRIZMA_BUILD:-build/release}
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
	cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
fi
cmake --build "$BUILD" -j 2 --target prizma-ping prizma-pong udp_perf >/dev/null ||
	{ echo "rtt_modes.sh: build failed" >&2; exit 1; }
PING=$BUILD/examples/prizma-ping
PONG=$BUILD/examples/prizma-pong
UDP=$BUILD/bench/udp_perf
OUT=${OUT:-$BUILD/rtt-modes-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
RES=$OUT/results.tsv # system mode round p50_ns p99_ns
: >"$RES"
port=$((45000 + $$ % 1000))
warmup=$((COUNT / 10 < 2000 ? COUNT / 10 : 2000))

run_raw() { # MODE ROUND
	local mode=$1 round=$2 block="" pid
	[ "$mode" = block ] && block=block
	port=$((port + 2))
	taskset -c 1 "$UDP" pong 239.192.97.1 $port 239.192.97.2 $((port + 1)) $block 2>/dev/null &
	pid=$!
	sleep 0.2
	taskset -c 0 "$UDP" ping 239.192.97.1 $port 239.192.97.2 $((port + 1)) "$COUNT" "$SIZE" \
		"$warmup" $block >"$OUT/raw.$mode.$round.json"
	kill $pid 2>/dev/null
	wait $pid 2>/dev/null
	record raw "$mode" "$round" "$OUT/raw.$mode.$round.json"
}

run_prizma() { # MODE ROUND
	local mode=$1 round=$2 pid a b
	port=$((port + 2))
	a="udp://239.192.97.3:$port?iface=127.0.0.1"
	b="udp://239.192.97.4:$((port + 1))?iface=127.0.0.1"
	taskset -c 1 "$PONG" "$a" "$b" --wait "$mode" >/dev/null 2>"$OUT/pong.err" &
	pid=$!
	for _ in $(seq 1 100); do grep -q echoing "$OUT/pong.err" && break; sleep 0.02; done
	taskset -c 0 "$PING" "$a" "$b" --count "$COUNT" --size "$SIZE" --warmup "$warmup" \
		--wait "$mode" --json >"$OUT/prizma.$mode.$round.json" 2>/dev/null
	kill -INT $pid 2>/dev/null
	wait $pid 2>/dev/null
	record prizma "$mode" "$round" "$OUT/prizma.$mode.$round.json"
}

record() { # SYSTEM MODE ROUND FILE
	/usr/bin/python3 -c 'import json,sys
d = json.load(open(sys.argv[4]))
print("%s\t%s\t%s\t%d\t%d" % (sys.argv[1], sys.argv[2], sys.argv[3], d["rtt_ns"]["p50"], d["rtt_ns"]["p99"]))' \
		"$@" >>"$RES" 2>/dev/null || echo "rtt_modes.sh: $1 $2 round $3 failed (see $4)" >&2
}

for round in $(seq 1 "$ROUNDS"); do
	for mode in $MODES; do
		if [ $((round % 2)) -eq 1 ]; then
			run_raw "$mode" "$round"
			run_prizma "$mode" "$round"
		else
			run_prizma "$mode" "$round"
			run_raw "$mode" "$round"
		fi
	done
	echo "[$(date +%T)] round $round of $ROUNDS done" >&2
done

/usr/bin/python3 - "$RES" "$OUT" "$SIZE" "$COUNT" <<'PY'
import json, statistics, sys
res, out, size, count = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = [l.split("\t") for l in open(res).read().splitlines() if l]
by = {}
for system, mode, rnd, p50, p99 in rows:
    by.setdefault((mode, rnd), {})[system] = (int(p50), int(p99))
summary = {}
for mode in sorted({m for m, _ in by}, key=lambda m: ["spin", "block"].index(m) if m in ("spin", "block") else 9):
    rounds = [v for (m, _), v in by.items() if m == mode and "raw" in v and "prizma" in v]
    if not rounds:
        continue
    med = lambda xs: statistics.median(xs)
    summary[mode] = {
        "rounds": len(rounds),
        "raw_p50_us": med([r["raw"][0] for r in rounds]) / 1e3,
        "raw_p99_us": med([r["raw"][1] for r in rounds]) / 1e3,
        "prizma_p50_us": med([r["prizma"][0] for r in rounds]) / 1e3,
        "prizma_p99_us": med([r["prizma"][1] for r in rounds]) / 1e3,
        "p50_ratio": med([r["prizma"][0] / r["raw"][0] for r in rounds]),
        "p50_ratio_range": [min(r["prizma"][0] / r["raw"][0] for r in rounds),
                            max(r["prizma"][0] / r["raw"][0] for r in rounds)],
        "p99_ratio": med([r["prizma"][1] / r["raw"][1] for r in rounds]),
    }
json.dump({"size": int(size), "count": int(count), "modes": summary}, open(out + "/summary.json", "w"), indent=1)
lines = ["| mode | raw p50 | prizma p50 | p50 ratio (range) | raw p99 | prizma p99 | p99 ratio |",
         "|---|---|---|---|---|---|---|"]
for mode, s in summary.items():
    lines.append("| %s | %.1f µs | %.1f µs | %.2f× (%.2f–%.2f) | %.1f µs | %.1f µs | %.2f× |" % (
        mode, s["raw_p50_us"], s["prizma_p50_us"], s["p50_ratio"], s["p50_ratio_range"][0],
        s["p50_ratio_range"][1], s["raw_p99_us"], s["prizma_p99_us"], s["p99_ratio"]))
open(out + "/table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
