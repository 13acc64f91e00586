#!/usr/bin/env bash
# root.sh RELEASE: makes the Debian root in which kbridge is built and
# tested against Debian's DPDK RELEASE (24.11: Debian 13, trixie; 25.11:
# Debian unstable, sid; lib.sh), or keeps the one made before: it is made
# again when it is absent, was made from another suite or mirror, or is
# older than KBR_MAX_AGE_DAYS; packages KBR_PKGS adds later are installed
# into the cached root. A new root is built beside the old one
# (debootstrap, then apt-get) and swapped in only when complete, so an
# interrupted run never leaves half a root behind. A root whose DPDK is not
# RELEASE (sid moves on to the next LTS) is refused, naming what it has.
# Prints the root's path. Root only. Takes about 3 minutes from scratch,
# nothing when cached.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
kbr_release "${1:?usage: root.sh RELEASE (${KBR_RELEASES[*]})}"
[ "$(id -u)" = 0 ] || kbr_die "must run as root (debootstrap, chroot)"
if ! command -v debootstrap >/dev/null; then
	kbr_say "installing debootstrap"
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends debootstrap >/dev/null ||
		kbr_die "debootstrap is missing and apt-get could not install it"
fi

stamp=$KBR_ROOT/.kbridge-root
want=$(kbr_stamp_id)
fresh() {
	[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
		[ -n "$(find "$stamp" -mtime -"$KBR_MAX_AGE_DAYS")" ]
}
# Installs what KBR_PKGS names and root $1 lacks.
add_packages() {
	local r=$1 missing=() p
	for p in "${KBR_PKGS[@]}"; do
		chroot "$r" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
	done
	((${#missing[@]})) || return 0
	kbr_say "installing ${missing[*]} in $r"
	cp /etc/resolv.conf "$r/etc/resolv.conf" 2>/dev/null || true
	unshare --mount --propagation private sh -c '
		mount -t proc proc "$1/proc"
		DEBIAN_FRONTEND=noninteractive chroot "$1" sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends $2 && apt-get clean"
	' sh "$r" "${missing[*]}" >"$KBR_CACHE/apt-$KBR_SUITE.log" 2>&1 ||
		{ tail -20 "$KBR_CACHE/apt-$KBR_SUITE.log" >&2; kbr_die "apt-get in the root failed (log: $KBR_CACHE/apt-$KBR_SUITE.log)"; }
}
# The root's DPDK, which must be RELEASE.
check_release() {
	local v
	v=$(chroot "$1" pkg-config --modversion libdpdk) || kbr_die "no libdpdk in $1"
	case $v in
	"$KBR_DPDK" | "$KBR_DPDK".*) echo "$v" ;;
	*) kbr_die "$KBR_SUITE's DPDK is $v now, not $KBR_DPDK: name the suite that ships $KBR_DPDK in tests/dpdkroot/lib.sh (kbr_suite)" ;;
	esac
}

# Fetches into root $1 the parts of its DPDK's Debian source that make
# build checks against (deploy/dpdk-src.sh, kept in the root's
# /var/cache/kbridge/dpdk-src): the vhost-user message layout. A mirror
# may lack the source package (this machine's had sid's 25.11.4 and
# bookworm's 22.11.11, not trixie's 24.11.8); the build then checks the
# layout against ring/vhost_msg.h's table alone, and the next run tries
# again.
add_source() {
	local r=$1 v
	v=$(chroot "$r" pkg-config --modversion libdpdk)
	[ ! -f "$r/var/cache/kbridge/dpdk-src/$v/VERSION" ] || return 0
	kbr_say "fetching DPDK $v's Debian source into $r"
	unshare --mount --propagation private sh -c '
		mount -t proc proc "$1/proc"
		chroot "$1" bash -s >/dev/null
	' sh "$r" <"$(dirname "$0")/../../deploy/dpdk-src.sh" ||
		kbr_say "no Debian source of DPDK $v (above): make build checks the vhost-user layout against ring/vhost_msg.h's table only"
}

if fresh; then
	add_packages "$KBR_ROOT"
	add_source "$KBR_ROOT"
	kbr_say "using the cached root $KBR_ROOT ($(check_release "$KBR_ROOT"))"
	echo "$KBR_ROOT"
	exit 0
fi

new=$KBR_ROOT.new
mkdir -p "$KBR_CACHE"
no_mounts "$new"
rm -rf "$new"
t0=$(date +%s)
kbr_say "making a $KBR_SUITE root in $new from $KBR_MIRROR"
debootstrap --variant=minbase --include=libdpdk-dev,dpdk,pkg-config,build-essential \
	"$KBR_SUITE" "$new" "$KBR_MIRROR" >"$KBR_CACHE/debootstrap-$KBR_SUITE.log" 2>&1 ||
	{ tail -20 "$KBR_CACHE/debootstrap-$KBR_SUITE.log" >&2; kbr_die "debootstrap failed (log: $KBR_CACHE/debootstrap-$KBR_SUITE.log)"; }
# No daemon starts inside the root while packages install.
printf '#!/bin/sh\nexit 101\n' >"$new/usr/sbin/policy-rc.d"
chmod 0755 "$new/usr/sbin/policy-rc.d"
# A mirror's Release file for unstable may be past its Valid-Until (sid's
# is renewed daily, mirrors lag): apt in the root takes it all the same.
# The root is a test fixture, rebuilt every KBR_MAX_AGE_DAYS.
echo 'Acquire::Check-Valid-Until "false";' >"$new/etc/apt/apt.conf.d/99kbridge-root"
add_packages "$new"
check_release "$new" >/dev/null
add_source "$new"
mkdir -p "$new/usr/local/go" "$new/root/go/pkg/mod" "$new$KBR_SRC" "$new/var/lib/kbt"
echo "$want" >"$new/.kbridge-root"

if [ -e "$KBR_ROOT" ]; then
	no_mounts "$KBR_ROOT"
	rm -rf "$KBR_ROOT"
fi
mv "$new" "$KBR_ROOT"
kbr_say "root ready in $(( $(date +%s) - t0 )) s: $KBR_ROOT, DPDK $(check_release "$KBR_ROOT")"
echo "$KBR_ROOT"
