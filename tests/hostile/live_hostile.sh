#!/usr/bin/env bash
# Live hostile test: the real tools in three network namespaces on a bridge (publisher
# 10.77.0.1, subscriber 10.77.0.2, attacker 10.77.0.3; addresses and the multicast route exist
# inside the namespaces only). The attacker captures a few packets of the live stream with
# prizma-capture to learn the TSI and the current sqns, then (tests/hostile/pgm_forge.py, PGM
# checksums checked against the captured ones) injects packets of that TSI:
#   (1) ODATA whose trail is ~2^31 ahead, (2) SPM with trail/lead far ahead and another NLA,
#   (3) ODATA 60,000 sqns ahead: once from its own address with prizma-capture --replay, once
#       from the publisher's address (raw socket: pinning cannot tell that one apart);
#   (4) a burst of NAKs from 10 spoofed hosts at the publisher's unicast port;
#   (5) from the publisher's address, an ODATA 50 sqns ahead of the live stream carrying the
#       index that sqn's message will carry but other bytes (a conflict: counted);
#   (6) a new TSI that sends ODATA BASE and BASE + 1000 and never an SPM (its SPMRs: <= 4);
#   (7) NCFs of the live TSI from the attacker's address every millisecond for 6 s (refused);
#   (8) 20 new TSIs from spoofed addresses, each two ODATA with a gap, 30 rounds (the
#       subscriber's sources and memory stay bounded: refused or evicted, RSS < 600 MB);
#   (9) from the publisher's address, one SPM with OPT_RST, then one with OPT_FIN, mid-stream.
# Then, from the tools' final counters: the subscriber got every message exactly once with no
# loss of the live stream, refused packets, counted the conflict; the publisher's NAK answers
# stayed within its repair budget (naks_ignored > 0, RDATA + NCF bytes within the budget,
# fewer RDATA than sqns NAKed); neither tool counted a malformed packet (every forged one is
# well-formed, its checksum valid). The forged sources' own messages reach prizma-recv too
# (payload index out of range: it then exits 1); their gaps, evicted, are their loss events:
# the forged sources use sqns 2^30 away from the live stream's, so each loss event it prints
# is told apart by its sqn.
# Usage: [COUNT=N] [SPM_OPTIONS=RST,FIN] live_hostile.sh PRIZMA_SEND PRIZMA_RECV PRIZMA_CAPTURE
#        (root, iproute2, /usr/bin/python3; exits 77 = skipped)
set -u
send=$1 recv=$2 capture=$3
count=${COUNT:-20000}
spm_options=${SPM_OPTIONS:-RST,FIN}  # (9): the forged SPMs' options, in order
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
netns_addresses 10.77.0 src sub atk
group=239.192.78.1 port=7780
uri() { echo "udp://$group:$port?iface=10.77.0.$1"; }
in_ns() { local h=$1; shift; ip netns exec "$tag-$h" "$@"; }
fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do echo "== $f"; sed 's/^/    /' "$f"; done; exit 1; }
counter() { sed -n "s/^counters.* $2 \([0-9]*\).*/\1/p" "$dir/$1.log"; }

# (not through in_ns: $! is prizma-recv itself, whose /proc/PID/status is read below; its
# stderr apart, so that no line of its stdout, read below, is cut by one)
ip netns exec "$tag-sub" "$recv" "$(uri 2)" --count "$count" --timeout 10 --deadline 40 \
    >"$dir/sub.log" 2>"$dir/sub-stderr.log" &
sub_pid=$!
for _ in $(seq 100); do grep -q listening "$dir/sub-stderr.log" && break; sleep 0.1; done
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

