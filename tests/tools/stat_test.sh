#!/bin/bash
# stat_test.sh STAT SEND RECV - prizma-stat reads a running prizma-recv's counters from outside
# (its shared-memory stats file): the channel, delivered messages and NAKs under 5% loss, as
# text and as JSON (--json: parses, the same counters; strings escaped); the file goes when
# the process ends; stale and junk files are handled; bad arguments refused.
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
# What the transport chose: the interface and the receive buffer the kernel granted.
grep -Eq "^    transport: udp iface 127\.0\.0\.1 ttl [0-9]+ rcvbuf [0-9]+" "$tmp/stat.log" ||
	fail "no transport line: $(cat "$tmp/stat.log")"
grep -E "^    source [0-9a-f]{12}\.[0-9]+:.*odata_received [0-9]+.*naks_sent [0-9]+" "$tmp/stat.log" >/dev/null ||
	fail "no per-source line with ODATA and NAKs: $(cat "$tmp/stat.log")"
# The same as JSON: one document that parses, with the receiver's channel and its counters.
"$STAT" --once --json --pid $rpid >"$tmp/stat.json" 2>"$tmp/statjson.log" || fail "prizma-stat --json exited $?"
/usr/bin/python3 -c 'import json,sys; json.load(sys.stdin)' <"$tmp/stat.json" ||
	fail "prizma-stat --json printed no JSON: $(cat "$tmp/stat.json")"
/usr/bin/python3 - "$tmp/stat.json" "$rpid" "udp://239.192.80.1:$base?" <<'PY' || fail "--json: $(cat "$tmp/stat.json")"
import json, sys
doc = json.load(open(sys.argv[1]))
procs = doc["processes"]
assert len(procs) == 1, procs
p = procs[0]
assert p["pid"] == int(sys.argv[2]) and p["running"] and p["command"] == "prizma-recv", p
assert p["updates"] > 0 and p["updated_unix_ns"] > 0 and doc["errors"] == [], p
chans = [c for c in p["channels"] if c["uri"].startswith(sys.argv[3])]
assert len(chans) == 1 and chans[0]["role"] == "subscriber", p["channels"]
assert chans[0]["transport"].startswith("udp iface 127.0.0.1 "), chans[0]["transport"]
c = chans[0]["counters"]
assert c["messages_delivered"] > 1000 and c["naks_sent"] > 0 and "fault_dropped" in c, c
src = chans[0]["sources"]
assert len(src) == 1 and src[0]["counters"]["odata_received"] > 0, src
print("prizma-stat --json: messages_delivered", c["messages_delivered"], "naks_sent", c["naks_sent"])
PY
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
# (Copied once the channel is in the file: the subscriber's storage is paged in first.)
for _ in $(seq 1 200); do grep -q listening "$tmp/recv2.log" && break; sleep 0.05; done
sleep 0.3
f=$(ls "$PRIZMA_STATS_DIR"/*.stats | head -1)
grep -qa "udp://239.192.80.1" "$f" || fail "no channel in $f"
cp "$f" "$tmp/copy"
kill $rpid
wait $rpid 2>/dev/null
# Its URI made awkward for JSON: a quote, a backslash, a control character, UTF-8 and a byte
# that is not UTF-8 (a URI cut in the middle of a character); a counter's name made a
# terminal escape sequence (clear screen, set the window title).
/usr/bin/python3 - "$tmp/copy" <<'PY' || fail "cannot patch the copy"
import sys
data = bytearray(open(sys.argv[1], "rb").read())
at = data.find(b"udp://239.192.80.1")
assert at > 0
uri = b'udp://q"b\\s\x01t\xc3\xa9\xff\x00'
data[at:at + len(uri)] = uri
rec = at  # the channel record (uri[192], transport[320], role, count, names[96][32], values[96])
names = rec + 192 + 320 + 8
assert data[rec + 192:rec + 196] == b"udp ", data[rec + 192:rec + 200]
transport = b"udp \x1b[31mred\x00"
data[rec + 192:rec + 192 + len(transport)] = transport
at = data.find(b"odata_sent\x00", rec)
assert at > 0 and (at - names) % 32 == 0
name = b"\x1b[2J\x1b]0;x\x07\x00"
data[at:at + len(name)] = name
value = names + 96 * 32 + 8 * ((at - names) // 32)
data[value:value + 8] = (1).to_bytes(8, "little")  # non-zero: shown
open(sys.argv[1], "wb").write(data)
PY
cp "$tmp/copy" "$PRIZMA_STATS_DIR/999999-0.stats"
"$STAT" --once >/dev/null 2>&1 && fail "a stale file counted as a running process"
"$STAT" --once --all >"$tmp/stale.txt" || fail "--all exited $?"
grep -q "stale" "$tmp/stale.txt" || fail "--all does not list the stale file"
# Text output: nothing but printable ASCII and newlines; the bytes shown as \xNN.
LC_ALL=C grep -q '[^[:print:]]' "$tmp/stale.txt" && fail "raw control bytes printed: $(cat -v "$tmp/stale.txt")"
grep -qF 'udp://q"b\s\x01t\xc3\xa9\xff' "$tmp/stale.txt" || fail "URI not shown escaped: $(cat "$tmp/stale.txt")"
grep -qF '\x1b[2J\x1b]0;x\x07' "$tmp/stale.txt" || fail "counter name not shown escaped: $(cat "$tmp/stale.txt")"
grep -qF 'transport: udp \x1b[31mred' "$tmp/stale.txt" || fail "transport not shown escaped: $(cat "$tmp/stale.txt")"
"$STAT" --once --all --json >"$tmp/stale.json" || fail "--all --json exited $?"
/usr/bin/python3 - "$tmp/stale.json" <<'PY' || fail "JSON escaping: $(cat "$tmp/stale.json")"
import json, sys
procs = json.load(open(sys.argv[1], encoding="utf-8"))["processes"]
assert procs and all(not p["running"] and p["command"] is None for p in procs), procs
uris = [c["uri"] for p in procs for c in p["channels"]]
assert 'udp://q"b\\s\x01t\u00e9\ufffd' in uris, uris
PY
"$STAT" --clean | grep -q "removed" || fail "--clean removed nothing"
[ -z "$(ls "$PRIZMA_STATS_DIR")" ] || fail "--clean left $(ls "$PRIZMA_STATS_DIR")"
# Junk in the directory: a clear line, no crash.
echo junk >"$PRIZMA_STATS_DIR/1-0.stats"
"$STAT" --once --all >"$tmp/junk.log" 2>&1
grep -q "not a prizma stats file" "$tmp/junk.log" || fail "junk file: $(cat "$tmp/junk.log")"
"$STAT" --dir "$tmp/none" --once >/dev/null 2>&1 && fail "missing directory accepted"
# Usage errors exit 2; --version prints the name and the version.
"$STAT" --interval 0.01 >/dev/null 2>&1
[ $? = 2 ] || fail "--interval 0.01 accepted"
"$STAT" --pid -1 --once >/dev/null 2>&1
[ $? = 2 ] || fail "--pid -1 accepted"
"$STAT" --version | grep -Eq "^prizma-stat [0-9]+\.[0-9]+\.[0-9]+$" || fail "--version: $("$STAT" --version)"
echo "PASS: prizma-stat"
