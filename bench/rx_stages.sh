#!/bin/bash
# bench/rx_stages.sh - where a 100-byte message's receive time goes, prizma beside raw UDP in
# the same run. Each receiver busy-polls on CPU 1 under `perf record` while its sender on CPU 0
# sends COUNT messages of 100 B at RATE (GSO on both sides, GRO at the receiver); the samples
# are summed into stages by symbol and turned into ns per message (the receiver's CPU time /
# messages received). The stages of prizma's receive path:
#   kernel receive (syscalls, copies), GRO split (poll_rx), PGM (parse, checksum), receive
#   window (on_data, insert), conflict fingerprint (SipHash), delivery (events, Subscriber),
#   the application (prizma-recv's own loop), timers (deadlines, NAK scan), idle polling.
#   bench/rx_stages.sh [RATE] [COUNT]       (default 2000000 msgs/s, 6000000); root for perf
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-2000000}
COUNT=${2:-6000000}
BUILD=${PRIZMA_BUILD:-build/release}
cmake --build "$BUILD" -j 2 --target prizma-send prizma-recv udp_perf >/dev/null
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
port=$((47000 + $$ % 1000))
cpu_s() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat"; }  # utime + stime, CLK_TCK 100

# raw: udp_perf recv (recvmmsg busy-poll with GRO) from a GSO sender, unpaced
taskset -c 1 "$BUILD/bench/udp_perf" recv 239.192.99.1 $port "$COUNT" 100 10 gro >"$OUT/raw.json" &
r=$!
sleep 0.3
perf record -q -o "$OUT/raw.data" -p $r 2>/dev/null &
pf=$!
sleep 0.2
taskset -c 0 "$BUILD/bench/udp_perf" send 239.192.99.1 $port "$COUNT" 100 gso "$RATE" >/dev/null
wait $r || true
kill -INT $pf 2>/dev/null || true; wait $pf || true

port=$((port + 2))
uri="udp://239.192.99.2:$port?iface=127.0.0.1"
taskset -c 1 "$BUILD/examples/prizma-recv" "$uri" --spin --count "$COUNT" --timeout 60 >"$OUT/p.out" 2>&1 &
r=$!
for _ in $(seq 1 100); do grep -q listening "$OUT/p.out" && break; sleep 0.02; done
perf record -q -o "$OUT/pz.data" -p $r 2>/dev/null &
pf=$!
sleep 0.2
taskset -c 0 "$BUILD/examples/prizma-send" "$uri" --count "$COUNT" --size 100 --rate "$RATE" --linger 2 >/dev/null 2>&1
wait $r || true
kill -INT $pf 2>/dev/null || true; wait $pf || true

for s in raw pz; do
	perf report -i "$OUT/$s.data" --no-children --sort sym -g none --percent-limit 0.01 2>/dev/null |
		grep -E '^ +[0-9.]+%' >"$OUT/$s.syms" || true
done
/usr/bin/python3 - "$OUT" "$COUNT" <<'PY'
import json, re, sys
out, count = sys.argv[1], int(sys.argv[2])
stages = [  # first match wins
    ("idle polling (empty reads)", None),
    ("kernel receive (syscalls, copies)", r"\[k\]|__libc_recv|__recvmmsg|recvmmsg|recvfrom"),
    ("GRO split, slots (poll_rx)", r"UdpTransport|read_datagrams|segment_size|gro_segment"),
    ("PGM parse and checksum", r"pgm::parse|csum|checksum|Session::dispatch|on_packet"),
    ("conflict fingerprint (SipHash)", r"siphash|shorthash"),
    ("receive window", r"on_data|Rxw|rxw|insert|find_or_add|apply_trail|unpark"),
    ("timers, NAK scan", r"deadline|run_naks|NakScan|nak|Timer|timer"),
    ("delivery (events, Subscriber)", r"next_event|Subscriber|deliver|Context::poll|do_work|look_ready"),
    ("clock reads", r"clock_gettime|steady_clock|now_ns"),
    ("the application, the rest", r"."),
]
def load(name):
    rows = []
    for line in open("%s/%s.syms" % (out, name)):
        m = re.match(r"\s*([0-9.]+)%\s+(.*)", line)
        if m:
            rows.append((float(m.group(1)), m.group(2)))
    return rows
def split(rows):
    acc = {s: 0.0 for s, _ in stages}
    for pct, sym in rows:
        for s, pat in stages[1:]:
            if re.search(pat, sym):
                acc[s] += pct
                break
    return acc
# Messages and rates: raw from its JSON, prizma from prizma-recv's summary line.
raw = json.load(open(out + "/raw.json"))
text = open(out + "/p.out").read()
pz_rate = float(re.search(r"rate (\d+) msgs/s", text).group(1))
pz_loss = re.search(r"loss events (\d+)", text)
print("raw UDP: %d of %d messages at %.0f msgs/s (it drops what it cannot take, repairs nothing)"
      % (raw.get("received", raw.get("got", 0)), count, raw.get("msgs_per_sec", 0)))
print("prizma: %.0f msgs/s, loss events %s" % (pz_rate, pz_loss.group(1) if pz_loss else "?"))
print()
# The receiver busy-polls a whole core for COUNT / rate seconds: a stage's share of its samples
# times 1e9 / rate is its ns per message. Kernel receive and clock reads include the empty
# polls between messages (idle time), so they overstate; the others are all per-message work.
raw_rate = raw.get("msgs_per_sec", 0) or 1
print("The receiving core's samples by stage, and as ns per message (share x 1e9 / rate):")
print("| stage | raw UDP share | raw UDP ns/msg | prizma share | prizma ns/msg |")
print("|---|---|---|---|---|")
r, p = split(load("raw")), split(load("pz"))
for s, _ in stages[1:]:
    print("| %s | %.1f%% | %.0f | %.1f%% | %.0f |" % (s, r[s], r[s] * 1e7 / raw_rate, p[s],
                                                     p[s] * 1e7 / pz_rate))
work = [s for s, _ in stages[1:] if not s.startswith(("kernel", "clock", "the application"))]
print("| prizma's per-message work outside the kernel (%s) | | | %.1f%% | %.0f |" % (
    ", ".join(w.split(" (")[0] for w in work), sum(p[w] for w in work),
    sum(p[w] for w in work) * 1e7 / pz_rate))
PY
