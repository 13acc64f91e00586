#!/bin/bash
# shellcheck disable=SC2046,SC2207 # pkg-config's flags are words to split, as in a Makefile
# Writes patches/dpdk2011-names.h: the old DPDK names (ETH_*, PKT_*, ...) that
# DPDK 21.11 kept as deprecated aliases of the RTE_ ones and 22.11 removed,
# taken from DPDK v21.11's own headers (a DPDK git checkout, argument 1).
# Apps written for DPDK 20.11 (Gatekeeper v1.1.0, F-Stack v1.23's parts)
# compile against 22.11 with it force-included: an API shim of DPDK, not KNI.
set -euo pipefail
DPDK_GIT=${1:?usage: $0 DPDK_GIT_TREE OUT.h}
out=${2:?usage: $0 DPDK_GIT_TREE OUT.h}
cd "$DPDK_GIT"
{
echo "/* DPDK names that 22.11 removed, as DPDK 21.11's own deprecated aliases defined them"
echo " * (generated from DPDK v21.11's lib/ headers by gen-dpdk2011-names.sh). Force-included"
echo " * with -include; a name the DPDK in use still defines is left alone. */"
echo "#ifndef KB_EXT_DPDK2011_NAMES_H"
echo "#define KB_EXT_DPDK2011_NAMES_H"
for f in $(git grep -l -E '^#define [A-Za-z0-9_]+[[:space:]]+(RTE_DEPRECATED|RTE_)' v21.11 -- 'lib/*.h' | sed 's/^v21.11://'); do
	git show "v21.11:$f" | sed -e :a -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta' |
	{ grep -E '^#define [A-Za-z0-9_]+[[:space:]]+(RTE_DEPRECATED\([A-Za-z0-9_]+\)[[:space:]]+)?RTE_[A-Za-z0-9_]+[[:space:]]*$' || true; } |
	sed -E 's/RTE_DEPRECATED\([A-Za-z0-9_]+\)[[:space:]]+//' |
	awk -v f="$f" '$2 != $3 && ("RTE_" $2 == $3 || $3 ~ /^RTE_(MBUF_F|ETH|ETHER)_/) { print $2, $3, f }'
done | sort -u -k1,1 | while read -r a b f; do
	# a name the installed DPDK still defines is its own business
	grep -rqsE "^#[[:space:]]*define[[:space:]]+$a\\b" $(pkg-config --cflags-only-I libdpdk | sed "s/-I//g") && continue
	printf '#ifndef %s\n#define %s %s /* %s */\n#endif\n' "$a" "$a" "$b" "$f"
done
echo "#endif"
} >"$out"
echo "$out: $(grep -c '^#define' "$out") names" >&2
