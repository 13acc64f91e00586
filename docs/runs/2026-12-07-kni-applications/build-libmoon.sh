#!/bin/bash
# shellcheck disable=SC2046,SC2207 # pkg-config's flags are words to split, as in a Makefile
# libmoon (master 2dbbcd9, its last commit; src/kni.c, lua/kni.lua) against
# DPDK 22.11 and kbridge's rte_kni.h. libmoon as a whole is not built: it
# carries its own DPDK 17.08-era fork (deps/dpdk, emmericp/dpdk), compiles
# against that fork's driver internals (ixgbe/i40e base code) and its Lua FFI
# declares DPDK 17.x structures: a port of libmoon, not a rebuild. What is
# built is libmoon's KNI part, and the way libmoon uses it:
#   src/kni.c with patches/libmoon.diff (DPDK API only: uint16_t port ids in
#   the rte_kni_ops callbacks (17.11), no rte_eth_dev_info.pci_dev (18.05));
#   shared: src/kni.c as a shared library, and LuaJIT (Debian's luajit) looks
#           up by name every call lua/kni.lua makes through ffi.C
#           (harness/libmoon-ffi.lua);
#   static: libmoon's own model: one executable linked -rdynamic with static
#           DPDK and LuaJIT inside (harness/libmoon_main.c), whose Lua looks
#           the same calls up through ffi.C.
# Each kind is "ok" when it builds; the lookups are printed after it
# ("ffi: ..."): with a header-only rte_kni.h the rte_kni_* calls are static
# inline, and LuaJIT finds none of them (issue 44, item 4).
# usage: build-libmoon.sh KBRIDGE_TREE [shared|static|both]
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
kb_setup "$@"
D=$EXT/libmoon
app_tree "$D" libmoon+libmoon 2dbbcd909874fc84ceecb7dd82e45d4cd28cef50 "$HERE/patches/libmoon.diff"
B=$EXT/build/libmoon
mkdir -p "$B"
CF=(-fno-stack-protector -Wall -Wextra -Wno-unused-parameter -g -O3 -std=gnu11 $(pkg-config --cflags kbridge libdpdk))
ffi_check() { # ffi_check LOG CMD...: the lookups, summed up on one line
	local out log=$1
	shift
	out=$("$@" 2>&1) || true
	echo "$out" >>"$log.ffi"
	echo "  ffi: $(echo "$out" | grep -c ' found$') found, $(echo "$out" | grep -c MISSING) missing ($(echo "$out" | awk '/MISSING/ {printf "%s ", $1}'))"
}
if want shared; then
	rc=0; run_logged libmoon shared cc -shared -fPIC "${CF[@]}" "$D/src/kni.c" -o "$B/libmoon-kni.so" $KNI_LIBS_SHARED $(pkg-config --libs libdpdk) || rc=$?
	record libmoon shared $rc "$B/libmoon-kni.so"
	[ $rc = 0 ] && { rm -f "$EXT/logs/build-libmoon-shared.log.ffi"; ffi_check "$EXT/logs/build-libmoon-shared.log" luajit "$HERE/harness/libmoon-ffi.lua" "$B/libmoon-kni.so"; }
fi
if want static; then
	rc=0; run_logged libmoon static cc -rdynamic "${CF[@]}" $(pkg-config --cflags luajit) "$D/src/kni.c" "$HERE/harness/libmoon_main.c" -o "$B/libmoon-kni-static" \
		-Wl,-Bstatic -lluajit-5.1 -Wl,-Bdynamic $KNI_LIBS_STATIC $(pkg-config --static --libs libdpdk) -lm -ldl || rc=$?
	record libmoon static $rc "$B/libmoon-kni-static"
	[ $rc = 0 ] && { rm -f "$EXT/logs/build-libmoon-static.log.ffi"; ffi_check "$EXT/logs/build-libmoon-static.log" "$B/libmoon-kni-static" "$HERE/harness/libmoon-ffi.lua" C; }
fi
finish
