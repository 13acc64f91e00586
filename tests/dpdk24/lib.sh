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
	ethtool iproute2 iputils-ping procps psmisc kmod util-linux coreutils)
# The repository inside the root; its bin/ there is the root's own.
KBR_SRC=/src/kbridge

kbr_say() { printf 'dpdk24: %s\n' "$*" >&2; }
kbr_die() { printf 'dpdk24: ERROR: %s\n' "$*" >&2; exit 1; }

# kbr_stamp_id: what a root was made from; a root with another is stale.
kbr_stamp_id() {
	printf '%s %s\n' "$KBR_SUITE" "$KBR_MIRROR" | sha256sum | cut -c1-16
}
