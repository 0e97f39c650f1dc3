#!/usr/bin/env bash
# prizma's InfiniBand SA client (SaMembership and query_path: libibumad, MCMemberRecord
# SubnAdmSet/Delete, PathRecord SubnAdmGet) against a real OpenSM on a simulated fabric: ibsim
# runs a switch and four HCAs, OpenSM reaches MASTER on Hca1, and sa_join_probe processes
# join from the others (LD_PRELOAD libumad2sim: only MADs are simulated, no verbs). Checks,
# with OpenSM's own saquery:
#  1. a publisher and two subscribers (Hca2, Hca3, Hca4) join one group as full members; the
#     group has prizma's MGID signature and Q_Key, and all three ports as members;
#  2. one subscriber leaves: the group stays, with the other two;
#  3. a PathRecord query from Hca2 to Hca4 gives Hca4's LID (what a NAK route on IB uses);
#  4. OpenSM restarted (it forgets its groups, as after a client reregister): the members join
#     again and take the MLID from the new reply; the switch forwards it to both again. (The
#     test tells the probes to rejoin: the SM_CHANGE / CLIENT_REREGISTER event a verbs channel
#     rejoins on needs a verbs device, which umad2sim does not simulate.)
#  5. the last two leave: the group is gone;
#  6. a group pre-created in OpenSM's partitions.conf with another Q_Key is refused with a
#     message naming both Q_Keys, while a join with the group's own Q_Key succeeds.
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
net=$dir/net  # ibsim's format: a switch, four HCAs on its ports 1-4 (the first is the SM's)
printf 'Switch\t8 "Switch1"\n' >"$net"
for i in 1 2 3 4; do printf '[%d]\t"Hca%d"[1]\n' $i $i >>"$net"; done
for i in 1 2 3 4; do printf '\nHca\t1 "Hca%d"\n[1]\t"Switch1"[%d]\n' $i $i >>"$net"; done
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
declare -A probe_pid probe_fd
# A process started in the background must not hold the probes' pipes open (a probe leaves at
# the end of its input): "N>&-" for each, for eval.
no_pipes() {
    local f out=""
    for f in "${probe_fd[@]}"; do out+=" $f>&-"; done
    echo "$out"
}
start_sm() {
    eval 'SIM_HOST=Hca1 LD_PRELOAD=$sim opensm -P "$dir/partitions.conf" -f "$dir/opensm.log" \
        -d 0 -D 0x03 >>"$dir/opensm.out.log" 2>&1' "$(no_pipes)" '&'
    sm_pid=$!
    pids+=("$sm_pid")
    for _ in $(seq 1 60); do
        [ "$(grep -c "Entering MASTER state" "$dir/opensm.log" 2>/dev/null)" -ge "$1" ] && return 0
        sleep 0.5
    done
    fail "OpenSM did not reach MASTER"
}
start_sm 1
sq() { SIM_HOST=Hca2 LD_PRELOAD=$sim saquery "$@" 2>>"$dir/saquery.log"; }
ca=$(SIM_HOST=Hca2 LD_PRELOAD=$sim ibstat -l 2>/dev/null | head -n 1)
[ -n "$ca" ] || fail "no simulated CA"
passed=0

