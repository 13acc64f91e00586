#!/bin/bash
# Gatekeeper v1.1.0 (cps/kni.c) against DPDK 22.11 and kbridge's rte_kni.h.
# Gatekeeper v1.1.0 is written for its own fork of DPDK 20.11 and LuaJIT 2.0
# (submodules dependencies/dpdk, dependencies/luajit-2.0) and links DPDK
# statically only (its Makefile's LINK uses LDFLAGS_STATIC). What it takes:
#   - its LuaJIT fork (github AltraMayor/luajit, the submodule's commit
#     9c90951), built into <out>/deps/luajit-gk: Gatekeeper calls the
#     fork's luaL_checkcdata, luaL_pushcdata, luaL_get_ctypeid;
#   - <out>/gen/dpdk2011-names.h (gen-dpdk2011-names.sh: DPDK 21.11's
#     deprecated aliases of the ETH_*/PKT_*/DEV_* names 22.11 removed) and
#     patches/gatekeeper-dpdk2211.h (one 22.11 rename, one call of the DPDK
#     fork), force-included;
#   - patches/gatekeeper.diff: rte_ether_hdr's s_addr/d_addr (21.11 renamed
#     them), rxmode.max_rx_pkt_len and the jumbo offload (21.11: rxmode.mtu);
#   - -fcommon: a variable defined in a header (gatekeeper_net.h, `iface`),
#     which GCC 10+ refuses to link without it.
# None of it concerns KNI: cps/kni.c compiles unedited.
#   static (upstream's way): its Makefile as it is.
#   shared: LDFLAGS_STATIC='$(LDFLAGS_SHARED)' on make's command line, and
#           -lrte_net_i40e (lib/net.c calls rte_pmd_i40e_inset_get/set, which
#           `pkg-config --libs libdpdk` does not list).
# usage: build-gatekeeper.sh KBRIDGE_TREE [shared|static|both]
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
kb_setup "$@"
names_shim
LJ=$EXT/deps/luajit-gk
if [ ! -e "$LJ/lib/libluajit-5.1.a" ]; then
	app_tree "$EXT/luajit-gk" AltraMayor+luajit 9c90951bf7329fae581d373ab55573caf26c6eb6
	run_logged gatekeeper luajit make -C "$EXT/luajit-gk" -j"$JOBS" PREFIX="$LJ"
	make -C "$EXT/luajit-gk" install PREFIX="$LJ" >>"$EXT/logs/build-gatekeeper-luajit.log" 2>&1
	rm -f "$LJ"/lib/libluajit-5.1.so*   # link the fork statically, as upstream's /usr/local would not matter
fi
D=$EXT/gatekeeper
app_tree "$D" AltraMayor+gatekeeper v1.1.0 "$HERE/patches/gatekeeper.diff"
cd "$D"
EXTRA="-I$KB_INC -I$LJ/include/luajit-2.0 -include $EXT/gen/dpdk2011-names.h -include $HERE/patches/gatekeeper-dpdk2211.h -fcommon"
if want static; then
	rc=0; run_logged gatekeeper static make -j"$JOBS" EXTRA_CFLAGS="$EXTRA" LDIR="-L$LJ/lib $KNI_LIBS_STATIC" || rc=$?
	[ $rc = 0 ] && mv build/gatekeeper build/gatekeeper-static
	record gatekeeper static $rc build/gatekeeper-static
fi
if want shared; then
	rc=0; run_logged gatekeeper shared make -j"$JOBS" EXTRA_CFLAGS="$EXTRA" LDIR="-L$LJ/lib $KNI_LIBS_SHARED -lrte_net_i40e" 'LDFLAGS_STATIC=$(LDFLAGS_SHARED)' || rc=$?
	[ $rc = 0 ] && mv build/gatekeeper build/gatekeeper-shared
	record gatekeeper shared $rc build/gatekeeper-shared
fi
finish
