#!/bin/bash
# bench/compare.sh - prizma vs OpenPGM vs raw UDP on this machine, side by side in one run.
#
#   bench/compare.sh [--reps N] [--sizes "100 500 1400 8000"] [--quick] [--rtt-only]
#
# Throughput, one publisher -> one subscriber, UDP multicast pinned to 127.0.0.1:
#   raw UDP: sendmmsg -> recvmmsg busy-poll, and GSO (UDP_SEGMENT) -> GRO; unpaced; what arrives
#            (raw UDP repairs nothing, so its loss is printed next to it).
#   OpenPGM (bench/compare/pgm_perf.c) and prizma (prizma-send/prizma-recv): neither has flow
#            control, so each runs down a ladder of send rates (unpaced first) and reports the
#            receiver's rate at the first step where every message arrived with no loss event;
#            each step is sustained ~2 s (up to 2 M messages, 12 M for prizma, which reaches
#            5-8 M/s and gets 8/7/6/5/4 M/s steps first): shorter bursts only measure the
#            socket buffers.
#   In every throughput run the sender is pinned to CPU 0 and the receiver to CPU 1, and every
#   receiver busy-polls (raw recvmmsg loop, OpenPGM "spin", prizma-recv --spin).
# Ping-pong RTT, 64 B, closed loop, both parties busy-polling on their own core (ping on CPU 0,
#   pong on CPU 1): raw UDP, OpenPGM, prizma with default URIs (gro=auto: UDP_GRO off while
#   datagrams come one at a time) and with gro=0 (never set; see PERFORMANCE.md).
#   RTT_REPS rounds (default 3 x --reps), each system's ratio to raw UDP taken per round;
#   --rtt-only skips the throughput runs.
# Each figure is the median of --reps runs (default 3). Prints a markdown table with ratios;
# raw results go to $OUT (default build/compare-YYYYmmdd-HHMMSS). Takes 8-10 minutes.
set -u
cd "$(dirname "$0")/.."
REPS=3
SIZES="100 500 1400 8000"
LADDER="0 3000000 2000000 1500000 1000000 700000 500000 350000 250000 180000 120000 80000 50000 30000 20000"
LADDER_PRIZMA="0 8000000 7000000 6000000 5000000 4000000 ${LADDER#0 }" # prizma reaches 5-8 M msgs/s
while [ $# -gt 0 ]; do
	case $1 in
	--reps) REPS=$2; shift 2 ;;
	--sizes) SIZES=$2; shift 2 ;;
	--quick) REPS=1; SIZES="100 1400"; shift ;;
	--rtt-only) SIZES=""; shift ;;
	-h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "compare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
	esac
done
case $REPS in '' | *[!0-9]* | 0) echo "compare.sh: --reps needs a positive number" >&2; exit 2 ;; esac

BUILD=${PRIZMA_BUILD:-build/release}
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
	cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
fi
targets="prizma-send prizma-recv prizma-ping prizma-pong udp_perf"
pkg-config --exists openpgm-5.3 2>/dev/null && targets="$targets pgm_perf"
cmake --build "$BUILD" -j 2 --target $targets >/dev/null || { echo "compare.sh: build failed" >&2; exit 1; }
SEND=$BUILD/examples/prizma-send
RECV=$BUILD/examples/prizma-recv
PING=$BUILD/examples/prizma-ping
PONG=$BUILD/examples/prizma-pong
UDP=$BUILD/bench/udp_perf
PGM=$BUILD/bench/pgm_perf
[ -x "$PGM" ] || PGM=
OUT=${OUT:-$BUILD/compare-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
RES=$OUT/results.tsv # system  metric  size  rep  value  extra
: >"$RES"
port=$((43000 + $$ % 1000))
next() { port=$((port + 2)); g1="239.192.99.$((port % 200 + 1))"; g2="239.192.98.$((port % 200 + 1))"; }
jget() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): d=d[k]
print(d)' "$@" 2>/dev/null; }
log() { echo "[$(date +%T)] $*" >&2; }
count_for() { # SIZE RATE [MAX] -> messages for a sustained ~2 s step (socket buffers hold
	# ~0.1 s); MAX (default 2 M) is raised for a system fast enough to need more for 2 s
	local max=${3:-2000000}
	local c=$(($2 == 0 ? max : $2 * 2))
	local cap=$((1200000000 / $1))
	[ $c -gt $cap ] && c=$cap
	[ $c -gt "$max" ] && c=$max
	[ $c -lt 20000 ] && c=20000
	echo $c
}
finish() { # RECV_PID SENDER_PID GRACE_S: the sender has lingered for repairs; give the
	# receiver GRACE_S more, then call it a failure (no waiting out a long timeout)
	wait "$2" 2>/dev/null
	local t=0
	while kill -0 "$1" 2>/dev/null && [ $t -lt $(($3 * 10)) ]; do sleep 0.1; t=$((t + 1)); done
	if kill -0 "$1" 2>/dev/null; then
		kill "$1" 2>/dev/null
		wait "$1" 2>/dev/null
		return 1
	fi
	wait "$1"
}

