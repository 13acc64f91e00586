#!/bin/bash
# Runs a command in the Debian 13 root kbridge's tests/dpdk24 made
# (/var/cache/kbridge/trixie, DPDK 24.11), with $KB_APPS_OUT at /mnt, in a
# private mount namespace (tmpfs on its /tmp, /proc, /dev bound), so that
# nothing of the cached root is written and nobody else sees the mounts.
# For compiling only: no hugepages, no network namespace, no DPDK process.
# usage: in-trixie.sh 'command run by bash -c in the root'
set -euo pipefail
R=${KB_TRIXIE:-/var/cache/kbridge/trixie}
[ -x "$R/usr/bin/pkg-config" ] || { echo "no DPDK 24.11 root at $R (kbridge: tests/dpdk24/root.sh)" >&2; exit 1; }
exec unshare -m --propagation private bash -c '
	R=$1; shift
	mount -t tmpfs kbext-tmp "$R/tmp"
	mount --bind "$1" "$R/mnt"
	mount -t proc proc "$R/proc"
	mount --bind /dev "$R/dev"
	exec chroot "$R" nice -n 19 bash -c "$2"
' sh "$R" "${KB_APPS_OUT:?set KB_APPS_OUT (README.md)}" "$1"
