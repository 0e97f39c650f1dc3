#!/usr/bin/env bash
# Live interop between prizma and OpenPGM (Debian libpgm 5.3.128) over UDP multicast on
# 127.0.0.1 (pinned with IP_MULTICAST_IF; never the default route). Both directions, small and
# fragmented APDUs, injected loss so NAK/NCF/RDATA cross implementations, and a late joiner.
# Usage: run.sh PRIZMA_SEND PRIZMA_RECV PGM_PEER
set -u
send=$1 recv=$2 peer=$3
base=$(( 21000 + ($$ % 400) * 10 ))
group=239.192.77.$(( $$ % 200 + 10 ))
fail=0
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

check() {  # name, exit code, log file
    if [ "$2" -eq 0 ]; then
        echo "PASS $1"
    else
        echo "FAIL $1 (exit $2)"; sed 's/^/    /' "$3"; fail=$((fail + 1))
    fi
}

# prizma -> OpenPGM: the prizma source drops some of its own ODATA (tx_loss), so the OpenPGM
# receiver must NAK and take prizma's NCF + RDATA.
p2o() {  # name count size tx_loss [extra URI keys]
    local port=$((base++)) ; base=$((base + 1))
    "$peer" recv "127.0.0.1;$group" "$port" "$2" 60 >"$log/$1.recv" 2>&1 &
    local rpid=$!
    sleep 0.5
    # 8000-byte messages at 5,000/s (40 MB/s): OpenPGM's receiver keeps up even on a loaded
    # host; at 20,000/s (160 MB/s) it lost whole windows there, NAKed past prizma's repair
    # budget and reset (the test is about fragments and repair across implementations).
    local rate=20000
    if [ "$3" -gt 1400 ]; then rate=5000; fi
    "$send" "udp://$group:$port?iface=127.0.0.1&tx_loss=$4&seed=7${5:-}" --count "$2" --size "$3" \
        --rate "$rate" --linger 4 >"$log/$1.send" 2>&1
    wait "$rpid"; local rc=$?
    cat "$log/$1.send" >>"$log/$1.recv"
    check "$1" "$rc" "$log/$1.recv"
    grep -h "pgm_peer: received\|rdata" "$log/$1.recv" | sed 's/^/    /'
}

# OpenPGM -> prizma: the prizma subscriber drops packets on receive (loss), so it NAKs the
# OpenPGM source, which must answer with NCF + RDATA that prizma accepts.
o2p() {  # name count size loss [recover | extra URI keys]
    local port=$((base++)) ; base=$((base + 1))
    local extra=() keys=""
    if [ "${5:-}" = recover ]; then extra=(--recover); else keys=${5:-}; fi
    "$recv" "udp://$group:$port?iface=127.0.0.1&loss=$4&seed=5$keys" --count "$2" --timeout 60 --preset wan \
        "${extra[@]}" >"$log/$1.recv" 2>&1 &
    local rpid=$!
    sleep 0.5
    "$peer" send "127.0.0.1;$group" "$port" "$2" "$3" 20000 3000 >"$log/$1.send" 2>&1
    wait "$rpid"; local rc=$?
    cat "$log/$1.send" >>"$log/$1.recv"
    check "$1" "$rc" "$log/$1.recv"
    grep -h "^received\|^repairs" "$log/$1.recv" | sed 's/^/    /'
}

p2o prizma-to-openpgm-100B 10000 100 0.05
p2o prizma-to-openpgm-fragmented 1500 8000 0.03
o2p openpgm-to-prizma-100B 10000 100 0.05
o2p openpgm-to-prizma-fragmented 1500 8000 0.03
# Flow control on at prizma's end: an OpenPGM receiver sends no status, so a min publisher
# runs as max; OpenPGM sources skip prizma's ACKs (PGMCC off) and repair as before.
p2o prizma-flow-min-to-openpgm 5000 100 0.05 "&flow=min"
o2p openpgm-to-prizma-flow-min 5000 100 0.05 "&flow=min"

# Late join: the OpenPGM source is already sending when prizma subscribes; with --recover the
# subscriber asks for the history back to OpenPGM's trail (SPMR first: no NAK before an SPM).
port=$((base++))
# ~500 messages go out before the subscriber starts: within its 1024-sqn recovery limit.
"$peer" send "127.0.0.1;$group" "$port" 3000 200 1000 3000 >"$log/late.send" 2>&1 &
spid=$!
sleep 0.5
"$recv" "udp://$group:$port?iface=127.0.0.1" --count 3000 --timeout 60 --preset wan --recover >"$log/late.recv" 2>&1
rc=$?
wait "$spid"
check openpgm-to-prizma-late-join-recover "$rc" "$log/late.recv"
grep -h "^received\|^repairs" "$log/late.recv" | sed 's/^/    /'

total=7
echo "$((total - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
