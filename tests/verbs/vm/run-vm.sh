#!/bin/bash
# run-vm.sh - boot the rxe test VM (image from build-image.sh) and run a script in it.
#
#   run-vm.sh [GUEST_SCRIPT]        default GUEST_SCRIPT: guest-tests.sh next to this file
#   RXE_VM_CMD='ctest --test-dir build -R rdma' RXE_VM_RW_DIR=build run-vm.sh
#                                   set up rxe0 (eth0) [+ rxe1 (eth1)] and run a command in
#                                   the current directory inside the VM (guest-run.sh)
#
# GUEST_SCRIPT is a path on the HOST; the guest sees the host's / read-only (9p) and runs
# it with the host's /bin/bash inside a chroot, so host-built test binaries just work.
# $RXEVM_OUT (a fresh host dir, writable from the guest) holds env.sh, logs and results.
#
# Env knobs:
#   RXE_VM_WORK=/tmp/rxe-vm   RXE_VM_NIC=virtio|e1000
#   RXE_VM_ACCEL=auto (KVM if usable, else TCG) | kvm (KVM or fail) | kvm-try (try KVM even
#                if it looks unusable, fall back to TCG) | tcg
#   RXE_VM_NICS=2 (1: a NIC with no peer; 2+: NICs joined by a qemu hub; never a host backend)
#   RXE_VM_MEM=256 (MiB)  RXE_VM_SMP=1  RXE_VM_TIMEOUT=600 (s)
#   RXE_VM_EXPLORE=1 (also run the diagnostic cases that show what does NOT work on 6.1)
#   RXE_VM_TB_MB=64 (TCG translation-cache MiB; qemu 7.2 default 1024 -> ~670 MB RSS, 64 -> ~270 MB, same speed)
#   RXE_VM_KVM_PROBE=20 (s to wait for the guest init banner under KVM before falling back)
#   RXE_VM_NAPI_TX=0|1 (virtio_net napi_tx; default 0, see guest-init.sh - 1 reproduces the hang)
#   RXE_VM_RW_DIR=DIR (host dir the guest may write to; the rest of / is read-only in the VM)
#   RXE_VM_SHELL=1 (interactive busybox shell in the guest instead of the script)
# Exit status: the guest script's exit status; 90+ for VM-level failures.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${RXE_VM_WORK:-/tmp/rxe-vm}
# default guest script: guest-run.sh when RXE_VM_CMD is set, else the test suite
DEF=$HERE/guest-run.sh
SCRIPT=$(realpath "${1:-$DEF}")
RW=${RXE_VM_RW_DIR:+$(realpath "$RXE_VM_RW_DIR")}
ACCEL=${RXE_VM_ACCEL:-auto}
NIC=${RXE_VM_NIC:-virtio}
NICS=${RXE_VM_NICS:-2}
MEM=${RXE_VM_MEM:-256}
SMP=${RXE_VM_SMP:-1}
TMO=${RXE_VM_TIMEOUT:-600}
PROBE=${RXE_VM_KVM_PROBE:-20}
for f in "$WORK/vmlinuz" "$WORK/initramfs.cpio.gz"; do
	[ -e "$f" ] || { echo "missing $f: run build-image.sh first"; exit 90; }
done

OUT=$WORK/run/$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$OUT"
cat >"$OUT/env.sh" <<EOF
RXEVM_BIN=$WORK/bin
RXEVM_NICS=$NICS
RXEVM_EXPLORE=${RXE_VM_EXPLORE:-0}
RXEVM_CWD=$(printf %q "$PWD")
RXEVM_CMD=$(printf %q "${RXE_VM_CMD:-}")
EOF
case "$SCRIPT$OUT$RW" in *[[:space:]]*) echo "paths passed on the kernel command line must not contain spaces"; exit 90 ;; esac

case $NIC in
virtio) NICDEV=virtio-net-pci,speed=10000,duplex=full ;; # known speed: no "eth0 speed is unknown" spam from ib_core
e1000) NICDEV=e1000 ;;
*) echo "RXE_VM_NIC must be virtio or e1000"; exit 90 ;;
esac
# No host network backend at all: guest traffic cannot leave the VM.
# - 1 NIC: the NIC has NO peer; qemu completes every TX at once and drops the frame.
# - 2+ NICs: the NICs share one qemu "hub" (a repeater), so eth0's frames reach eth1 etc.
#   Pitfall: a hub port only accepts a frame while another port can receive; a lone NIC on a
#   hub (or one whose peers are down) never gets TX completions: the virtio TX ring (256)
#   fills, "NETDEV WATCHDOG: transmit queue 0 timed out", and rxe sends stall.  guest-init
#   therefore brings every NIC up.
# romfile= : skip the iPXE option ROM (faster firmware, nothing to boot from the net)
NETARGS=()
if [ "$NICS" -le 1 ]; then
	NETARGS+=(-device "$NICDEV,romfile=,mac=52:54:00:00:00:10")
else
	for ((i = 0; i < NICS; i++)); do
		NETARGS+=(-netdev "hubport,id=n$i,hubid=0" -device "$NICDEV,netdev=n$i,romfile=,mac=52:54:00:00:00:1$i")
	done
