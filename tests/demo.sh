#!/usr/bin/env bash
# make demo: bring the test bed up, list the NFS tree and ping through kbridge
# and through kbt-direct (no forwarder), print both side by side, tear down.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/testbed/lib.sh"
need_root
kbt_cpus

trap 'bash "$here/testbed/down.sh" >/dev/null' EXIT
say "bringing the test bed up (namespaces, NFS server, reference DPDK app, kbridge)"
bash "$here/testbed/up.sh" >/dev/null

# Clients run off the app's lcore, as tests/testbed/README.md places them.
client=(taskset -c "${KBT_OTHER_CPUS:-0}")

nfs_ls() { # ns ip -> "entries seconds"
	local t0 n
	t0=$(now)
	n=$(ip netns exec "$1" "${client[@]}" nfs-ls -R "nfs://$2/export?version=4" | wc -l)
	echo "$n $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')"
}
ping_rtt() { # ns ip -> "min avg max mdev" in ms
	ip netns exec "$1" "${client[@]}" ping -q -c 50 -i 0.02 -W 2 "$2" |
		awk -F'[/ =]+' '/^rtt/ { print $6, $7, $8, $9 }'
}

say "nfs-ls -R through kbridge (kbt-dut -> kb0 -> DPDK app -> kbt-peer)"
read -r kb_n kb_t < <(nfs_ls "$KBT_NS_DUT" "$KBT_PEER_IP")
say "nfs-ls -R through kbt-direct (plain veth, the floor)"
read -r d_n d_t < <(nfs_ls "$KBT_NS_DIRECT" "$KBT_ALT_IP")
say "ping through kbridge and through kbt-direct (50 each)"
read -r kb_min kb_avg kb_max _ < <(ping_rtt "$KBT_NS_DUT" "$KBT_PEER_IP")
read -r d_min d_avg d_max _ < <(ping_rtt "$KBT_NS_DIRECT" "$KBT_ALT_IP")
stats=$("$KBT_ROOT/bin/kbridge" stats --socket "$KBT_RUN/kbridge.sock")

printf '\n| %-26s | %-18s | %-18s |\n' "measure" "through kbridge" "kbt-direct (floor)"
printf '|%s|%s|%s|\n' "----------------------------" "--------------------" "--------------------"
printf '| %-26s | %-18s | %-18s |\n' "nfs-ls -R entries" "$kb_n" "$d_n"
printf '| %-26s | %-18s | %-18s |\n' "nfs-ls -R time (s)" "$kb_t" "$d_t"
printf '| %-26s | %-18s | %-18s |\n' "ping rtt min/avg/max (ms)" "$kb_min/$kb_avg/$kb_max" "$d_min/$d_avg/$d_max"
echo
echo "$stats" | python3 -c '
import json, sys
s = json.load(sys.stdin)
q = s["queues"][0]
print("kbridge queue 0 (%s): to kernel %d pkts, from kernel %d pkts, drops %d, parks %d, app kicks %d, pool in use %d of %d" % (
    q["mode"], q["to_kernel_packets"], q["from_kernel_packets"], sum(q["drops"].values()),
    q["parks"], q["app"]["kicks"], s["pool_in_use"], s["pool_size"]))'
[ "$kb_n" = "$KBT_TREE_ENTRIES" ] || die "the listing through kbridge is incomplete: $kb_n of $KBT_TREE_ENTRIES"
say "tearing the test bed down"
