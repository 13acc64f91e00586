#!/usr/bin/env bash
# run.sh RELEASE [--] COMMAND...: runs COMMAND (a bash command line) in the
# root of DPDK RELEASE (root.sh makes it; lib.sh says which) with the
# repository at /src/kbridge.
# run.sh --host RELEASE... -- COMMAND...: runs COMMAND on the host, with the
# root of each RELEASE mounted as for the first form; it can start programs
# in a root with `chroot ROOT ...`. KBR_ROOTS (exported) lists them as
# RELEASE=ROOT, space-separated, and KBR_SRC is the repository's path in
# each.
# Either way in a private mount namespace that holds the roots' mounts;
# they vanish with it.
#
# A root sees the host's /proc, /sys, /dev (hugepages, TUN), /run (network
# namespaces, DPDK runtime directories, the vhost-user sockets: shared with
# host processes, which the cross-version tests rely on), Go at
# /usr/local/go, the module cache and the test bed's export tree. Each root
# is bind-mounted onto itself: `ip netns exec` makes / a slave mount, which
# a plain chroot directory is not. The repository's bin/ inside a root is a
# directory of the root's own for this checkout (/var/lib/kbridge-bin/<a
# hash of its path>), so no two builds overwrite each other, and make never
# takes another checkout's newer binary for this one's. Root only; the
# caller holds /tmp/kbridge-root.lock.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
host=0
releases=()
while [ $# -gt 0 ]; do
	case $1 in
	--host) host=1; shift ;;
	--) shift; break ;;
	[0-9]*.[0-9]*) releases+=("$1"); shift ;;
	*) break ;;
	esac
done
usage="usage: run.sh RELEASE [--] COMMAND... | run.sh --host RELEASE... -- COMMAND..."
[ $# -gt 0 ] && [ ${#releases[@]} -gt 0 ] || kbr_die "$usage"
[ $host = 1 ] || [ ${#releases[@]} = 1 ] || kbr_die "one release, or --host: $usage"
[ "$(id -u)" = 0 ] || kbr_die "must run as root"
roots=()
repo=$(cd "$here/../.." && pwd)
bin=/var/lib/kbridge-bin/$(printf '%s' "$repo" | sha256sum | cut -c1-12)
for r in "${releases[@]}"; do
	kbr_release "$r"
	[ -f "$KBR_ROOT/.kbridge-root" ] || kbr_die "no root at $KBR_ROOT: run tests/dpdkroot/root.sh $r"
	mkdir -p "$KBR_ROOT$bin"
	roots+=("$r=$KBR_ROOT")
done
# The Go the roots build with (bound at their /usr/local/go, GOTOOLCHAIN=local
# there): the Makefile's GO, else deploy/go.sh's; both are the toolchain
# go.mod names, its own binary.
goroot=$(dirname "$(dirname "$(readlink -f "${GO:-$(bash "$repo/deploy/go.sh")}")")")
modcache=$("$goroot/bin/go" env GOMODCACHE 2>/dev/null || echo /root/go/pkg/mod)
mkdir -p "$repo/bin" /var/lib/kbt "$modcache"

export KBR_ROOTS="${roots[*]}" KBR_SRC KBR_HOST=$host KBR_BIN=$bin
exec unshare --mount --propagation private bash -euo pipefail -c '
	repo=$1 goroot=$2 modcache=$3; shift 3
	for pair in $KBR_ROOTS; do
		R=${pair#*=}
		mount --bind "$R" "$R"
		mount -t proc proc "$R/proc"
		mount --rbind /sys "$R/sys"
		mount --rbind /dev "$R/dev"
		mount --rbind /run "$R/run"
		mount --bind "$goroot" "$R/usr/local/go"
		mount --bind "$modcache" "$R/root/go/pkg/mod"
		mount --bind /var/lib/kbt "$R/var/lib/kbt"
		mount --bind "$repo" "$R$KBR_SRC"
		mount --bind "$R$KBR_BIN" "$R$KBR_SRC/bin"
	done
	if [ "$KBR_HOST" = 1 ]; then
		exec bash -c "$*"
	fi
	exec chroot "$R" /usr/bin/env -i PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root TERM=dumb LANG=C.UTF-8 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false GOPROXY=off \
		CGO_CFLAGS_ALLOW='"'"'-m[a-z0-9-]+'"'"' GOEXPERIMENT=norandomizedheapbase64 \
		bash -c "cd $KBR_SRC && $*"
' run.sh "$repo" "$goroot" "$modcache" "$*"
