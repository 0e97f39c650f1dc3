#!/usr/bin/env bash
# Real OpenPGM FEC parity at a live prizma subscriber (RFC 3208 section 11.8; prizma implements
# no FEC, so parity must never be delivered as data). Debian's libpgm 5.3.128 is the source,
# with on-demand parity (pgm_peer send ... 8 0 1: transmission groups of 8); its SPMs carry
# OPT_PARITY_PRM. pgm_forge.py parity-naks asks it for parity as an OpenPGM receiver would (a
# parity NAK per transmission group) and sends each parity RDATA it answers with to the group
# again with the source's ports and a valid checksum (5.3.128 leaves both wrong: prizma drops
# those as malformed, which proves nothing), so the real parity bytes, numbered with the
# group's first sqn, reach a prizma subscriber that loses 5% of every packet type: some land in
# its gaps. Pro-active parity cannot be tested: 5.3.128 crashes at its first parity packet.
#
# Passes when the subscriber delivered no byte that is not the source's (--verify), dropped
# parity packets and refused parity NCFs (counted), saw the source's FEC SPMs, and every
# message arrived once, except that a transmission group's first message may be reported lost
# when OpenPGM had a parity request queued for that group: 5.3.128 then eliminates every
# selective NAK for that packet (its retransmit-queue entry never leaves; txw.c), a defect of
# the source that prizma reports as a loss event instead of waiting forever.
# Usage: parity.sh PRIZMA_RECV PGM_PEER PGM_FORGE
set -u
recv=$1 peer=$2 forge=$3
port=$(( 22000 + ($$ % 400) * 4 ))
group=239.192.78.$(( $$ % 200 + 10 ))
count=4000
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

"$recv" "udp://$group:$port?iface=127.0.0.1&loss=0.05&seed=11" --count $count --timeout 8 \
    --preset wan --verify >"$dir/recv.log" 2>&1 &
rpid=$!
sleep 0.5
"$peer" send "127.0.0.1;$group" "$port" $count 200 2000 3000 8 0 1 >"$dir/peer.log" 2>&1 &
ppid=$!
sleep 0.2
/usr/bin/python3 "$forge" parity-naks "$group" "$port" 127.0.0.1 8 40 4 >"$dir/forge.log" 2>&1
wait "$ppid"; peer_rc=$?
wait "$rpid"
fail=0
say() { echo "FAIL $*"; fail=1; }
cat "$dir/forge.log"
grep -h "^received\|^repairs" "$dir/recv.log"
[ "$peer_rc" -eq 0 ] || say "the OpenPGM source exited $peer_rc"
val() { sed -n "s/.* $1 \([0-9]*\).*/\1/p" "$dir/recv.log" | head -n 1; }
corrupt=$(sed -n 's/.* corrupt \([0-9]*\) .*/\1/p' "$dir/recv.log")
oor=$(sed -n 's/.* out-of-range \([0-9]*\) .*/\1/p' "$dir/recv.log")
dups=$(sed -n 's/^repairs .* duplicates \([0-9]*\) .*/\1/p' "$dir/recv.log")
[ "${corrupt:-x}" = 0 ] || say "bytes that are not the source's were delivered (corrupt ${corrupt:-?})"
[ "${oor:-x}" = 0 ] || say "out-of-range messages delivered (${oor:-?})"
[ "${dups:-x}" = 0 ] || say "duplicates delivered (${dups:-?})"
pd=$(val parity_dropped) pr=$(val parity_refused) fs=$(val fec_spms)
echo "subscriber: parity_dropped ${pd:-?} parity_refused ${pr:-?} fec_spms ${fs:-?} malformed $(val malformed)"
[ "${pd:-0}" -ge 1 ] || say "no parity packet was counted as dropped"
[ "${pr:-0}" -ge 1 ] || say "no parity NCF was counted as refused"
[ "${fs:-0}" -ge 1 ] || say "no SPM announcing FEC was counted"
resent=$(sed -n 's/.* resent \([0-9]*\)$/\1/p' "$dir/forge.log")
[ "${resent:-0}" -ge 1 ] || say "the source sent no parity RDATA"
# Missing messages: only first messages of groups the forge asked parity for.
asked=",$(sed -n 's/^asked groups //p' "$dir/forge.log"),"
missing=$(sed -n 's/^prizma-recv: missing: //p' "$dir/recv.log" | tr -d ' .')
for m in ${missing//,/ }; do
    case "$m" in
        *-*) say "a run of messages is missing ($m)" ;;
        *) case "$asked" in *",$m,"*) echo "lost (OpenPGM held its repair): $m" ;;
               *) say "message $m is missing" ;; esac ;;
    esac
done
if [ "$fail" -ne 0 ]; then
    sed 's/^/    /' "$dir/recv.log" "$dir/peer.log"
    echo "0 passed, 1 failed"
    exit 1
fi
echo "1 passed, 0 failed"
