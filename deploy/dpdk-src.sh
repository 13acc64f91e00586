#!/usr/bin/env bash
# dpdk-src.sh: prints a directory that holds what kbridge's build checks
# against in DPDK's source, for the DPDK installed here: lib/vhost/vhost_user.h
# (librte_vhost's private message layout, which DPDK does not install; ring/
# vhost_msg.h mirrors it), VERSION and, for a DPDK that still had KNI
# (22.11 and before), lib/kni/rte_kni.h and rte_kni_common.h: DPDK's own KNI
# header, which tests/kni builds an app against to link it with kbridge's
# librte_kni (docs/KNI.md; Debian's 22.11 installs no KNI), and
# lib/kni/version.map, KNI's exports, which tests/libkni checks librte_kni's
# against. Taken once from Debian's source
# package of the installed libdpdk-dev, with its patches applied, and kept
# in KB_DPDK_SRC_CACHE/<version> (default /var/cache/kbridge/dpdk-src); the
# Makefile finds it there (DPDK_SRC, docs/DPDK.md). make deps runs it on
# the host, tests/dpdkroot/root.sh in each root.
#
# apt-get source needs deb-src entries: this script makes them from the
# system's deb entries in a private apt configuration of its own, so the
# system's sources and package lists stay as they are. Root only (the
# cache); needs the Debian mirror on its first run for a version.
set -euo pipefail

cache=${KB_DPDK_SRC_CACHE:-/var/cache/kbridge/dpdk-src}
die() { echo "dpdk-src: $*" >&2; exit 1; }

up=$(pkg-config --modversion libdpdk 2>/dev/null) || die "pkg-config finds no libdpdk (make deps installs libdpdk-dev)"
deb=$(dpkg-query -W -f='${Version}' libdpdk-dev 2>/dev/null) ||
	die "libdpdk-dev is not a Debian package here (DPDK $up built from source?): give make its source yourself (DPDK_SRC=DIR)"
dir=$cache/$up
# KNI left DPDK in 23.11: before it, a cache without its header or map is refreshed.
had_kni() { [ "$(printf '%s\n23.11\n' "${up%.*}" | sort -V | head -1)" != 23.11 ]; }
if [ -f "$dir/lib/vhost/vhost_user.h" ] && [ -f "$dir/VERSION" ] &&
	{ ! had_kni || { [ -f "$dir/lib/kni/rte_kni.h" ] && [ -f "$dir/lib/kni/version.map" ]; }; }; then
	echo "$dir"
	exit 0
fi
[ "$(id -u)" = 0 ] || die "run as root: the source goes to $cache"
command -v dpkg-source >/dev/null || die "dpkg-source missing (dpkg-dev)"

tmp=$(mktemp -d /tmp/kbridge-dpdk-src.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lists/partial" "$tmp/parts"
# deb-src beside each deb: one-line lists and deb822 .sources files.
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
	[ -f "$f" ] && sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f"
done >"$tmp/sources.list"
for f in /etc/apt/sources.list.d/*.sources; do
	[ -f "$f" ] && sed 's/^Types:.*/Types: deb-src/' "$f" >"$tmp/parts/${f##*/}"
done
apt=(apt-get -q -o Dir::Etc::SourceList="$tmp/sources.list" -o Dir::Etc::SourceParts="$tmp/parts"
	-o Dir::State::Lists="$tmp/lists" -o Acquire::Languages=none -o APT::Sandbox::User=root)
"${apt[@]}" update >"$tmp/apt.log" 2>&1 || { tail -5 "$tmp/apt.log" >&2; die "apt-get update of the deb-src lists failed"; }
(cd "$tmp" && "${apt[@]}" source --download-only "dpdk=$deb") >>"$tmp/apt.log" 2>&1 ||
	{ tail -5 "$tmp/apt.log" >&2; die "apt-get source dpdk=$deb failed"; }
# The whole tree with Debian's patches, of which two files are kept.
(cd "$tmp" && dpkg-source --no-check -x dpdk_*.dsc src) >>"$tmp/apt.log" 2>&1 ||
	{ tail -5 "$tmp/apt.log" >&2; die "dpkg-source -x failed"; }
mkdir -p "$dir.new/lib/vhost"
cp "$tmp/src/lib/vhost/vhost_user.h" "$dir.new/lib/vhost/"
cp "$tmp/src/VERSION" "$dir.new/"
if [ -f "$tmp/src/lib/kni/rte_kni.h" ]; then
	mkdir -p "$dir.new/lib/kni"
	cp "$tmp/src/lib/kni/rte_kni.h" "$tmp/src/lib/kni/rte_kni_common.h" "$tmp/src/lib/kni/version.map" "$dir.new/lib/kni/"
fi
echo "Debian source package dpdk $deb" >"$dir.new/SOURCE"
rm -rf "$dir"
mv "$dir.new" "$dir"
echo "$dir"
