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
#  - Version: the binary's own (`kbridge version`, which the Makefile set
#    from deploy/version.sh), so that the package, the binary and
#    kbridge.pc say one version; `make VERSION=...` sets another for all.
# Environment: DEB_MAINTAINER sets the Maintainer field.
# KBRIDGE_DEB_DPDK=24.11 or 25.11 (make deb DEB_DPDK=...): the package of
# the kbridge built in that release's Debian root of tests/dpdkroot (made
# or taken from its cache), made there by this script (its DPDK's packages
# in Depends), written to OUTDIR on the host; the caller holds the
# root-test lock, as for any use of a root.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(mkdir -p "${1:-$top/bin}" && cd "${1:-$top/bin}" && pwd)

if [ -n "${KBRIDGE_DEB_DPDK:-}" ]; then
	# The version the host's git gives (deploy/version.sh): the root may
	# not see the repository's .git (a worktree's points outside it).
	ver=$(bash "$top/deploy/version.sh") DEB_MAINTAINER=${DEB_MAINTAINER:-}
	. "$top/tests/dpdkroot/lib.sh"
	kbr_release "$KBRIDGE_DEB_DPDK"
	bash "$top/tests/dpdkroot/root.sh" "$KBR_DPDK" >/dev/null
	tmp=$(mktemp -d "$KBR_ROOT/tmp/kbridge-deb.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	bash "$top/tests/dpdkroot/run.sh" "$KBR_DPDK" -- "make build VERSION=$ver >/dev/null &&
		DEB_MAINTAINER=${DEB_MAINTAINER@Q} bash deploy/deb.sh /tmp/${tmp##*/} >/dev/null"
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

ver=$("$bin" version | sed -n '1s/^kbridge //p')
[[ $ver =~ ^[0-9][A-Za-z0-9.+~]*$ ]] || {
	echo "deb: $bin says version \"$ver\", which Debian does not take: rebuild it with make build (deploy/version.sh)" >&2
	exit 1
}
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
bash "$top/deploy/unit.sh" /usr >"$root$unitdir/kbridge.service"
bash "$top/deploy/instance-unit.sh" "$root$unitdir/kbridge.service" >"$root$unitdir/kbridge@.service"
chmod 0644 "$root$unitdir/kbridge.service" "$root$unitdir/kbridge@.service"
install -m 0644 "$top/deploy/kbridge.service.d/10-dpdk-app.conf" "$root$unitdir/kbridge.service.d/"
install -m 0644 "$top/deploy/kbridge.service.d/10-dpdk-app.conf" "$root$unitdir/kbridge@.service.d/"
install -D -m 0644 "$top/deploy/kbridge.yaml" "$root/etc/kbridge/kbridge.yaml"
# kbridge.h with the headers it includes, and KNI's API over it (docs/KNI.md).
install -d "$root/usr/include/kbridge"
install -m 0644 "$top"/include/kbridge/*.h "$root/usr/include/kbridge/"
# librte_kni (make build's bin/lib; docs/KNI.md): the shared library under
# its soname (librte_kni.so.23 on 22.11) with the link -lrte_kni and dlopen
# find, the archive for static links, stripped as Debian ships them; and
# the pkg-config files.
lib=$root/usr/lib/$multiarch
for f in librte_kni.so librte_kni.a; do
	[ -f "$top/bin/lib/$f" ] || { echo "deb: $top/bin/lib/$f missing: make build first (make deb does)" >&2; exit 1; }
done
soname=$(readelf -d "$top/bin/lib/librte_kni.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
install -d "$lib/pkgconfig"
install -m 0644 "$top/bin/lib/librte_kni.so" "$lib/$soname.0"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$lib/$soname.0"
ln -s "$soname.0" "$lib/$soname"
ln -s "$soname" "$lib/librte_kni.so"
install -m 0644 "$top/bin/lib/librte_kni.a" "$lib/librte_kni.a"
strip --strip-debug --enable-deterministic-archives --remove-section=.comment --remove-section=.note "$lib/librte_kni.a"
for pc in kbridge librte_kni librte_kni-libs; do
	sed -e "s|@PREFIX@|/usr|" -e "s|@LIBDIR@|\${prefix}/lib/$multiarch|" -e "s|@VERSION@|$ver|" "$top/deploy/debian/$pc.pc.in" >"$lib/pkgconfig/$pc.pc"
	chmod 0644 "$lib/pkgconfig/$pc.pc"
done
# A man page per command (make man), and bash and zsh completion, from
# the binary's own command line.
ls "$top"/bin/man/*.8 >/dev/null 2>&1 || { echo "deb: $top/bin/man has no man pages: make man first (make deb does)" >&2; exit 1; }
install -d "$root/usr/share/man/man8"
for m in "$top"/bin/man/*.8; do
	gzip -9n <"$m" >"$root/usr/share/man/man8/$(basename "$m").gz"
done
chmod 0644 "$root"/usr/share/man/man8/*.gz
install -d "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions"
"$bin" completion bash >"$root/usr/share/bash-completion/completions/kbridge"
"$bin" completion zsh >"$root/usr/share/zsh/vendor-completions/_kbridge"
chmod 0644 "$root/usr/share/bash-completion/completions/kbridge" "$root/usr/share/zsh/vendor-completions/_kbridge"
install -D -m 0644 "$top/deploy/debian/lintian-overrides" "$root/usr/share/lintian/overrides/kbridge"
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
	printf '  * Built by make deb from commit %s against DPDK %s.\n' "$commit" "$dpdk"
	# What an app's build must change (deploy/debian/NEWS), wrapped as
	# dpkg-parsechangelog and lintian take a changelog's lines.
	grep -v '^#' "$top/deploy/debian/NEWS" | while IFS= read -r line; do
		printf '%s\n' "$line" | fold -s -w 72 | sed -e 's/ *$//' -e '1s/^/  * /' -e '1!s/^/    /'
	done
	printf '\n'

	printf ' -- %s  %s\n' "${DEB_MAINTAINER:-kbridge maintainers <kbridge@example.org>}" \
		"$(LC_ALL=C date -u -R -d "@$(git -C "$top" log -1 --format=%ct 2>/dev/null || date +%s)")"
} | gzip -9n >"$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"

# Depends from what the binary links (see the top).
deps=$(cd "$work" && dpkg-shlibdeps -O --ignore-missing-info -e"$root/usr/bin/kbridge" -e"$lib/$soname.0" 2>"$work/shlibdeps.err") || {
	cat "$work/shlibdeps.err" >&2
	exit 1
}
deps=${deps#shlibs:Depends=}
for so in $(readelf -d "$root/usr/bin/kbridge" "$lib/$soname.0" | sed -n 's/.*NEEDED.*\[\(librte_[^]]*\)\].*/\1/p' | sort -u); do
	if ! dpkg -S "*/$so" >/dev/null 2>&1; then
		echo "deb: warning: $so is in no Debian package (a DPDK built from source?): the package does not depend on it" >&2
	fi
done

mkdir -p "$root/DEBIAN"
install -m 0755 "$top/deploy/debian/postinst" "$top/deploy/debian/prerm" "$top/deploy/debian/postrm" "$root/DEBIAN/"
echo /etc/kbridge/kbridge.yaml >"$root/DEBIAN/conffiles"
# librte_kni's symbols, each with the version that first had it (this one),
# for the packages of apps linked against it (dpkg-shlibdeps reads it), and
# the trigger that runs ldconfig after an install or removal.
# The shlibs file says the same for what reads no symbols file.
(cd "$work" && dpkg-gensymbols -q -pkbridge -P"$root" -v"$ver" -e"$lib/$soname.0" -O"$work/symbols") ||
	{ echo "deb: dpkg-gensymbols failed" >&2; exit 1; }
sed '1a\* Build-Depends-Package: kbridge' "$work/symbols" >"$root/DEBIAN/symbols"
echo "librte_kni ${soname#librte_kni.so.} kbridge (>= $ver)" >"$root/DEBIAN/shlibs"
chmod 0644 "$root/DEBIAN/symbols" "$root/DEBIAN/shlibs"
echo "activate-noawait ldconfig" >"$root/DEBIAN/triggers"
# Conflicts: DPDK's own KNI package of this ABI (librte-kni23 for 22.11)
# ships the same librte_kni.so.N: apt refuses the pair up front instead of
# dpkg failing on the overlap in the middle of an unpack.
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
Conflicts: librte-kni${soname#librte_kni.so.}
Section: net
Priority: optional
Description: DPDK-to-kernel exception path bridge
 kbridge is a DPDK secondary process that moves the packets a DPDK
 application hands it (kbridge.h, over rings in the app's shared memory,
 or virtio-user in mode vhost) to a kernel TAP interface and back, with
 a systemd unit that starts and stops it with the app.
 .
 Built against DPDK $dpdk: in ring mode the app must run this same DPDK.
 The package also carries kbridge.h and kbridge.pc for building apps, and
 librte_kni, KNI's API over kbridge for apps written for KNI.
EOF
deb=$out/kbridge_${ver}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
