#!/usr/bin/env bash
# Prove the NFS export end to end from a namespace: a recursive listing must show
# every entry of the generated tree, and big.bin read over NFS must hash to the
# recorded sha256. Prints one summary line on stdout; progress on stderr.
#   usage: tests/testbed/check-nfs.sh [NS [SERVER_IP]]
#   e.g.   check-nfs.sh kbt-direct 198.18.1.1   (baseline veth, the default)
#          check-nfs.sh kbt-dut 198.18.0.1      (through kb0 and the forwarder)
set -euo pipefail
# shellcheck source=tests/testbed/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root

ns=${1:-$KBT_NS_DIRECT}
ip=${2:-}
if [ -z "$ip" ]; then
	case $ns in
	"$KBT_NS_DIRECT") ip=$KBT_ALT_IP ;;
	*) ip=$KBT_PEER_IP ;;
	esac
fi
ns_exists "$ns" || die "namespace $ns does not exist (is the test bed up?)"
[ -s "$KBT_BIG_SHA" ] || die "$KBT_BIG_SHA missing (is the test bed up?)"
url="nfs://$ip/export"

t=$(now)
entries=$(ip netns exec "$ns" nfs-ls -R "$url?version=4" | wc -l)
tl=$(since "$t")
say "nfs-ls -R $url from $ns: $entries entries in $tl (expected $KBT_TREE_ENTRIES)"
[ "$entries" -eq "$KBT_TREE_ENTRIES" ] || die "listing incomplete: $entries of $KBT_TREE_ENTRIES entries"

t=$(now)
got=$(ip netns exec "$ns" nfs-cat "$url/big.bin?version=4" | sha256sum | awk '{ print $1 }')
tc=$(since "$t")
want=$(cat "$KBT_BIG_SHA")
say "nfs-cat big.bin from $ns: sha256 $got in $tc"
[ "$got" = "$want" ] || die "big.bin hash mismatch: got $got, want $want"

echo "nfs ok: $ns -> $ip: $entries entries ($tl), big.bin sha256 matches ($tc)"
