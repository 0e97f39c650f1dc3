#!/usr/bin/env bash
# Wireshark's PGM dissector decodes a capture of prizma traffic (ODATA, RDATA, SPM, NAK, NCF,
# SPMR, fragments) with no malformed packet and no bad checksum. The sender runs with gso=0:
# on lo a capture sees a GSO send as one unsegmented super-packet, which no dissector parses
# (on a NIC the segments are split before the wire).
# With `auth`, both ends authenticate every packet (key_file=): the capture must still decode
# as PGM with no malformed packet, prizma's auth option skipped as an unknown option.
# With `flow`, both ends run flow control (flow=min): the receiver's status messages are PGM
# ACKs (0x0d) whose status option Wireshark skips as an unknown option of 28 bytes.
# Usage: tshark.sh PRIZMA_SEND PRIZMA_RECV [auth|flow]
set -u
send=$1 recv=$2 mode=${3:-plain}
port=$(( 23000 + ($$ % 400) * 2 ))
group=239.192.78.$(( $$ % 200 + 10 ))
# Capturing needs root (or the wireshark group): without it, skipped (exit 77) with the reason.
if [ "$(id -u)" -ne 0 ] && ! timeout 5 dumpcap -q -i lo -a duration:1 -w /dev/null >/dev/null 2>&1; then
    echo "SKIP: cannot capture on lo (needs root or the wireshark group)"
    exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cap=$dir/prizma.pcap
key=""
if [ "$mode" = auth ]; then
    printf '3 00112233445566778899aabbccddeeff\n' >"$dir/key"
    chmod 600 "$dir/key"
    key="&key_file=$dir/key"
elif [ "$mode" = flow ]; then
    key="&flow=min"
fi
tshark -q -i lo -f "udp port $port" -w "$cap" -a duration:8 >"$dir/tshark.log" 2>&1 &
tpid=$!
sleep 1.5
"$recv" "udp://$group:$port?iface=127.0.0.1&loss=0.03&seed=3$key" --count 1000 --timeout 5 >"$dir/recv.log" 2>&1 &
rpid=$!
sleep 0.3
"$send" "udp://$group:$port?iface=127.0.0.1&tx_loss=0.03&seed=9&gso=0$key" --count 1000 --size 3000 --rate 2000 \
    --linger 1.5 >"$dir/send.log" 2>&1
wait "$rpid"; rrc=$?
wait "$tpid"
decode=$dir/decode.txt
tshark -r "$cap" -d "udp.port==$port,pgm" -o pgm.check_checksum:TRUE -V >"$decode" 2>&1
types=$(tshark -r "$cap" -d "udp.port==$port,pgm" -T fields -e pgm.hdr.type 2>/dev/null | sort | uniq -c)
echo "PGM packet types in the capture (count type):"; echo "$types" | sed 's/^/    /'
packets=$(tshark -r "$cap" -d "udp.port==$port,pgm" -Y pgm 2>/dev/null | wc -l)
malformed=$(grep -c -i "malformed" "$decode")
# The PGM checksum verdict is the "[Checksum Status: ...]" line (tshark 4.0 also prints the
# raw checksum field through the status names, e.g. "Checksum Status: Unknown [correct]").
badsum=$(grep -c "^ *\[Checksum Status: Bad\]" "$decode")
goodsum=$(grep -c "^ *\[Checksum Status: Good\]" "$decode")
if [ "$mode" = auth ]; then
    # Every PGM packet carries the auth option, decoded as an unknown option of 32 bytes.
    tagged=$(grep -c "Option: Unknown (0x3d), Length: 32" "$decode")
    echo "auth: $tagged of $packets PGM packets carry prizma's auth option"
    [ "$tagged" -eq "$packets" ] || exit 1
fi
if [ "$mode" = flow ]; then
    acks=$(tshark -r "$cap" -d "udp.port==$port,pgm" -Y "pgm.hdr.type == 0x0d" 2>/dev/null | wc -l)
    status=$(grep -c "Option: Unknown (0x3e), Length: 28" "$decode")
    echo "flow: $acks ACKs, $status carry prizma's status option"
    [ "$acks" -gt 0 ] && [ "$status" -eq "$acks" ] || exit 1
fi
echo "decoded $packets PGM packets, $malformed malformed, $badsum bad and $goodsum good checksums; receiver exit $rrc"
for t in 0x00 0x04 0x05 0x08 0x0a; do  # SPM ODATA RDATA NAK NCF must all be present
    if ! echo "$types" | grep -q " $t\$"; then echo "missing PGM type $t"; exit 1; fi
done
[ "$packets" -gt 1000 ] && [ "$malformed" -eq 0 ] && [ "$badsum" -eq 0 ] && [ "$goodsum" -eq "$packets" ] \
    && [ "$rrc" -eq 0 ]
