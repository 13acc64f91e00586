#!/usr/bin/env bash
# Installs what kbridge's build, tests and test bed need on Debian 12 or 13,
# if it is missing, Go included, and reserves 2 MB hugepages. Idempotent; run
# as root.
set -euo pipefail

# libsystemd-dev: DPDK's static link line (pkg-config --static libdpdk, the
# statically linked test apps) names -lsystemd.
pkgs=(build-essential pkg-config libdpdk-dev dpdk dpdk-dev libsystemd-dev
      nfs-ganesha nfs-ganesha-vfs libnfs-utils sockperf iperf3 wrk linux-perf hping3
      ethtool iproute2 iputils-ping procps psmisc curl git
      clang llvm libbpf-dev bpftool systemd-container meson ninja-build bird2
      shellcheck lintian)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	[ "$(id -u)" = 0 ] || { echo "deps: missing ${missing[*]}; run as root to install them" >&2; exit 1; }
	echo "deps: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# ganesha's package starts a system-wide server on install; the test bed
# runs its own inside a namespace, so the system one must not hold port 2049.
if systemctl is-active --quiet nfs-ganesha 2>/dev/null; then
	systemctl stop nfs-ganesha || true
fi

# podman and runc run the pod test (tests/pod) and build the image (make
# image). Optional: where Debian has no podman, or it cannot be installed,
# everything else still works and tests/pod skips, saying why.
if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
	if [ "$(id -u)" = 0 ]; then
		# With its recommends: kube play's infra container needs catatonit,
		# and podman a network backend even for host networking.
		apt-get install -y -qq podman runc >/dev/null 2>&1 ||
			echo "deps: podman and runc could not be installed; tests/pod will skip" >&2
	else
		echo "deps: podman or runc missing (tests/pod will skip); run as root to install them" >&2
	fi
fi

# A Go that can build kbridge: one already here (1.21 or later), or Debian's
# own package; it fetches the toolchain go.mod names (deploy/go.sh).
bash "$(dirname "$0")/go.sh" --install >&2

if [ "$(id -u)" = 0 ]; then
	bash "$(dirname "$0")/../tests/testbed/hugepages.sh"
	# The two files of DPDK's Debian source that make build checks
	# kbridge's vhost-user message layout against (docs/DPDK.md).
	# Without it (a mirror without sources) the build checks the layout
	# against its own table only.
	bash "$(dirname "$0")/dpdk-src.sh" >/dev/null ||
		echo "deps: no DPDK source: make build checks the vhost-user layout against ring/vhost_msg.h's table only" >&2
fi
