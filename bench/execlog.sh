#!/usr/bin/env bash
# The ExecLog example's numbers (docs/EXECLOG.md, "Numbers"), on this host, in a network
# namespace of its own (root: lo with 127.0.0.1 and 127.0.0.2):
#   1. prizma's raw ping-pong RTT (prizma-ping / prizma-pong) on the same loopback, blocking
#      (as the consumers wait) and spinning;
#   2. core -> consumer latency (execlog-risk, input due -> applied) at 16,000 records/s, with
#      the four consumers and (2b) with the archiver and the risk engine only;
#   3. records/s through core -> archiver, risk, fix, monitor at ~1 M records/s offered
#      (the core busy-spins; the consumers block);
#   4. failover stall: the longest pause between two records at execlog-risk when the active
#      core is killed, over TRIALS kills;
#   5. catch-up rate of a late joiner replaying step 3's archive.
#   bench/execlog.sh [BUILD_DIR] [TRIALS]     (default build/release, 5; TP_ORDERS=N sizes step 3)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../build/release}" && pwd)
trials=${2:-5}
if [ "${EXECLOG_PRIVATE_NET:-}" != 1 ]; then
    exec env EXECLOG_PRIVATE_NET=1 unshare -n sh -c \
        'ip link set lo up && ip addr add 127.0.0.2/8 dev lo && exec "$0" "$@"' "$0" "$build" "$trials"
fi
bin=$build/examples/execlog
tools=$build/examples
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
u="udp://239.192.139.1:24891?iface=127.0.0.1"
flow="flow=tagged&flow_tag=21&flow_group=1&flow_timeout_ms=1000"
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

consumers() {  # consumers DIR [risk options...]
    local d=$1; shift
    mkdir -p "$d"
    "$bin/execlog-archiver" "$u&flow=tagged&flow_tag=21" --journal "$d/journal" --listen "127.0.0.1:$port" >"$d/archiver.log" 2>&1 &
    arch=$!; pids+=("$arch")
    for _ in $(seq 100); do grep -q "replay on" "$d/archiver.log" && break; sleep 0.05; done
    "$bin/execlog-risk" "$u&flow=tagged&flow_tag=22" --replay "127.0.0.1:$port" --state "$d/risk.state" --exit-at-end --print-ms 0 "$@" >"$d/risk.log" 2>&1 &
    risk=$!; pids+=("$risk")
    "$bin/execlog-fix" "$u&flow=tagged&flow_tag=23" --replay "127.0.0.1:$port" --output "$d/fix.out" --exit-at-end >"$d/fix.log" 2>&1 &
    fix=$!; pids+=("$fix")
    "$bin/execlog-monitor" "$u" --exit-at-end --no-stats >"$d/monitor.log" 2>&1 &
    mon=$!; pids+=("$mon")
    sleep 0.3
}
finish() {  # finish DIR: waits for the consumers, stops the archiver
    for p in "$risk" "$fix" "$mon"; do wait "$p" || true; done
    kill -TERM "$arch"; wait "$arch" || true
}

# The consumers block on the context's fd, so the RTT they compare with is the blocking one
# (both ends sleep in epoll); the spinning one is printed next to it.
for w in block spin; do
    echo "== 1. prizma ping-pong RTT (same loopback, --wait $w)"
    "$tools/prizma-pong" "udp://239.192.139.2:24892?iface=127.0.0.1" "udp://239.192.139.3:24893?iface=127.0.0.1" \
        --wait "$w" >"$work/pong.log" 2>&1 &
    pong=$!; pids+=("$pong")
    sleep 0.3
    "$tools/prizma-ping" "udp://239.192.139.2:24892?iface=127.0.0.1" "udp://239.192.139.3:24893?iface=127.0.0.1" \
        --count 20000 --size 140 --rate 10000 --wait "$w" | grep -E "RTT"
    kill "$pong" 2>/dev/null || true; wait "$pong" 2>/dev/null || true
done

