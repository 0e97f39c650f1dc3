#!/bin/bash
# tests/verbs/vm/run.sh - the one command for the verbs tests on real libibverbs.
#
# Builds what the tests need (Release: prizma_verbs_tests and the tools), builds
# a tiny VM image (Debian's own 6.1 kernel with rdma_rxe; apt only, nothing installed into
# the host kernel), boots it under qemu (TCG), brings up Soft-RoCE rxe0 on eth0 and rxe1 on
# eth1 (two NICs on an isolated qemu hub: no traffic can leave the VM) and runs
# guest-tests.sh inside. Exit 0 only when every verbs test passed.
#
#   tests/verbs/vm/run.sh                 # from the repository root
#   PRIZMA_VM_BUILD=build/release         # build dir (default), configured if missing
#   RXE_VM_WORK=/tmp/rxe-vm               # image cache (kernel .deb, initramfs)
# How the VM works and every pitfall met on the way: NOTES.md next to this file.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
cd "$ROOT"
BUILD=${PRIZMA_VM_BUILD:-build/release}
t0=$(date +%s)
echo "== verbs VM: build ($BUILD)"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
	cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPRIZMA_WARNINGS_AS_ERRORS=ON \
		-DPRIZMA_WITH_VERBS=ON >/dev/null
fi
cmake --build "$BUILD" -j 2 --target prizma_verbs_tests prizma-send prizma-recv prizma-ping prizma-pong mq_bench \
	execlog-core execlog-archiver execlog-risk execlog-fix execlog-monitor execlog-dump prizma_bench
echo "== verbs VM: image"
bash "$HERE/build-image.sh"
echo "== verbs VM: boot + tests"
rc=0
# 3 GiB: the default windows (64 Ki packets of the port MTU, 4096 after the MTU step) of
# several channels per process, and the ExecLog step's six processes, need room.
# 2 vCPUs: the replay bench's kernel TLS check compares with the host's 2 cores.
RXE_VM_CMD="bash tests/verbs/vm/guest-tests.sh $BUILD" RXE_VM_NICS=2 RXE_VM_MEM=${RXE_VM_MEM:-3072} \
	RXE_VM_SMP=${RXE_VM_SMP:-2} \
	bash "$HERE/run-vm.sh" || rc=$?
echo "== verbs VM: done in $(($(date +%s) - t0)) s, exit $rc"
if [ $rc = 0 ]; then echo "PASS: verbs tests in the Soft-RoCE VM"; else echo "FAIL: verbs tests in the Soft-RoCE VM (rc=$rc)"; fi
exit $rc
