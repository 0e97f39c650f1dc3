#!/usr/bin/env bash
# md-gateway's HTTP request reading, the two ways it has, in one run (issue 33): the
# hand-written recognizer in front of Beast (--http-parser fast: classify() and fast_headers()
# over raw read_some, an idle sweep every 250 ms) against Beast's parser alone with the
# stream's own deadline (--http-parser beast: expires_after, as Beast's advanced server does).
# Both answer the 60-bar /getStockData query from the same per-loop cache with the same write.
# Two gateways (one event loop each) on one feed; wrk -t1 -c$CONNS for $SECS s against each in
# turn, the first of a round alternating, $ROUNDS rounds; medians of req/s, and their ratio.
# Run it with nothing else busy on the host: the two gateways and wrk share its cores.
#   bench/http_parser.sh [BIN_DIR] (default build/release/examples/marketdata); ROUNDS=7 SECS=5
#   CONNS=100
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/release/examples/marketdata}
rounds=${ROUNDS:-7}
secs=${SECS:-5}
conns=${CONNS:-100}
uri="udp://239.192.122.21:24750?iface=127.0.0.1"
py=/usr/bin/python3
free_port() { $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
declare -A port
for mode in fast beast; do
    port[$mode]=$(free_port)
    "$bin/md-gateway" "$uri" --http "127.0.0.1:${port[$mode]}" --threads 1 --http-parser "$mode" \
        >"$work/$mode.log" 2>&1 &
    pids+=($!)
done
for mode in fast beast; do
    for _ in $(seq 100); do curl -s "http://127.0.0.1:${port[$mode]}/healthz" >/dev/null && break; sleep 0.1; done
done
"$bin/md-feed" "$uri" --symbols 5000 --day-ticks 1000000 --rate 200000 | tail -1
q="/getStockData?code=300525.SZ&period=1m&start=202308180930&end=202308181030"
for mode in fast beast; do
    curl -s "http://127.0.0.1:${port[$mode]}$q" >"$work/$mode.json"
    $py -c "import json,sys; assert len(json.load(open('$work/$mode.json'))) == 60" \
        || { echo "bench: $mode does not answer 60 bars"; exit 1; }
done
cmp "$work/fast.json" "$work/beast.json" || { echo "bench: the two answers differ"; exit 1; }

rps() { wrk -t1 -c"$conns" -d"${secs}s" "http://127.0.0.1:${port[$1]}$q" | awk '/Requests\/sec/ { printf "%.0f\n", $2 }'; }
: >"$work/fast.txt"
: >"$work/beast.txt"
for r in $(seq "$rounds"); do
    if [ $((r % 2)) = 1 ]; then order="fast beast"; else order="beast fast"; fi
    for mode in $order; do
        v=$(rps "$mode")
        echo "$v" >>"$work/$mode.txt"
        echo "round $r $mode $v req/s"
    done
done
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mf=$(median "$work/fast.txt")
mb=$(median "$work/beast.txt")
echo "median req/s: fast $mf, beast $mb; fast/beast $(awk -v a="$mf" -v b="$mb" 'BEGIN { printf "%.3f", a / b }')"
echo "(one loop each, wrk -t1 -c$conns, ${secs} s x $rounds rounds, $(nproc) cores)"