# A probe per role, each on its own HCA, reading commands from a pipe.
start_probe() {  # NAME HCA GROUP
    mkfifo "$dir/$1.in"
    # (An ASan build of the probe runs under the preload too: its runtime then is not first.)
    eval 'SIM_HOST=$2 LD_PRELOAD=$sim ASAN_OPTIONS=${ASAN_OPTIONS:-}:verify_asan_link_order=0 \
        "$probe" "$ca" 1 "$3" <"$dir/$1.in" >"$dir/$1.log" 2>&1' "$(no_pipes)" '&'
    probe_pid[$1]=$!
    pids+=("$!")
    exec {fd}>"$dir/$1.in"
    probe_fd[$1]=$fd
}
wait_line() {  # NAME REGEX [COUNT]: until the probe's log has COUNT (1) lines matching
    for _ in $(seq 1 80); do
        [ "$(grep -c -E "$2" "$dir/$1.log")" -ge "${3:-1}" ] && return 0
        kill -0 "${probe_pid[$1]}" 2>/dev/null || break
        sleep 0.25
    done
    fail "$1: no line matching '$2': $(cat "$dir/$1.log")"
}
say() { echo "$2" >&"${probe_fd[$1]}"; }
leave() {  # NAME: closes its input, it leaves and exits
    local fd=${probe_fd[$1]}
    exec {fd}>&-
    wait "${probe_pid[$1]}" || fail "$1 failed to leave"
    grep -q "^left" "$dir/$1.log" || fail "$1: no leave"
}
# Who is a member, as the fabric sees it: the switch ports OpenSM programmed into the switch's
# multicast forwarding table for the MLID (ibroute -M; saquery hides members' PortGIDs from a
# non-privileged requester). Hca N hangs on Switch1's port N.
members() {  # MLID -> the switch ports that forward it, e.g. "2 3 4"
    local swlid
    swlid=$(SIM_HOST=Hca2 LD_PRELOAD=$sim ibswitches 2>/dev/null | sed -n 's/.* lid \([0-9]*\) .*/\1/p')
    SIM_HOST=Hca2 LD_PRELOAD=$sim ibroute -M "$swlid" 2>/dev/null | awk -v m="$1" '
        /Ports:/ { hdr = $0 }
        tolower($1) == tolower(m) {
            out = ""
            for (i = 2; i <= length(hdr); i++) {
                if (substr(hdr, i, 1) ~ /[0-9]/ && substr(hdr, i - 1, 1) == " ") {
                    n = substr(hdr, i); sub(/ .*/, "", n)
                    if (substr($0, i, 1) == "x") out = out (out == "" ? "" : " ") n
                }
            }
            print out
        }'
}
field() { sed -n "s/.* $2 \(0x[0-9a-f]*\|[0-9a-f:]*\).*/\1/p" "$dir/$1.log" | head -n 1; }

for p in pub:Hca2 sub1:Hca3 sub2:Hca4; do start_probe "${p%%:*}" "${p##*:}" 239.192.0.77; done
for p in pub sub1 sub2; do wait_line "$p" "^joined"; done
cat "$dir/pub.log" "$dir/sub1.log" "$dir/sub2.log"
mgid=$(sed -n 's/^joined mgid \([0-9a-f:]*\) .*/\1/p' "$dir/pub.log")
mlid=$(field pub mlid)
[ $((mlid)) -ge $((0xc000)) ] || fail "MLID $mlid is not a multicast LID"
[ "$(field sub1 mlid)" = "$mlid" ] && [ "$(field sub2 mlid)" = "$mlid" ] ||
    fail "the members were given different MLIDs"
case $mgid in ff12:5047:ffff::*) ;; *) fail "MGID $mgid lacks prizma's signature ff12:5047" ;; esac
for p in pub sub1 sub2; do
    [ "$(field "$p" qkey)" = 0x80010000 ] || fail "$p: the SA's record has another Q_Key"
done
sq -g >"$dir/groups.joined" || fail "saquery -g failed"
# The group's record as OpenSM made it: MTU and rate "exactly" what the join asked (2048 =
# code 4, 10 Gb/s = code 3, selector 2 in the top bits).
awk -v g="$mgid" 'tolower($0) ~ /mgid/ { m = (tolower($0) ~ tolower(g)) } m' \
    "$dir/groups.joined" >"$dir/group.rec"
[ -s "$dir/group.rec" ] || fail "OpenSM has no record of the group"
grep -qi "Mtu\.*0x84" "$dir/group.rec" && grep -qi "Rate\.*0x83" "$dir/group.rec" ||
    fail "the group's MTU or rate is not what the join asked: $(cat "$dir/group.rec")"
[ "$(members "$mlid")" = "2 3 4" ] ||
    fail "the switch forwards MLID $mlid to ports '$(members "$mlid")', not 2 3 4"
echo "1. three full members on one group: MGID $mgid, MLID $mlid, Q_Key 0x80010000, MTU and"
echo "   rate as asked; the switch forwards the MLID to the three HCAs' ports"
passed=$((passed + 1))

