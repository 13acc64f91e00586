#!/bin/bash
# DPVS v1.10.2 (src/kni.c, netif.c) against DPDK 22.11 and kbridge's rte_kni.h.
# DPVS v1.10 is written for DPDK 24.11 and always compiles its virtio-user
# exception path (src/config.mk: CFLAGS += -D CONFIG_KNI_VIRTIO_USER, "should
# always be ON from DPVS v1.10"); its rte_kni path is still in the source.
# What it takes (patches/dpvs.diff, patches/dpvs-dpdk2211.h):
#   KNI:  src/config.mk: that line commented out, so that the rte_kni path is
#         built; src/kni.c: the PCI address of conf (ignored by KNI since 18.11,
#         and by kbridge) taken only before 22.11, which made struct
#         rte_pci_device internal (DPVS guarded it for 24.11 only).
#   DPDK: src/netif.c: the same guard; dpvs-dpdk2211.h (force-included): the
#         23.11/24.11 names back to 22.11's (bond member/slave, RTE_ICMP_TYPE_*,
#         rte_lpm6's struct rte_ipv6_addr, RTE_LOGTYPE_MBUF).
#   toolchain: -Wno-deprecated-declarations (OpenSSL 3's MD5, under -Werror),
#         -Wno-array-bounds (GCC 12 in SSE intrinsics, under -Werror).
#   The make runs in src/ with the top-level config.mk's exports (as the
#   top-level Makefile would; tools/ (keepalived, ipvsadm, dpip) not built).
# static (upstream's way): src/Makefile as it is (pkg-config --static).
# shared: LIBS on make's command line with `pkg-config --libs libdpdk`: does
#   NOT link on Debian's 22.11 (rte_mempool_ops_get_count and the bonding's
#   link_*_prop_delay/monitoring getters are not exported by the .so files);
#   tried anyway, so that a change shows.
# usage: build-dpvs.sh KBRIDGE_TREE [shared|static|both]
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
kb_setup "$@"
D=$EXT/dpvs
app_tree "$D" iqiyi+dpvs v1.10.2 "$HERE/patches/dpvs.diff"
cd "$D"
set -a
eval "$(sed -n 's/^export //p' config.mk)"
set +a
cd src
export CFLAGS="-I$KB_INC -include $HERE/patches/dpvs-dpdk2211.h -Wno-deprecated-declarations -Wno-array-bounds"
if want static; then
	rc=0; run_logged dpvs static make -j"$JOBS" ${KNI_LIBS_STATIC:+LIBS="$KNI_LIBS_STATIC -lpthread -lnuma -lrt -lm -ldl -lcrypto $(pkg-config --static --libs libssl) $(pkg-config --static --libs libdpdk)"} || rc=$?
	[ $rc = 0 ] && mv dpvs dpvs-static
	record dpvs static $rc dpvs-static
fi
if want shared; then
	rc=0; run_logged dpvs shared make -j"$JOBS" LIBS="$KNI_LIBS_SHARED $(pkg-config --libs libdpdk) -lrte_net_bond -lpthread -lnuma -lrt -lm -ldl -lcrypto -lssl" || rc=$?
	[ $rc = 0 ] && mv dpvs dpvs-shared
	record dpvs shared $rc dpvs-shared
fi
finish
