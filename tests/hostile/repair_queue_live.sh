#!/usr/bin/env bash
# Live repair queue under eviction (issue: "repair queue with a repair rate set and a small
# window: evicted entries stay queued; some sqns get no RDATA at all"). Two network namespaces
# on a bridge; the subscriber loses 10% of its input at random (iptables statistic). The
# publisher has a 128-packet window and an RDATA budget (--repair-rate) far below what the
# loss asks for, so NAKed sqns leave the window while their repairs wait for tokens. Outcome:
#   - the queued repairs of evicted sqns are dropped (repairs_dropped > 0), never sent;
#   - repairs still flow for sqns still in the window (the subscriber repaired some);
#   - every message is delivered exactly once or inside a reported loss: unique + lost ==
#     count, no duplicate, and prizma-recv ends (no sqn waits for ever).
# Usage: repair_queue_live.sh PRIZMA_SEND PRIZMA_RECV  (root, ip, iptables; 77 = skipped)
set -u
send=$1 recv=$2
count=${COUNT:-20000}
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v iptables >/dev/null; then
    echo "SKIP: needs root, iproute2 and iptables"; exit 77
fi
tag=pq$$
dir=$(mktemp -d)
# shellcheck source=tests/transport/netns_lib.sh
. "$(dirname "$0")/../transport/netns_lib.sh"
netns_hosts "$tag" "" pub sub
ip -n "$tag-pub" addr add 198.18.1.1/24 dev "${tag}pub"
ip -n "$tag-sub" addr add 198.18.1.2/24 dev "${tag}sub"
ip netns exec "$tag-sub" iptables -A INPUT -p udp -m statistic --mode random --probability 0.10 \
    -j DROP || { echo "SKIP: iptables statistic unavailable"; exit 77; }
uri() { echo "udp://239.192.78.9:7790?iface=198.18.1.$1"; }
fail() { echo "FAIL: $*"; for f in pub sub; do echo "== $f"; sed 's/^/    /' "$dir/$f.log"; done; exit 1; }
counter() { sed -n "s/^counters.* $2 \([0-9]*\).*/\1/p" "$dir/$1.log"; }

ip netns exec "$tag-sub" "$recv" "$(uri 2)" --count "$count" --timeout 5 --deadline 60 \
    >"$dir/sub.log" 2>"$dir/sub-stderr.log" &
sub_pid=$!
for _ in $(seq 100); do grep -q listening "$dir/sub-stderr.log" && break; sleep 0.1; done
# 4,000 msgs/s of 200 bytes lose ~400/s; 20,000 B/s of repair is ~90 RDATA/s.
ip netns exec "$tag-pub" "$send" "$(uri 1)" --count "$count" --size 200 --rate 4000 \
    --window 128 --repair-rate 20000 --linger 2 >"$dir/pub.log" 2>&1 || fail "prizma-send"
wait "$sub_pid"
rc=$?
[ "$rc" -le 1 ] || fail "prizma-recv exited $rc"
read -r received unique <<<"$(sed -n \
    's/^received \([0-9]*\) messages (\([0-9]*\) unique of .*/\1 \2/p' "$dir/sub.log")"
dups=$(sed -n 's/^repairs .* duplicates \([0-9]*\) out-of-range.*/\1/p' "$dir/sub.log")
lost=$(sed -n 's/^loss: \([0-9]*\) sequence numbers from sqn [0-9]*$/\1/p' "$dir/sub.log" \
    | awk '{s += $1} END {print s + 0}')
{ [ -n "$unique" ] && [ -n "$dups" ]; } || fail "no summary in prizma-recv's output"
dropped=$(counter pub repairs_dropped)
rdata=$(counter pub rdata_sent)
repaired=$(counter sub repaired)
{ [ -n "$dropped" ] && [ -n "$repaired" ]; } || fail "no counters line in the tools' output"
echo "delivered $unique of $count, $lost reported lost, $dups duplicates; publisher: $rdata" \
    "RDATA, $dropped queued repairs dropped; subscriber: $repaired repaired"
[ "$dups" -eq 0 ] || fail "$dups duplicates delivered"
[ $((unique + lost)) -eq "$count" ] || fail "$unique delivered + $lost lost != $count"
[ "$dropped" -gt 0 ] || fail "no queued repair dropped: was the budget really short?"
[ "$repaired" -gt 0 ] || fail "no repair reached the subscriber: the queue is stuck"
[ "$lost" -gt 0 ] || fail "nothing lost: the budget was not short"
echo PASS
