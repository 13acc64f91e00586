#!/usr/bin/env bash
# Builds the OCI image of kbridge (make image): bin/kbridge, the DPDK runtime
# it was built against and the example configuration, taken from installed
# Debian packages, imported with podman import. No registry and no base
# image: the image holds the files kbridge and DPDK's drivers load and
# nothing else (no shell, no package manager).
#
#   deploy/image/build.sh BIN [TAG]     (root; TAG default kbridge:<version>,
#                                        also tagged kbridge:latest)
#
# KBRIDGE_IMAGE_DPDK=24.11 or 25.11 (make image IMAGE_DPDK=...): the image
# of the kbridge built in that release's Debian root of tests/dpdkroot
# (Debian 13, Debian unstable; made or taken from its cache) against that
# root's DPDK, with that root's files: BIN is the root's own bin/, built
# there first (make build); TAG default kbridge:<version>-dpdk<release>,
# also kbridge:dpdk<release>. The caller holds the root-test lock, as for
# any use of a root (tests/README.md).
#
# KBRIDGE_IMAGE_EXTRA: more binaries (paths) for /usr/bin, with the
# libraries they need: an app image on the same DPDK (tests/pod puts the
# reference app in its image this way). For a root, every path names the
# root's file (a path in the repository: the root's copy, whose bin/ is its own).
#
# KBRIDGE_IMAGE_TREE=DIR: only lay the image's files out in DIR (which
# exists), without podman: how a root's image is assembled in the root,
# with KBRIDGE_IMAGE_VERSION the version the host's git describe gave.
#
# What goes in, and why:
# - bin/kbridge and the shared libraries ldd lists for it.
# - Every driver in DPDK's plugin directory and their libraries: EAL loads the
#   whole directory at start. For an app of kbridge.h version 7 kbridge never
#   calls the app's mempool handlers (the app allocates and frees its mbufs
#   itself), so the drivers need not match the app's. An older app's mbufs
#   kbridge allocates through the pool's handler index, which each process
#   resolves in its own table: such an app must register the same mempool
#   drivers in the same order, so its container runs the same image
#   (deploy/kubernetes/README.md); kbridge refuses it otherwise.
# - /etc/kbridge/kbridge.yaml (deploy/kbridge.yaml), an ld.so cache, and
#   /usr/share/kbridge/packages.txt: the Debian package and version of every
#   file copied, for an image scanner.
set -euo pipefail

bin=${1:?usage: build.sh BIN [TAG]}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
version=${KBRIDGE_IMAGE_VERSION:-$(git -C "$repo" describe --always --dirty 2>/dev/null || echo dev)}
dpdk=${KBRIDGE_IMAGE_DPDK:-}
case $dpdk in
"" | 22.11) dpdk= ;;
24.11 | 25.11) ;;
*) echo "image: KBRIDGE_IMAGE_DPDK=$dpdk: the image is built for the host's DPDK (empty), 24.11 or 25.11" >&2; exit 1 ;;
esac
tag=${2:-kbridge:$version${dpdk:+-dpdk$dpdk}}
alias=latest
[ -z "$dpdk" ] || alias=dpdk$dpdk

if [ -z "${KBRIDGE_IMAGE_TREE:-}" ]; then
	[ "$(id -u)" = 0 ] || { echo "image: run as root (podman's root storage, where tests/pod finds it)" >&2; exit 1; }
	command -v podman >/dev/null || { echo "image: podman is missing (make deps installs it)" >&2; exit 1; }
fi

# import DIR: the image of the files laid out in DIR, tagged.
import() {
	tar -C "$1" --numeric-owner -c . | podman import \
		--change 'ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'ENTRYPOINT ["/usr/bin/kbridge"]' \
		--change 'CMD ["run", "--config", "/etc/kbridge/kbridge.yaml"]' \
		--change "LABEL org.opencontainers.image.version=$version" \
		--change "LABEL org.opencontainers.image.source=https://github.com/kbridge/kbridge" \
		- "$tag" >/dev/null
	[ -n "${2:-}" ] || podman tag "$tag" "kbridge:$alias"
	echo "image: $tag, $(podman image inspect --format '{{.Size}}' "$tag" | numfmt --to=iec) ($(grep -c . "$1/usr/share/kbridge/packages.txt") packages' files)"
}

