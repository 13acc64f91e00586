# shellcheck shell=bash
# The variables are for the scripts that source this:
# shellcheck disable=SC2034
# Shared by root.sh, run.sh and ci.sh: where the Debian 13 (trixie) root
# with DPDK 24.11 lives and what it holds. Sourced, not run.

KBR_SUITE=${KBR_SUITE:-trixie}
KBR_CACHE=${KBR_CACHE:-/var/cache/kbridge}
KBR_ROOT=${KBR_ROOT:-$KBR_CACHE/$KBR_SUITE}
KBR_MIRROR=${KBR_MIRROR:-http://deb.debian.org/debian}
# A root older than this is made again, so that the tests follow the
# suite's point releases (DPDK 24.11.x, the kernel-facing tools).
KBR_MAX_AGE_DAYS=${KBR_MAX_AGE_DAYS:-14}
# What the DPDK tests and the test bed need (compare deploy/deps.sh); git
# because go build stamps the VCS state.
# Added to a cached root when missing; the root is made again only when
# the suite or the mirror changes, or it grows old.
KBR_PKGS=(build-essential pkg-config libdpdk-dev dpdk dpdk-dev git ca-certificates
	nfs-ganesha nfs-ganesha-vfs libnfs-utils sockperf iperf3
	ethtool iproute2 iputils-ping procps psmisc kmod util-linux coreutils curl)
# The repository inside the root; its bin/ there is the root's own.
KBR_SRC=/src/kbridge

kbr_say() { printf 'dpdk24: %s\n' "$*" >&2; }
kbr_die() { printf 'dpdk24: ERROR: %s\n' "$*" >&2; exit 1; }

# kbr_stamp_id: what a root was made from; a root with another is stale.
kbr_stamp_id() {
	printf '%s %s\n' "$KBR_SUITE" "$KBR_MIRROR" | sha256sum | cut -c1-16
}

# no_mounts DIR: refuses (dies) while anything is mounted at or below DIR.
# run.sh mounts /proc, /sys, /dev, /run and the repository into the root in
# a private mount namespace that takes them along when it ends; should one
# be left (a namespace still alive), rm -rf would reach through a bind mount
# into the host's own /dev or /run.
no_mounts() {
	local dir m
	dir=$(readlink -f "$1" 2>/dev/null || echo "$1")
	[ -e "$dir" ] || return 0
	while read -r _ m _; do
		m=$(printf '%b' "$m") # /proc/mounts escapes spaces as \040
		case $m in
		"$dir" | "$dir"/*) kbr_die "$m is mounted inside $dir: unmount it (umount -R $dir) before the root is made again" ;;
		esac
	done </proc/self/mounts
}
