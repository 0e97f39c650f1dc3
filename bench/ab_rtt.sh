#!/usr/bin/env bash
# A/B ping-pong RTT of two prizma builds, interleaved round by round on the same machine:
# each round runs build A's prizma-ping/pong, then build B's (same URI, same CPUs: ping on 0,
# pong on 1, busy-polling), and records each p50; prints each round's B/A ratio and the median.
#   bench/ab_rtt.sh BUILD_A BUILD_B [ROUNDS=10] [COUNT=20000]
# Use it to show that a change did not slow the hot path (A = before, B = after).
set -euo pipefail
a=$1
b=$2
rounds=${3:-10}
count=${4:-20000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
port=$((30000 + $$ % 10000))
p50() {  # rtt_ns.p50 of the JSON prizma-ping printed
    /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rtt_ns"]["p50"])' "$1"
}
run() {  # run BUILD OUT
    local build=$1 json=$2
    local u1="udp://239.192.91.1:$port?iface=127.0.0.1&ttl=0"
    local u2="udp://239.192.91.2:$((port + 1))?iface=127.0.0.1&ttl=0"
    PRIZMA_STATS=0 "$build/examples/prizma-pong" "$u1" "$u2" --cpu 1 >/dev/null 2>&1 &
    local pong=$!
    sleep 0.3
    PRIZMA_STATS=0 "$build/examples/prizma-ping" "$u1" "$u2" --cpu 0 --count "$count" --size 64 \
        --warmup 2000 --json >"$json" 2>/dev/null || true
    kill -INT "$pong" 2>/dev/null || true
    sleep 0.1
    kill "$pong" 2>/dev/null || true
    wait "$pong" 2>/dev/null || true
    port=$((port + 2))
}
ratios=()
echo "round  A p50 (ns)  B p50 (ns)  B/A"
for r in $(seq "$rounds"); do
    run "$a" "$out/a.json"
    run "$b" "$out/b.json"
    pa=$(p50 "$out/a.json")
    pb=$(p50 "$out/b.json")
    ratio=$(awk -v a="$pa" -v b="$pb" 'BEGIN { printf "%.3f", b / a }')
    ratios+=("$ratio")
    printf '%5d  %10s  %10s  %s\n' "$r" "$pa" "$pb" "$ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "median B/A %.3f (range %.3f-%.3f, %d rounds)\n", m, v[1], v[NR], NR }'