# A root's DPDK: build and lay the files out in the root, import them here.
if [ -n "$dpdk" ] && [ -z "${KBRIDGE_IMAGE_TREE:-}" ]; then
	. "$repo/tests/dpdkroot/lib.sh"
	kbr_release "$dpdk"
	bash "$repo/tests/dpdkroot/root.sh" "$dpdk" >/dev/null
	tree=$(mktemp -d "$KBR_ROOT/tmp/kbridge-image.XXXXXX")
	trap 'rm -rf "$tree"' EXIT
	inner=()
	read -ra extra <<<"${KBRIDGE_IMAGE_EXTRA:-}"
	for f in "${extra[@]}"; do
		f=$(realpath -m "$f")
		case $f in "$repo"/*) f=$KBR_SRC${f#"$repo"} ;; esac
		inner+=("$f")
	done
	bash "$repo/tests/dpdkroot/run.sh" "$dpdk" -- "make build VERSION=$version >/dev/null && KBRIDGE_IMAGE_TREE=/tmp/${tree##*/} \
		KBRIDGE_IMAGE_EXTRA='${inner[*]}' KBRIDGE_IMAGE_DPDK=$dpdk KBRIDGE_IMAGE_VERSION=$version bash deploy/image/build.sh bin"
	import "$tree" "${2:-}"
	exit 0
fi

pmds=$(ls -d "$(pkg-config --variable=libdir libdpdk)"/dpdk/pmds-* 2>/dev/null | head -1)
[ -d "$pmds" ] || { echo "image: no DPDK plugin directory under $(pkg-config --variable=libdir libdpdk)/dpdk" >&2; exit 1; }

if [ -n "${KBRIDGE_IMAGE_TREE:-}" ]; then
	root=$KBRIDGE_IMAGE_TREE
else
	root=$(mktemp -d /tmp/kbridge-image.XXXXXX)
	trap 'rm -rf "$root"' EXIT
fi

# copy PATH into the root at the same path, with the chain of symlinks
# that leads to it (sonames are links to the versioned file).
copy() {
	local p=$1
	while :; do
		[ -e "$root$p" ] || [ -L "$root$p" ] && return 0
		mkdir -p "$root$(dirname "$p")"
		cp -P "$p" "$root$p"
		[ -L "$p" ] || return 0
		local t; t=$(readlink "$p")
		[[ $t = /* ]] || t=$(dirname "$p")/$t
		p=$t
	done
}
# The libraries a binary or driver needs, as ldd resolves them here.
libs() { ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'; }

read -ra extra <<<"${KBRIDGE_IMAGE_EXTRA:-}"
files=("$bin/kbridge" "${extra[@]}")
# glibc loads libgcc_s when a thread is cancelled (EAL cancels its own).
gcc_s=$(ldconfig -p | awk '$1 == "libgcc_s.so.1" && /x86-64|64bit/ && !p {p = $NF} END {print p}')
# /lib, /lib64, /bin and /sbin are links into /usr on a merged-/usr Debian:
# made first, so a library ldd names under /lib lands once, in /usr/lib
# (twice, EAL would load a driver twice and panic).
mkdir -p "$root/usr"
for l in /lib /lib64 /bin /sbin; do
	if [ -L "$l" ]; then mkdir -p "$root/$(readlink -f "$l")"; ln -s "$(readlink "$l")" "$root$l"; fi
done
for so in "$pmds"/*.so*; do files+=("$so"); done
mapfile -t needed < <({ for f in "${files[@]}"; do libs "$f"; done; echo "$gcc_s"; } | sort -u)
install -D -m 0755 "$bin/kbridge" "$root/usr/bin/kbridge"
for f in "${extra[@]}"; do install -D -m 0755 "$f" "$root/usr/bin/$(basename "$f")"; done
for so in "$pmds"/*.so*; do copy "$so"; done
for f in "${needed[@]}"; do copy "$f"; done
install -D -m 0644 "$repo/deploy/kbridge.yaml" "$root/etc/kbridge/kbridge.yaml"
mkdir -p "$root/etc/ld.so.conf.d" "$root/run" "$root/tmp" "$root/var/run/dpdk" "$root/dev/hugepages"
chmod 1777 "$root/tmp"
cp /etc/ld.so.conf.d/*.conf "$root/etc/ld.so.conf.d/" 2>/dev/null || true
echo 'include /etc/ld.so.conf.d/*.conf' >"$root/etc/ld.so.conf"
ldconfig -r "$root"

# Provenance: each copied file's package, as dpkg knows it.
mkdir -p "$root/usr/share/kbridge"
for f in "$pmds"/*.so* "${needed[@]}"; do
	r=$(readlink -f "$f")
	dpkg -S "$r" 2>/dev/null | cut -d: -f1 || dpkg -S "${r#/usr}" 2>/dev/null | cut -d: -f1 || echo "?unpackaged $r" >&2
done | sort -u | while read -r p; do
	dpkg-query -W -f='${Package} ${Version}\n' "$p"
done >"$root/usr/share/kbridge/packages.txt"
echo "kbridge $version (built here against DPDK $(pkg-config --modversion libdpdk))" >>"$root/usr/share/kbridge/packages.txt"

[ -n "${KBRIDGE_IMAGE_TREE:-}" ] || import "$root" "${2:-}"
