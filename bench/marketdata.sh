#!/usr/bin/env bash
# Benchmarks of the market-data gateway (examples/marketdata), side by side in one run:
#  1. 60-bar queries (/getStockData, one hour of 1m bars) with wrk -t1 -c100 against nginx
#     serving a static file of the same bytes (as many workers as the gateway has loops,
#     access_log off, keep-alive): req/s and p99, RUNS rounds alternating, medians. As a firm
#     runs it (issue 35): the security limits on (--max-connections, --max-push, an Origin
#     allow-list, a Host allow-list that every wrk request passes, a byte-bounded cache, a /v2
#     answer cap), and, with PUSH=1 (default), during every round a feed publishing ticks
#     (FEED_RATE ticks/s, 5000 codes) and WS_CLIENTS WebSocket + SSE_CLIENTS SSE sessions
#     connected and receiving its live bars (counted; the run fails if one received none);
#     with REDIS=1 the gateway also writes a redis-server of its own (the consistency feature:
#     the shared bars and the gap fill from them); REDIS=0 is the fill-disabled control;
#  2. feed -> gateway -> WebSocket client latency of bar updates (p50/p99) at the open's burst;
#  3. ticks/s the gateway absorbs while wrk keeps querying it at full rate.
# Multicast stays on loopback (iface=127.0.0.1). Prints a summary to paste into
# docs/MARKETDATA.md.
#   bench/marketdata.sh [BIN_DIR] (default build/release/examples/marketdata); RUNS=3 SECS=10
#   LOOPS=2 PUSH=1 WS_CLIENTS=50 SSE_CLIENTS=50 FEED_RATE=20000 REDIS=0
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/release/examples/marketdata}
runs=${RUNS:-3}
secs=${SECS:-10}
loops=${LOOPS:-2}
push=${PUSH:-1}
ws_clients=${WS_CLIENTS:-50}
sse_clients=${SSE_CLIENTS:-50}
feed_rate=${FEED_RATE:-20000}
use_redis=${REDIS:-0}
host=md.example.com                 # the name the gateway is reached by (--allow-host)
origin=https://charts.example.com   # the only page allowed to open push sessions
uri="udp://239.192.122.20:24740?iface=127.0.0.1"
py=/usr/bin/python3
free_port() { $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
gw_port=$(free_port)
ng_port=$(free_port)
work=$(mktemp -d)
chmod 755 "$work"  # nginx workers (user nobody when started as root) read www/
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
health() { curl -s "http://127.0.0.1:$gw_port/healthz"; }
ticks_now() { health | sed -n 's/.*"ticks":\([0-9]*\).*/\1/p'; }

gw_args=(--max-connections 1000 --max-push 200 --allow-origin "$origin" --allow-host "$host"
         --cache-mib 16 --max-answer-kib 1024 --idle-timeout 60 --push-write-timeout 10)
if [ "$use_redis" = 1 ]; then
    redis_port=$(free_port)
    redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$work" >"$work/redis.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    gw_args+=(--redis "127.0.0.1:$redis_port")
fi
"$bin/md-gateway" "$uri" --http "127.0.0.1:$gw_port" --threads "$loops" "${gw_args[@]}" \
    >"$work/gw.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do health >/dev/null && break; sleep 0.1; done
echo "== one trading day, 5000 symbols, 1,000,000 continuous ticks"
"$bin/md-feed" "$uri" --symbols 5000 --day-ticks 1000000 --rate 200000 | tail -1
# The limits are on: a foreign Host name and a foreign page's push session are refused.
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
[ "$(code -H 'Host: evil.example.net' "http://127.0.0.1:$gw_port/healthz")" = 421 ] \
    || { echo "bench: the Host check is off"; exit 1; }
[ "$(code -H "Host: $host" -H 'Origin: https://evil.example.net' \
    "http://127.0.0.1:$gw_port/sse?code=600000.SH&period=1m")" = 403 ] \
    || { echo "bench: the Origin check is off"; exit 1; }

q="/getStockData?code=300525.SZ&period=1m&start=202308180930&end=202308181030"
curl -s "http://127.0.0.1:$gw_port$q" >"$work/bars.json"
bytes=$(stat -c %s "$work/bars.json")
$py -c "import json,sys; assert len(json.load(open('$work/bars.json'))) == 60" \
    || { echo "bench: the query does not answer 60 bars"; exit 1; }
mkdir -p "$work/www" "$work/nginx"
chmod 755 "$work/www"
cp "$work/bars.json" "$work/www/bars.json"
cat >"$work/nginx/nginx.conf" <<NGX
worker_processes $loops;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 60;
    default_type application/json;
    client_body_temp_path $work/nginx;
    proxy_temp_path $work/nginx;
    fastcgi_temp_path $work/nginx;
    uwsgi_temp_path $work/nginx;
    scgi_temp_path $work/nginx;
    server { listen 127.0.0.1:$ng_port; root $work/www; }
}
NGX
nginx -c "$work/nginx/nginx.conf" -g 'daemon off;' &
pids+=($!)
sleep 0.5
curl -sf "http://127.0.0.1:$ng_port/bars.json" | cmp - "$work/bars.json"

# wrk's summary: "req/s p99_ms".
run_wrk() {
    wrk -t1 -c100 -d"${secs}s" --latency -H "Host: $host" "$1" | awk '
        /Requests\/sec/ { rps = $2 }
        /^ +99%/ { v = $2; if (v ~ /us$/) { sub(/us$/, "", v); v /= 1000 }
                   else if (v ~ /ms$/) { sub(/ms$/, "", v) }
                   else if (v ~ /s$/) { sub(/s$/, "", v); v *= 1000 }
                   p99 = v }
        END { printf "%.0f %.3f\n", rps, p99 }'
}
# Push clients and a live feed for the whole of the rounds (PUSH=1).
if [ "$push" = 1 ]; then
    $py - "$gw_port" "$ws_clients" "$sse_clients" "$host" "$origin" >"$work/push.txt" <<'PY' &
import json, selectors, signal, socket, sys, websocket
port, n_ws, n_sse, host, origin = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), \
    sys.argv[4], sys.argv[5]
# Codes that trade (000002.SZ is suspended), 1m and 5m bars.
codes = ["600000.SH", "300525.SZ", "000001.SZ", "600001.SH", "000003.SZ", "300001.SZ",
         "600002.SH", "000004.SZ", "300002.SZ", "600003.SH"]
subs = [(codes[i % len(codes)], ("1m", "5m")[i // len(codes) % 2]) for i in range(n_ws + n_sse)]
sel = selectors.DefaultSelector()
bars = []  # bar updates received, per client
for i in range(n_ws):
    c, p = subs[i]
    ws = websocket.create_connection("ws://127.0.0.1:%d/ws?code=%s&period=%s" % (port, c, p),
                                     host=host, origin=origin, timeout=10)
    sel.register(ws.sock, selectors.EVENT_READ, ("ws", ws, len(bars)))
    bars.append(0)
for i in range(n_sse):
    c, p = subs[n_ws + i]
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(("GET /sse?code=%s&period=%s HTTP/1.1\r\nHost: %s\r\nOrigin: %s\r\n"
               "Accept: text/event-stream\r\n\r\n" % (c, p, host, origin)).encode())
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, ("sse", [s, b"", False], len(bars)))
    bars.append(0)
print("connected", flush=True)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
while not stop:
    for key, _ in sel.select(0.2):
        kind, h, k = key.data
        if kind == "ws":
            m = json.loads(h.recv())
            bars[k] += "type" not in m and "sent_ns" in m  # live bars, not the snapshot
            continue
        try:
            d = h[0].recv(65536)
        except BlockingIOError:
            continue
        if not d:
            raise SystemExit("an SSE session was closed")
        h[1] += d
        if not h[2]:
            if b"\r\n\r\n" not in h[1]:
                continue
            head, h[1] = h[1].split(b"\r\n\r\n", 1)
            assert head.startswith(b"HTTP/1.1 200"), head[:60]
            h[2] = True
        *lines, h[1] = h[1].split(b"\n")
        bars[k] += sum(1 for x in lines if x.startswith(b"data: ") and b'"sent_ns"' in x)
ws_bars, sse_bars = bars[:n_ws], bars[n_ws:]
print("%d %d %d %d %d" % (n_ws, sum(ws_bars), n_sse, sum(sse_bars), min(bars)))
PY
    push_pid=$!
    pids+=($push_pid)
    for _ in $(seq 100); do [ -s "$work/push.txt" ] && break; sleep 0.1; done
    grep -q connected "$work/push.txt" || { echo "bench: push clients did not connect"; exit 1; }
    "$bin/md-feed" "$uri" --symbols 5000 --day-ticks 4000000 --days 3 --rate "$feed_rate" \
        --seed 4 --date 20230823 --duration $((runs * secs * 2 + runs * 2 + 5)) \
        >"$work/live_feed.txt" 2>&1 &
    feed_pid=$!
    pids+=($feed_pid)
    sleep 2
fi
echo "== wrk -t1 -c100 -d${secs}s, $runs rounds: md-gateway ($loops loops) vs nginx ($loops workers), $bytes-byte answers"
: >"$work/gw.txt"
: >"$work/ng.txt"
: >"$work/ratio.txt"
for r in $(seq "$runs"); do
    # Halfway through the first round: the open connections (wrk's 100 + the push sessions).
    [ "$r" = 1 ] && { sleep $((secs / 2 + 1)); curl -s "http://127.0.0.1:$gw_port/metrics" \
        >"$work/mid_metrics.txt"; } &
    g=$(run_wrk "http://127.0.0.1:$gw_port$q")
    n=$(run_wrk "http://127.0.0.1:$ng_port/bars.json")
    rr=$($py -c "print('%.2f' % (${g%% *} / ${n%% *}))")
    echo "round $r: md-gateway $g   nginx $n   (req/s p99_ms)   ratio $rr"
    echo "$g" >>"$work/gw.txt"
    echo "$n" >>"$work/ng.txt"
    echo "$rr" >>"$work/ratio.txt"
done
if [ "$push" = 1 ]; then
    live_ticks=$(ticks_now)
    push_gauge=$(curl -s "http://127.0.0.1:$gw_port/metrics" | sed -n 's/^md_push_clients //p')
    conns=$(sed -n 's/^md_http_connections //p' "$work/mid_metrics.txt")
    kill "$feed_pid" 2>/dev/null || true
    wait "$feed_pid" 2>/dev/null || true
    kill -TERM "$push_pid"
    wait "$push_pid" || { echo "bench: a push client failed"; cat "$work/push.txt"; exit 1; }
    read -r p_ws p_ws_bars p_sse p_sse_bars p_min < <(tail -1 "$work/push.txt")
    [ "$p_min" -gt 0 ] || { echo "bench: a push client received no live bar"; exit 1; }
    push_line="during the rounds: md-feed at $feed_rate ticks/s ($live_ticks ticks applied by the gateway in all), $p_ws WebSocket clients ($p_ws_bars live bars) + $p_sse SSE clients ($p_sse_bars live bars), each >= $p_min; md_push_clients $push_gauge, md_http_connections $conns (halfway through round 1)"
else
    push_line="no push clients, no feed during the rounds (PUSH=0)"
fi
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
g_rps=$(cut -d' ' -f1 "$work/gw.txt" | median)
g_p99=$(cut -d' ' -f2 "$work/gw.txt" | median)
n_rps=$(cut -d' ' -f1 "$work/ng.txt" | median)
n_p99=$(cut -d' ' -f2 "$work/ng.txt" | median)

echo "== feed -> gateway -> WebSocket latency of bar updates, second day's open burst"
$py - "$gw_port" >"$work/ws.txt" <<'PY' &
import json, sys, time, websocket
port = int(sys.argv[1])
codes = ["600000.SH", "300525.SZ", "000001.SZ", "600001.SH", "000003.SZ"]
socks = [websocket.create_connection("ws://127.0.0.1:%d/ws?code=%s&period=1m" % (port, c))
         for c in codes]
for s in socks:
    s.recv()  # the snapshot
import selectors
sel = selectors.DefaultSelector()
for s in socks:
    sel.register(s.sock, selectors.EVENT_READ, s)
lat = []
end = time.time() + 8
while time.time() < end:
    for key, _ in sel.select(0.5):
        m = json.loads(key.data.recv())
        if "sent_ns" in m:
            lat.append((time.time_ns() - m["sent_ns"]) / 1e3)
lat.sort()
if lat:
    print("%d %.0f %.0f" % (len(lat), lat[len(lat) // 2], lat[int(len(lat) * 0.99)]))
else:
    print("0 0 0")
PY
ws_pid=$!
pids+=($ws_pid)
sleep 1
# The open's burst rate: the generator puts 7x the average into the first minutes; 100k
# ticks/s on the wire.
"$bin/md-feed" "$uri" --symbols 5000 --day-ticks 300000 --rate 100000 --seed 2 \
    --date 20230821 --duration 5 >/dev/null || true
wait "$ws_pid" || true
read -r ws_n ws_p50 ws_p99 <"$work/ws.txt"

echo "== ticks/s absorbed while wrk queries at full rate"
wrk -t1 -c100 -d20s "http://127.0.0.1:$gw_port$q" >"$work/wrk_bg.txt" &
wrk_pid=$!
pids+=($wrk_pid)
sleep 1
t0_ticks=$(ticks_now)
t0=$(date +%s.%N)
feed_out=$("$bin/md-feed" "$uri" --symbols 5000 --day-ticks 1000000 --rate 0 --seed 3 \
    --date 20230822 --window 1048576 | tail -1)
sent=$(echo "$feed_out" | sed -n 's/^published \([0-9]*\) ticks.*/\1/p')
want=$((t0_ticks + sent))
for _ in $(seq 300); do
    [ "$(ticks_now)" -ge "$want" ] && break
    sleep 0.05
done
t1=$(date +%s.%N)
got=$(( $(ticks_now) - t0_ticks ))
wait "$wrk_pid" || true
loss=$(curl -s "http://127.0.0.1:$gw_port/metrics" | sed -n 's/^md_feed_loss_events_total //p')
abs_rate=$($py -c "print('%.0f' % ($got / ($t1 - $t0)))")
bg_rps=$(awk '/Requests\/sec/ { print $2 }' "$work/wrk_bg.txt")

ratio=$($py -c "print('%.2f' % ($g_rps / $n_rps))")
ratios=$(tr '\n' ' ' <"$work/ratio.txt")
ratio_median=$(median <"$work/ratio.txt")
per_core=$($py -c "print('%.0f' % ($g_rps / $loops))")
echo
echo "== summary (medians of $runs rounds)"
echo "60-bar query ($bytes bytes): md-gateway $g_rps req/s p99 $g_p99 ms; nginx static $n_rps req/s p99 $n_p99 ms; ratio of medians $ratio x"
echo "per-round ratios: $ratios(median $ratio_median x)"
echo "limits on: --max-connections 1000 --max-push 200 --allow-origin --allow-host (wrk sends Host: $host) --cache-mib 16 --max-answer-kib 1024; redis: $([ "$use_redis" = 1 ] && echo "on (consistency/fill)" || echo "off (fill-disabled control)")"
echo "$push_line"
echo "per busy loop: $per_core req/s (reference: ~11000 req/s per core)"
echo "feed->gateway->WebSocket: $ws_n updates, p50 $ws_p50 us, p99 $ws_p99 us"
echo "absorbed $got of $sent ticks in $($py -c "print('%.2f' % ($t1 - $t0))") s = $abs_rate ticks/s while serving $bg_rps req/s (loss events so far: $loss)"
