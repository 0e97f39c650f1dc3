#!/bin/bash
# build-image.sh - fetch (apt only) and build a tiny VM image for Soft-RoCE tests.
#
# Produces, under $RXE_VM_WORK (default /tmp/rxe-vm):
#   debs/*.deb         the kernel package (kept as the cache; ~70 MB)
#   vmlinuz            Debian 12 kernel (linux-image-6.1.0-N-amd64, NOT installed on the host)
#   initramfs.cpio.gz  busybox + the kernel modules needed (rdma_rxe, ib_uverbs, virtio/e1000,
#                      9p, veth, crc32, tls, aesni_intel) + /init.  Userspace (ibverbs, test
#                      binaries) is NOT in the image: the guest mounts the host's / read-only
#                      over virtio-9p and chroots into it, so anything built on the host runs
#                      unchanged.
#
# Idempotent: a repeat run re-uses the downloaded .deb / extracted tree and only
# rebuilds the initramfs if its inputs changed.
#
# Env: RXE_VM_WORK (work dir), RXE_VM_KPKG (kernel package name, default = what
#      linux-image-amd64 depends on), RXE_VM_SKIP_APT=1 (do not apt-get install).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${RXE_VM_WORK:-/tmp/rxe-vm}
NICE="nice -n 19"
mkdir -p "$WORK"/debs "$WORK"/bin "$WORK"/run
t0=$(date +%s.%N)
log() { printf '[build %6.1fs] %s\n' "$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN{print a-b}')" "$*"; }

# ---------------------------------------------------------------- 1. host packages
# rdma-core (the daemon/udev-rules package) is NOT needed and pulls systemd+udev; the
# `rdma` tool comes from iproute2.  qemu-system-x86 without recommends is enough.
PKGS="qemu-system-x86 busybox-static ibverbs-utils ibverbs-providers libibverbs-dev
      iproute2 cpio kmod"
missing=""
for p in $PKGS; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"; done
if [ -n "$missing" ] && [ "${RXE_VM_SKIP_APT:-0}" != 1 ]; then
	echo "[build] apt-get install:$missing"
	[ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ] || apt-get update
	DEBIAN_FRONTEND=noninteractive $NICE apt-get install -y --no-install-recommends $missing >"$WORK/apt-install.log" 2>&1 ||
		{ tail -20 "$WORK/apt-install.log"; exit 1; }
fi
log "host packages ok"

# ---------------------------------------------------------------- 2. kernel .deb
# Must be the generic -amd64 flavour: the -cloud-amd64 kernel has no rdma_rxe and no 9p.
resolve_kpkg() { echo "${RXE_VM_KPKG:-$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')}"; }
fetch_kpkg() { # -> sets DEB; the .deb in debs/ is the cache
	DEB=$(ls "$WORK"/debs/"${KPKG}"_*.deb 2>/dev/null | head -1 || true)
	[ -n "$DEB" ] && return 0
	# (as root apt warns that the download is "unsandboxed": harmless)
	(cd "$WORK/debs" && $NICE apt-get download "$KPKG" 2>&1 | grep -v 'unsandboxed') || true
	DEB=$(ls "$WORK"/debs/"${KPKG}"_*.deb 2>/dev/null | head -1 || true)
	[ -n "$DEB" ]
}
KPKG=$(resolve_kpkg)
if [ -z "$KPKG" ] || ! fetch_kpkg; then
	# stale package lists: the security archive drops old kernel ABIs -> refresh and retry
	echo "[build] kernel package '${KPKG}' not resolvable/downloadable: apt-get update and retry"
	apt-get update >/dev/null
	KPKG=$(resolve_kpkg)
	[ -n "$KPKG" ] && fetch_kpkg || { echo "cannot fetch a linux-image-*-amd64 package"; exit 1; }
fi
KVER=${KPKG#linux-image-}
log "kernel package $(basename "$DEB")"

# ---------------------------------------------------------------- 3. vmlinuz + initramfs
# tls + aesni_intel: kernel TLS for the replay service (guest-tests.sh loads them from the
# initramfs with modprobe -d /proc/1/root; the kernel also loads tls on demand)
MODS="virtio_pci virtio_net e1000 9pnet_virtio 9p rdma_rxe ib_uverbs veth dummy crc32_generic crc32-pclmul
      tls aesni_intel"
STAGE=$WORK/initramfs
KROOT=$WORK/kernel-tree        # temporary: the full extracted package is ~400 MB
stamp=$(cat "$HERE/guest-init.sh" "$0" | md5sum | cut -c1-12)-$(basename "$DEB")
if [ -e "$WORK/vmlinuz" ] && [ -e "$WORK/initramfs.cpio.gz" ] &&
	[ "$(cat "$WORK/initramfs.stamp" 2>/dev/null)" = "$stamp" ]; then
	log "vmlinuz + initramfs up to date"
else
	rm -rf "$KROOT" "$STAGE"
	$NICE dpkg -x "$DEB" "$KROOT"             # extract only; never installed on the host
	grep -q '^CONFIG_RDMA_RXE=m' "$KROOT/boot/config-$KVER" || { echo "kernel $KVER has no rdma_rxe"; exit 1; }
	# pitfall: the .deb ships no modules.dep (its postinst runs depmod) -> generate it
	$NICE depmod -b "$KROOT" "$KVER"
	log "kernel $KVER extracted + depmod"
	mkdir -p "$STAGE"/{bin,sbin,dev,proc,sys,host,tmp,run,etc} "$STAGE/lib/modules/$KVER"
	cp /bin/busybox "$STAGE/bin/busybox"           # busybox-static: no shared libs needed
	# module closure via modules.dep (modprobe --show-depends against the extracted tree)
	for m in $MODS; do
		modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'
	done | sort -u | while read -r ko; do
		rel=${ko#"$KROOT/lib/modules/$KVER/"}
		mkdir -p "$STAGE/lib/modules/$KVER/$(dirname "$rel")"
		cp "$ko" "$STAGE/lib/modules/$KVER/$rel"
	done
	cp "$KROOT/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$STAGE/lib/modules/$KVER/"
	depmod -b "$STAGE" "$KVER"                     # busybox modprobe reads modules.dep/alias
	install -m 0755 "$HERE/guest-init.sh" "$STAGE/init"
	echo "$KVER" >"$STAGE/etc/kver"
	(cd "$STAGE" && find . | sort | $NICE cpio -o -H newc --quiet | $NICE gzip -6 >"$WORK/initramfs.cpio.gz")
	cp -f "$KROOT/boot/vmlinuz-$KVER" "$WORK/vmlinuz"
	echo "$stamp" >"$WORK/initramfs.stamp"
	log "initramfs built: $(du -h "$WORK/initramfs.cpio.gz" | cut -f1), $(find "$STAGE" -name '*.ko' | wc -l) modules"
	rm -rf "$KROOT"
fi

log "done: $WORK/vmlinuz $WORK/initramfs.cpio.gz"
