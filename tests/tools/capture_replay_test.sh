#!/bin/bash
# capture_replay_test.sh CAPTURE - prizma-capture --replay on a crafted pcap (a capture is
# input from anywhere): a timestamp jump of ~127 years is waited 1 s (--max-gap) and counted;
# a 65 KB PGM packet (beyond the channel's max datagram), a record beyond the snaplen and a
# record cut short by the end of the file are skipped and counted, and the records after them
# are still replayed: a capture on the target channel hears every one.
set -u
CAP=$1
base=$((27000 + $$ % 20000))
B="udp://239.192.81.2:$base?iface=127.0.0.1"
tmp=$(mktemp -d)
trap 'kill $cpid 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; tail -5 "$tmp"/*.log 2>/dev/null; exit 1; }

/usr/bin/python3 - "$tmp/crafted.pcap" "$base" <<'PY' || fail "cannot write the crafted pcap"
import struct, sys

path, dport = sys.argv[1], int(sys.argv[2])

def fold(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s

def odata(sqn, payload):  # RFC 3208 ODATA, checksum over the whole packet
    pkt = bytearray(struct.pack("!HHBBH6sH", 4321, dport, 0x04, 0, 0, bytes.fromhex("deadbeef0001"),
                                len(payload)) + struct.pack("!II", sqn, 0) + payload)
    c = ~fold(bytes(pkt)) & 0xFFFF
    pkt[6:8] = struct.pack("!H", c or 0xFFFF)
    return bytes(pkt)

def ipv4_udp(payload):  # LINKTYPE_RAW: IPv4 + UDP (checksum 0: none)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + len(payload), 0, 0x4000, 1, 17, 0,
                               bytes([127, 0, 0, 1]), bytes([239, 192, 81, 2])))
    ip[10:12] = struct.pack("!H", ~fold(bytes(ip)) & 0xFFFF)
    return bytes(ip) + struct.pack("!HHHH", 4321, dport, 8 + len(payload), 0) + payload

out = open(path, "wb")
out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101))
t = [1000, 0]

def record(data, incl=None, orig=None, jump=0):
    t[0] += jump
    t[1] += 1000
    incl = len(data) if incl is None else incl
    out.write(struct.pack("<IIII", t[0] + t[1] // 1000000, t[1] % 1000000, incl,
                          incl if orig is None else orig) + data)

for sqn in range(3):
    record(ipv4_udp(odata(sqn, b"m%d" % sqn)))
record(ipv4_udp(odata(3, b"m3")), jump=4_000_000_000)  # ~127 years later
record(ipv4_udp(odata(100, b"x" * 65476)))  # a 65500-byte PGM packet: oversize
record(b"\0" * 70000)  # beyond the snaplen (65535)
for sqn in range(4, 7):
    record(ipv4_udp(odata(sqn, b"m%d" % sqn)))
record(ipv4_udp(b"not pgm at all"))  # not PGM: skipped
out.write(struct.pack("<IIII", t[0], 0, 500, 500) + b"cut short")  # the file ends inside it
out.close()
PY

"$CAP" "$B" --output "$tmp/heard.pcap" --count 7 --timeout 10 >"$tmp/cap.log" 2>&1 &
cpid=$!
for _ in $(seq 1 100); do grep -q capturing "$tmp/cap.log" && break; sleep 0.05; done
sleep 0.2
# (timeout: without the cap the replay would sleep for ~127 years)
timeout 60 "$CAP" --replay "$tmp/crafted.pcap" "$B" >"$tmp/replay.log" 2>&1 ||
	fail "replay exited $?: $(cat "$tmp/replay.log")"
cat "$tmp/replay.log"
grep -q "^replayed 7 PGM packets to .*, skipped 4 records (3 oversize or damaged), 1 gaps capped at 1 s$" \
	"$tmp/replay.log" || fail "replay summary: $(cat "$tmp/replay.log")"
wait $cpid || fail "the capture on the target channel exited non-zero"
grep -q "^captured 7 PGM packets" "$tmp/cap.log" || fail "heard: $(cat "$tmp/cap.log")"
# --max-gap is the cap; --fast waits for none.
timeout 60 "$CAP" --replay "$tmp/crafted.pcap" "$B" --max-gap 0.1 >"$tmp/replay2.log" 2>&1 ||
	fail "--max-gap 0.1: $(cat "$tmp/replay2.log")"
grep -q "1 gaps capped at 0.1 s$" "$tmp/replay2.log" || fail "--max-gap 0.1: $(cat "$tmp/replay2.log")"
timeout 60 "$CAP" --replay "$tmp/crafted.pcap" "$B" --fast >"$tmp/replay3.log" 2>&1 ||
	fail "--fast: $(cat "$tmp/replay3.log")"
grep -q "^replayed 7 PGM packets.* 0 gaps capped" "$tmp/replay3.log" || fail "--fast: $(cat "$tmp/replay3.log")"
"$CAP" --max-gap 1 "$B" --output "$tmp/x.pcap" >/dev/null 2>&1
[ $? = 2 ] || fail "--max-gap without --replay accepted"
echo "PASS: crafted capture replayed (gap capped, oversize and damaged records skipped)"
