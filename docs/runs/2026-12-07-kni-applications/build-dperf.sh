#!/bin/bash
# dperf v1.7.0 (the last release whose DPDK >= 20.11 build compiles src/kni.c;
# v1.8.0 on replaced it with virtio-user) against DPDK 22.11 and kbridge's
# rte_kni.h. Its Makefile, unedited: it reads CFLAGS from the environment
# (CFLAGS := -O3 -g $(CFLAGS) ...), so kbridge's include dir comes in that way.
#   static (upstream's way): the Makefile's `pkg-config --static --libs libdpdk`.
#   shared: the same, with LDFLAGS given on make's command line in place of
#           the Makefile's static list.
# usage: build-dperf.sh KBRIDGE_TREE [shared|static|both]
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
kb_setup "$@"
D=$EXT/dperf
app_tree "$D" baidu+dperf v1.7.0
cd "$D"
if want static; then
	rc=0; CFLAGS="-I$KB_INC" run_logged dperf static make ${KNI_LIBS_STATIC:+LDFLAGS0="$(pkg-config --static --libs libdpdk) -lpthread -lrte_net_bond -lrte_bus_pci -lrte_bus_vdev $KNI_LIBS_STATIC"} || rc=$?
	[ $rc = 0 ] && cp build/dperf build/dperf-static
	record dperf static $rc build/dperf-static
fi
if want shared; then
	rc=0; CFLAGS="-I$KB_INC" run_logged dperf shared make APP=dperf-shared LDFLAGS="$KNI_LIBS_SHARED $(pkg-config --libs libdpdk) -lrte_net_bond -lpthread" build/dperf-shared || rc=$?
	record dperf shared $rc build/dperf-shared
fi
finish
