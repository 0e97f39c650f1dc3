#!/bin/bash
# capture_test.sh CAPTURE SEND RECV - prizma-capture records a lossy prizma session (GSO on,
# so datagrams carry several PGM packets) into a pcap that tshark decodes packet by packet
# with good checksums; replaying the capture onto another channel delivers every message
# to a fresh prizma-recv. Bad input (missing file, not a pcap) fails clearly.
set -u
CAP=$1
SEND=$2
RECV=$3
base=$((24000 + $$ % 20000))
A="udp://239.192.79.1:$base?iface=127.0.0.1"
B="udp://239.192.79.2:$((base + 1))?iface=127.0.0.1"
N=2000
tmp=$(mktemp -d)
trap 'kill $cpid $rpid 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; tail -5 "$tmp"/*.log 2>/dev/null; exit 1; }

"$CAP" "$A" --output "$tmp/a.pcap" --timeout 3 >"$tmp/cap.log" 2>&1 &
cpid=$!
"$RECV" "$A&loss=0.05&seed=5" --count $N --timeout 20 >"$tmp/recv.log" 2>&1 &
rpid=$!
for _ in $(seq 1 100); do grep -q capturing "$tmp/cap.log" && grep -q listening "$tmp/recv.log" && break; sleep 0.05; done
"$SEND" "$A" --count $N --size 300 --rate 20000 --linger 1 >"$tmp/send.log" 2>&1 || fail "prizma-send"
wait $rpid || fail "prizma-recv on the captured channel"
wait $cpid || fail "prizma-capture exited non-zero"
packets=$(grep -o 'captured [0-9]*' "$tmp/cap.log" | grep -o '[0-9]*')
[ "${packets:-0}" -gt $N ] || fail "captured only ${packets:-0} packets"
echo "captured $packets PGM packets"

if command -v tshark >/dev/null; then
	port=$base
	types=$(tshark -r "$tmp/a.pcap" -d "udp.port==$port,pgm" -T fields -e pgm.hdr.type 2>/dev/null | sort | uniq -c)
	echo "$types" | sed 's/^/    /'
	decoded=$(tshark -r "$tmp/a.pcap" -d "udp.port==$port,pgm" -Y pgm 2>/dev/null | wc -l)
	tshark -r "$tmp/a.pcap" -d "udp.port==$port,pgm" -o pgm.check_checksum:TRUE -V >"$tmp/decode.txt" 2>&1
	malformed=$(grep -c -i malformed "$tmp/decode.txt")
	good=$(grep -c "^ *\[Checksum Status: Good\]" "$tmp/decode.txt")
	[ "$decoded" = "$packets" ] || fail "tshark decoded $decoded PGM packets of $packets"
	[ "$malformed" = 0 ] || fail "$malformed malformed"
	[ "$good" = "$packets" ] || fail "$good good checksums of $packets"
	for t in 0x00 0x04 0x05 0x0a; do # SPM ODATA RDATA NCF
		echo "$types" | grep -q " $t\$" || fail "no PGM type $t in the capture"
	done
	odata=$(echo "$types" | awk '$2 == "0x04" {print $1}')
	[ "${odata:-0}" -ge $N ] || fail "only ${odata:-0} ODATA captured"
else
	echo "tshark not installed: decode check skipped (replay still checked)"
fi

# Replay onto channel B: a fresh receiver gets all N messages, once each.
"$RECV" "$B" --count $N --timeout 20 >"$tmp/recv2.log" 2>&1 &
rpid=$!
for _ in $(seq 1 100); do grep -q listening "$tmp/recv2.log" && break; sleep 0.05; done
"$CAP" --replay "$tmp/a.pcap" "$B" >"$tmp/replay.log" 2>&1 || fail "replay exited non-zero"
wait $rpid || fail "the replayed session did not deliver 0..$((N - 1)) once each"
grep -q "^replayed" "$tmp/replay.log" || fail "replay printed no summary"
cat "$tmp/replay.log"

# Bad input: a missing file, a file that is not a pcap, a bad URI.
"$CAP" --replay "$tmp/none.pcap" "$B" >"$tmp/bad1.log" 2>&1 && fail "missing file accepted"
grep -q "cannot read" "$tmp/bad1.log" || fail "no clear error for a missing file"
echo "not a capture file at all" >"$tmp/junk.pcap"
"$CAP" --replay "$tmp/junk.pcap" "$B" >"$tmp/bad2.log" 2>&1 && fail "junk file accepted"
grep -q "not a pcap" "$tmp/bad2.log" || fail "no clear error for a junk file"
"$CAP" "udp://239.192.79.3:1?iface=no-such" --output "$tmp/x.pcap" >"$tmp/bad3.log" 2>&1 && fail "bad iface accepted"
echo "PASS: capture + tshark decode + replay"
