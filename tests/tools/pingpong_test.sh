#!/bin/bash
# pingpong_test.sh PING PONG - prizma-ping through prizma-pong over UDP multicast on 127.0.0.1.
# Functional only (no timing asserted): every round trip is recorded, the percentiles are
# ordered, both loop modes and both wait modes work, and a ping without a pong fails clearly.
set -u
PING=$1
PONG=$2
base=$((20000 + $$ % 20000))
A="udp://239.192.77.1:$base?iface=127.0.0.1"
B="udp://239.192.77.2:$((base + 1))?iface=127.0.0.1"
tmp=$(mktemp -d)
trap 'kill $pong 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp"/* 2>/dev/null; exit 1; }

"$PONG" "$A" "$B" --window 4096 2>"$tmp/pong.err" >"$tmp/pong.out" &
pong=$!
for _ in $(seq 1 100); do grep -q echoing "$tmp/pong.err" && break; sleep 0.05; done

check() { # NAME COUNT ARGS...: run ping --json, check the result
	local name=$1 count=$2
	shift 2
	"$PING" "$A" "$B" --count "$count" --window 4096 --json "$@" >"$tmp/$name.json" 2>"$tmp/$name.err" ||
		fail "$name: prizma-ping exited $?"
	python3 - "$tmp/$name.json" "$count" <<'PY' || fail "$name: bad result $(cat "$tmp/$name.json")"
import json, sys
r = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
t = r["rtt_ns"]
assert r["recorded"] == n, r
assert 0 < t["min"] <= t["p50"] <= t["p90"] <= t["p99"] <= t["p99_9"] <= t["max"], t
assert t["min"] <= t["mean"] <= t["max"], t
assert r["loss_events"] == 0 and not r["timed_out"], r
assert r["round_trips_per_sec"] > 0, r
PY
	echo "ok: $name $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("p50", r["rtt_ns"]["p50"], "ns p99", r["rtt_ns"]["p99"], "ns")' "$tmp/$name.json")"
}
check closed_spin 2000 --size 64 --warmup 200
check closed_block 500 --size 1000 --wait block
check open_rate 1000 --size 100 --rate 5000 --warmup 100
check fragmented 200 --size 5000 --warmup 10

# Text output names the percentiles.
"$PING" "$A" "$B" --count 100 --size 32 --window 4096 >"$tmp/text.out" 2>&1 || fail "text run"
grep -q "p99.9" "$tmp/text.out" || fail "text output lacks p99.9"

# No pong on the other channel: a clear error and exit 1, not a hang.
C="udp://239.192.77.3:$((base + 2))?iface=127.0.0.1"
"$PING" "$A" "$C" --count 10 --size 16 --timeout 1 >"$tmp/nopong.out" 2>"$tmp/nopong.err"
rc=$?
[ $rc = 1 ] || fail "ping without pong exited $rc"
grep -q "no answer" "$tmp/nopong.err" || fail "no clear error without a pong"
kill -INT $pong
wait $pong || fail "pong exited non-zero"
grep -q "^echoed" "$tmp/pong.out" || fail "pong printed no summary"

# pong --count N stops by itself after N messages; ping's handshake probes do not count.
D="udp://239.192.77.4:$((base + 3))?iface=127.0.0.1"
E="udp://239.192.77.5:$((base + 4))?iface=127.0.0.1"
"$PONG" "$D" "$E" --count 50 --window 4096 2>"$tmp/pong2.err" >"$tmp/pong2.out" &
pong=$!
for _ in $(seq 1 100); do grep -q echoing "$tmp/pong2.err" && break; sleep 0.05; done
"$PING" "$D" "$E" --count 40 --warmup 10 --size 32 --window 4096 >"$tmp/ping2.out" 2>&1 ||
	fail "ping against pong --count 50 failed"
for _ in $(seq 1 100); do kill -0 $pong 2>/dev/null || break; sleep 0.05; done
kill -0 $pong 2>/dev/null && fail "pong --count 50 still running after 50 echoes"
wait $pong || fail "pong --count 50 exited non-zero"
grep -q "^echoed 50 messages" "$tmp/pong2.out" || fail "pong counted $(cat "$tmp/pong2.out")"
echo "PASS: ping-pong over UDP"