leave sub1
sleep 1
[ "$(members "$mlid")" = "2 4" ] ||
    fail "after one leave, the switch forwards to ports '$(members "$mlid")', not 2 4"
echo "2. one subscriber left: the group stays, with the other two"
passed=$((passed + 1))

# From a process of its own that exits at once: query_path opens and closes a umad port of its
# own, after which libumad2sim's reader thread of the closed port crashes on the next MAD it
# sees (a NULL mutex in the simulator's own thread, per gdb; on real ib_umad a port is a file).
# The members, which live on for the SM restart, ask nothing.
lid4=$(SIM_HOST=Hca4 LD_PRELOAD=$sim ibstat "$ca" 1 2>/dev/null | sed -n 's/.*Base lid: *\([0-9]*\).*/\1/p')
path=$(SIM_HOST=Hca2 LD_PRELOAD=$sim timeout 20 "$probe" "$ca" 1 path "$(field sub2 gid)" 2>&1)
echo "$path"
[ -n "$lid4" ] && [ $(($(echo "$path" | sed -n 's/^path dlid \(0x[0-9a-f]*\).*/\1/p'))) -eq "$lid4" ] ||
    fail "the PathRecord to Hca4 does not give its LID $lid4: $path"
echo "3. PathRecord from Hca2 to Hca4: DLID $lid4 (Hca4's LID)"
passed=$((passed + 1))

kill "$sm_pid"
wait "$sm_pid" 2>/dev/null
start_sm 2
sleep 1
sq -g >"$dir/groups.restarted"
grep -qiw "MGID\.*$mgid" "$dir/groups.restarted" && echo "(the new OpenSM kept the group)"
say pub rejoin
say sub2 rejoin
wait_line pub "^rejoin"
wait_line sub2 "^rejoin"
grep -h "^rejoin" "$dir/pub.log" "$dir/sub2.log"
grep -q "^rejoined" "$dir/pub.log" && grep -q "^rejoined" "$dir/sub2.log" ||
    fail "the members could not join the restarted SM's group again"
new_mlid=$(sed -n 's/^rejoined mlid \(0x[0-9a-f]*\).*/\1/p' "$dir/pub.log")
[ "$(sed -n 's/^rejoined mlid \(0x[0-9a-f]*\).*/\1/p' "$dir/sub2.log")" = "$new_mlid" ] ||
    fail "after the restart the members hold different MLIDs"
sq -g | grep -qiE "Mlid\.*$new_mlid" || fail "OpenSM's group does not have the MLID the reply gave"
[ "$(members "$new_mlid")" = "2 4" ] ||
    fail "after the restart, the switch forwards to ports '$(members "$new_mlid")', not 2 4"
echo "4. OpenSM restarted: both members joined again, MLID $new_mlid from the reply"
passed=$((passed + 1))

leave pub
leave sub2
sleep 1
sq -g >"$dir/groups.left" || fail "saquery -g failed"
if grep -qiw "MGID\.*$mgid" "$dir/groups.left"; then
    fail "the group is still there after its last member left"
fi
echo "5. the last members left: the group is gone"
passed=$((passed + 1))

# The pre-created group: our Q_Key refused (both named), the group's own accepted.
out=$(echo | SIM_HOST=Hca2 LD_PRELOAD=$sim timeout 20 "$probe" "$ca" 1 239.192.0.78 2>&1)
rc=$?
echo "$out"
[ $rc -eq 1 ] || fail "a join with another Q_Key than the group's was not refused (rc $rc)"
echo "$out" | grep -q "Q_Key 0x12345678" && echo "$out" | grep -q "0x80010000" \
    || fail "the refusal does not name both Q_Keys"
out=$(echo | SIM_HOST=Hca2 LD_PRELOAD=$sim timeout 20 "$probe" "$ca" 1 239.192.0.78 0x12345678 2>&1)
echo "$out" | grep -q "^joined .* qkey 0x12345678" || fail "the group's own Q_Key did not join: $out"
echo "6. a group with another Q_Key is refused naming both; its own Q_Key joins"
passed=$((passed + 1))
echo "$passed passed, 0 failed"
