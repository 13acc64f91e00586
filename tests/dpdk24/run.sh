#!/usr/bin/env bash
# run.sh [--host] [--] COMMAND...: runs COMMAND (a bash command line) in the
# DPDK 24.11 root (root.sh makes it) with the repository at /src/kbridge, or
# with --host on the host beside it, in a private mount namespace that
# holds the root's mounts; they vanish with it. A --host command can start
# programs in the root with `chroot "$KBR_ROOT" ...` (exported).
#
# The root sees the host's /proc, /sys, /dev (hugepages, TUN), /run (network
# namespaces, DPDK runtime directories, the vhost-user sockets: shared with
# host processes, which the cross-version tests rely on), Go at
# /usr/local/go, the module cache and the test bed's export tree. Its root
# is bind-mounted onto itself: `ip netns exec` makes / a slave mount, which a
# plain chroot directory is not. The repository's bin/ inside the root is a
# directory of the root's own (/var/lib/kbridge-bin), so the two builds never
# overwrite each other. Root only; the caller holds /tmp/kbridge-root.lock.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
host=0
while [ $# -gt 0 ]; do
	case $1 in
	--host) host=1; shift ;;
	--) shift; break ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || kbr_die "usage: run.sh [--host] [--] COMMAND..."
[ "$(id -u)" = 0 ] || kbr_die "must run as root"
[ -f "$KBR_ROOT/.kbridge-root" ] || kbr_die "no root at $KBR_ROOT: run tests/dpdk24/root.sh"
repo=$(cd "$(dirname "$0")/../.." && pwd)
# The Go the root builds with (bound at its /usr/local/go, GOTOOLCHAIN=local
# there): the Makefile's GO, else deploy/go.sh's; both are the toolchain
# go.mod names, its own binary.
goroot=$(dirname "$(dirname "$(readlink -f "${GO:-$(bash "$repo/deploy/go.sh")}")")")
modcache=$("$goroot/bin/go" env GOMODCACHE 2>/dev/null || echo /root/go/pkg/mod)
mkdir -p "$repo/bin" "$KBR_ROOT/var/lib/kbridge-bin" /var/lib/kbt "$modcache"

export KBR_ROOT KBR_SRC KBR_HOST=$host
exec unshare --mount --propagation private bash -euo pipefail -c '
	R=$KBR_ROOT repo=$1 goroot=$2 modcache=$3; shift 3
	mount --bind "$R" "$R"
	mount -t proc proc "$R/proc"
	mount --rbind /sys "$R/sys"
	mount --rbind /dev "$R/dev"
	mount --rbind /run "$R/run"
	mount --bind "$goroot" "$R/usr/local/go"
	mount --bind "$modcache" "$R/root/go/pkg/mod"
	mount --bind /var/lib/kbt "$R/var/lib/kbt"
	mount --bind "$repo" "$R$KBR_SRC"
	mount --bind "$R/var/lib/kbridge-bin" "$R$KBR_SRC/bin"
	if [ "$KBR_HOST" = 1 ]; then
		exec bash -c "$*"
	fi
	exec chroot "$R" /usr/bin/env -i PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root TERM=dumb LANG=C.UTF-8 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false GOPROXY=off \
		CGO_CFLAGS_ALLOW='-m[a-z0-9-]+' GOEXPERIMENT=norandomizedheapbase64 \
		bash -c "cd $KBR_SRC && $*"
' run.sh "$repo" "$goroot" "$modcache" "$*"
