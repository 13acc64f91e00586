#!/usr/bin/env bash
# deb.sh: packages bin/kbridge as a Debian package (make deb).
#
#   deploy/deb.sh [OUTDIR]      writes OUTDIR/kbridge_<version>_<arch>.deb
#                               (default bin/) and prints its path
#
# What goes where is in docs/PACKAGING.md. Two things are computed here, on
# the machine that built bin/kbridge:
#  - Depends: dpkg-shlibdeps reads the libraries the binary links (its
#    NEEDED entries: librte_eal.so.23 from DPDK 22.11, .so.25 from 24.11, and
#    libc) and names the packages that ship them, with their minimum
#    versions, so the package asks for the DPDK runtime it was built against.
#    A DPDK built from source is in no package: the package then depends on
#    none (a warning says so) and the operator provides that DPDK.
#  - Version: git describe made Debian-valid: v1.2.3 -> 1.2.3, 4 commits on
#    -> 1.2.3+git4.gabcdef0, no tag -> 0.0~git<commit time>.<hash>, which
#    sorts by commit and before any release; +dirty for uncommitted changes.
# Environment: DEB_VERSION overrides the version, DEB_MAINTAINER the
# Maintainer field. KBRIDGE_DEB_DPDK=24.11 or 25.11 (make deb DEB_DPDK=...):
# the package of the kbridge built in that release's Debian root of
# tests/dpdkroot (made or taken from its cache), made there by this script
# (its DPDK's packages in Depends), written to OUTDIR on the host; the
# caller holds the root-test lock, as for any use of a root.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(mkdir -p "${1:-$top/bin}" && cd "${1:-$top/bin}" && pwd)

version() {
	local d dirty=
	if ! d=$(git -C "$top" describe --tags --long --match 'v[0-9]*' 2>/dev/null); then
		d=
	fi
	git -C "$top" diff --quiet HEAD 2>/dev/null || dirty=+dirty
	if [[ $d =~ ^v(.+)-([0-9]+)-g([0-9a-f]+)$ ]]; then
		if [ "${BASH_REMATCH[2]}" = 0 ]; then
			d=${BASH_REMATCH[1]}
		else
			d=${BASH_REMATCH[1]}+git${BASH_REMATCH[2]}.g${BASH_REMATCH[3]}
		fi
	elif git -C "$top" rev-parse -q --verify HEAD >/dev/null 2>&1; then
		d=0.0~git$(TZ=UTC git -C "$top" log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S).$(git -C "$top" rev-parse --short=7 HEAD)
	else
		d=0.0~dev
	fi
	# Debian's upstream version: alphanumerics and . + ~ only (no "-": the
	# package is native, it has no revision), starting with a digit.
	d=$(printf '%s' "$d" | tr -c 'A-Za-z0-9.+~' '.')
	[[ $d =~ ^[0-9] ]] || d=0.0~$d
	echo "$d$dirty"
}

