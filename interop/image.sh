#!/usr/bin/env bash
# Builds (or reuses) the interop guest image: a Debian bookworm rootfs with
# Linux 6.1 (rdma_rxe), rdma-core, perftest and friends, plus the softib
# guest init. Everything comes from Debian packages through the mirror that
# this machine's apt sources name.
#
# It also carries a real Lustre LNet node (kernel modules libcfs, lnet,
# ksocklnd, ko2iblnd, lnet_selftest; lnetctl, lst) built from the Lustre
# source tarball by build-lnet.sh in $SOFTIB_LUSTRE_DIR (default
# ../shared/lustre beside the repository; a test input, not part of the
# project) against the guest kernel's headers, which come from apt on this
# host (linux-headers-KVER).
#
# The image lives in $INTEROP_CACHE (default /var/tmp/softib-interop)/<key>/,
# where <key> hashes every input (this script with its package list, the
# guest init, the Lustre tarball's md5 and build-lnet.sh): it is rebuilt only
# when one of them changes. Output: the directory path on stdout; it holds
# rootfs.ext4, vmlinuz and initrd.img.
#
# Usage: interop/image.sh            build if needed, print the directory
#        INTEROP_MIRROR=URL ...      override the mirror
#        SOFTIB_LUSTRE_DIR=DIR ...   where lustre-src.tar.xz and build-lnet.sh are
#        SOFTIB_LUSTRE_DIR=none ...  an image without Lustre
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cache=${INTEROP_CACHE:-/var/tmp/softib-interop}
suite=bookworm
# Guest packages (see interop/README.md for why each is here).
pkgs="linux-image-amd64 initramfs-tools kmod iproute2 procps rdma-core ibverbs-utils rdmacm-utils perftest infiniband-diags ibverbs-providers python3-pyverbs libyaml-0-2 libnl-3-200 libnl-genl-3-200 libreadline8 open-iscsi fio e2fsprogs sg3-utils"

# Bump when the base build steps below change.
base_version=1
base_key=$(echo "$base_version $suite $pkgs" | sha256sum | cut -c1-16)

# Lustre: the tarball's md5 and the build script's hash key both its build
# cache (lustre-<lkey>) and the image.
lustre_dir=${SOFTIB_LUSTRE_DIR:-$repo/../shared/lustre}
lustre_key=none
if [ "$lustre_dir" != none ]; then
	if [ ! -f "$lustre_dir/lustre-src.tar.xz" ] || [ ! -f "$lustre_dir/build-lnet.sh" ]; then
		echo "image: no Lustre input: $lustre_dir/lustre-src.tar.xz and build-lnet.sh are needed" \
			"(set SOFTIB_LUSTRE_DIR to their directory, or SOFTIB_LUSTRE_DIR=none for an image without Lustre)" >&2
		exit 1
	fi
	lustre_dir=$(cd "$lustre_dir" && pwd)
	lustre_key=$( {
		md5sum <"$lustre_dir/lustre-src.tar.xz" | cut -d' ' -f1
		sha256sum <"$lustre_dir/build-lnet.sh" | cut -d' ' -f1
	} | sha256sum | cut -c1-16)
fi
key=$( {
	cat "$0" "$here/guest/init"
	echo "lustre $lustre_key"
} | sha256sum | cut -c1-16)
# The package rootfs (slow: debootstrap + apt) is cached apart from the
# final image (fast: init + mkfs), so editing the init costs seconds.
base=$cache/base-$base_key
out=$cache/image-$key
if [ -f "$out/done" ]; then
	echo "$out"
	exit 0
fi

log() { echo "image: $*" >&2; }

# mirror picks the first apt source that serves "$suite" main.
mirror() {
	if [ -n "${INTEROP_MIRROR:-}" ]; then
		echo "$INTEROP_MIRROR"
		return
	fi
	local f
	# deb822 .sources files: a paragraph with Types: deb, URIs and Suites.
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v suite="$suite" '
			function flush() {
				if (types ~ /(^| )deb( |$)/ && enabled != "no" && (" " suites " ") ~ (" " suite " ") && uris != "") {
					split(uris, u, " "); print u[1]; found = 1; exit
				}
				types = ""; suites = ""; uris = ""; enabled = ""
			}
			/^[ \t]*$/ { flush(); next }
			/^[ \t]*#/ { next }
			{ k = tolower($1); sub(/:$/, "", k); $1 = ""; v = $0; sub(/^[ \t]+/, "", v)
			  if (k == "types") types = v; else if (k == "uris") uris = v
			  else if (k == "suites") suites = v; else if (k == "enabled") enabled = tolower(v) }
			END { if (!found) flush() }' "$f"
	done | head -n1 | grep . && return
	# One-line format.
	cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
		sed -e 's/\[[^]]*\]//' |
		awk -v suite="$suite" '$1 == "deb" && $3 == suite { print $2; exit }' | grep . && return
	echo "image: no apt source for $suite found; set INTEROP_MIRROR" >&2
	return 1
}

mkdir -p "$cache"
exec 8>"$cache/lock"
flock 8
if [ -f "$out/done" ]; then
	echo "$out"
	exit 0
fi

mounted=()
cleanup() {
	local m
	for m in "${mounted[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
}
# safe_rm refuses to delete a tree that still has something mounted in it.
safe_rm() {
	if awk -v p="$1/" 'index($2 "/", p) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
		log "refusing to remove $1: mounts remain below it"
		exit 1
	fi
	rm -rf "$1"
}
trap cleanup EXIT