raw_tput() { # HOW SIZE REP
	local how=$1 size=$2 rep=$3 n
	n=$(count_for "$size" 0)
	next
	taskset -c 1 "$UDP" recv "$g1" $port "$n" "$size" 10 $([ "$how" = gso ] && echo gro) >"$OUT/raw_$how.$size.$rep.json" &
	local r=$!
	sleep 0.3
	taskset -c 0 "$UDP" send "$g1" $port "$n" "$size" "$how" >/dev/null
	wait $r
	local rate recv
	rate=$(jget "$OUT/raw_$how.$size.$rep.json" msgs_per_sec)
	recv=$(jget "$OUT/raw_$how.$size.$rep.json" received)
	echo -e "raw_$how\ttput\t$size\t$rep\t${rate:-0}\tloss $(((n - ${recv:-0}) * 100 / n))%" >>"$RES"
}

prizma_step() { # SIZE RATE N -> prints delivered msgs/s, fails when not all arrived
	local size=$1 rate=$2 n=$3 uri
	next
	uri="udp://$g1:$port?iface=127.0.0.1"
	taskset -c 1 "$RECV" "$uri" --spin --count "$n" --timeout 600 >"$OUT/p.out" 2>&1 &
	local r=$!
	for _ in $(seq 1 100); do grep -q listening "$OUT/p.out" && break; sleep 0.02; done
	taskset -c 0 "$SEND" "$uri" --count "$n" --size "$size" $([ "$rate" != 0 ] && echo --rate "$rate") --linger 2 >/dev/null 2>&1 &
	finish $r $! 1 || return 1
	grep -q "loss events 0" "$OUT/p.out" || return 1
	grep -o 'rate [0-9]* msgs/s' "$OUT/p.out" | grep -o '[0-9]*'
}

pgm_step() {
	local size=$1 rate=$2 n=$3
	next
	taskset -c 1 "$PGM" recv "127.0.0.1;$g1" $port "$n" 600 spin >"$OUT/g.json" 2>"$OUT/g.err" &
	local r=$!
	sleep 0.3
	taskset -c 0 "$PGM" send "127.0.0.1;$g1" $port "$n" "$size" $([ "$rate" != 0 ] && echo "$rate") >/dev/null 2>&1 &
	finish $r $! 2 || return 1
	[ "$(jget "$OUT/g.json" loss_events)" = 0 ] || return 1
	jget "$OUT/g.json" msgs_per_sec
}

ladder() { # SYSTEM SIZE REP
	local sys=$1 size=$2 rep=$3 rate n got
	local steps=$LADDER
	[ "$sys" = prizma ] && steps=$LADDER_PRIZMA
	for rate in $steps; do
		n=$(count_for "$size" "$rate" "$([ "$sys" = prizma ] && echo 12000000)")
		if got=$("${sys}_step" "$size" "$rate" "$n"); then
			echo -e "$sys\ttput\t$size\t$rep\t$got\tat send rate $([ "$rate" = 0 ] && echo unpaced || echo "$rate")" >>"$RES"
			log "$sys $size B: $got msgs/s delivered (send rate ${rate/#0/unpaced})"
			return
		fi
		log "$sys $size B: loss or timeout at send rate ${rate/#0/unpaced}, stepping down"
	done
	echo -e "$sys\ttput\t$size\t$rep\t0\tnothing lossless" >>"$RES"
}

rtt() { # SYSTEM REP
	local sys=$1 rep=$2 p
	next
	case $sys in
	raw)
		taskset -c 1 "$UDP" pong "$g1" $port "$g2" $((port + 1)) 2>/dev/null &
		p=$!
		sleep 0.3
		taskset -c 0 "$UDP" ping "$g1" $port "$g2" $((port + 1)) 20000 64 2000 >"$OUT/rtt.json"
		;;
	pgm)
		taskset -c 1 "$PGM" pong "127.0.0.1;$g1" $port "127.0.0.1;$g2" $((port + 1)) 0 spin >/dev/null 2>&1 &
		p=$!
		sleep 0.5
		taskset -c 0 "$PGM" ping "127.0.0.1;$g1" $port "127.0.0.1;$g2" $((port + 1)) 20000 64 2000 spin >"$OUT/rtt.json" 2>/dev/null
		;;
	prizma | prizma_gro0)
		local q=""
		[ "$sys" = prizma_gro0 ] && q="&gro=0"
		"$PONG" "udp://$g1:$port?iface=127.0.0.1$q" "udp://$g2:$((port + 1))?iface=127.0.0.1$q" --cpu 1 >/dev/null 2>&1 &
		p=$!
		sleep 0.3
		"$PING" "udp://$g1:$port?iface=127.0.0.1$q" "udp://$g2:$((port + 1))?iface=127.0.0.1$q" --cpu 0 \
			--count 20000 --size 64 --warmup 2000 --json >"$OUT/rtt.json" 2>/dev/null
		;;
	esac
	kill -INT $p 2>/dev/null
	sleep 0.1
	kill $p 2>/dev/null
	wait $p 2>/dev/null
	echo -e "$sys\trtt_p50\t64\t$rep\t$(jget "$OUT/rtt.json" rtt_ns.p50)\t" >>"$RES"
	echo -e "$sys\trtt_p99\t64\t$rep\t$(jget "$OUT/rtt.json" rtt_ns.p99)\t" >>"$RES"
	log "$sys RTT p50 $(jget "$OUT/rtt.json" rtt_ns.p50) ns"
}

