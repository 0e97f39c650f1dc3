#!/usr/bin/env bash
# Multi-host test: four network namespaces (one publisher, three subscribers) joined by veth
# pairs to a bridge in a fifth, 5% random loss on every host's input (iptables statistic: this
# kernel has no netem), 100k messages over UDP multicast. Every subscriber must get all of
# them in order (prizma-recv checks the counters), and the repairs show in its counters.
# Addresses are RFC 2544 benchmarking addresses inside our own namespaces only.
# Usage: netns.sh PRIZMA_SEND PRIZMA_RECV   (needs root, ip, iptables; exits 77 = skipped)
set -u
send=$1 recv=$2
count=${COUNT:-100000}
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v iptables >/dev/null; then
    echo "SKIP: needs root, iproute2 and iptables"; exit 77
fi
tag=pz$$
dir=$(mktemp -d)
. "$(dirname "$0")/netns_lib.sh"
netns_hosts "$tag" "" pub s1 s2 s3
i=1
for h in pub s1 s2 s3; do
    ip -n "$tag-$h" addr add "198.18.0.$i/24" dev "$tag$h"
    ip netns exec "$tag-$h" iptables -A INPUT -p udp -m statistic --mode random --probability 0.05 -j DROP
    i=$((i + 1))
done
uri() { echo "udp://239.192.90.1:7700?iface=198.18.0.$1&rcvbuf=8388608"; }
pids=()
n=2
for h in s1 s2 s3; do
    ip netns exec "$tag-$h" "$recv" "$(uri $n)" --count "$count" --timeout 120 >"$dir/$h.log" 2>&1 &
    pids+=($!)
    n=$((n + 1))
done
sleep 1
ip netns exec "$tag-pub" "$send" "$(uri 1)" --count "$count" --size 200 --rate 50000 --linger 5 \
    >"$dir/pub.log" 2>&1
fail=0
for k in 0 1 2; do
    wait "${pids[$k]}" || fail=$((fail + 1))
done
for h in pub s1 s2 s3; do echo "== $h"; sed 's/^/    /' "$dir/$h.log"; done
for h in s1 s2 s3; do
    grep -q "^repairs 0 " "$dir/$h.log" && { echo "no repairs on $h: was the loss really there?"; fail=$((fail + 1)); }
done
echo "$((3 - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
