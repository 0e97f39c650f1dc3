#!/usr/bin/env bash
# Flow control between real processes over UDP multicast pinned to loopback (docs/PROTOCOL.md,
# "Flow control"). Counts and orders only; what flow control costs in throughput is measured
# by prizma_bench --benchmark_filter=PublishDeliverMemory (its last argument: 0 max, 1 min).
#   throttled N RATE  an unpaced publisher and one tagged subscriber that consumes RATE msgs/s:
#                     every message once, no loss event, the publisher back-pressured.
#   sigstop           the tagged subscriber is stopped (SIGSTOP) longer than the flow timeout:
#                     the publisher evicts it and goes on; after SIGCONT it reports the loss it
#                     suffered and is counted again.
#   untagged          a stopped subscriber without the tag never holds a tagged publisher back.
#                     prizma-stat shows the publisher's tracked receiver meanwhile.
# Usage: flow_test.sh PRIZMA_SEND PRIZMA_RECV PRIZMA_STAT MODE [N RATE]
set -u
send=$1 recv=$2 stat=$3 mode=$4
shift
export PRIZMA_STATS_DIR=$(mktemp -d)
port=$(( 26200 + ($$ % 300) * 2 ))
group=239.192.93.$(( $$ % 200 + 10 ))
dir=$(mktemp -d)
rpid=""
trap '[ -n "$rpid" ] && kill -CONT "$rpid" 2>/dev/null; [ -n "$rpid" ] && kill "$rpid" 2>/dev/null; rm -rf "$dir" "$PRIZMA_STATS_DIR"' EXIT
base="udp://$group:$port?iface=127.0.0.1"

counter() {  # counter NAME FILE: the value on the file's "counters" line
    sed -n 's/^counters .*\b'"$1"' \([0-9]*\).*/\1/p' "$2" | head -1
}
fail() { echo "FAIL: $*"; echo "--- publisher"; cat "$dir/send.log"; echo "--- subscriber"; cat "$dir/recv.log"; exit 1; }

start_recv() {  # URI, then prizma-recv arguments; waits for its ready line
    "$recv" "$@" >"$dir/recv.log" 2>&1 &
    rpid=$!
    for _ in $(seq 100); do grep -q "listening on" "$dir/recv.log" && return 0; sleep 0.05; done
    fail "the subscriber did not start"
}

case "$mode" in
throttled)
    n=${4:-300000} rate=${5:-100000}
    start_recv "$base&flow=tagged&flow_tag=7" --count "$n" --consume-rate "$rate" --timeout 20
    "$send" "$base&flow=tagged&flow_tag=7&flow_group=1" --count "$n" --size 100 >"$dir/send.log" 2>&1 &
    spid=$!
    shown=0
    for _ in $(seq 50); do
        sleep 0.1
        "$stat" --once --pid "$spid" >"$dir/stat.log" 2>&1 || continue
        if grep -Eq "^    receiver: id [0-9]+ tag 7 consumed [0-9]+ window 65536 lag [0-9]+ heard_ms_ago [0-9]+ counted 1" "$dir/stat.log"; then
            shown=1; break
        fi
    done
    wait "$spid" || fail "the publisher failed"
    [ "$shown" = 1 ] || fail "prizma-stat did not show the tracked receiver: $(cat "$dir/stat.log")"
    wait "$rpid"; rc=$?; rpid=""
    [ "$rc" -eq 0 ] || fail "the subscriber did not get every message once (exit $rc)"
    [ "$(counter loss_events "$dir/recv.log")" = 0 ] || fail "loss events"
    [ "$(counter window_full "$dir/recv.log")" = 0 ] || fail "the subscriber's window overflowed"
    blocked=$(counter flow_blocked "$dir/send.log")
    [ "${blocked:-0}" -gt 0 ] || fail "the publisher was never held back"
    [ "$(counter flow_evicted "$dir/send.log")" = 0 ] || fail "the consuming subscriber was evicted"
    echo "throttled: $n messages once each, 0 loss, publisher held back $blocked times"
    grep -h "^rate\|^sent" "$dir/recv.log" "$dir/send.log"
    ;;
sigstop)
    n=400000
    # A small socket buffer: what comes while it is stopped overflows in the kernel.
    start_recv "$base&flow=tagged&flow_tag=7&rcvbuf=262144" --count "$n" --timeout 3
    "$send" "$base&flow=tagged&flow_tag=7&flow_timeout_ms=1000" --count "$n" --size 100 \
        --rate 50000 >"$dir/send.log" 2>&1 &
    spid=$!
    sleep 1
    kill -STOP "$rpid"
    sleep 4  # > the 1 s timeout, after the publisher's window (65536 at 50 k/s: 1.3 s) filled
    kill -CONT "$rpid"
    wait "$spid" || fail "the publisher failed"
    wait "$rpid"; rpid=""  # it misses what went past its window meanwhile: exit 1 expected
    evicted=$(counter flow_evicted "$dir/send.log")
    [ "${evicted:-0}" -ge 1 ] || fail "the stopped subscriber was not evicted"
    losses=$(counter loss_events "$dir/recv.log")
    [ "${losses:-0}" -ge 1 ] || fail "the subscriber did not report the loss it suffered"
    [ "$(counter flow_receivers "$dir/send.log")" = 1 ] || fail "the subscriber was not counted again"
    grep -q "duplicates 0 " "$dir/recv.log" || fail "duplicates"
    echo "sigstop: evicted $evicted time(s); the subscriber reported $losses loss event(s) and was counted again"
    ;;
untagged)
    n=200000
    start_recv "$base&flow=min" --count "$n" --timeout 30
    sleep 0.3
    "$send" "$base&flow=tagged&flow_tag=7" --count 10 --size 100 --linger 0.5 >/dev/null 2>&1
    kill -STOP "$rpid"  # it has sent status: stopped, it would hold back a min publisher
    "$send" "$base&flow=tagged&flow_tag=7" --count "$n" --size 100 >"$dir/send.log" 2>&1 \
        || fail "the publisher failed"
    kill -CONT "$rpid"
    [ "$(counter flow_blocked "$dir/send.log")" = 0 ] || fail "an untagged subscriber held the publisher back"
    [ "$(counter flow_receivers "$dir/send.log")" = 0 ] || fail "an untagged subscriber is counted"
    echo "untagged: a stopped untagged subscriber never held the tagged publisher back"
    ;;
*) echo "usage: flow_test.sh SEND RECV STAT throttled|sigstop|untagged [N RATE]"; exit 2 ;;
esac