systems="prizma_gro0 prizma raw"
[ -n "$PGM" ] && systems="prizma_gro0 prizma pgm raw"
for rep in $(seq 1 "$REPS"); do
	for size in $SIZES; do
		raw_tput mmsg "$size" "$rep"
		raw_tput gso "$size" "$rep"
		ladder prizma "$size" "$rep"
		[ -n "$PGM" ] && ladder pgm "$size" "$rep"
	done
done
# RTT runs are short (~0.5 s) and this machine's speed drifts by the second: RTT_REPS rounds
# (default 3 x --reps), the systems' order reversed every other round.
RTT_REPS=${RTT_REPS:-$((REPS * 3))}
for rep in $(seq 1 "$RTT_REPS"); do
	order=$systems
	[ $((rep % 2)) = 0 ] && order=$(echo "$systems" | tr ' ' '\n' | tac | tr '\n' ' ')
	for s in $order; do rtt "$s" "$rep"; done
done

python3 - "$RES" "$REPS" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
runs = collections.defaultdict(list)  # (value, extra) of every run
for line in open(sys.argv[1]):
    sysname, metric, size, rep, value, extra = (line.rstrip("\n").split("\t") + [""])[:6]
    try:
        v = float(value)
    except ValueError:
        v = 0.0
    rows[(sysname, metric, int(size))].append(v)
    runs[(sysname, metric, int(size))].append((v, extra))
med = {k: statistics.median(v) for k, v in rows.items()}
# The note shown is the median run's own (with an even count, the median is a mean: no note).
notes = {k: next((e for v, e in runs[k] if v == med[k]), "") for k in med}
sizes = sorted({k[2] for k in med if k[1] == "tput"})
name = {"prizma": "prizma (default, gro=auto)", "prizma_gro0": "prizma, gro=0", "pgm": "OpenPGM 5.3.128", "raw_mmsg": "raw UDP sendmmsg/recvmmsg",
        "raw_gso": "raw UDP GSO/GRO", "raw": "raw UDP busy-poll"}
if sizes:
    print(f"\nMedians of {sys.argv[2]} run(s). Throughput: messages/s delivered, one publisher -> one"
          " subscriber, multicast on 127.0.0.1.\n")
    print("| system | " + " | ".join(f"{s} B" for s in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
for s in ["prizma", "pgm", "raw_mmsg", "raw_gso"]:
    if any((s, "tput", z) in med for z in sizes):
        cells = []
        for z in sizes:
            v = med.get((s, "tput", z))
            cells.append("-" if v is None else f"{v/1e6:.3f} M ({notes.get((s, 'tput', z), '')})")
        print(f"| {name[s]} | " + " | ".join(cells) + " |")
for other in ["pgm", "raw_mmsg", "raw_gso"]:
    if any((other, "tput", z) in med for z in sizes):
        cells = []
        for z in sizes:
            a, b = med.get(("prizma", "tput", z)), med.get((other, "tput", z))
            cells.append("-" if not a or not b else f"{a/b:.2f}x")
        print(f"| prizma / {name[other]} | " + " | ".join(cells) + " |")
# Per round: each system's p50 over raw UDP's p50 from the same round; the median of those.
by_rep = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if len(f) >= 5 and f[1] == "rtt_p50":
        try:
            by_rep[f[3]][f[0]] = float(f[4])
        except ValueError:
            pass
nrtt = len(by_rep)
print(f"\nPing-pong RTT, 64 B, busy-poll, ping on CPU 0, pong on CPU 1; medians of {nrtt} rounds:\n")
print("| system | p50 | p99 | p50 / raw p50 (median of per-round ratios) |")
print("|---|---|---|---|")
for s in ["prizma_gro0", "prizma", "pgm", "raw"]:
    p50, p99 = med.get((s, "rtt_p50", 64)), med.get((s, "rtt_p99", 64))
    if p50:
        rs = [r[s] / r["raw"] for r in by_rep.values() if r.get(s) and r.get("raw")]
        ratio = f"{statistics.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f})" if rs else "-"
        print(f"| {name[s]} | {p50/1e3:.1f} us | {p99/1e3:.1f} us | {ratio} |")
PY
echo "raw results: $RES" >&2
