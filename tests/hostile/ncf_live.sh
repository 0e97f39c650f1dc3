#!/usr/bin/env bash
# Live: spoofed NCFs for the sqns a subscriber is repairing, every millisecond, from the
# publisher's own address (issue row "spoofed NCF or NAK for a lost sqn every 1 ms: the repair
# is frozen"). Three network namespaces on a bridge (publisher 10.77.1.1, subscriber
# 10.77.1.2, attacker 10.77.1.3); the subscriber loses 2% of the publisher's packets at random
# (iptables statistic in its namespace). The attacker captures a few packets to learn the TSI
# and the current sqn, then (tests/hostile/pgm_forge.py ncf-flood-behind) sends, from the
# publisher's address through a raw socket (so pinning cannot refuse them), one NCF a
# millisecond for the 48 sqns behind the live stream's estimated lead and 8 around it, for
# as long as the stream runs. An NCF holds a NAK back once and never restarts a wait for data,
# so every lost packet must still be repaired: every message delivered once, in order, no
# loss event; the subscriber took the NCFs (ncf_received) and held NAKs back for them.
# Usage: ncf_live.sh PRIZMA_SEND PRIZMA_RECV PRIZMA_CAPTURE  (root, ip, iptables,
#        /usr/bin/python3; 77 = skipped)
set -u
send=$1 recv=$2 capture=$3
count=${COUNT:-16000}
rate=2000
py=/usr/bin/python3
forge="$(cd "$(dirname "$0")" && pwd)/pgm_forge.py"
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v iptables >/dev/null \
    || [ ! -x "$py" ]; then
    echo "SKIP: needs root, iproute2, iptables and /usr/bin/python3"; exit 77
fi
tag=pn$$
dir=$(mktemp -d)
# shellcheck source=tests/transport/netns_lib.sh
. "$(dirname "$0")/../transport/netns_lib.sh"
netns_hosts "$tag" "" src sub atk
netns_addresses 10.77.1 src sub atk
ip netns exec "$tag-sub" iptables -A INPUT -s 10.77.1.1 -p udp -m statistic --mode random \
    --probability 0.02 -j DROP || { echo "SKIP: iptables statistic unavailable"; exit 77; }
group=239.192.78.5 port=7785
uri() { echo "udp://$group:$port?iface=10.77.1.$1"; }
in_ns() { local h=$1; shift; ip netns exec "$tag-$h" "$@"; }
fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do echo "== $f"; sed 's/^/    /' "$f"; done; exit 1; }
counter() { sed -n "s/^counters.* $2 \([0-9]*\).*/\1/p" "$dir/$1.log"; }

in_ns sub "$recv" "$(uri 2)" --count "$count" --timeout 10 --deadline 60 \
    >"$dir/sub.log" 2>"$dir/sub-stderr.log" &
sub_pid=$!
for _ in $(seq 100); do grep -q listening "$dir/sub-stderr.log" && break; sleep 0.1; done
in_ns atk "$capture" "$(uri 3)" --output "$dir/live.pcap" --count 100 --timeout 20 \
    >"$dir/capture.log" 2>&1 &
cap_pid=$!
for _ in $(seq 100); do grep -q capturing "$dir/capture.log" && break; sleep 0.1; done
in_ns src "$send" "$(uri 1)" --count "$count" --size 200 --rate "$rate" --linger 2 \
    >"$dir/src.log" 2>&1 &
src_pid=$!
wait "$cap_pid" || fail "capture"
learned=$(in_ns atk "$py" "$forge" learn "$dir/live.pcap") || fail "learn: $learned"
echo "attacker learned: $learned"
val() { sed -n "s/.*\<$1=\([^ ]*\).*/\1/p" <<<"$learned"; }
seconds=$(( count / rate - 2 ))
in_ns atk "$py" "$forge" ncf-flood-behind "$group" "$port" "$(val gsi)" "$(val sport)" \
    "$(val dport)" "$(val nla)" 10.77.1.1 10.77.1.3 "$seconds" >"$dir/ncfs.log" 2>&1 \
    || fail "NCF flood"
wait "$src_pid" || fail "prizma-send"
wait "$sub_pid"
rc=$?
for f in src sub ncfs; do echo "== $f"; sed 's/^/    /' "$dir/$f.log"; done
[ "$rc" -eq 0 ] || fail "prizma-recv exited $rc: not every message arrived once"
ncfs=$(sed -n 's/^ncfs=\([0-9]*\).*/\1/p' "$dir/ncfs.log")
loss=$(counter sub loss_events)
ncf_in=$(counter sub ncf_received)
suppressed=$(counter sub naks_suppressed)
repaired=$(counter sub repaired)
{ [ -n "$loss" ] && [ -n "$ncfs" ]; } || fail "no counters in the tools' output"
[ "$loss" -eq 0 ] || fail "$loss loss events"
[ "$repaired" -gt 0 ] || fail "nothing repaired: was the loss really there?"
# The forged NCFs reached the subscriber and were taken (they pass pinning): most of them.
[ "$ncf_in" -ge $((ncfs / 2)) ] || fail "the subscriber took $ncf_in NCFs of $ncfs forged"
[ "$suppressed" -gt 0 ] || fail "no NAK held back: the NCFs never met a repair"
echo "PASS: $count delivered once, no loss event, $repaired repaired (NCFed sqns ahead of the lead count too) under $ncfs forged NCFs" \
    "($ncf_in NCFs taken, $suppressed NAKs held back once)"
