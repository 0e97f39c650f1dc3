#!/usr/bin/env bash
# Bursts at receivers with default socket buffers, run as a non-root user would run them
# (docs/PROTOCOL.md §3.1, §3.2): an unpaced burst from the default prizma-send (no --linger)
# at (a) two prizma-recv, one with rcvbuf=212992 (what a non-root process gets on a stock
# Debian, net.core.rmem_max) sharing a core with the publisher so that it loses most of the
# burst, one with 1 MiB on the other core; (b) the OpenPGM receiver of the interop harness
# (Debian's libpgm 5.3.128, its own timers, the system's default socket buffer), sharing the
# publisher's core. Bursts of 20,000 x 300 B and 2,000 x 8,000 B, and whole windows (the
# default 65,536 packets: 65,000 x 64 B, 65,000 x 1,000 B, 10,000 x 8,000 B in 6 fragments
# each), one of them with four receivers on the host. Every message must arrive once, in
# order, with no loss event. As root, every process runs as nobody (no SO_RCVBUFFORCE:
# buffers capped by rmem_max). Prints each case's repairs and close time.
# Usage: burst.sh PRIZMA_SEND PRIZMA_RECV [PGM_PEER]
set -u
send=$1 recv=$2 peer=${3:-}
run=()
if [ "$(id -u)" -eq 0 ]; then
    run=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
if [ "$(nproc)" -lt 2 ]; then
    cpu_a=0 cpu_b=0
else
    cpu_a=0 cpu_b=1
fi
base=$(( 23000 + ($$ % 300) * 8 ))
group=239.192.81.$(( $$ % 200 + 10 ))
dir=$(mktemp -d)
chmod 777 "$dir"
trap 'rm -rf "$dir"' EXIT
pass=0 fail=0

result() {  # name rc log
    if [ "$2" -eq 0 ]; then
        echo "PASS $1"; pass=$((pass + 1))
    else
        echo "FAIL $1"; sed 's/^/    /' "$3"; fail=$((fail + 1))
    fi
}

# The receiver's own verdict, plus in order (no gap) and no loss event.
check_prizma() {  # log
    grep -q "^received .*(\([0-9]*\) unique of \1)" "$1" || return 1
    grep -q "^repairs .* gaps 0 duplicates 0 out-of-range 0 corrupt 0 loss events 0 " "$1"
}

prizma_case() {  # name count size [receivers: 2 by default]
    local port=$((base++)) n=${4:-2} k pids=() cpus=() bufs=()
    local uri="udp://$group:$port?iface=127.0.0.1"
    # Receiver 1: 212992 B on the publisher's core; 2: 1 MiB on the other; 3, 4: 212992 B on
    # the publisher's core and on the other.
    for ((k = 1; k <= n; k++)); do
        case $k in
            1) cpus[k]=$cpu_a bufs[k]=212992 ;;
            2) cpus[k]=$cpu_b bufs[k]=1048576 ;;
            3) cpus[k]=$cpu_a bufs[k]=212992 ;;
            *) cpus[k]=$cpu_b bufs[k]=212992 ;;
        esac
        "${run[@]}" taskset -c "${cpus[k]}" "$recv" "$uri&rcvbuf=${bufs[k]}" --count "$2" \
            --timeout 60 --verify >"$dir/$1.$k" 2>&1 &
        pids[k]=$!
    done
    sleep 0.5
    local t0
    t0=$(date +%s%N)
    "${run[@]}" taskset -c $cpu_a "$send" "$uri" --count "$2" --size "$3" >"$dir/$1.send" 2>&1
    local send_rc=$? t1 rc
    t1=$(date +%s%N)
    for ((k = 1; k <= n; k++)); do
        wait "${pids[k]}"; rc=$?
        [ "$k" -eq 1 ] && cat "$dir/$1.send" >>"$dir/$1.1"
        [ "$send_rc" -eq 0 ] && [ "$rc" -eq 0 ] && check_prizma "$dir/$1.$k"
        result "$1 (receiver $k of $n: rcvbuf ${bufs[k]}, cpu ${cpus[k]})" $? "$dir/$1.$k"
    done
    echo "    publisher closed after $(( (t1 - t0) / 1000000 )) ms: $(sed -n 2p "$dir/$1.send")"
    for ((k = 1; k <= n; k++)); do
        echo "    $k: $(grep -o 'rcvbuf_bytes [0-9]*' "$dir/$1.$k") $(grep -h '^repairs' "$dir/$1.$k" | cut -d' ' -f1-4)"
    done
}

openpgm_case() {  # name count size
    local port=$((base++))
    "${run[@]}" taskset -c $cpu_a "$peer" recv "127.0.0.1;$group" "$port" "$2" 60 >"$dir/$1.o" 2>&1 &
    local o=$!
    sleep 0.5
    local t0
    t0=$(date +%s%N)
    "${run[@]}" taskset -c $cpu_a "$send" "udp://$group:$port?iface=127.0.0.1" --count "$2" \
        --size "$3" >"$dir/$1.send" 2>&1
    local send_rc=$? t1
    t1=$(date +%s%N)
    wait "$o"; local rc=$?
    cat "$dir/$1.send" >>"$dir/$1.o"
    [ "$send_rc" -eq 0 ] && [ "$rc" -eq 0 ]
    result "$1 (OpenPGM receiver, the publisher's core)" $? "$dir/$1.o"
    echo "    publisher closed after $(( (t1 - t0) / 1000000 )) ms: $(sed -n 2p "$dir/$1.send")"
    grep -h "pgm_peer: received" "$dir/$1.o" | sed 's/^/    /'
}

prizma_case burst-20000x300 20000 300
prizma_case burst-2000x8000 2000 8000
# Whole windows.
prizma_case window-65000x64 65000 64
prizma_case window-65000x1000 65000 1000
prizma_case window-10000x8000 10000 8000
prizma_case window-65000x1000-4-receivers 65000 1000 4
if [ -n "$peer" ]; then
    openpgm_case openpgm-20000x300 20000 300
    openpgm_case openpgm-2000x8000 2000 8000
    openpgm_case openpgm-window-65000x1000 65000 1000
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
