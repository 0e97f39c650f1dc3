#!/usr/bin/env bash
# The ExecLog fan-out on this host (docs/EXECLOG.md): a hot-standby pair of matching engines
# (execlog-core) and the four consumers (archiver, risk, FIX drop copy, monitor) over UDP
# multicast on loopback. Midway the active core is killed with -9 and restarted as the
# standby. Ends with one line per consumer and an agreement check: the archive contiguous,
# the risk state equal to an independent reference model, every FIX session's store exactly
# its account's messages of the archive; exits 0 only when everything agrees and nothing was lost or
# doubled.
#   examples/execlog/demo.sh [BIN_DIR] [--verbs DEV_A,DEV_B]
#     BIN_DIR    default build/release/examples/execlog
#     --verbs    the same over RDMA UD (verbs://): core-a, the archiver and risk on DEV_A, core-b,
#                the FIX drop copy and the monitor on DEV_B (the Soft-RoCE VM runs it so:
#                tests/verbs/vm/guest-tests.sh); EXECLOG_DEMO_RATE and EXECLOG_DEMO_SECONDS
#                (default 10000 orders/s for 4 s) slow it for an emulated CPU
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir="$here/../../build/release/examples/execlog"
verbs=""
while [ $# -gt 0 ]; do
    case "$1" in
        --verbs) [ $# -ge 2 ] || { echo "demo: --verbs DEV_A,DEV_B" >&2; exit 2; }
                 verbs=$2; shift 2 ;;
        --verbs=*) verbs=${1#--verbs=}; shift ;;
        -*) echo "demo: unknown option '$1' (usage: demo.sh [BIN_DIR] [--verbs DEV_A,DEV_B])" >&2
            exit 2 ;;
        *) dir=$1; shift ;;
    esac
done
bin=$(cd "$dir" 2>/dev/null && pwd) || { echo "demo: no directory '$dir'" >&2; exit 2; }
for p in execlog-core execlog-archiver execlog-risk execlog-fix execlog-monitor execlog-dump; do
    [ -x "$bin/$p" ] || { echo "demo: no $p in '$bin' (build the execlog target)" >&2; exit 2; }
done
# A loopback of our own when root may make one, so that nothing else on the host hears or
# disturbs the demo. The second core publishes from 127.0.0.2 (lo's without set-up): each
# publisher needs its own unicast NAK address (docs/URI.md).
# (Not over verbs: the RDMA devices' GIDs belong to the host's network namespace.)
if [ -z "$verbs" ] && [ "${EXECLOG_PRIVATE_NET:-}" != 1 ] && unshare -n true 2>/dev/null; then
    exec env EXECLOG_PRIVATE_NET=1 unshare -n sh -c \
        'ip link set lo up && ip addr add 127.0.0.2/8 dev lo && exec "$0" "$@"' "$0" "$bin"
fi
group=239.192.130.21:24821
if [ -n "$verbs" ]; then
    IFS=, read -r dev_a dev_b <<<"$verbs"
    dev_b=${dev_b:-$dev_a}
    for d in "$dev_a" "$dev_b"; do
        [ -e "/sys/class/infiniband/$d" ] || { echo "demo: no RDMA device '$d'" >&2; exit 2; }
    done
    uri_a="verbs://$dev_a:1/$group?rx_depth=4096"   # core-a, archiver, risk
    uri_b="verbs://$dev_b:1/$group?rx_depth=4096"   # core-b, FIX drop copy, monitor
else
    uri_a="udp://$group?iface=127.0.0.1"
    uri_b="udp://$group?iface=127.0.0.1"
fi
core_uri_a=$uri_a
core_uri_b=${uri_b/iface=127.0.0.1/iface=127.0.0.2}  # UDP: each publisher its own NAK address
flow="flow=tagged&flow_tag=21&flow_group=1&flow_timeout_ms=1000"
rate=${EXECLOG_DEMO_RATE:-10000}
count=$((rate * ${EXECLOG_DEMO_SECONDS:-4}))   # default 4 s of orders, ~64,000 records
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "demo: FAIL: $*"; tail -n 5 "$work"/*.log; exit 1; }
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
fix_port=$(free_port)

"$bin/execlog-archiver" "$uri_a&flow=tagged&flow_tag=21" --journal "$work/journal" \
    --listen "127.0.0.1:$port" >"$work/archiver.log" 2>&1 &
arch=$!; pids+=("$arch")
for _ in $(seq 100); do grep -q "replay on" "$work/archiver.log" && break; sleep 0.05; done
"$bin/execlog-risk" "$uri_a&flow=tagged&flow_tag=22" --replay "127.0.0.1:$port" \
    --state "$work/risk.state" --exit-at-end --print-ms 1000 >"$work/risk.log" 2>&1 &
risk=$!; pids+=("$risk")
"$bin/execlog-fix" "$uri_b&flow=tagged&flow_tag=23" --replay "127.0.0.1:$port" \
    --listen "$fix_port" --store "$work/fix" --exit-at-end >"$work/fix.log" 2>&1 &
fix=$!; pids+=("$fix")
"$bin/execlog-monitor" "$uri_b" --exit-at-end --interval-ms 1000 >"$work/monitor.log" 2>&1 &
mon=$!; pids+=("$mon")
core() {  # core NAME URI
    "$bin/execlog-core" "$2&$flow" --seed 42 --rate $rate --count $count \
        --state "$work/$1.state" >>"$work/$1.log" 2>&1 &
    pids+=("$!")
    echo $!
}
echo "== execlog-core pair: $count orders at $rate/s, 64 instruments, 1000 accounts${verbs:+, over verbs ($verbs)}"
a=$(core core-a "$core_uri_a")
for _ in $(seq 200); do grep -q "publishing from" "$work/core-a.log" && break; sleep 0.05; done
b=$(core core-b "$core_uri_b")
sleep $((${EXECLOG_DEMO_SECONDS:-4} / 2))
echo "== kill -9 the active core (pid $a) midway; it restarts as the standby"
kill -9 "$a"
sleep 0.3
a=$(core core-a "$core_uri_a")
tail -f "$work/monitor.log" --pid "$mon" | grep --line-buffered -E "records/s" &
pids+=("$!")
for p in "$risk" "$fix" "$mon"; do
    for _ in $(seq $(((${EXECLOG_DEMO_SECONDS:-4} * 3 + 36) * 10))); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && fail "a consumer did not reach the session end"
done
kill -TERM "$arch"; wait "$arch" || fail "archiver exit status"
wait "$b" "$a" 2>/dev/null || true
echo "== the restarted core:"
grep -E "joining|publishing" "$work/core-a.log" | tail -2
echo "== one line per consumer"
grep "final:" "$work/archiver.log"
grep "final:" "$work/risk.log"
grep "final:" "$work/fix.log"
grep "final:" "$work/monitor.log"
echo "== agreement (execlog-check, the operator's checker)"
"$here/execlog-check" "$work" --bin "$bin" || fail "the consumers do not agree"
/usr/bin/python3 - "$work" <<'PY' || fail "a consumer lost records"
import re, sys
work = sys.argv[1]
for name in ("risk", "fix", "archiver"):
    text = open("%s/%s.log" % (work, name)).read()
    assert "LOSS" not in text, name + " reported a loss"
mon = open(work + "/monitor.log").read()
gaps = re.findall(r"final: records \d+, next (\d+), gaps (\d+)", mon)
assert gaps and int(gaps[-1][1]) == 0, gaps
print("monitor: every record seen, no gap; no consumer reported a loss")
PY
echo "demo: OK: every consumer agrees; nothing lost, nothing doubled"