start=$(date +%s)
root=$base/rootfs
if [ ! -f "$base/done" ]; then
	url=$(mirror)
	log "building $base from $url (takes several minutes)"
	safe_rm "$base"
	mkdir -p "$base"
	debootstrap --variant=minbase --include=ca-certificates "$suite" "$root" "$url" >"$base/build.log" 2>&1 || {
		tail -n 30 "$base/build.log" >&2
		exit 1
	}
	log "debootstrap done after $(($(date +%s) - start)) s"
	mount -t proc proc "$root/proc" && mounted+=("$root/proc")
	mount -t sysfs sysfs "$root/sys" && mounted+=("$root/sys")
	# No services start inside the chroot.
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod +x "$root/usr/sbin/policy-rc.d"
	# The initrd must find the root on virtio-blk.
	mkdir -p "$root/etc/initramfs-tools/conf.d"
	echo "MODULES=most" >"$root/etc/initramfs-tools/conf.d/softib"
	printf '%s\n' virtio_pci virtio_blk virtio_net ext4 >>"$root/etc/initramfs-tools/modules"
	echo "deb $url $suite main" >"$root/etc/apt/sources.list"
	chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get update -qq >>"$base/build.log" 2>&1
	# shellcheck disable=SC2086
	chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >>"$base/build.log" 2>&1 || {
		tail -n 30 "$base/build.log" >&2
		exit 1
	}
	chroot "$root" apt-get clean
	rm -f "$root/usr/sbin/policy-rc.d"
	cleanup
	mounted=()
	rm -rf "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"*.bin "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/locale"
	touch "$base/done"
	log "packages installed after $(($(date +%s) - start)) s"
fi

# install_lustre builds (cached in $cache/lustre-<lkey>) and installs the
# Lustre LNet node into the rootfs for the guest kernel; without Lustre it
# removes what an earlier image put there (the rootfs is shared).
lustre_cache=
install_lustre() {
	local kver stage t0
	kver=$(find "$root/usr/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -n1)
	if [ -z "$kver" ]; then
		log "no kernel modules in $root/usr/lib/modules"
		exit 1
	fi
	rm -rf "$root/usr/lib/modules/$kver/updates/lustre"
	rm -f "$root"/usr/sbin/{lnetctl,lst,routerstat} "$root"/usr/lib/x86_64-linux-gnu/liblnetconfig.so*
	if [ "$lustre_key" = none ]; then
		depmod -b "$root" "$kver"
		return
	fi
	lustre_cache=$cache/lustre-$lustre_key
	stage=$lustre_cache/stage-$kver
	mkdir -p "$lustre_cache"
	if [ ! -f "$stage/done" ]; then
		# The headers of the guest's kernel must come from apt here.
		if ! dpkg -s "linux-headers-$kver" 2>/dev/null | grep -q '^Status: install ok installed' &&
			! apt-cache show "linux-headers-$kver" >/dev/null 2>&1; then
			apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 2>&1 || true
			if ! apt-cache show "linux-headers-$kver" >/dev/null 2>&1; then
				log "cannot build Lustre: the guest kernel is $kver, and linux-headers-$kver is not installable" \
					"on this host (apt-cache show finds no such package in $(. /etc/os-release && echo "$PRETTY_NAME")'s sources);" \
					"the host must be Debian bookworm with the same mirror the guest uses"
				exit 1
			fi
		fi
		t0=$(date +%s)
		log "building Lustre LNet for $kver (build-lnet.sh from $lustre_dir; log $lustre_cache/build.log; ~3 min)"
		rm -rf "$stage"
		if ! bash "$lustre_dir/build-lnet.sh" "$kver" "$stage" "$lustre_cache/work" >"$lustre_cache/build.log" 2>&1; then
			tail -n 40 "$lustre_cache/build.log" >&2
			log "Lustre build failed (log $lustre_cache/build.log)"
			exit 1
		fi
		touch "$stage/done"
		log "Lustre built in $(($(date +%s) - t0)) s"
	fi
	(cd "$stage" && tar -c --exclude=./done .) | tar -x -C "$root"
	depmod -b "$root" "$kver"
	chroot "$root" ldconfig
	log "Lustre LNet installed for $kver"
}

safe_rm "$out"
mkdir -p "$out"
install_lustre
install -m 0755 "$here/guest/init" "$root/sbin/softib-init"
echo softib-guest >"$root/etc/hostname"
echo "/dev/vda / ext4 rw 0 1" >"$root/etc/fstab"

kernel=$(find "$root/boot" -maxdepth 1 -name 'vmlinuz-*' | sort | tail -n1)
initrd=$(find "$root/boot" -maxdepth 1 -name 'initrd.img-*' | sort | tail -n1)
if [ -z "$kernel" ] || [ -z "$initrd" ]; then
	log "no kernel/initrd in $root/boot"
	exit 1
fi
cp "$kernel" "$out/vmlinuz"
cp "$initrd" "$out/initrd.img"
basename "$kernel" | sed 's/^vmlinuz-//' >"$out/kernel-version"

size_mb=$(($(du -sm "$root" | cut -f1) + 512))
mkfs.ext4 -q -F -L softib-root -d "$root" "$out/rootfs.ext4" "${size_mb}M" >&2
touch "$out/done"
log "image ready after $(($(date +%s) - start)) s"
# Older images are stale once the inputs change.
for d in "$cache"/base-* "$cache"/image-* "$cache"/lustre-*; do
	[ "$d" = "$out" ] || [ "$d" = "$base" ] || [ "$d" = "$lustre_cache" ] || [ ! -d "$d" ] || (safe_rm "$d") || true
done
echo "$out"
