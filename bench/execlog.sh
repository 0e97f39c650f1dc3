#!/usr/bin/env bash
# The ExecLog example's numbers (docs/EXECLOG.md, "Numbers"), on this host, in a network
# namespace of its own (root: lo with 127.0.0.1 and 127.0.0.2), against a baseline measured in
# the same run:
#   1. raw UDP one-way (bench/compare/udp_perf oneway-send/oneway-recv), 112-byte datagrams
#      (an ExecLog record) at 16,000/s, "due -> received", the receiver blocking in epoll (as
#      the consumers wait) and spinning; run before and after step 2. Also prizma's ping-pong
#      RTT (prizma-ping / prizma-pong), blocking and spinning;
#   2. core -> consumer latency (execlog-risk, "input due -> applied", against core-a's
#      --anchor-file) at 10,000 orders/s (~16,000 records/s) with the hot-standby PAIR (core-a,
#      core-b) and the four consumers, and (2b) core-a with the archiver and the risk engine
#      only; each consumer's CPU (getrusage, its "final:" line) per record;
#   3. records/s through core -> archiver, risk, fix, monitor at ~1 M records/s offered
#      (the core busy-spins; the consumers block), and their CPU per record;
#   4. failover: TRIALS kills of the active core of a pair, each at a time drawn from a
#      seeded RNG (--seed, printed); the stall is measured against the pair's schedule: the
#      greatest lateness (applied - due) of any record at the risk engine in the trial;
#   5. catch-up rate of a late joiner replaying step 3's archive.
#   bench/execlog.sh [BUILD_DIR] [--trials N] [--seed S]      (default build/release, 50, 1)
#   Environment, to debug with smaller runs: LAT_ORDERS (50000), RAW_COUNT (80000),
#   TP_ORDERS (1240000), FO_ORDERS (12000).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build_arg=$here/../build/release
trials=50
seed=1
while [ $# -gt 0 ]; do
    case $1 in
    --trials) trials=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    -*) echo "usage: $0 [BUILD_DIR] [--trials N] [--seed S]" >&2; exit 2 ;;
    *) build_arg=$1; shift ;;
    esac
done
build=$(cd "$build_arg" && pwd)
if [ "${EXECLOG_PRIVATE_NET:-}" != 1 ]; then
    exec env EXECLOG_PRIVATE_NET=1 unshare -n sh -c \
        'ip link set lo up && ip addr add 127.0.0.2/8 dev lo && exec "$0" "$@"' "$0" "$build" \
        --trials "$trials" --seed "$seed"
