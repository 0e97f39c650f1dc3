#!/usr/bin/env bash
# The market-data gateway on this host: md-feed publishes a generated trading day over
# loopback multicast (iface=127.0.0.1), md-gateway builds the bars; the script queries the
# reference API and a push stream (SSE), prints what it got, and exits 0 only when the
# answers are right.
#   examples/marketdata/demo.sh [BIN_DIR]
# The environment may say where and what (so that two demos, or a demo beside the tests, do
# not share a channel or a port):
#   MD_BUILD_DIR  the build directory (default build/release; BIN_DIR wins when given)
#   MD_GROUP      the multicast group (default 239.192.122.9)
#   MD_PORT       its UDP port (default 24729)
#   MD_HTTP_PORT  the gateway's HTTP port on 127.0.0.1 (default: a free one)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-${MD_BUILD_DIR:-$here/../../build/release}/examples/marketdata}
uri="udp://${MD_GROUP:-239.192.122.9}:${MD_PORT:-24729}?iface=127.0.0.1"
port=${MD_HTTP_PORT:-$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
[ -x "$bin/md-gateway" ] || { echo "demo: no $bin/md-gateway (build first, or set MD_BUILD_DIR)"; exit 1; }
echo "== md-gateway on 127.0.0.1:$port, feed $uri"
work=$(mktemp -d)
gw_pid=""
cleanup() {
    [ -n "$gw_pid" ] && kill "$gw_pid" 2>/dev/null && wait "$gw_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "demo: FAIL: $*"; exit 1; }

"$bin/md-gateway" "$uri" --http "127.0.0.1:$port" --store "$work/store" >"$work/gw.log" 2>&1 &
gw_pid=$!
# /healthz answers 503 until the feed is live: any answer means the gateway is up.
for _ in $(seq 100); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz")" != 000 ] && break
    kill -0 "$gw_pid" 2>/dev/null || { cat "$work/gw.log"; fail "md-gateway exited"; }
    sleep 0.1
done
echo "== md-feed: one day of 300525.SZ, 600000.SH and 98 more symbols"
"$bin/md-feed" "$uri" --symbols 100 --day-ticks 50000 --rate 100000 --record "$work/day.rec" \
    | tee "$work/feed.out"
ticks=$(sed -n 's/^published \([0-9]*\) ticks.*/\1/p' "$work/feed.out")
for _ in $(seq 100); do
    got=$(curl -s "http://127.0.0.1:$port/healthz" | sed -n 's/.*"ticks":\([0-9]*\).*/\1/p')
    [ "$got" = "$ticks" ] && break
    sleep 0.1
done
[ "$got" = "$ticks" ] || fail "gateway has $got of $ticks ticks"

echo "== GET /getStockData?code=300525.SZ&period=1m&start=202308180930&end=202308181030"
body=$(curl -s "http://127.0.0.1:$port/getStockData?code=300525.SZ&period=1m&start=202308180930&end=202308181030")
echo "$body" | /usr/bin/python3 -c 'import json,sys; b=json.load(sys.stdin); [print(x) for x in b[:3]]; print("... %d bars" % len(b))'
# The answer against the reference computation of the recorded feed.
/usr/bin/python3 -c "
import sys, json
sys.dont_write_bytecode = True
sys.path.insert(0, '$here/test')
import mdref
inst, ticks = mdref.read_recording('$work/day.rec')
code = (300525 << 2) | 1
ref = [b for b in mdref.reference_bars(ticks)[(code, '1m')] if 202308180930 <= b['time'] <= 202308181030]
want = '[' + ','.join(mdref.bar_json(code, b) for b in ref) + ']'
got = sys.stdin.read().strip()
assert len(ref) == 60, len(ref)
assert got == want, (got[:300], want[:300])
print('demo: 60 one-minute bars, identical to the reference computation')
" <<<"$body" || fail "1m bars differ from the reference"

echo "== GET /getStockData?code=600000.SH&period=60m (the day's four hourly bars)"
curl -s "http://127.0.0.1:$port/getStockData?code=600000.SH&period=60m&start=202308180930&end=202308181500" \
    | tee "$work/h.json" | /usr/bin/python3 -c 'import json,sys; b=json.load(sys.stdin); [print(x["time"], x["open"], x["high"], x["low"], x["close"], x["volume"]) for x in b]; assert [x["time"] % 10000 for x in b] == [1030, 1130, 1400, 1500]' \
    || fail "hourly bars"
status=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/getStockData?code=600000.SH&period=1m&start=202308181030&end=202308180930")
[ "$status" = 400 ] || fail "a reversed range answered $status"
echo "== reversed range: 400 as it should"

echo "== SSE /sse?code=600000.SH&period=1d while a second day is published"
curl -sN --max-time 20 "http://127.0.0.1:$port/sse?code=600000.SH&period=1d" >"$work/sse.txt" &
sse_pid=$!
sleep 0.3
"$bin/md-feed" "$uri" --symbols 100 --day-ticks 20000 --rate 100000 --seed 2 --date 20230821 >/dev/null
sleep 0.5
kill "$sse_pid" 2>/dev/null || true
wait "$sse_pid" 2>/dev/null || true
head -c 300 "$work/sse.txt"; echo
updates=$(grep -c '"time":202308211500' "$work/sse.txt" || true)
[ "$updates" -ge 1 ] || fail "no pushed update of the 2023-08-21 day bar"
echo "demo: $updates pushed updates of 600000.SH's 2023-08-21 day bar"
echo "demo: OK"
