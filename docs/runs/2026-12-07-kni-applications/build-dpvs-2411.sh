#!/bin/bash
# DPVS v1.10.2 on the DPDK it is written for, 24.11, in the Debian 13 root
# kbridge's tests/dpdk24/root.sh makes (/var/cache/kbridge/trixie; it has
# libnuma-dev and libssl-dev already), with kbridge's rte_kni.h. Built in a
# private mount namespace (harness/in-trixie.sh): the cached root is not
# written to. Only the KNI changes (patches/dpvs-2411.diff, the KNI half of
# dpvs.diff): src/config.mk builds the rte_kni path instead of virtio-user;
# src/kni.c skips the PCI address of conf from 22.11 on (struct rte_bus and
# rte_pci_device are internal; on 24.11 the block also failed -Werror on
# rte_eth_dev_info_get's unused result). Toolchain: -Wno-array-bounds (GCC
# 14 in SSE intrinsics) and -Wno-deprecated-declarations (OpenSSL 3's MD5),
# both under DPVS's -Werror. Static only (upstream's way).
# usage: build-dpvs-2411.sh KBRIDGE_TREE [static]
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
kb_setup "$@"
D=$EXT/dpvs-2411
app_tree "$D" iqiyi+dpvs v1.10.2 "$HERE/patches/dpvs-2411.diff"
inc=/mnt/${KB_INC#"$EXT"/}
[ "$inc" != "/mnt/$KB_INC" ] || { echo "$0: the prefix must be under $EXT" >&2; exit 1; }
rc=0
run_logged dpvs-2411 static "$HERE/harness/in-trixie.sh" "cd /mnt/dpvs-2411 && set -a && eval \"\$(sed -n 's/^export //p' config.mk)\" && set +a && cd src && CFLAGS='-I$inc -Wno-array-bounds -Wno-deprecated-declarations' make -j$JOBS" || rc=$?
record dpvs-2411 static $rc "$D/src/dpvs"
if [ "$KINDS" != static ]; then echo "dpvs-2411 shared: not built (upstream links DPDK statically only)"; fi
finish
