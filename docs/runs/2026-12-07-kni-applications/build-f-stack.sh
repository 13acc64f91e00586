#!/bin/bash
# F-Stack v1.23 (lib/ff_dpdk_kni.c; the last release on rte_kni: v1.24 on
# moved to DPDK 23.11 and virtio-user) against DPDK 22.11 and kbridge's
# rte_kni.h. v1.23 is written for DPDK 21.11 (it carries 21.11.5 in dpdk/;
# not built here: Debian's 22.11 is used). What it takes:
#   lib/: its Makefile, with DPDK_CFLAGS given on make's command line (the
#     Makefile's own value plus `pkg-config --cflags kbridge` and
#     <out>/gen/dpdk2011-names.h force-included: the ETH_*/DEV_* names 22.11
#     removed);
#   toolchain: WERROR on make's command line adds -Wno-error=dangling-pointer
#     (GCC 12 in FreeBSD's subr_taskqueue.c, under the kernel part's -Werror);
#   patches/f-stack.diff: ff_dpdk_kni.c takes the PCI address for conf
#     (ignored by KNI since 18.11, and by kbridge) only before 22.11, which made
#     struct rte_bus and rte_pci_device internal: DPDK API, in the KNI file.
#   example/ (helloworld, helloworld_epoll): its Makefile links libfstack.a
#     (which holds ff_dpdk_kni.o with rte_kni.h's inline bodies) and DPDK
#     with `pkg-config --static` (upstream's way); shared: LIBS on make's
#     command line with `pkg-config --libs libdpdk`. If lib/ fails, the
#     examples are not tried.
# usage: build-f-stack.sh KBRIDGE_TREE [shared|static|both]
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
kb_setup "$@"
names_shim
D=$EXT/f-stack
app_tree "$D" F-Stack+f-stack v1.23 "$HERE/patches/f-stack.diff"
rc=0
# -j1: its Makefile remakes machine_include/ (a phony prerequisite) while
# other jobs compile against it
run_logged f-stack lib make -C "$D/lib" -j1 \
	DPDK_CFLAGS="-Wall -Wno-deprecated-declarations -Werror $(pkg-config --cflags kbridge libdpdk) -include $EXT/gen/dpdk2011-names.h" \
	WERROR="-Werror -Wno-unused-variable -Wno-error=dangling-pointer" || rc=$?
record f-stack lib $rc "$D/lib/libfstack.a"
[ $rc = 0 ] || exit 1
# example/ includes ff_config.h and ff_api.h from an installed F-Stack
# (lib's `make install`, /usr/local): here from lib/ through CFLAGS in the
# environment (the Makefile appends to it).
export CFLAGS="-I$D/lib"
FF="-L$D/lib -Wl,--whole-archive,-lfstack,--no-whole-archive"
if want static; then
	rc=0; run_logged f-stack static make -C "$D/example" ${KNI_LIBS_STATIC:+LIBS="$(pkg-config --static --libs libdpdk) $KNI_LIBS_STATIC $FF -lrt -lm -ldl -lcrypto -pthread -lnuma"} || rc=$?
	if [ $rc = 0 ]; then
		mv "$D/example/helloworld" "$D/example/helloworld-static"
		mv "$D/example/helloworld_epoll" "$D/example/helloworld_epoll-static"
	fi
	record f-stack static $rc "$D/example/helloworld-static"
fi
if want shared; then
	# libfstack before DPDK (the Makefile's order puts DPDK first, which a
	# shared link with --as-needed cannot resolve), and -lrte_net_bond
	# (ff_dpdk_if.c's bonding calls; pkg-config --libs libdpdk lists no drivers)
	rc=0; run_logged f-stack shared make -C "$D/example" \
		LIBS="$FF $KNI_LIBS_SHARED $(pkg-config --libs libdpdk) -lrte_net_bond -lrt -lm -ldl -lcrypto -pthread -lnuma" || rc=$?
	if [ $rc = 0 ]; then
		mv "$D/example/helloworld" "$D/example/helloworld-shared"
		mv "$D/example/helloworld_epoll" "$D/example/helloworld_epoll-shared"
	fi
	record f-stack shared $rc "$D/example/helloworld-shared"
fi
finish
