#!/bin/bash
# Compiles each application's KNI source twice, -fsyntax-only, with its own
# flags: once against kbridge's rte_kni.h (the prefix of KBRIDGE_TREE, made by
# kbprefix.sh), once against DPDK 22.11's own lib/kni/rte_kni.h (the v22.11
# checkout), and says whether the diagnostics are the same: "compiles against
# kbridge's header exactly as against DPDK's". The work trees must be as the
# build scripts leave them (patches applied).
# usage: ab-header.sh KBRIDGE_TREE
set -uo pipefail
EXT=${KB_APPS_OUT:?set KB_APPS_OUT to the work directory of the build scripts (README.md)}
TREE=$(cd "${1:?usage: $0 KBRIDGE_TREE}" && pwd)
KBI=$EXT/prefix/$(basename "$TREE")/include/kbridge
DPI=$EXT/dpdk-22.11/lib/kni
[ -e "$KBI/rte_kni.h" ] || { echo "no $KBI/rte_kni.h: run kbprefix.sh $TREE" >&2; exit 1; }
[ -e "$DPI/rte_kni.h" ] || { echo "no $DPI/rte_kni.h: check out DPDK v22.11 in $EXT/dpdk-22.11" >&2; exit 1; }
DP=$(pkg-config --cflags libdpdk)
N=$EXT/gen/dpdk2011-names.h
out=$(mktemp -d)
ab() { # name compiler file flags...
	local name=$1 cc=$2 f=$3
	shift 3
	[ -e "$f" ] || { echo "$name: $f missing"; return; }
	# the headers' own directory first, as -I puts it
	(cd "$(dirname "$f")" && nice -n 19 $cc -fsyntax-only -I"$KBI" "$@" $DP "$f") >"$out/kb" 2>&1
	local a=$?
	(cd "$(dirname "$f")" && nice -n 19 $cc -fsyntax-only -I"$DPI" "$@" $DP "$f") >"$out/dp" 2>&1
	local b=$?
	# the diagnostics without the header paths, which differ by design
	sed -e "s|$KBI|H|g" -e '/In file included from/d' -e '/^ *from /d' "$out/kb" | grep -E "error|warning" | sed 's/^[^:]*H[^:]*:[0-9]*:[0-9]*: //' | sort >"$out/kb.d"
	sed -e "s|$DPI|H|g" -e '/In file included from/d' -e '/^ *from /d' "$out/dp" | grep -E "error|warning" | sed 's/^[^:]*H[^:]*:[0-9]*:[0-9]*: //' | sort >"$out/dp.d"
	if cmp -s "$out/kb.d" "$out/dp.d"; then
		echo "$name: same (kbridge exit $a, DPDK exit $b, $(wc -l <"$out/kb.d") diagnostics each)"
	else
		echo "$name: DIFFERENT (kbridge exit $a, DPDK exit $b)"
		diff "$out/dp.d" "$out/kb.d" | sed 's/^/    /' | head -20
	fi
}
W="-Wall -Wextra"
ab examples/kni cc "$EXT/dpdk-22.07/examples/kni/main.c" $W -DALLOW_EXPERIMENTAL_API
ab test_kni cc "$EXT/dpdk-22.11/app/test/test_kni.c" $W -DALLOW_EXPERIMENTAL_API -DRTE_LIB_KNI -I"$EXT/dpdk-22.11/app/test" -idirafter "$EXT/dpdk-22.11/lib/eal/include"
ab dperf cc "$EXT/dperf/src/kni.c" $W -DHTTP_PARSE -DALLOW_EXPERIMENTAL_API -I"$EXT/dperf/src" -Wno-address-of-packed-member
GK=(-DALLOW_EXPERIMENTAL_API -DCORO_ASM -Wno-packed-not-aligned -Wno-address-of-packed-member -I"$EXT/gatekeeper/include" -I"$EXT/deps/luajit-gk/include/luajit-2.0" -include "$N" -include "$HERE/patches/gatekeeper-dpdk2211.h" -fcommon)
ab gatekeeper/cps/kni.c cc "$EXT/gatekeeper/cps/kni.c" $W "${GK[@]}"
ab gatekeeper/cps/main.c cc "$EXT/gatekeeper/cps/main.c" $W "${GK[@]}"
DV=(-include "$HERE/patches/dpvs-dpdk2211.h" -D DPVS_MAX_SOCKET=2 -D DPVS_MAX_LCORE=64 -D CONFIG_DPVS_LOG -D CONFIG_DPVS_PDUMP -DALLOW_EXPERIMENTAL_API -D __DPVS__ -Wno-address-of-packed-member -I"$EXT/dpvs/include")
ab dpvs/src/kni.c cc "$EXT/dpvs/src/kni.c" -Wall "${DV[@]}"
ab dpvs/src/netif.c cc "$EXT/dpvs/src/netif.c" -Wall "${DV[@]}"
ab f-stack/lib/ff_dpdk_kni.c cc "$EXT/f-stack/lib/ff_dpdk_kni.c" -Wall -DFF_KNI -DINET -DINET6 -I"$EXT/f-stack/lib" -include "$N"
ab libmoon/src/kni.c cc "$EXT/libmoon/src/kni.c" $W -Wno-unused-parameter -std=gnu11
PP=(-I"$EXT/PcapPlusPlus/Pcap++/header" -I"$EXT/PcapPlusPlus/Common++/header" -I"$EXT/PcapPlusPlus/Packet++/header" -include "$N" -DUSE_DPDK -std=c++11)
ab PcapPlusPlus/KniDevice.cpp c++ "$EXT/PcapPlusPlus/Pcap++/src/KniDevice.cpp" -Wall "${PP[@]}"
ab PcapPlusPlus/KniDeviceList.cpp c++ "$EXT/PcapPlusPlus/Pcap++/src/KniDeviceList.cpp" -Wall "${PP[@]}"
rm -rf "$out"
