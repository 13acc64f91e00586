#!/bin/bash
# PcapPlusPlus v23.09 (Pcap++/src/KniDevice.cpp, KniDeviceList.cpp; the
# KniPong example; Pcap++Test, which has the KNI tests) against DPDK 22.11 and
# kbridge's rte_kni.h. CMake, -DPCAPPP_USE_DPDK=ON, DPDK found by pkg-config
# (libdpdk, shared: upstream's only way; PcapPlusPlus's own libraries are
# static archives). kbridge's include dir comes in as CMAKE_C(XX)_FLAGS.
# KniDevice.cpp and KniDeviceList.cpp compile unedited. DpdkDevice.cpp
# predates 22.11 (DPDK API, not KNI):
#   patches/PcapPlusPlus.diff: rxmode.split_hdr_size (removed in 22.11) set
#     only before 22.11; the device name through rte_dev_name() from 22.11
#     (struct rte_device became internal);
#   <out>/gen/dpdk2011-names.h force-included: the ETH_RSS_*/ETH_LINK_* names.
# usage: build-pcapplusplus.sh KBRIDGE_TREE [shared]   (no static build upstream)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
kb_setup "$@"
names_shim
D=$EXT/PcapPlusPlus
app_tree "$D" seladb+PcapPlusPlus v23.09 "$HERE/patches/PcapPlusPlus.diff"
if want shared; then
	rc=0
	run_logged pcapplusplus shared cmake -S "$D" -B "$D/build" -DPCAPPP_USE_DPDK=ON -DPCAPPP_BUILD_TESTS=ON -DPCAPPP_BUILD_EXAMPLES=ON \
		-DCMAKE_C_FLAGS="-I$KB_INC" -DCMAKE_CXX_FLAGS="-I$KB_INC -include $EXT/gen/dpdk2011-names.h" \
		${KNI_LIBS_SHARED:+-DCMAKE_EXE_LINKER_FLAGS="$KNI_LIBS_SHARED"} || rc=$?
	if [ $rc = 0 ]; then
		nice -n 19 make -C "$D/build" -j"$JOBS" KniPong Pcap++Test >>"$EXT/logs/build-pcapplusplus-shared.log" 2>&1 || rc=$?
	fi
	record pcapplusplus shared $rc "$D/build/examples_bin/KniPong"
	[ $rc = 0 ] && record pcapplusplus shared-test 0 "$D/Tests/Pcap++Test/Bin/Pcap++Test"
fi
if [ "$KINDS" != shared ]; then echo "pcapplusplus static: not built (upstream links DPDK shared only)"; fi
finish
