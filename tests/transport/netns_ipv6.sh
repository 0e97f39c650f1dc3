#!/usr/bin/env bash
# IPv6 multicast across hosts: three network namespaces (one publisher, two subscribers)
# joined by veth pairs to a bridge in a fourth, ULA addresses, group ff15::/16 (site-local
# scope, our own namespaces only). Each subscriber drops 5% on receive (loss=), so NAKs go
# unicast over IPv6 to the source and RDATA comes back; APDUs of 3000 bytes are fragmented
# into IPv6-sized PGM packets. Every subscriber must get all messages once.
# Usage: netns_ipv6.sh PRIZMA_SEND PRIZMA_RECV   (needs root and ip; exits 77 = skipped)
set -u
send=$1 recv=$2
count=${COUNT:-5000}
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
	echo "SKIP: needs root and iproute2"
	exit 77
fi
tag=p6$$
dir=$(mktemp -d)
. "$(dirname "$0")/netns_lib.sh"
netns_hosts "$tag" "mcast_snooping 0" pub s1 s2
i=1
for h in pub s1 s2; do
	ip -n "$tag-$h" addr add "fd00:77::$i/64" dev "$tag$h" nodad
	i=$((i + 1))
done
uri() { echo "udp://[ff15::7:1]:7710?iface=fd00:77::$1"; }
pids=()
for k in 2 3; do
	ip netns exec "$tag-s$((k - 1))" "$recv" "$(uri $k)&loss=0.05&seed=$k" --count "$count" --timeout 60 \
		>"$dir/recv$k.log" 2>&1 &
	pids+=($!)
done
for _ in $(seq 1 100); do
	[ "$(grep -l listening "$dir"/recv*.log 2>/dev/null | wc -l)" = 2 ] && break
	sleep 0.05
done
ip netns exec "$tag-pub" "$send" "$(uri 1)" --count "$count" --size 3000 --rate 10000 --linger 3 \
	>"$dir/send.log" 2>&1
src=$?
fail=0
for k in 2 3; do
	wait "${pids[$((k - 2))]}" || { echo "FAIL: subscriber fd00:77::$k"; tail -5 "$dir/recv$k.log"; fail=1; }
	echo "subscriber fd00:77::$k: $(grep -h '^received\|^repairs' "$dir/recv$k.log" | tr '\n' ' ')"
	grep -q "^repairs [1-9]" "$dir/recv$k.log" || { echo "FAIL: no repairs at fd00:77::$k"; fail=1; }
done
echo "publisher: $(tail -1 "$dir/send.log")"
[ $src = 0 ] && [ $fail = 0 ] && echo "PASS: IPv6 multicast, 2 subscribers, loss repaired"
