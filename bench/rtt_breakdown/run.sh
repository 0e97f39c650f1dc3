#!/bin/bash
# bench/rtt_breakdown/run.sh [PAIRS] [URI_EXTRA]: where a ping-pong hop's time goes, prizma next
# to raw UDP. Every send and receive call of both parties is timed with the TSC
# (syscall_timer.c, LD_PRELOAD) and breakdown.py lines the two traces up: the calls' own
# durations, the user time from a datagram read to the next send, the user time per poll
# loop, and send-entry -> read-exit across the parties. PAIRS (default 2) raw/prizma pairs,
# alternating; URI_EXTRA is appended to prizma's URIs (e.g. "&gro=0").
set -eu
cd "$(dirname "$0")/../.."
BUILD=${PRIZMA_BUILD:-build/release}
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j 2 --target prizma-ping prizma-pong udp_perf >/dev/null
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cc -O2 -shared -fPIC -o "$OUT/timer.so" bench/rtt_breakdown/syscall_timer.c -ldl
PAIRS=${1:-2}
Q=${2:-}
port=$((46000 + $$ % 1000))
p50() { python3 -c 'import json,sys; print(json.load(sys.stdin)["rtt_ns"]["p50"])'; }
for i in $(seq 1 "$PAIRS"); do
	port=$((port + 4))
	g1="239.192.97.$((port % 200 + 1))"
	g2="239.192.96.$((port % 200 + 1))"
	SYSCALL_TIMER_OUT=$OUT/raw.pong SYSCALL_TIMER_TERM=1 LD_PRELOAD=$OUT/timer.so \
		taskset -c 1 "$BUILD/bench/udp_perf" pong "$g1" $port "$g2" $((port + 1)) >/dev/null 2>&1 &
	pp=$!
	sleep 0.3
	r=$(SYSCALL_TIMER_OUT=$OUT/raw.ping LD_PRELOAD=$OUT/timer.so taskset -c 0 \
		"$BUILD/bench/udp_perf" ping "$g1" $port "$g2" $((port + 1)) 20000 64 2000 | p50)
	kill $pp
	wait $pp 2>/dev/null || true
	echo "== raw UDP, RTT p50 $r ns"
	python3 bench/rtt_breakdown/breakdown.py "$OUT/raw"
	rm -f "$OUT"/raw.*
	port=$((port + 4))
	u1="udp://$g1:$port?iface=127.0.0.1$Q"
	u2="udp://$g2:$((port + 1))?iface=127.0.0.1$Q"
	SYSCALL_TIMER_OUT=$OUT/pz.pong LD_PRELOAD=$OUT/timer.so \
		"$BUILD/examples/prizma-pong" "$u1" "$u2" --cpu 1 >/dev/null 2>&1 &
	pp=$!
	sleep 0.3
	r=$(SYSCALL_TIMER_OUT=$OUT/pz.ping LD_PRELOAD=$OUT/timer.so "$BUILD/examples/prizma-ping" \
		"$u1" "$u2" --cpu 0 --count 20000 --size 64 --warmup 2000 --json 2>/dev/null | p50)
	kill -INT $pp
	wait $pp 2>/dev/null || true
	echo "== prizma$Q, RTT p50 $r ns"
	python3 bench/rtt_breakdown/breakdown.py "$OUT/pz"
	rm -f "$OUT"/pz.*
done