fi
# no_timer_check: under TCG on a loaded host the boot-time IO-APIC timer check can fail
# ("IO-APIC + timer doesn't work!", a panic before init); it proves nothing about rxe.
APPEND="console=ttyS0 quiet panic=-1 no_timer_check rxevm_script=$SCRIPT rxevm_out=$OUT dummy.numdummies=0"
[ "${RXE_VM_SHELL:-0}" = 1 ] && APPEND="$APPEND rxevm_shell=1"
[ -n "${RXE_VM_NAPI_TX:-}" ] && APPEND="$APPEND rxevm_napi_tx=$RXE_VM_NAPI_TX"
RWARGS=()
if [ -n "$RW" ]; then # one extra host dir the guest may write to (e.g. a build dir for ctest)
	RWARGS=(-virtfs "local,path=$RW,mount_tag=hostrw,security_model=none")
	APPEND="$APPEND rxevm_rw=$RW"
fi
COMMON=(-M pc -m "$MEM" -smp "$SMP" -nographic -no-reboot -bios /usr/share/qemu/qboot.rom
	-kernel "$WORK/vmlinuz" -initrd "$WORK/initramfs.cpio.gz" -append "$APPEND"
	-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap
	-virtfs "local,path=$OUT,mount_tag=hostout,security_model=none"
	"${RWARGS[@]}" "${NETARGS[@]}")

kvm_usable() {
	[ -r /dev/kvm ] && [ -w /dev/kvm ] || { echo "no /dev/kvm access"; return 1; }
	# PVM ("pagetable-based VM", kvm_pvm.ko) backs /dev/kvm on some nested/cloud hosts: it
	# only runs PVM-enabled guest kernels; a stock Debian kernel hangs after "Probing EDD".
	if [ -d /sys/module/kvm_pvm ] && [ ! -d /sys/module/kvm_intel ] && [ ! -d /sys/module/kvm_amd ]; then
		echo "/dev/kvm is kvm_pvm (needs a PVM guest kernel)"
		return 1
	fi
	return 0
}

QPID=
cleanup() { [ -n "$QPID" ] && kill "$QPID" 2>/dev/null; }
trap cleanup EXIT INT TERM

boot() { # ACCEL -> starts qemu in background, console to $OUT/console.log
	local acc=$1 cpu
	local accarg=$acc
	[ "$acc" = kvm ] && cpu=host,-arch-capabilities || cpu=max
	# TCG's translation cache defaults to 1 GiB and is what makes qemu's RSS exceed guest RAM
	[ "$acc" = tcg ] && accarg=tcg,tb-size=${RXE_VM_TB_MB:-64}
	: >"$OUT/console.log"
	# hard wall-clock limit via timeout(1) (TERM, then KILL 5 s later); no watchdog subshell:
	# an orphaned `sleep` would keep the caller's stdout pipe open
	timeout -k 5 "$TMO" nice -n 19 qemu-system-x86_64 -accel "$accarg" -cpu "$cpu" "${COMMON[@]}" \
		</dev/null >>"$OUT/console.log" 2>&1 &
	QPID=$!
}

if [ "${RXE_VM_SHELL:-0}" = 1 ]; then # interactive: qemu in the foreground on this terminal (TCG)
	echo "[run] interactive VM (Ctrl-A X quits qemu); host / is at /host, 'chroot /host bash'"
	exec nice -n 19 qemu-system-x86_64 -accel tcg,tb-size=${RXE_VM_TB_MB:-64} -cpu max "${COMMON[@]}"
fi
T0=$(date +%s.%N)
el() { awk -v a="$(date +%s.%N)" -v b="$1" 'BEGIN{printf "%.1f", a-b}'; }
used=tcg
if [ "$ACCEL" != tcg ]; then
	if why=$(kvm_usable) || [ "$ACCEL" = kvm ] || [ "$ACCEL" = kvm-try ]; then
		boot kvm
		ok=0
		for ((s = 0; s < PROBE * 10; s++)); do
			grep -q 'rxevm-init: kernel' "$OUT/console.log" && { ok=1; break; }
			kill -0 "$QPID" 2>/dev/null || break
			sleep 0.1
		done
		if [ $ok = 1 ]; then
			used=kvm
		else
			echo "[run] KVM boot failed/timed out after $(el "$T0")s: $(grep -m1 -iE 'error|assert' "$OUT/console.log")"
			kill "$QPID" 2>/dev/null; wait "$QPID" 2>/dev/null; QPID=
			[ "$ACCEL" = kvm ] && exit 91
		fi
	else
		echo "[run] KVM not used: $why"
	fi
fi
[ "$used" = tcg ] && boot tcg
echo "[run] accel=$used nic=$NIC x$NICS mem=${MEM}M smp=$SMP out=$OUT"

# stream the console while waiting (with a hard timeout)
tail -n +1 -f "$OUT/console.log" --pid="$QPID" 2>/dev/null | grep --line-buffered -avE '^\s*$|hub 0 is not connected|has no peer' &
TPID=$!
wait "$QPID"
qrc=$?
QPID=
wait "$TPID" 2>/dev/null
[ $qrc = 124 ] || [ $qrc = 137 ] && echo "[run] TIMEOUT: VM killed after ${TMO}s"
TOT=$(el "$T0")

rc=$(sed -n 's/.*RXEVM-EXIT rc=\([0-9]*\).*/\1/p' "$OUT/console.log" | tail -1)
boot_s=$(sed -n 's/.*modules+9p ready at \([0-9.]*\)s.*/\1/p' "$OUT/console.log")
echo "[run] VM wall time ${TOT}s (guest uptime at init ready: ${boot_s:-?}s), console log: $OUT/console.log"
if [ -z "$rc" ]; then
	echo "FAIL: VM did not report an exit status (crash/timeout); last console lines:"
	tail -15 "$OUT/console.log"
	exit 92
fi
exit "$rc"
