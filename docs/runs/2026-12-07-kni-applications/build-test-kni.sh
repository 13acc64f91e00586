#!/bin/bash
# shellcheck disable=SC2046,SC2207 # pkg-config's flags are words to split, as in a Makefile
# DPDK's app/test/test_kni.c (v22.11) against DPDK 22.11 and kbridge's
# rte_kni.h. test_kni.c is one file of DPDK's test application; it is built
# here unedited with harness/test_kni_main.c (ours: a main() that runs one
# REGISTER_TEST_COMMAND test by name, as dpdk-test's prompt would) and two
# flags: -DRTE_LIB_KNI (Debian's rte_build_config.h has no KNI, and test_kni.c
# compiles to "KNI not supported, skipping" without it) and DPDK's
# lib/eal/include after the installed headers (app/test/test.h includes
# rte_test.h, which DPDK does not install). DPDK builds dpdk-test statically
# by default, so both kinds are built.
# usage: build-test-kni.sh KBRIDGE_TREE [shared|static|both]
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
kb_setup "$@"
D=$EXT/dpdk-22.11
app_tree "$D" DPDK+dpdk v22.11
cd "$D/app/test"
mkdir -p "$EXT/build/test_kni"
CF=(-O2 -g -Wall -DALLOW_EXPERIMENTAL_API -DRTE_LIB_KNI -I. $(pkg-config --cflags kbridge libdpdk) -idirafter ../../lib/eal/include)
SRC=(test_kni.c "$HERE/harness/test_kni_main.c")
if want shared; then
	rc=0; run_logged test-kni shared cc "${CF[@]}" "${SRC[@]}" -o "$EXT/build/test_kni/test_kni-shared" $KNI_LIBS_SHARED $(pkg-config --libs libdpdk) || rc=$?
	record test-kni shared $rc "$EXT/build/test_kni/test_kni-shared"
fi
if want static; then
	# --static --libs of libdpdk alone: see build-examples-kni.sh
	rc=0; run_logged test-kni static cc "${CF[@]}" "${SRC[@]}" -o "$EXT/build/test_kni/test_kni-static" $KNI_LIBS_STATIC $(pkg-config --static --libs libdpdk) || rc=$?
	record test-kni static $rc "$EXT/build/test_kni/test_kni-static"
fi
finish
