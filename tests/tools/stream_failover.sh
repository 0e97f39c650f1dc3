#!/usr/bin/env bash
# Hot-standby failover between real processes over UDP multicast on loopback (docs/STREAMS.md):
# two publishers write the same stream; at a seeded random point the one started first is
# killed with -9 (mid-burst, possibly mid-fragmented record); it restarts from its own saved
# state and rejoins as a standby. The arbitrating subscriber must get every record once, in
# order, with no loss event. The seed is printed; the same seed replays the same kill points.
# The pair sends on one shared schedule (record s due at START + s/rate); the subscriber
# prints the failover stall of each trial (the greatest lateness of the records due within
# 100 ms after the kill, next to the lateness before it); its median and p99 over the trials
# are printed for the benchmark (bench/stream_failover.sh), never asserted.
# Each publisher needs its own unicast address for the NAKs it is sent (docs/URI.md): the
# second one publishes from 127.0.0.2.
# Usage: stream_failover.sh STREAM_PEER TRIALS [SEED]
set -u
peer=$1 trials=$2 seed=${3:-$(( $$ % 100000 ))}
echo "stream_failover: $trials trials, seed $seed (rerun: $0 $peer $trials $seed)"
RANDOM=$seed
dir=$(mktemp -d)
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null; rm -rf "$dir"' EXIT
n=30000 rate=15000  # 2 s of stream per trial
fail=0
lates=()
for t in $(seq 1 "$trials"); do
    port=$(( 26800 + ($$ % 100) * 10 + t ))
    uri="udp://239.192.95.$(( t + 10 )):$port?iface=127.0.0.1"
    rm -f "$dir"/state-*
    start_ns=$(( $(date +%s%N) + 300000000 ))
    rm -f "$dir/kill"
    "$peer" sub "$uri" "$n" 3 "$start_ns" "$rate" "$dir/kill" >"$dir/sub.log" 2>&1 &
    spid=$!; pids=("$spid")
    for _ in $(seq 100); do grep -q listening "$dir/sub.log" && break; sleep 0.02; done
    "$peer" pub "$uri" "$dir/state-a" "$n" "$rate" "$start_ns" >"$dir/a.log" 2>&1 &
    apid=$!
    "$peer" pub "${uri/iface=127.0.0.1/iface=127.0.0.2}" "$dir/state-b" "$n" "$rate" "$start_ns" \
        >"$dir/b.log" 2>&1 &
    bpid=$!
    pids+=("$apid" "$bpid")
    kill_ms=$(( 500 + RANDOM % 1500 ))  # somewhere in the stream's 2 s (it starts at 300 ms)
    sleep "$(printf '%d.%03d' $((kill_ms / 1000)) $((kill_ms % 1000)))"
    date +%s%N >"$dir/kill"
    kill -9 "$apid" 2>/dev/null
    wait "$apid" 2>/dev/null
    resumed=$(cat "$dir/state-a" 2>/dev/null || echo 0)
    sleep 0.2
    "$peer" pub "$uri" "$dir/state-a" "$n" "$rate" "$start_ns" >"$dir/a2.log" 2>&1 &
    a2pid=$!; pids+=("$a2pid")
    wait "$spid"; rc=$?
    wait "$bpid" "$a2pid" 2>/dev/null
    line=$(grep '^stream:' "$dir/sub.log")
    echo "trial $t: killed the active publisher at ${kill_ms} ms, restarted from record $resumed: $line"
    fo=$(grep '^failover:' "$dir/sub.log")
    echo "    $fo"
    echo "    $(grep '^pgm:' "$dir/sub.log")"
    late=$(sed -n 's/^failover: stall \([0-9.]*\) ms.*/\1/p' <<<"$fo")
    [ -n "$late" ] && lates+=("$late")
    if [ "$rc" -ne 0 ]; then
        echo "FAIL trial $t (seed $seed)"; cat "$dir/sub.log" "$dir/a.log" "$dir/b.log" "$dir/a2.log"
        fail=$((fail + 1))
    fi
done
echo "stream_failover: $((trials - fail)) of $trials trials passed (seed $seed)"
if [ "${#lates[@]}" -gt 0 ]; then
    printf '%s\n' "${lates[@]}" | sort -g | awk '{v[NR] = $1} END {
        p50 = v[int((NR + 1) / 2)]; i99 = int(NR * 0.99 + 0.999); if (i99 < 1) i99 = 1
        printf "stream_failover: failover stall per trial: median %.3f ms, p99 %.3f ms, max %.3f ms over %d trials\n", p50, v[i99], v[NR], NR }'
fi
[ "$fail" -eq 0 ]
