#!/usr/bin/env bash
# The main demo: real processes over UDP multicast on this host. One publisher (prizma-send)
# and two subscribers (prizma-recv), each subscriber losing 5% of what reaches it (seeded,
# injected on receive); PGM repairs the loss (NAK -> NCF + RDATA) and each subscriber must get
# every message exactly once, in order, with no loss event. Ends with one verdict line and
# exits 0 only when both subscribers got everything.
#   scripts/demo.sh [MESSAGES]        (default 20000 messages of 200 bytes)
# Multicast stays on this host: the channel is pinned to 127.0.0.1 with TTL 0.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-20000}
scripts/setup-debian.sh >/dev/null
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j 2 --target prizma-send prizma-recv >/dev/null
bin=build/release/examples

port=$((20000 + $$ % 20000))
group=239.192.$((RANDOM % 200 + 1)).$((RANDOM % 200 + 1))
uri="udp://$group:$port?iface=127.0.0.1&ttl=0"
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

echo "prizma demo: 1 publisher -> 2 subscribers over $uri"
echo "             $count messages of 200 bytes, each subscriber losing 5% on receive"
for i in 1 2; do
    PRIZMA_STATS=0 "$bin/prizma-recv" "$uri&loss=0.05&seed=$((i * 7919))" --count "$count" \
        --timeout 60 >"$work/sub$i.out" 2>"$work/sub$i.err" &
    pids+=($!)
done
# Wait until both subscribers have joined the group (their ready line).
for i in 1 2; do
    for _ in $(seq 100); do
        grep -q "listening on" "$work/sub$i.err" 2>/dev/null && break
        sleep 0.05
    done
done
PRIZMA_STATS=0 "$bin/prizma-send" "$uri" --count "$count" --size 200 --rate 50000 \
    --linger 3 >"$work/pub.out" 2>&1 &
pub=$!
pids+=("$pub")

ok=1
for i in 1 2; do
    if ! wait "${pids[$((i - 1))]}"; then ok=0; fi
done
wait "$pub" || true
for i in 1 2; do
    echo "--- subscriber $i"
    cat "$work/sub$i.out"
done
echo "--- publisher"
cat "$work/pub.out"

summary() {  # unique repairs gaps duplicates loss-events of subscriber $1
    local out=$work/sub$1.out
    local unique repairs gaps dups losses
    unique=$(sed -n 's/.*(\([0-9]*\) unique of.*/\1/p' "$out")
    repairs=$(sed -n 's/^repairs \([0-9]*\) .*/\1/p' "$out")
    gaps=$(sed -n 's/^repairs .* gaps \([0-9]*\) .*/\1/p' "$out")
    dups=$(sed -n 's/^repairs .* duplicates \([0-9]*\) .*/\1/p' "$out")
    losses=$(sed -n 's/^repairs .* loss events \([0-9]*\) .*/\1/p' "$out")
    echo "${unique:-0} ${repairs:-0} ${gaps:-1} ${dups:-1} ${losses:-1}"
}
verdict=""
for i in 1 2; do
    read -r unique repairs gaps dups losses < <(summary "$i")
    verdict+=" sub$i: $unique/$count in order, $repairs repaired, $losses loss events;"
    if [ "$unique" != "$count" ] || [ "$gaps" != 0 ] || [ "$dups" != 0 ] \
        || [ "$losses" != 0 ] || [ "$repairs" = 0 ]; then
        ok=0
    fi
done
if [ "$ok" = 1 ]; then
    echo "VERDICT: PASS:${verdict%;} (every message once, in order; injected loss repaired)"
    exit 0
fi
echo "VERDICT: FAIL:${verdict%;}"
exit 1
