#!/usr/bin/env bash
# The burst sweep of docs/PROTOCOL.md §3.1: unpaced bursts from the default prizma-send at
# receivers with a stock non-root socket buffer (212,992 B), message sizes 64 B to 8 KB, bursts
# from a tenth of the default window (65,536 packets) to all of it, 1 to 4 receivers on the
# host, prizma-recv's beside OpenPGM's (pgm_peer recv, its defaults, the system's default
# buffer); every receiver on the publisher's core or the other one in turn. As root every
# process runs as nobody. Prints one Markdown table row per case: messages delivered (the
# fewest of the receivers, of the burst), loss events, and the publisher's time from its first
# message to its close (the burst's repair included: it closes once no NAK came for its quiet
# period).
# Usage: burst_sweep.sh PRIZMA_SEND PRIZMA_RECV [PGM_PEER] [SIZES] [RECEIVERS]
#   SIZES (default "64 300 1000 4000 8000"), RECEIVERS (default "1 2 4")
set -u
send=$1 recv=$2 peer=${3:-}
sizes=${4:-64 300 1000 4000 8000}
receivers=${5:-1 2 4}
run=()
if [ "$(id -u)" -eq 0 ]; then
    run=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
ncpu=$(nproc)
base=$(( 26000 + ($$ % 300) * 8 ))
group=239.192.82.$(( $$ % 200 + 10 ))
dir=$(mktemp -d)
chmod 777 "$dir"
trap 'rm -rf "$dir"' EXIT
window=65536

packets_per_message() {  # size: fragments of a message of that size (1,428 B each)
    echo $(( ($1 + 1427) / 1428 ))
}

# One burst at n receivers of one kind: prints "delivered-min loss-events close-ms".
burst() {  # kind count size n
    local port=$((base++)) k pids=() t0 t1
    for ((k = 0; k < $4; k++)); do
        if [ "$1" = prizma ]; then
            "${run[@]}" taskset -c $((k % ncpu)) "$recv" \
                "udp://$group:$port?iface=127.0.0.1&rcvbuf=212992" --count "$2" --timeout 90 \
                --verify >"$dir/r.$k" 2>&1 &
        else
            "${run[@]}" taskset -c $((k % ncpu)) "$peer" recv "127.0.0.1;$group" "$port" "$2" \
                90 >"$dir/r.$k" 2>&1 &
        fi
        pids[k]=$!
    done
    sleep 0.5
    t0=$(date +%s%N)
    "${run[@]}" taskset -c 0 "$send" "udp://$group:$port?iface=127.0.0.1" --count "$2" \
        --size "$3" >"$dir/send" 2>&1
    t1=$(date +%s%N)
    local min=$2 losses=0 got
    for ((k = 0; k < $4; k++)); do
        wait "${pids[k]}"
        if [ "$1" = prizma ]; then
            got=$(sed -n 's/^received .*(\([0-9]*\) unique of .*/\1/p' "$dir/r.$k")
            losses=$((losses + $(sed -n 's/.* loss events \([0-9]*\).*/\1/p' "$dir/r.$k" | head -1)))
        else
            got=$(sed -n 's/^pgm_peer: received \([0-9]*\) of .*/\1/p' "$dir/r.$k")
            losses=$((losses + $(sed -n 's/.*, \([0-9]*\) resets.*/\1/p' "$dir/r.$k")))
        fi
        got=${got:-0}
        [ "$got" -lt "$min" ] && min=$got
    done
    echo "$min $losses $(( (t1 - t0) / 1000000 ))"
}

echo "| size | messages (packets) | receivers | prizma: fewest delivered, loss events, close ms | OpenPGM: fewest delivered, resets, close ms |"
echo "|---|---|---|---|---|"
for size in $sizes; do
    ppm=$(packets_per_message "$size")
    whole=$(( (window - 500) / ppm ))
    for count in $(( whole / 10 )) $(( whole / 2 )) "$whole"; do
        for n in $receivers; do
            read -r pd pl pt < <(burst prizma "$count" "$size" "$n")
            o="not run"
            if [ -n "$peer" ]; then
                read -r od ol ot < <(burst openpgm "$count" "$size" "$n")
                o="$od, $ol, $ot"
            fi
            echo "| $size B | $count ($(( count * ppm ))) | $n | $pd, $pl, $pt | $o |"
        done
    done
done
