#!/bin/bash
# Installs what a KNI application builds against from a kbridge checkout
# into a prefix of its own under $KB_APPS_OUT, without writing into the
# checkout: the app headers (the Makefile's APP_HEADERS), kbridge.pc, and a
# kbridge binary built with `go build -o` (the binary rte_kni_alloc() starts,
# for KBRIDGE_BIN).
#
#   kbprefix.sh KBRIDGE_TREE            prints the prefix (last line of stdout)
#
# KB_PREFIX     where to install (default $KB_APPS_OUT/prefix/<basename of tree>)
# KB_NO_BINARY  set: skip the go build (headers and kbridge.pc only)
# KB_MAKE_INSTALL set: use the tree's own `make install` into a staging
#               DESTDIR instead (runs `make build` IN the tree: writes its
#               bin/); use once the tree ships librte_kni.so/.a, whose
#               install rule this script cannot guess. The .pc files are
#               then rewritten to point into the staging directory.
set -euo pipefail
TREE=$(cd "${1:?usage: kbprefix.sh KBRIDGE_TREE}" && pwd)
P=${KB_PREFIX:-${KB_APPS_OUT:?set KB_APPS_OUT (README.md)}/prefix/$(basename "$TREE")}
rm -rf "$P"
mkdir -p "$P/include/kbridge" "$P/lib/pkgconfig" "$P/bin"
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
export CGO_CFLAGS_ALLOW='-m[a-z0-9-]+'
export GOEXPERIMENT=norandomizedheapbase64

if [ -n "${KB_MAKE_INSTALL:-}" ]; then
	stage=$P/stage
	nice -n 19 make -C "$TREE" install DESTDIR="$stage" PREFIX=/usr/local >&2
	cp -a "$stage/usr/local/." "$P/"
	rm -rf "$stage"
	for pc in "$P"/lib/pkgconfig/*.pc "$P"/lib/*/pkgconfig/*.pc; do
		[ -e "$pc" ] || continue
		sed -i "s|^prefix=.*|prefix=$P|" "$pc"
	done
else
	hdrs=$(make -s --no-print-directory -C "$TREE" --eval 'print-%: ; @echo $($*)' print-APP_HEADERS)
	for h in $hdrs; do install -m 0644 "$TREE/$h" "$P/include/kbridge/"; done
	ver=$(git -C "$TREE" describe --always --dirty 2>/dev/null || echo dev)
	sed -e "s|@PREFIX@|$P|" -e "s|@VERSION@|$ver|" "$TREE/deploy/debian/kbridge.pc.in" >"$P/lib/pkgconfig/kbridge.pc"
	# librte_kni's .pc files are left out: this mode builds no library, and
	# the build scripts link librte_kni whenever pkg-config finds it.
	[ -e "$TREE/deploy/debian/librte_kni.pc.in" ] &&
		echo "kbprefix: the headers alone; for librte_kni use KB_MAKE_INSTALL=1" >&2
	if [ -z "${KB_NO_BINARY:-}" ]; then
		go=$(cd "$TREE" && bash deploy/go.sh)
		(cd "$TREE" && nice -n 19 "$go" build -trimpath -ldflags "-X main.version=$ver" -o "$P/bin/kbridge" ./cmd/kbridge) >&2
	fi
fi
echo "$P"