fi
py=/usr/bin/python3
bin=$build/examples/execlog
tools=$build/examples
udp_perf=$build/bench/udp_perf
lat_orders=${LAT_ORDERS:-50000}
raw_count=${RAW_COUNT:-80000}
fo_orders=${FO_ORDERS:-12000}
work=$(mktemp -d)
res=$work/results  # KEY VALUE lines for the table at the end
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
u="udp://239.192.139.1:24891?iface=127.0.0.1"
flow="flow=tagged&flow_tag=21&flow_group=1&flow_timeout_ms=1000"
read -r port fix_port < <($py -c '
import socket; s, t = socket.socket(), socket.socket(); s.bind(("127.0.0.1", 0)); t.bind(("127.0.0.1", 0))
print(s.getsockname()[1], t.getsockname()[1])')
echo "bench/execlog.sh: $(date -u +%FT%TZ), build $build, trials $trials, seed $seed"

consumers() {  # consumers DIR [risk options...]
    local d=$1; shift
    mkdir -p "$d"
    "$bin/execlog-archiver" "$u&flow=tagged&flow_tag=21" --journal "$d/journal" --listen "127.0.0.1:$port" >"$d/archiver.log" 2>&1 &
    arch=$!; pids+=("$arch")
    for _ in $(seq 100); do grep -q "replay on" "$d/archiver.log" && break; sleep 0.05; done
    "$bin/execlog-risk" "$u&flow=tagged&flow_tag=22" --replay "127.0.0.1:$port" --state "$d/risk.state" --exit-at-end --print-ms 0 "$@" >"$d/risk.log" 2>&1 &
    risk=$!; pids+=("$risk")
    "$bin/execlog-fix" "$u&flow=tagged&flow_tag=23" --replay "127.0.0.1:$port" --listen "$fix_port" --store "$d/fix" --exit-at-end >"$d/fix.log" 2>&1 &
    fix=$!; pids+=("$fix")
    "$bin/execlog-monitor" "$u" --exit-at-end --no-stats >"$d/monitor.log" 2>&1 &
    mon=$!; pids+=("$mon")
    # execlog-fix makes its thousand sessions' stores first.
    for _ in $(seq 200); do grep -q "listening on port" "$d/fix.log" && break; sleep 0.05; done
    sleep 0.2
}
finish() {  # finish DIR: waits for the consumers, stops the archiver
    for p in "$risk" "$fix" "$mon"; do wait "$p" || true; done
    kill -TERM "$arch"; wait "$arch" || true
}
pair() {  # pair DIR SEED ORDERS: core-a (anchor DIR/anchor-a), then core-b as its standby
    # on core-a's schedule (--schedule-file: the same input feed, so in step)
    local d=$1 s=$2 n=$3
    "$bin/execlog-core" "$u&$flow" --seed "$s" --rate 10000 --count "$n" --state "$d/a" \
        --anchor-file "$d/anchor-a" >"$d/a.log" 2>&1 &
    a=$!; pids+=("$a")
    for _ in $(seq 200); do grep -q "publishing from" "$d/a.log" && break; sleep 0.01; done
    "$bin/execlog-core" "${u/127.0.0.1/127.0.0.2}&$flow" --seed "$s" --rate 10000 --count "$n" \
        --state "$d/b" --anchor-file "$d/anchor-b" --schedule-file "$d/anchor-a" >"$d/b.log" 2>&1 &
    b=$!; pids+=("$b")
    for _ in $(seq 200); do grep -q "publishing from" "$d/b.log" && break; sleep 0.01; done
}
cpu_per_record() {  # cpu_per_record DIR PREFIX: "PREFIX_cpu_CONSUMER us/record" into $res
    $py - "$1" "$2" >>"$res" <<'EOF'
import re, sys
d, prefix = sys.argv[1:]
pat = {"archiver": r"final: journal next \d+, records (\d+),",
       "risk": r"final: next \d+, applied (\d+),",
       "fix": r"final: next \d+, messages \d+, not resent \d+, no session \d+, applied (\d+),",
       "monitor": r"final: records (\d+),"}
for c, p in pat.items():
    try:
        text = open("%s/%s.log" % (d, c)).read()
    except OSError:
        continue  # not in this step
    m, cpu = re.findall(p, text), re.findall(r"final: .*, cpu ([0-9.]+) s", text)
    if m and cpu and int(m[-1]) > 0:
        print("%s_cpu_%s %.2f %d %.3f" % (prefix, c, float(cpu[-1]) * 1e6 / int(m[-1]),
                                           int(m[-1]), float(cpu[-1])))
EOF
}
raw_oneway() {  # raw_oneway TAG: the raw UDP one-way baseline, blocking and spinning
    for w in block spin; do
        "$udp_perf" oneway-recv 239.192.139.4 24894 "$raw_count" $([ $w = block ] && echo block) \
            >"$work/raw-$1-$w.json" &
        local r=$!; pids+=("$r")
        sleep 0.2
        "$udp_perf" oneway-send 239.192.139.4 24894 16000 "$raw_count" 112 >/dev/null
        wait "$r" || true
        echo "raw UDP one-way ($1 step 2, receiver --wait $w): $(cat "$work/raw-$1-$w.json")"
        $py -c "import json,sys; j=json.load(open(sys.argv[1])); u=j['us']
print('raw_%s_%s %.1f %.1f %.1f %.1f %d' % (sys.argv[2], sys.argv[3], u['p50'], u['p99'], u['p99_9'], u['max'], j['received']))" \
            "$work/raw-$1-$w.json" "$1" "$w" >>"$res"
    done
}

echo "== 1. baseline: raw UDP one-way, 112 bytes at 16,000/s, due -> received (before step 2)"
raw_oneway before
# The consumers block on the context's fd, so the RTT they compare with is the blocking one
# (both ends sleep in epoll); the spinning one is printed next to it.
for w in block spin; do
    echo "== 1b. prizma ping-pong RTT (same loopback, --wait $w)"
    "$tools/prizma-pong" "udp://239.192.139.2:24892?iface=127.0.0.1" "udp://239.192.139.3:24893?iface=127.0.0.1" \
        --wait "$w" >"$work/pong.log" 2>&1 &
    pong=$!; pids+=("$pong")
    sleep 0.3
    "$tools/prizma-ping" "udp://239.192.139.2:24892?iface=127.0.0.1" "udp://239.192.139.3:24893?iface=127.0.0.1" \
        --count 20000 --size 140 --rate 10000 --wait "$w" | grep -E "RTT" | tee "$work/rtt-$w"
    kill "$pong" 2>/dev/null || true; wait "$pong" 2>/dev/null || true
    echo "rtt_$w $(sed -n 's/.*p50 \([0-9.]*\).*p99 \([0-9.]*\).*/\1 \2/p' "$work/rtt-$w" | head -1)" >>"$res"
done

echo "== 2. core -> risk latency at 10,000 orders/s (~16,000 records/s): the pair, four consumers"
consumers "$work/lat" --latency-anchor-file "$work/lat/anchor-a"
pair "$work/lat" 3 "$lat_orders"
wait "$a" || true; wait "$b" || true
finish "$work/lat"
grep -E "latency|longest" "$work/lat/risk.log"
grep -h "final:" "$work/lat/"{archiver,risk,fix,monitor}.log || true
echo "lat $(sed -n 's/.*latency us (input due -> applied): p50 \([0-9.]*\) p99 \([0-9.]*\) p99.9 \([0-9.]*\) max \([0-9.]*\) (\([0-9]*\) records)/\1 \2 \3 \4 \5/p' "$work/lat/risk.log")" >>"$res"
cpu_per_record "$work/lat" lat
echo "== 1 (again). raw UDP one-way, after step 2"
raw_oneway after
echo "== 2b. core-a alone with the archiver and the risk engine only (two consumers, not four)"
mkdir -p "$work/lat2"
"$bin/execlog-archiver" "$u&flow=tagged&flow_tag=21" --journal "$work/lat2/journal" --listen "127.0.0.1:$port" >"$work/lat2/archiver.log" 2>&1 &
arch=$!; pids+=("$arch")
for _ in $(seq 100); do grep -q "replay on" "$work/lat2/archiver.log" && break; sleep 0.05; done
"$bin/execlog-risk" "$u&flow=tagged&flow_tag=22" --replay "127.0.0.1:$port" --state "$work/lat2/risk.state" --exit-at-end --print-ms 0 \
    --latency-anchor-file "$work/lat2/anchor" >"$work/lat2/risk.log" 2>&1 &
risk=$!; pids+=("$risk")
sleep 0.3
"$bin/execlog-core" "$u&$flow" --seed 3 --rate 10000 --count "$lat_orders" --anchor-file "$work/lat2/anchor" >"$work/lat2/core.log" 2>&1
wait "$risk" || true
kill -TERM "$arch"; wait "$arch" || true
grep -E "latency" "$work/lat2/risk.log"
echo "lat2 $(sed -n 's/.*latency us (input due -> applied): p50 \([0-9.]*\) p99 \([0-9.]*\).*/\1 \2/p' "$work/lat2/risk.log")" >>"$res"

echo "== 3a. archiver rate: ~1.5 M records/s offered (900,000 orders/s), archiver and risk only"
mkdir -p "$work/tpa"
"$bin/execlog-archiver" "$u&flow=tagged&flow_tag=21" --journal "$work/tpa/journal" --listen "127.0.0.1:$port" >"$work/tpa/archiver.log" 2>&1 &
arch=$!; pids+=("$arch")
for _ in $(seq 100); do grep -q "replay on" "$work/tpa/archiver.log" && break; sleep 0.05; done
"$bin/execlog-risk" "$u&flow=tagged&flow_tag=22" --replay "127.0.0.1:$port" --state "$work/tpa/risk.state" --exit-at-end --print-ms 0 >"$work/tpa/risk.log" 2>&1 &
risk=$!; pids+=("$risk")
sleep 0.3
start=$(date +%s.%N)
# The core on CPU 0, the archiver (the flow-control member: it sets the pace) and risk on CPU 1.
taskset -c 0 "$bin/execlog-core" "$u&$flow" --seed 5 --rate 900000 --count 1800000 --spin >"$work/tpa/core.log" 2>&1
wait "$risk" || true
end=$(date +%s.%N)
kill -TERM "$arch"; wait "$arch" || true
grep -E "records/s" "$work/tpa/core.log"
records=$(sed -n 's/^execlog-risk: final: next \([0-9]*\).*/\1/p' "$work/tpa/risk.log")
echo "tpa_core $(sed -n 's/.*: \([0-9]*\) records\/s.*/\1/p' "$work/tpa/core.log" | head -1)" >>"$res"
echo "tpa_risk $records $($py -c "print('%.2f %.0f' % ($end - $start, $records / ($end - $start)))")" >>"$res"
cpu_per_record "$work/tpa" tpa

echo "== 3. throughput: ~1 M records/s offered (620,000 orders/s, one core spinning)"
consumers "$work/tp"
start=$(date +%s.%N)
"$bin/execlog-core" "$u&$flow" --seed 4 --rate 620000 --count "${TP_ORDERS:-1240000}" --spin >"$work/tp/core.log" 2>&1
for p in "$risk" "$fix" "$mon"; do wait "$p" || true; done
end=$(date +%s.%N)
grep -E "records/s" "$work/tp/core.log"
grep -h "final:" "$work/tp/"{risk,fix,monitor}.log | cut -c1-200 || true
records=$(sed -n 's/^execlog-risk: final: next \([0-9]*\).*/\1/p' "$work/tp/risk.log")
$py -c "print('through all four consumers: %d records in %.2f s: %.0f records/s' % ($records, $end - $start, $records / ($end - $start)))" | tee "$work/tp/through"
echo "tp_core $(sed -n 's/.*: \([0-9]*\) records\/s.*/\1/p' "$work/tp/core.log" | head -1)" >>"$res"
echo "tp_all $records $($py -c "print('%.2f %.0f' % ($end - $start, $records / ($end - $start)))")" >>"$res"
echo "== 5. catch-up: a late risk engine replays that archive"
t0=$(date +%s.%N)
"$bin/execlog-risk" "$u" --replay "127.0.0.1:$port" --state "$work/tp/late.state" --exit-at-end --print-ms 0 >"$work/tp/late.log" 2>&1 &
late=$!; pids+=("$late")
# Its first live gap check needs the archiver: keep it up until the late engine is done.
wait "$late" || true
t1=$(date +%s.%N)
kill -TERM "$arch"; wait "$arch" || true
cpu_per_record "$work/tp" tp
$py -c "print('late joiner: %d records in %.2f s: %.0f records/s' % ($records, $t1 - $t0, $records / ($t1 - $t0)))"
echo "late $records $($py -c "print('%.2f %.0f' % ($t1 - $t0, $records / ($t1 - $t0)))")" >>"$res"
grep -h "final:" "$work/tp/late.log" | cut -c1-120

# The kill delays (after core-b is publishing) come from one seeded RNG: a rerun with the same
# --seed kills at the same points of the schedule, as near as the shell's sleep allows.
echo "== 4. failover: $trials kills of the active core of a pair (10,000 orders/s, $fo_orders orders a trial, seed $seed)"
mapfile -t delays < <($py -c "
import random, sys; r = random.Random($seed)
print('\n'.join('%.3f' % r.uniform(0.1, 0.6) for _ in range($trials)))")
for t in $(seq "$trials"); do
    d="$work/fo$t"
    consumers "$d" --latency-anchor-file "$d/anchor-a"
    pair "$d" "$t" "$fo_orders"
    sleep "${delays[$((t - 1))]}"
    kill -9 "$a"
    killed=$(date +%s%N)
    finish "$d"
    wait "$b" || true
    $py - "$d" "$t" "${delays[$((t - 1))]}" "$killed" "$fo_orders" >>"$res" <<'EOF'
import re, sys
d, t, delay, killed, orders = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
anchor_a = int(open(d + "/anchor-a").read())
try:
    anchor_b = int(open(d + "/anchor-b").read())
except (OSError, ValueError):
    anchor_b = anchor_a
risk = open(d + "/risk.log").read()
lat = re.findall(r"latency us \(input due -> applied\): p50 ([0-9.]+) p99 ([0-9.]+) "
                 r"p99.9 ([0-9.]+) max ([0-9.]+)", risk)
pause = re.findall(r"longest pause between two records ([0-9.]+) ms, the record after it "
                   r"applied (-?[0-9.]+) ms", risk)
lost = re.findall(r"final: next \d+, applied \d+, skipped \d+, late joins \d+, replayed \d+, "
                  r"lost (\d+)", risk)
worst = float(lat[-1][3]) / 1e3 if lat else float("nan")
# Killed after core-a's last input was due (core-b joined late): no failover to measure.
after_end = (killed - anchor_a) / 1e6 > orders / 10000 * 1e3
print("fo %d %s %.3f %.3f %.3f %s %s %s %s" % (
    t, delay, (killed - anchor_a) / 1e6, (anchor_b - anchor_a) / 1e6, worst,
    pause[-1][0] if pause else "nan", pause[-1][1] if pause else "nan",
    lost[-1] if lost else "?", "after-end" if after_end else "failover"))
EOF
    rm -rf "$d"  # a thousand FIX session stores a trial: not all at the end
    tail -1 "$res" | $py -c "
f = input().split()
print('trial %s: kill %s s after core-b published = %s ms into the schedule (core-b %s ms behind core-a); '
      'greatest lateness at risk %s ms; longest pause %s ms, the record after it %s ms late; lost %s%s'
      % (*f[1:9], '' if f[9] == 'failover' else ' (killed after its last input was due: no failover)'))"
done

echo "== table"
$py - "$res" <<'EOF'
import math, sys
r = {}
fo = []
for line in open(sys.argv[1]):
    f = line.split()
    if not f:
        continue
    if f[0] == "fo":
        fo.append(f[1:])
    else:
        r[f[0]] = f[1:]

def g(k, i=0):
    try:
        return float(r[k][i])
    except (KeyError, IndexError, ValueError):
        return float("nan")

def pct(v, p):  # nearest rank
    v = sorted(v)
    return v[max(0, math.ceil(p / 100 * len(v)) - 1)] if v else float("nan")

rows = []
for w in ("block", "spin"):
    rows.append(("raw UDP one-way, receiver %s (before / after step 2), p50 / p99 / p99.9 / max"
                 % ("blocking in epoll" if w == "block" else "spinning"),
                 "; ".join("%.1f / %.1f / %.1f / %.1f µs" % tuple(g("raw_%s_%s" % (s, w), i)
                                                              for i in range(4))
                           for s in ("before", "after"))))
rows.append(("prizma ping-pong RTT blocking / spinning, p50 / p99",
             "%.1f / %.1f µs; %.1f / %.1f µs" % (g("rtt_block"), g("rtt_block", 1),
                                               g("rtt_spin"), g("rtt_spin", 1))))
raw50 = (g("raw_before_block") + g("raw_after_block")) / 2
raw99 = (g("raw_before_block", 1) + g("raw_after_block", 1)) / 2
rows.append(("core → risk, the pair + four consumers, p50 / p99 / p99.9 / max (records)",
             "%.1f / %.1f / %.1f / %.1f µs (%d)" % (g("lat"), g("lat", 1), g("lat", 2),
                                                  g("lat", 3), g("lat", 4))))
ratio = g("lat") / raw50
rows.append(("p50 ratio: core → risk / raw one-way blocking (mean of before/after %.1f µs)"
             % raw50, "%.2f× — target ≤ 1.5×: %s" % (
                 ratio, "met" if ratio <= 1.5 else "missed by %.2f× (%.1f µs over 1.5× = %.1f µs)"
                 % (ratio / 1.5, g("lat") - 1.5 * raw50, 1.5 * raw50))))
rows.append(("p99: core → risk beside raw one-way blocking (same run)",
             "%.1f µs beside %.1f µs (%.1f×)" % (g("lat", 1), raw99, g("lat", 1) / raw99)))
rows.append(("core-a alone, archiver and risk only, p50 / p99",
             "%.1f / %.1f µs" % (g("lat2"), g("lat2", 1))))
for step, what in (("lat", "16,000 records/s, the pair"), ("tp", "~1 M records/s offered")):
    rows.append(("CPU per record (getrusage user+sys), %s: archiver / risk / fix / monitor" % what,
                 " / ".join("%.2f" % g("%s_cpu_%s" % (step, c)) for c in
                            ("archiver", "risk", "fix", "monitor")) + " µs"))
rows.append(("archiver rate: core → archiver (flow member) + risk, ~1.5 M records/s offered "
             "(target ≥ 1 M)", "%.0f records/s (%s); risk done at %.0f records/s"
             % (g("tpa_core"), "met" if g("tpa_core") >= 1e6 else
                "missed by %.0f%%" % (100 - g("tpa_core") / 1e4), g("tpa_risk", 2))))
rows.append(("CPU per record at the archiver rate: archiver / risk",
             "%.2f / %.2f µs" % (g("tpa_cpu_archiver"), g("tpa_cpu_risk"))))
rows.append(("core rate at ~1 M records/s offered (one core spinning)",
             "%.0f records/s" % g("tp_core")))
rows.append(("records/s through all four consumers",
             "%.0f (%d records in %.2f s)" % (g("tp_all", 2), g("tp_all"), g("tp_all", 1))))
rows.append(("late joiner catch-up", "%.0f records/s (%.2f s)" % (g("late", 2), g("late", 1))))
if fo:
    n_all = len(fo)
    fo = [f for f in fo if f[8] == "failover"] or fo
    worst = [float(f[4]) for f in fo]
    after = [float(f[6]) for f in fo]
    behind = [float(f[3]) for f in fo]
    rows.append(("failover, %d kills (%d of them after core-a's last input, left out): greatest "
                 "lateness (applied - due) at risk, p50 / p99 / max" % (n_all, n_all - len(fo)), "%.3f / %.3f / %.3f ms" % (pct(worst, 50), pct(worst, 99),
                                                       max(worst))))
    rows.append(("failover: lateness of the record after the longest pause, p50 / p99 / max",
                 "%.3f / %.3f / %.3f ms" % (pct(after, 50), pct(after, 99), max(after))))
    rows.append(("failover: core-b's schedule behind core-a's, p50 / max",
                 "%.3f / %.3f ms" % (pct(behind, 50), max(behind))))
    rows.append(("failover: records lost at risk (all trials)",
                 "%d" % sum(int(f[7]) for f in fo if f[7].isdigit())))
    rows.append(("no kill (step 2): greatest lateness at risk", "%.3f ms" % (g("lat", 3) / 1e3)))
print("| | measured |")
print("|---|---|")
for k, v in rows:
    print("| %s | %s |" % (k, v))
EOF