# (5)-(9) run in the background, alongside (4); each writes its own log.
forger() { local log=$1; shift; in_ns atk "$py" "$forge" "$@" >"$dir/$log.log" 2>&1; }
base=$(((sqn + (1 << 30)) & 0xffffffff))  # the forged sources' sqns: far from the live ones
forger conflict conflict "$group" "$port" 10.77.0.3 "$gsi" "$sport" "$nla" 50 || fail "conflict"
forger ncfs ncf-flood "$group" "$port" "$gsi" "$sport" "$dport" "$nla" 10.77.0.3 \
    "$((sqn + rate / 2))" "$rate" 6 &
ncf_pid=$!
{ forger silent silent-source "$group" "$port" "$dport" 10.77.0.3 "$base" 3 \
    && forger gaps gap-sources "$group" "$port" "$dport" 20 "$((base + (1 << 28)))" \
        1000 30 0.1; } &
sources_pid=$!
# (9) One forged RST SPM must not reset the source (two are needed), and a forged FIN must not
# end it while its data goes on: every message must still arrive.
forger spmopts spm-options "$group" "$port" 10.77.0.3 "$gsi" "$sport" "$nla" 0.5 "$spm_options" &
spmopts_pid=$!

# (4) Once the window holds a few thousand messages: NAKs from 10 spoofed hosts for all of them.
sleep 3
naked=$((rate * 3))
in_ns atk "$py" "$forge" naks 10.77.0.1 "$port" "$gsi" "$sport" "$dport" "$nla" "$group" \
    "$trail" "$naked" 10 2 >"$dir/naks.log" 2>&1 || fail "naks"
sqns_naked=$(sed -n 's/.*sqns=\([0-9]*\).*/\1/p' "$dir/naks.log")

wait "$sources_pid" || fail "forged sources"
# The subscriber after the forged sources: alive, its memory bounded.
[ "$(cat "/proc/$sub_pid/comm" 2>/dev/null)" = prizma-recv ] \
    || fail "prizma-recv gone before the end of the stream"
