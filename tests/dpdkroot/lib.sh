# shellcheck shell=bash
# The variables are for the scripts that source this:
# shellcheck disable=SC2034
# Shared by root.sh, run.sh and ci.sh: which Debian root holds which DPDK
# LTS release, where it lives and what it holds. Sourced, not run; the
# caller names the release first (kbr_release), or sets KBR_DPDK.
#
#   release  suite   root (KBR_CACHE/suite)
#   24.11    trixie  Debian 13's libdpdk-dev 24.11.x
#   25.11    sid     Debian unstable's libdpdk-dev 25.11.x
#
# The releases make test runs beside the host's DPDK (22.11 on Debian 12).
KBR_RELEASES=(24.11 25.11)
KBR_CACHE=${KBR_CACHE:-/var/cache/kbridge}
KBR_MIRROR=${KBR_MIRROR:-http://deb.debian.org/debian}
# A root older than this is made again, so that the tests follow the
# suite's point releases (DPDK 24.11.x, 25.11.x, the kernel-facing tools).
KBR_MAX_AGE_DAYS=${KBR_MAX_AGE_DAYS:-14}
# What the DPDK tests and the test bed need (compare deploy/deps.sh); git
# because go build stamps the VCS state.
# Added to a cached root when missing; the root is made again only when
# the suite or the mirror changes, or it grows old.
KBR_PKGS=(build-essential pkg-config libdpdk-dev dpdk dpdk-dev libsystemd-dev git ca-certificates
	nfs-ganesha nfs-ganesha-vfs libnfs-utils sockperf iperf3
	ethtool iproute2 iputils-ping procps psmisc kmod util-linux coreutils curl)
# The repository inside a root; its bin/ there is the root's own.
KBR_SRC=/src/kbridge

kbr_say() { printf 'dpdkroot%s: %s\n' "${KBR_DPDK:+ $KBR_DPDK}" "$*" >&2; }
kbr_die() { printf 'dpdkroot%s: ERROR: %s\n' "${KBR_DPDK:+ $KBR_DPDK}" "$*" >&2; exit 1; }

# kbr_suite RELEASE: the Debian suite whose libdpdk-dev is that release.
kbr_suite() {
	case $1 in
	24.11) echo trixie ;;
	25.11) echo sid ;;
	*) kbr_die "no Debian root for DPDK '$1': the releases are ${KBR_RELEASES[*]} (the host has its own)" ;;
	esac
}

# kbr_release RELEASE: selects the root of that release for what follows
# (KBR_DPDK, KBR_SUITE, KBR_ROOT).
kbr_release() {
	KBR_DPDK=$1
	KBR_SUITE=$(kbr_suite "$1") || exit 1
	KBR_ROOT=$KBR_CACHE/$KBR_SUITE
}

# kbr_stamp_id: what a root was made from; a root with another is stale.
# The suite names the release; root.sh checks that its DPDK is that one.
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
