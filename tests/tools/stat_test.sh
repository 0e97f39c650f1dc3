#!/bin/bash
# stat_test.sh STAT SEND RECV - prizma-stat reads a running prizma-recv's counters from outside
# (its shared-memory stats file): the channel, delivered messages and NAKs under 5% loss; the
# file goes when the process ends; stale and junk files are handled; bad arguments refused.
set -u
STAT=$1
SEND=$2
RECV=$3
base=$((26000 + $$ % 20000))
A="udp://239.192.80.1:$base?iface=127.0.0.1"
tmp=$(mktemp -d)
export PRIZMA_STATS_DIR=$tmp/stats
trap 'kill $rpid $spid 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; tail -20 "$tmp"/*.log 2>/dev/null; exit 1; }

"$RECV" "$A&loss=0.05&seed=7" --count 40000 --timeout 30 >"$tmp/recv.log" 2>&1 &
rpid=$!
for _ in $(seq 1 100); do grep -q listening "$tmp/recv.log" && break; sleep 0.05; done
"$SEND" "$A" --count 40000 --size 200 --rate 10000 --linger 2 >"$tmp/send.log" 2>&1 &
spid=$!
ok=0
for _ in $(seq 1 60); do
	sleep 0.2
	"$STAT" --once --pid $rpid >"$tmp/stat.log" 2>&1 || continue
	d=$(grep -o 'messages_delivered [0-9]*' "$tmp/stat.log" | head -1 | grep -o '[0-9]*$')
	[ "${d:-0}" -gt 1000 ] && grep -q 'naks_sent' "$tmp/stat.log" && { ok=1; break; }
done
[ $ok = 1 ] || fail "prizma-stat never showed the receiver delivering with NAKs: $(cat "$tmp/stat.log")"
grep -q "pid $rpid (prizma-recv)" "$tmp/stat.log" || fail "no process line"
grep -q "subscriber udp://239.192.80.1:$base" "$tmp/stat.log" || fail "no channel line"
grep -q "fault_dropped" "$tmp/stat.log" || fail "no transport counters"
grep -E "^    source [0-9a-f]{12}\.[0-9]+:.*odata_received [0-9]+.*naks_sent [0-9]+" "$tmp/stat.log" >/dev/null ||
	fail "no per-source line with ODATA and NAKs: $(cat "$tmp/stat.log")"
# The sender's file shows it as a publisher with RDATA sent (repairs) once NAKs arrive.
for _ in $(seq 1 30); do
	"$STAT" --once --pid $spid >"$tmp/stat2.log" 2>&1 && grep -q "rdata_sent" "$tmp/stat2.log" && break
	sleep 0.2
done
grep -q "publisher  udp://239.192.80.1:$base" "$tmp/stat2.log" || fail "no publisher channel: $(cat "$tmp/stat2.log")"
grep -q "naks_received" "$tmp/stat2.log" || fail "publisher shows no NAKs received"
head -12 "$tmp/stat.log"
wait $rpid || fail "prizma-recv failed"
wait $spid
# Gone with the process: nothing left for that pid.
"$STAT" --once --pid $rpid >"$tmp/gone.log" 2>&1 && fail "stats of an exited process still shown"
[ -z "$(ls "$PRIZMA_STATS_DIR")" ] || fail "stats files left behind: $(ls "$PRIZMA_STATS_DIR")"
# A stale file (a crashed process) is skipped, listed with --all, removed with --clean.
"$RECV" "$A" --count 1 --timeout 5 >"$tmp/recv2.log" 2>&1 &
rpid=$!
for _ in $(seq 1 100); do ls "$PRIZMA_STATS_DIR"/*.stats >/dev/null 2>&1 && break; sleep 0.05; done
sleep 0.3
f=$(ls "$PRIZMA_STATS_DIR"/*.stats | head -1)
cp "$f" "$tmp/copy"
kill $rpid
wait $rpid 2>/dev/null
cp "$tmp/copy" "$PRIZMA_STATS_DIR/999999-0.stats"
"$STAT" --once >/dev/null 2>&1 && fail "a stale file counted as a running process"
"$STAT" --once --all | grep -q "stale" || fail "--all does not list the stale file"
"$STAT" --clean | grep -q "removed" || fail "--clean removed nothing"
[ -z "$(ls "$PRIZMA_STATS_DIR")" ] || fail "--clean left $(ls "$PRIZMA_STATS_DIR")"
# Junk in the directory: a clear line, no crash.
echo junk >"$PRIZMA_STATS_DIR/1-0.stats"
"$STAT" --once --all >"$tmp/junk.log" 2>&1
grep -q "not a prizma stats file" "$tmp/junk.log" || fail "junk file: $(cat "$tmp/junk.log")"
"$STAT" --dir "$tmp/none" --once >/dev/null 2>&1 && fail "missing directory accepted"
echo "PASS: prizma-stat"