echo "== 2. core -> risk latency at 10,000 orders/s (~16,000 records/s)"
consumers "$work/lat" --latency-anchor-file "$work/lat/anchor"
"$bin/execlog-core" "$u&$flow" --seed 3 --rate 10000 --count 50000 --anchor-file "$work/lat/anchor" >"$work/lat/core.log" 2>&1
finish "$work/lat"
grep -E "latency" "$work/lat/risk.log"
echo "== 2b. the same with the archiver and the risk engine only (two consumers, not four)"
mkdir -p "$work/lat2"
"$bin/execlog-archiver" "$u&flow=tagged&flow_tag=21" --journal "$work/lat2/journal" --listen "127.0.0.1:$port" >"$work/lat2/archiver.log" 2>&1 &
arch=$!; pids+=("$arch")
for _ in $(seq 100); do grep -q "replay on" "$work/lat2/archiver.log" && break; sleep 0.05; done
"$bin/execlog-risk" "$u&flow=tagged&flow_tag=22" --replay "127.0.0.1:$port" --state "$work/lat2/risk.state" --exit-at-end --print-ms 0 \
    --latency-anchor-file "$work/lat2/anchor" >"$work/lat2/risk.log" 2>&1 &
risk=$!; pids+=("$risk")
sleep 0.3
"$bin/execlog-core" "$u&$flow" --seed 3 --rate 10000 --count 50000 --anchor-file "$work/lat2/anchor" >"$work/lat2/core.log" 2>&1
wait "$risk" || true
kill -TERM "$arch"; wait "$arch" || true
grep -E "latency" "$work/lat2/risk.log"

echo "== 3. throughput: ~1 M records/s offered (620,000 orders/s, the core spinning)"
consumers "$work/tp"
start=$(date +%s.%N)
"$bin/execlog-core" "$u&$flow" --seed 4 --rate 620000 --count "${TP_ORDERS:-1240000}" --spin >"$work/tp/core.log" 2>&1
for p in "$risk" "$fix" "$mon"; do wait "$p" || true; done
end=$(date +%s.%N)
grep -E "records/s" "$work/tp/core.log"
for c in risk fix monitor; do grep -h "final:" "$work/tp/$c.log" | cut -c1-150; done
records=$(sed -n 's/^execlog-risk: final: next \([0-9]*\).*/\1/p' "$work/tp/risk.log")
/usr/bin/python3 -c "print('through all four consumers: %d records in %.2f s: %.0f records/s' % ($records, $end - $start, $records / ($end - $start)))"
echo "== 5. catch-up: a late risk engine replays that archive"
t0=$(date +%s.%N)
"$bin/execlog-risk" "$u" --replay "127.0.0.1:$port" --state "$work/tp/late.state" --exit-at-end --print-ms 0 >"$work/tp/late.log" 2>&1 &
late=$!; pids+=("$late")
# Its first live gap check needs the archiver: keep it up until the late engine is done.
wait "$late" || true
t1=$(date +%s.%N)
kill -TERM "$arch"; wait "$arch" || true
/usr/bin/python3 -c "print('late joiner: %d records in %.2f s: %.0f records/s' % ($records, $t1 - $t0, $records / ($t1 - $t0)))"
grep -h "final:" "$work/tp/late.log" | cut -c1-120

echo "== 4. failover stall over $trials kills of the active core (10,000 orders/s)"
stalls=()
for t in $(seq "$trials"); do
    d="$work/fo$t"
    consumers "$d"
    "$bin/execlog-core" "$u&$flow" --seed $t --rate 10000 --count 30000 --state "$d/a" >"$d/a.log" 2>&1 &
    a=$!; pids+=("$a")
    for _ in $(seq 200); do grep -q "publishing from" "$d/a.log" && break; sleep 0.05; done
    "$bin/execlog-core" "${u/127.0.0.1/127.0.0.2}&$flow" --seed $t --rate 10000 --count 30000 --state "$d/b" >"$d/b.log" 2>&1 &
    b=$!; pids+=("$b")
    sleep "1.$((RANDOM % 9))"
    kill -9 "$a"
    finish "$d"
    kill -TERM "$b" 2>/dev/null || true
    s=$(sed -n 's/.*longest pause between two records \([0-9.]*\) ms/\1/p' "$d/risk.log")
    echo "trial $t: longest pause at risk $s ms"
    stalls+=("$s")
done
printf '%s\n' "${stalls[@]}" | sort -n | /usr/bin/python3 -c "
import sys; v=[float(x) for x in sys.stdin if x.strip()]
print('failover stall: max (= p99 of %d trials) %.3f ms, median %.3f ms' % (len(v), v[-1], v[len(v)//2]))"
