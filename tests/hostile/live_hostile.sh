#!/usr/bin/env bash
# Live hostile test: the real tools in three network namespaces on a bridge (publisher
# 10.77.0.1, subscriber 10.77.0.2, attacker 10.77.0.3; addresses and the multicast route exist
# inside the namespaces only). The attacker captures a few packets of the live stream with
# prizma-capture to learn the TSI and the current sqns, then (tests/hostile/pgm_forge.py, PGM
# checksums checked against the captured ones) injects packets of that TSI:
#   (1) ODATA whose trail is ~2^31 ahead, (2) SPM with trail/lead far ahead and another NLA,
#   (3) ODATA 60,000 sqns ahead: once from its own address with prizma-capture --replay, once
#       from the publisher's address (raw socket: pinning cannot tell that one apart);
#   (4) a burst of NAKs from 10 spoofed hosts at the publisher's unicast port.
# Then, from the tools' final counters: the subscriber got every message exactly once with 0
# loss events and refused packets; the publisher's NAK answers stayed within its repair budget
# (naks_ignored > 0, RDATA + NCF bytes within the budget, fewer RDATA than sqns NAKed).
# Usage: live_hostile.sh PRIZMA_SEND PRIZMA_RECV PRIZMA_CAPTURE
#        (root, iproute2, /usr/bin/python3; exits 77 = skipped)
set -u
send=$1 recv=$2 capture=$3
count=${COUNT:-20000}
size=200
rate=2000
py=/usr/bin/python3
forge="$(cd "$(dirname "$0")" && pwd)/pgm_forge.py"
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || [ ! -x "$py" ]; then
    echo "SKIP: needs root, iproute2 and /usr/bin/python3"; exit 77
fi
tag=ph$$
dir=$(mktemp -d)
# shellcheck source=tests/transport/netns_lib.sh
. "$(dirname "$0")/../transport/netns_lib.sh"
netns_hosts "$tag" "" src sub atk
i=1
for h in src sub atk; do
    ip -n "$tag-$h" addr add "10.77.0.$i/24" dev "$tag$h"
    ip -n "$tag-$h" route add 224.0.0.0/4 dev "$tag$h"
    i=$((i + 1))
done
group=239.192.78.1 port=7780
uri() { echo "udp://$group:$port?iface=10.77.0.$1"; }
in_ns() { local h=$1; shift; ip netns exec "$tag-$h" "$@"; }
fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do echo "== $f"; sed 's/^/    /' "$f"; done; exit 1; }
counter() { sed -n "s/^counters.* $2 \([0-9]*\).*/\1/p" "$dir/$1.log"; }

in_ns sub "$recv" "$(uri 2)" --count "$count" --timeout 30 --deadline 90 >"$dir/sub.log" 2>&1 &
sub_pid=$!
for _ in $(seq 100); do grep -q listening "$dir/sub.log" && break; sleep 0.1; done
in_ns atk "$capture" "$(uri 3)" --output "$dir/live.pcap" --count 200 --timeout 20 \
    >"$dir/capture.log" 2>&1 &
cap_pid=$!
for _ in $(seq 100); do grep -q capturing "$dir/capture.log" && break; sleep 0.1; done
start=$(date +%s)
in_ns src "$send" "$(uri 1)" --count "$count" --size "$size" --rate "$rate" --linger 5 \
    >"$dir/src.log" 2>&1 &
src_pid=$!
wait "$cap_pid" || fail "capture"

# What the attacker learns: the TSI, the current sqns, the source's NLA (checksums verified).
learned=$(in_ns atk "$py" "$forge" learn "$dir/live.pcap") || fail "learn: $learned"
echo "attacker learned: $learned"
val() { sed -n "s/.*\<$1=\([^ ]*\).*/\1/p" <<<"$learned"; }
gsi=$(val gsi) sport=$(val sport) dport=$(val dport) sqn=$(val sqn) trail=$(val trail)
spm_sqn=$(val spm_sqn) nla=$(val nla)
in_ns atk "$py" "$forge" downstream "$dir/forged.pcap" 10.77.0.3 "$group" "$port" "$gsi" \
    "$sport" "$dport" "$sqn" "$trail" "$spm_sqn" "$nla" || fail "forge"
in_ns atk "$capture" --replay "$dir/forged.pcap" "$(uri 3)" --fast >"$dir/replay.log" 2>&1 \
    || fail "replay"
in_ns atk "$py" "$forge" send-downstream "$dir/forged.pcap" "$nla" || fail "spoofed downstream"

# (4) Once the window holds a few thousand messages: NAKs from 10 spoofed hosts for all of them.
sleep 3
naked=$((rate * 3))
in_ns atk "$py" "$forge" naks 10.77.0.1 "$port" "$gsi" "$sport" "$dport" "$nla" "$group" \
    "$trail" "$naked" 10 2 >"$dir/naks.log" 2>&1 || fail "naks"
sqns_naked=$(sed -n 's/.*sqns=\([0-9]*\).*/\1/p' "$dir/naks.log")

wait "$src_pid" || fail "prizma-send"
wait "$sub_pid" || fail "prizma-recv: not every message exactly once"
echo "took $(($(date +%s) - start)) s"
for f in src sub capture replay naks; do echo "== $f"; sed 's/^/    /' "$dir/$f.log"; done

loss=$(counter sub loss_events)
refused=$(counter sub packets_refused)
odata=$(counter src odata_sent)
rdata=$(counter src rdata_sent)
ncf=$(counter src ncf_sent)
naks=$(counter src naks_received)
ignored=$(counter src naks_ignored)
{ [ -n "$loss" ] && [ -n "$rdata" ]; } || fail "no counters line in the tools' output"
[ "$loss" -eq 0 ] || fail "subscriber: $loss loss events"
[ "$refused" -gt 0 ] || fail "subscriber: no packet refused"
[ "$naks" -gt 0 ] || fail "publisher: no forged NAK accepted (checksum, NLA or ports wrong?)"
[ "$ignored" -gt 0 ] || fail "publisher: naks_ignored 0: every forged NAK was answered"
# RDATA + NCF bytes (PGM, each packet counted at most at its size) within the repair budget:
# 100% of the ODATA bytes plus the initial credit of 64 packets (max_tpdu <= 1500).
wire=$((size + 24))
budget=$((odata * wire + 64 * 1500))
spent=$((rdata * wire + ncf * 56))
[ "$spent" -le "$budget" ] || fail "publisher: $spent bytes of repair over the budget $budget"
[ "$rdata" -lt "$sqns_naked" ] || fail "publisher: $rdata RDATA for $sqns_naked sqns NAKed"
echo "PASS: $count delivered, 0 loss events, $refused packets refused; publisher: $naks NAKs," \
    "$ignored sqns ignored, $rdata RDATA for $sqns_naked sqns NAKed ($spent of $budget bytes)"
