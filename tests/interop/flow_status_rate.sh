#!/usr/bin/env bash
# Flow control's status messages stay within their bound at full rate (docs/PROTOCOL.md §11):
# an unpaced publisher (> 1 M messages/s on this machine's loopback) and a flow=min subscriber;
# a capture of the status messages only (PGM ACKs: the PGM type byte, 0x0d, at offset 4 of the
# UDP payload) counts them. At most one per quarter window consumed (65536 / 4) plus one per
# 200 ms, and at least one.
# Usage: flow_status_rate.sh PRIZMA_SEND PRIZMA_RECV
set -u
send=$1 recv=$2
port=$(( 27400 + ($$ % 300) * 2 ))
group=239.192.96.$(( $$ % 200 + 10 ))
# Capturing needs root (or the wireshark group): without it, skipped (exit 77) with the reason.
if [ "$(id -u)" -ne 0 ] && ! timeout 5 dumpcap -q -i lo -a duration:1 -w /dev/null >/dev/null 2>&1; then
    echo "SKIP: cannot capture on lo (needs root or the wireshark group)"
    exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
n=3000000
uri="udp://$group:$port?iface=127.0.0.1&flow=min"
tshark -q -i lo -f "udp port $port and udp[12] == 0x0d" -w "$dir/acks.pcap" >"$dir/tshark.log" 2>&1 &
tpid=$!
sleep 1.5
"$recv" "$uri" --count "$n" --timeout 20 >"$dir/recv.log" 2>&1 &
rpid=$!
for _ in $(seq 100); do grep -q listening "$dir/recv.log" && break; sleep 0.02; done
t0=$(date +%s%N)
"$send" "$uri" --count "$n" --size 100 >"$dir/send.log" 2>&1
t1=$(date +%s%N)
wait "$rpid"; rrc=$?
sleep 0.5
kill "$tpid"; wait "$tpid" 2>/dev/null
acks=$(tshark -r "$dir/acks.pcap" 2>/dev/null | wc -l)
secs_ms=$(( (t1 - t0) / 1000000 ))
rate=$(sed -n 's/^sent .*(\([0-9]*\) msgs\/s)$/\1/p' "$dir/send.log")
bound=$(( n / 16384 + secs_ms / 200 + 10 ))
echo "flow status: $acks status messages for $n messages at ${rate:-?} msgs/s in ${secs_ms} ms (bound $bound); subscriber exit $rrc"
[ "$rrc" -eq 0 ] || { cat "$dir/recv.log"; exit 1; }
[ "$acks" -ge 1 ] && [ "$acks" -le "$bound" ]
