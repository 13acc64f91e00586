#!/bin/bash
# DPDK's examples/kni (v22.07, the last DPDK with it) against DPDK 22.11 and
# kbridge's rte_kni.h: the example's own Makefile, unedited. Its Makefile names
# only libdpdk (PKGCONF ?= pkg-config); kbridge comes in through:
#   shared: PKGCONF="pkg-config kbridge" (cflags and libs of both);
#   static: C_INCLUDE_PATH=<kbridge include dir> and the Makefile's own
#           `pkg-config --static --libs libdpdk`. (PKGCONF="pkg-config kbridge"
#           doubles DPDK's --whole-archive list in pkgconf's --static output
#           and the link fails with multiple definitions: see REPORT.md.)
# usage: build-examples-kni.sh KBRIDGE_TREE [shared|static|both]
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
kb_setup "$@"
D=$EXT/dpdk-22.07
app_tree "$D" DPDK+dpdk v22.07
cd "$D/examples/kni"
if want shared; then
	rc=0; run_logged examples-kni shared make PKGCONF="pkg-config kbridge" LDFLAGS="-pthread $KNI_LIBS_SHARED" shared || rc=$?
	record examples-kni shared $rc build/kni-shared
fi
if want static; then
	rc=0; C_INCLUDE_PATH=$KB_INC run_logged examples-kni static make LDFLAGS="-pthread $KNI_LIBS_STATIC" static || rc=$?
	record examples-kni static $rc build/kni-static
fi
finish