rss_kb=$(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$sub_pid/status")
wait "$ncf_pid" || fail "NCF flood"
wait "$spmopts_pid" || fail "SPM options"
wait "$src_pid" || fail "prizma-send"
wait "$sub_pid"
sub_rc=$?
echo "took $(($(date +%s) - start)) s"
for f in src sub sub-stderr capture replay naks conflict ncfs silent gaps spmopts; do
    echo "== $f"; sed '/^loss: /d; s/^/    /' "$dir/$f.log"
done
echo "    ($(grep -c '^loss: ' "$dir/sub.log") loss lines of prizma-recv left out)"
# prizma-recv exits 1 when a message is missing, duplicated or out of range; the forged
# sources' messages are out of range. Anything else (a signal, a crash) is a failure.
[ "$sub_rc" -le 1 ] || fail "prizma-recv exited $sub_rc"
read -r received unique <<<"$(sed -n \
    's/^received \([0-9]*\) messages (\([0-9]*\) unique of .*/\1 \2/p' "$dir/sub.log")"
read -r dups out_of_range <<<"$(sed -n \
    's/.* duplicates \([0-9]*\) out-of-range \([0-9]*\) .*/\1 \2/p' "$dir/sub.log")"
{ [ -n "$unique" ] && [ -n "$out_of_range" ]; } || fail "no summary in prizma-recv's output"
[ "$unique" -eq "$count" ] || fail "subscriber: $unique of $count messages"
[ "$dups" -eq 0 ] || fail "subscriber: $dups duplicates delivered"
[ "$received" -eq $((count + out_of_range)) ] \
    || fail "subscriber: $received delivered: not $count + $out_of_range forged"
forged_odata=$(($(sed -n 's/.*odata=\([0-9]*\).*/\1/p' "$dir/gaps.log") + 4))
[ "$out_of_range" -le "$forged_odata" ] \
    || fail "subscriber: $out_of_range forged messages of $forged_odata ODATA sent"
# Loss events of the live stream (an sqn within a window of its own): none.
live_loss=0
while read -r sqn_lost; do
    [ $(((sqn_lost - sqn + 65536) & 0xffffffff)) -lt $((count + 131072)) ] \
        && live_loss=$((live_loss + 1))
done < <(sed -n 's/^loss: [0-9]* sequence numbers from sqn \([0-9]*\)$/\1/p' "$dir/sub.log")

loss=$(counter sub loss_events)
refused=$(counter sub packets_refused)
odata=$(counter src odata_sent)
rdata=$(counter src rdata_sent)
ncf=$(counter src ncf_sent)
naks=$(counter src naks_received)
ignored=$(counter src naks_ignored)
{ [ -n "$loss" ] && [ -n "$rdata" ]; } || fail "no counters line in the tools' output"
[ "$live_loss" -eq 0 ] || fail "subscriber: $live_loss loss events of the live stream"
[ "$refused" -gt 0 ] || fail "subscriber: no packet refused"
for t in sub src; do
    [ "$(counter $t malformed)" -eq 0 ] || fail "$t: $(counter $t malformed) malformed packets"
done
# (5) The second copy of the sqn (the forged one or the source's) is a conflict.
conflicts=$(counter sub conflicts)
[ "$conflicts" -ge 1 ] || fail "subscriber: the forged ODATA of a live sqn not counted"
# (6) At most 4 SPMRs (kMaxSpmrs) for a source that never sends an SPM, each way; at least one.
read -r spmr_u spmr_g <<<"$(sed -n 's/.*spmr_unicast=\([0-9]*\) spmr_group=\([0-9]*\).*/\1 \2/p' \
    "$dir/silent.log")"
{ [ "$spmr_u" -ge 1 ] && [ "$spmr_u" -le 4 ] && [ "$spmr_g" -le 4 ]; } \
    || fail "subscriber: $spmr_u unicast and $spmr_g multicast SPMRs for a silent source"
# (7) Every NCF from the attacker's address was refused (pinned to the publisher's).
ncfs=$(sed -n 's/^ncfs=\([0-9]*\).*/\1/p' "$dir/ncfs.log")
[ "$refused" -ge "$ncfs" ] || fail "subscriber: $refused refused of $ncfs forged NCFs"
# (8) More sources than fit: refused or evicted, and the memory stays bounded.
src_refused=$(counter sub sources_refused)
src_evicted=$(counter sub sources_evicted)
[ $((src_refused + src_evicted)) -gt 0 ] || fail "subscriber: 21 forged sources all kept"
[ "$rss_kb" -lt $((600 * 1024)) ] || fail "subscriber: RSS $rss_kb kB after the forged sources"
[ "$naks" -gt 0 ] || fail "publisher: no forged NAK accepted (checksum, NLA or ports wrong?)"
[ "$ignored" -gt 0 ] || fail "publisher: naks_ignored 0: every forged NAK was answered"
# RDATA + NCF bytes (PGM, each packet counted at most at its size) within the repair budget:
# 100% of the ODATA bytes plus the initial credit of 64 packets (max_tpdu <= 1500).
wire=$((size + 24))
budget=$((odata * wire + 64 * 1500))
spent=$((rdata * wire + ncf * 56))
[ "$spent" -le "$budget" ] || fail "publisher: $spent bytes of repair over the budget $budget"
[ "$rdata" -lt "$sqns_naked" ] || fail "publisher: $rdata RDATA for $sqns_naked sqns NAKed"
echo "PASS: $count delivered once, no loss of the live stream; $refused packets refused" \
    "($ncfs forged NCFs), $conflicts conflicts, SPMRs for a silent source $spmr_u + $spmr_g," \
    "sources refused $src_refused evicted $src_evicted, $out_of_range forged messages and" \
    "$loss loss events of forged sources, RSS $((rss_kb / 1024)) MB; publisher: $naks NAKs," \
    "$ignored sqns ignored, $rdata RDATA for $sqns_naked sqns NAKed ($spent of $budget bytes)"
