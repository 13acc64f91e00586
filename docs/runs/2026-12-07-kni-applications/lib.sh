# shellcheck shell=bash disable=SC2034 # KNI_LIBS_*, set here, are read by the build-*.sh that source it
# Shared by build-*.sh: each rebuilds one KNI application, outside the
# kbridge repository, against Debian's DPDK 22.11 (pkg-config libdpdk) and
# the kbridge checkout given as the first argument. Everything it makes goes
# under $KB_APPS_OUT (<out> in README.md); this directory is only read.
#
#   build-APP.sh KBRIDGE_TREE [shared|static|both]
#
# What every script does:
#   1. kbprefix.sh KBRIDGE_TREE: the tree's app headers, kbridge.pc and a
#      kbridge binary in <out>/prefix/<tree basename> (the tree is not
#      written to; KB_MAKE_INSTALL=1 uses the tree's `make install` instead).
#   2. the app's work tree <out>/<app> is reset to the pinned commit (cloned
#      from GitHub, or $KB_GIT_MIRROR/<owner>+<name>/repo, when missing) and
#      patches/<app>.diff applied.
#   3. builds; the binaries are copied to <out>/out/<app>/; the log is
#      <out>/logs/build-<app>-<kind>.log; one line per kind on stdout:
#      "<app> <kind>: ok <binary>" or "<app> <kind>: FAILED (log)".
#      Exit status 0 only when every kind asked for built.
#
# Environment: KB_PREFIX (see kbprefix.sh), KB_SKIP_PREFIX=1 (reuse the prefix
# as it is), KB_KNI_PC (default librte_kni: the pkg-config name of a KNI library
# the tree may ship; linked when the prefix has it), JOBS (default 2),
# KB_NO_RESET=1 (build the work tree as it is, without reset and patch).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
EXT=${KB_APPS_OUT:?"set KB_APPS_OUT to a work directory for the sources, builds and logs (README.md)"}
mkdir -p "$EXT"
EXT=$(cd "$EXT" && pwd)
export KB_APPS_OUT=$EXT
# DPDK 21.11's aliases of the names 22.11 removed, made once from DPDK's git.
names_shim() {
	[ -s "$EXT/gen/dpdk2011-names.h" ] && return 0
	app_tree "$EXT/dpdk-22.07" DPDK+dpdk v22.07
	mkdir -p "$EXT/gen"
	bash "$HERE/gen-dpdk2011-names.sh" "$EXT/dpdk-22.07" "$EXT/gen/dpdk2011-names.h" >&2
}
JOBS=${JOBS:-2}
KB_KNI_PC=${KB_KNI_PC:-librte_kni}

kb_setup() {
	KB_TREE=$(cd "${1:?usage: $0 KBRIDGE_TREE [shared|static|both]}" && pwd)
	KINDS=${2:-both}
	case $KINDS in shared | static | both) ;; *) echo "$0: kind must be shared, static or both" >&2; exit 2 ;; esac
	mkdir -p "$EXT/logs" "$EXT/out"
	if [ "${KB_SKIP_PREFIX:-}" = 1 ]; then
		KB_P=${KB_PREFIX:-$EXT/prefix/$(basename "$KB_TREE")}
	else
		KB_P=$("$HERE/kbprefix.sh" "$KB_TREE" | tail -1)
	fi
	export PKG_CONFIG_PATH=$KB_P/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
	KB_INC=$(pkg-config --cflags-only-I kbridge | tr ' ' '\n' | sed -n 's/^-I//p' | grep -v '^/usr/include' | head -1)
	[ -n "$KB_INC" ] && [ -e "$KB_INC/rte_kni.h" ] || { echo "$0: no rte_kni.h in kbridge's include dir ($KB_INC)" >&2; exit 1; }
	# A KNI library (issue 44, item 4), once the tree ships one.
	KNI_LIBS_SHARED="" KNI_LIBS_STATIC=""
	if pkg-config --exists "$KB_KNI_PC" 2>/dev/null; then
		KNI_LIBS_SHARED=$(pkg-config --libs "$KB_KNI_PC")
		KNI_LIBS_STATIC=$(pkg-config --static --libs-only-L --libs-only-l "$KB_KNI_PC" | tr ' ' '\n' | grep -v -- '-lrte_\|whole-archive' | tr '\n' ' ')
	fi
	echo "kbridge: $KB_TREE ($(git -C "$KB_TREE" describe --always --dirty 2>/dev/null || echo ?)), prefix $KB_P, KNI library: ${KNI_LIBS_SHARED:-none}" >&2
}

want() { [ "$KINDS" = both ] || [ "$KINDS" = "$1" ]; }

# app_tree DIR MIRROR REF [PATCH]: reset DIR to REF and apply PATCH.
app_tree() {
	local dir=$1 mirror=$2 ref=$3 patch=${4:-}
	if [ ! -d "$dir/.git" ]; then
		if [ -n "${KB_GIT_MIRROR:-}" ]; then
			git clone -q --no-checkout "$KB_GIT_MIRROR/$mirror/repo" "$dir"
		else
			git clone -q --no-checkout "https://github.com/${mirror/+//}" "$dir"
		fi
	fi
	[ "${KB_NO_RESET:-}" = 1 ] && return 0
	git -C "$dir" -c advice.detachedHead=false checkout -q -f "$ref"
	git -C "$dir" clean -q -fdx >/dev/null
	if [ -n "$patch" ]; then git -C "$dir" apply "$patch"; fi
}

OK=1
# record APP KIND STATUS FILE: one result line; copies the binary to out/APP/.
record() {
	local app=$1 kind=$2 rc=$3 file=$4
	if [ "$rc" = 0 ] && [ -e "$file" ]; then
		mkdir -p "$EXT/out/$app"
		cp -f "$file" "$EXT/out/$app/"
		echo "$app $kind: ok $EXT/out/$app/$(basename "$file")"
	else
		OK=0
		echo "$app $kind: FAILED (see $EXT/logs/build-$app-$kind.log)"
	fi
}

# run_logged APP KIND CMD...: runs CMD at nice 19, its output in the log.
run_logged() {
	local app=$1 kind=$2
	shift 2
	local log=$EXT/logs/build-$app-$kind.log
	{ echo "# $(date -Is) kbridge $KB_TREE"; echo "# $*"; } >"$log"
	nice -n 19 "$@" >>"$log" 2>&1
}

finish() { [ "$OK" = 1 ]; }
