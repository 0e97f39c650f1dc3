#!/usr/bin/env bash
# prizma's InfiniBand SA join (SaMembership: libibumad, MCMemberRecord SubnAdmSet/Delete)
# against a real OpenSM on a simulated fabric: ibsim runs a switch and two HCAs, OpenSM
# reaches MASTER on Hca1, and sa_join_probe joins from Hca2 (LD_PRELOAD libumad2sim: only MADs
# are simulated, no verbs). Checks, with OpenSM's own saquery, that the group exists with the
# probe's port as a full member after the join, and is gone after the leave; and that a group
# pre-created in OpenSM's partitions.conf with another Q_Key is refused with a message naming
# both Q_Keys, while a join with the group's own Q_Key succeeds.
# Usage: opensm_sim.sh SA_JOIN_PROBE      (exits 77 when ibsim/opensm/saquery are missing)
set -u
probe=$1
sim=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so
for t in ibsim opensm saquery; do
    command -v "$t" >/dev/null || { echo "SKIP: $t missing (apt-get install ibsim-utils opensm infiniband-diags)"; exit 77; }
done
[ -f "$sim" ] || { echo "SKIP: ibsim-utils has no libumad2sim"; exit 77; }
if ldd "$probe" | grep -q libasan; then
    # libumad2sim's read() copies 320 bytes out of a smaller buffer of its own on every MAD it
    # hands over; ASan stops at that. The Release build runs this test (scripts/test.sh).
    echo "SKIP: libumad2sim reads past its own buffer, which ASan stops"
    exit 77
fi
dir=$(mktemp -d)
probe=$(realpath "$probe")
cd "$dir" || exit 1  # libumad2sim makes its fake sysfs (sys-PID/) in the working directory
net=$dir/net  # ibsim's format: a switch, two HCAs on its ports 1 and 2 (the first is the SM's)
printf 'Switch\t8 "Switch1"\n[1]\t"Hca1"[1]\n[2]\t"Hca2"[1]\n\n' >"$net"
printf 'Hca\t1 "Hca1"\n[1]\t"Switch1"[1]\n\nHca\t1 "Hca2"\n[1]\t"Switch1"[2]\n' >>"$net"
pids=()
cleanup() {
    exec 7>&- 8>&- 2>/dev/null
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    sleep 0.3
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    cd / && rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do echo "--- $f"; tail -n 20 "$f"; done; echo "0 passed, 1 failed"; exit 1; }

# ibsim keeps its console on stdin: feed it a pipe that stays open.
mkfifo "$dir/ibsim.in"
(cd "$dir" && exec ibsim -s "$net" <"$dir/ibsim.in" >"$dir/ibsim.log" 2>&1) &
pids+=($!)
exec 7>"$dir/ibsim.in"
sleep 1
export OSM_CACHE_DIR=$dir
# The default partition, and a group of 239.192.0.78's MGID made by the SM with its own Q_Key.
printf 'Default=0x7fff, ipoib : ALL=full ;\nDefault=0x7fff : mgid=ff12:5047:ffff::fc0:4e,Q_Key=0x12345678 ;\n' \
    >"$dir/partitions.conf"
SIM_HOST=Hca1 LD_PRELOAD=$sim opensm -P "$dir/partitions.conf" -f "$dir/opensm.log" -d 0 -D 0x03 \
    >"$dir/opensm.out.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 60); do
    grep -q "Entering MASTER state" "$dir/opensm.log" 2>/dev/null && break
    sleep 0.5
done
grep -q "Entering MASTER state" "$dir/opensm.log" 2>/dev/null || fail "OpenSM did not reach MASTER"
sq() { SIM_HOST=Hca2 LD_PRELOAD=$sim saquery "$@" 2>>"$dir/saquery.log"; }
ca=$(SIM_HOST=Hca2 LD_PRELOAD=$sim ibstat -l 2>/dev/null | head -n 1)
[ -n "$ca" ] || fail "no simulated CA"

mkfifo "$dir/probe.in"
# (An ASan build of the probe runs under the preload too: its runtime then is not first.)
SIM_HOST=Hca2 LD_PRELOAD=$sim ASAN_OPTIONS=${ASAN_OPTIONS:-}:verify_asan_link_order=0 \
    "$probe" "$ca" 1 239.192.0.77 <"$dir/probe.in" >"$dir/probe.log" 2>&1 &
probe_pid=$!
pids+=("$probe_pid")
exec 8>"$dir/probe.in"
for _ in $(seq 1 40); do
    grep -q "^joined" "$dir/probe.log" && break
    kill -0 "$probe_pid" 2>/dev/null || break
    sleep 0.25
done
grep -q "^joined" "$dir/probe.log" || fail "the join did not complete: $(cat "$dir/probe.log")"
cat "$dir/probe.log"
mlid=$(sed -n 's/.* mlid \(0x[0-9a-f]*\).*/\1/p' "$dir/probe.log")
mgid=$(sed -n 's/^joined mgid \([0-9a-f:]*\) .*/\1/p' "$dir/probe.log")
[ $((mlid)) -ge $((0xc000)) ] || fail "MLID $mlid is not a multicast LID"
sq -g >"$dir/groups.joined" || fail "saquery -g failed"
grep -qiw "MGID\.*$mgid" "$dir/groups.joined" \
    || fail "OpenSM has no record of the group after the join"
echo "OpenSM lists the group $mgid (MLID $mlid) after the join"
exec 8>&-
wait "$probe_pid" || fail "the probe failed to leave"
grep -q "^left" "$dir/probe.log" || fail "no leave"
sleep 1
sq -g >"$dir/groups.left" || fail "saquery -g failed"
if grep -qiw "MGID\.*$mgid" "$dir/groups.left"; then
    fail "the group is still there after its only member left"
fi
echo "the group is gone after the leave"

# The pre-created group: our Q_Key refused (both named), the group's own accepted.
out=$(echo | SIM_HOST=Hca2 LD_PRELOAD=$sim timeout 20 "$probe" "$ca" 1 239.192.0.78 2>&1)
rc=$?
echo "$out"
[ $rc -eq 1 ] || fail "a join with another Q_Key than the group's was not refused (rc $rc)"
echo "$out" | grep -q "Q_Key 0x12345678" && echo "$out" | grep -q "0x80010000" \
    || fail "the refusal does not name both Q_Keys"
out=$(echo | SIM_HOST=Hca2 LD_PRELOAD=$sim timeout 20 "$probe" "$ca" 1 239.192.0.78 0x12345678 2>&1)
echo "$out" | grep -q "^joined .* qkey 0x12345678" || fail "the group's own Q_Key did not join: $out"
echo "a group with another Q_Key is refused naming both; its own Q_Key joins"
echo "2 passed, 0 failed"