if [ -n "${KBRIDGE_DEB_DPDK:-}" ]; then
	ver=${DEB_VERSION:-$(version)} DEB_MAINTAINER=${DEB_MAINTAINER:-}
	. "$top/tests/dpdkroot/lib.sh"
	kbr_release "$KBRIDGE_DEB_DPDK"
	bash "$top/tests/dpdkroot/root.sh" "$KBR_DPDK" >/dev/null
	tmp=$(mktemp -d "$KBR_ROOT/tmp/kbridge-deb.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	# The versions git gives here: the root may not see the repository's
	# .git (a worktree's points outside it).
	bash "$top/tests/dpdkroot/run.sh" "$KBR_DPDK" -- "make build VERSION=$(git -C "$top" describe --always --dirty 2>/dev/null || echo dev) >/dev/null &&
		DEB_VERSION=$ver DEB_MAINTAINER=${DEB_MAINTAINER@Q} bash deploy/deb.sh /tmp/${tmp##*/} >/dev/null"
	for f in "$tmp"/*.deb; do
		cp "$f" "$out/"
		echo "$out/${f##*/}"
	done
	exit 0
fi
bin=$top/bin/kbridge
[ -x "$bin" ] || { echo "deb: $bin missing: make build first (make deb does)" >&2; exit 1; }
for c in dpkg-deb dpkg-shlibdeps dpkg-architecture pkg-config; do
	command -v "$c" >/dev/null || { echo "deb: $c missing: make deps installs it (dpkg-dev, pkg-config)" >&2; exit 1; }
done
ver=${DEB_VERSION:-$(version)}
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
# Where this release puts package units: /lib/systemd/system on Debian 12,
# /usr/lib/systemd/system on 13. systemd.pc says (Debian 13 ships it in
# systemd-dev); without it, where the systemd package put its own.
unitdir=$(pkg-config --variable=systemdsystemunitdir systemd 2>/dev/null) ||
	unitdir=$(dpkg -L systemd 2>/dev/null | sed -n 's|^\(.*/systemd/system\)/systemd-journald\.service$|\1|p' | head -1)
[ -n "$unitdir" ] || unitdir=/lib/systemd/system
dpdk=$(pkg-config --modversion libdpdk 2>/dev/null || echo unknown)

work=$(mktemp -d /tmp/kbridge-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
# The debian/<package> layout dpkg-shlibdeps expects.
mkdir -p "$work/debian"
printf 'Source: kbridge\n\nPackage: kbridge\nArchitecture: any\n' >"$work/debian/control"
root=$work/debian/kbridge
doc=$root/usr/share/doc/kbridge

install -D -m 0755 "$bin" "$root/usr/bin/kbridge"
# Debian ships binaries stripped; Go keeps what panics and the profiler
# need (pclntab) outside the symbol table.
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/kbridge"
install -d "$root$unitdir/kbridge.service.d" "$root$unitdir/kbridge@.service.d"
# The unit as deploy/ has it, with the package's paths (not /usr/local),
# and its template for several ports, kbridge@NAME.service, made from it.
sed -e 's|/usr/local/bin/kbridge|/usr/bin/kbridge|g' \
	-e 's|/usr/local/share/doc/kbridge|/usr/share/doc/kbridge|g' \
	"$top/deploy/kbridge.service" >"$root$unitdir/kbridge.service"
bash "$top/deploy/instance-unit.sh" "$root$unitdir/kbridge.service" >"$root$unitdir/kbridge@.service"
chmod 0644 "$root$unitdir/kbridge.service" "$root$unitdir/kbridge@.service"
install -m 0644 "$top/deploy/kbridge.service.d/10-dpdk-app.conf" "$root$unitdir/kbridge.service.d/"
install -m 0644 "$top/deploy/kbridge.service.d/10-dpdk-app.conf" "$root$unitdir/kbridge@.service.d/"
install -D -m 0644 "$top/deploy/kbridge.yaml" "$root/etc/kbridge/kbridge.yaml"
# kbridge.h with the headers it includes, and KNI's API over it (docs/KNI.md).
install -d "$root/usr/include/kbridge"
install -m 0644 "$top"/ring/kbridge*.h "$top"/ring/rte_kni*.h "$root/usr/include/kbridge/"
install -d "$root/usr/lib/$multiarch/pkgconfig"
sed -e "s|@PREFIX@|/usr|" -e "s|@VERSION@|$ver|" "$top/deploy/debian/kbridge.pc.in" >"$root/usr/lib/$multiarch/pkgconfig/kbridge.pc"
chmod 0644 "$root/usr/lib/$multiarch/pkgconfig/kbridge.pc"
install -D -m 0644 "$top/README.md" "$doc/README.md"
install -m 0644 "$top/docs/DOCTOR.md" "$doc/DOCTOR.md"
install -m 0644 "$top/docs/PACKAGING.md" "$doc/PACKAGING.md"
install -m 0644 "$top/deploy/README.md" "$doc/SERVICE.md"
install -D -m 0644 "$top/deploy/kbridge.service.d/20-iova-pa.conf.example" "$doc/examples/20-iova-pa.conf.example"
install -m 0644 "$top/deploy/kbridge.service.d/30-mode-xdp.conf.example" "$doc/examples/30-mode-xdp.conf.example"
install -m 0644 "$top/deploy/debian/copyright" "$doc/copyright"
commit=$(git -C "$top" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
{
	printf 'kbridge (%s) unstable; urgency=medium\n\n' "$ver"
	printf '  * Built by make deb from commit %s against DPDK %s.\n\n' "$commit" "$dpdk"
	printf ' -- %s  %s\n' "${DEB_MAINTAINER:-kbridge maintainers <kbridge@example.org>}" \
		"$(LC_ALL=C date -u -R -d "@$(git -C "$top" log -1 --format=%ct 2>/dev/null || date +%s)")"
} | gzip -9n >"$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"

# Depends from what the binary links (see the top).
deps=$(cd "$work" && dpkg-shlibdeps -O --ignore-missing-info -e"$root/usr/bin/kbridge" 2>"$work/shlibdeps.err") || {
	cat "$work/shlibdeps.err" >&2
	exit 1
}
deps=${deps#shlibs:Depends=}
for lib in $(readelf -d "$root/usr/bin/kbridge" | sed -n 's/.*NEEDED.*\[\(librte_[^]]*\)\].*/\1/p'); do
	if ! dpkg -S "*/$lib" >/dev/null 2>&1; then
		echo "deb: warning: $lib is in no Debian package (a DPDK built from source?): the package does not depend on it" >&2
	fi
done

mkdir -p "$root/DEBIAN"
install -m 0755 "$top/deploy/debian/postinst" "$top/deploy/debian/prerm" "$top/deploy/debian/postrm" "$root/DEBIAN/"
echo /etc/kbridge/kbridge.yaml >"$root/DEBIAN/conffiles"
# md5sums: every file but the conffile (dpkg keeps the conffile's own sum).
(cd "$root" && find . -type f ! -path ./DEBIAN/\* ! -path ./etc/kbridge/kbridge.yaml -printf '%P\0' |
	LC_ALL=C sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
cat >"$root/DEBIAN/control" <<EOF
Package: kbridge
Version: $ver
Architecture: $arch
Maintainer: ${DEB_MAINTAINER:-kbridge maintainers <kbridge@example.org>}
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $deps
Section: net
Priority: optional
Description: DPDK-to-kernel exception path bridge
 kbridge is a DPDK secondary process that moves the packets a DPDK
 application hands it (kbridge.h, over rings in the app's shared memory,
 or virtio-user in mode vhost) to a kernel TAP interface and back, with
 a systemd unit that starts and stops it with the app.
 .
 Built against DPDK $dpdk: in ring mode the app must run this same DPDK.
 The package also carries kbridge.h and kbridge.pc for building apps.
EOF
deb=$out/kbridge_${ver}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
