#!/usr/bin/env bash
# make testbed-down: stop everything the test bed started (by PID), remove its
# namespaces (and with them the veths and TAPs), and remove stale DPDK runtime
# files of the bed's file prefixes. Safe to run twice and after a crash.
# Prints "testbed down" on stdout; progress goes to stderr.
set -euo pipefail
# shellcheck source=tests/testbed/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
kbt_lock

# Our own ancestors are never killed by the namespace sweep below (in case this
# script is run from a shell inside one of the bed's namespaces).
declare -A self=()
p=$$
while [ -n "$p" ] && [ "$p" -gt 1 ]; do
	self[$p]=1
	p=$(awk '{ print $4 }' "/proc/$p/stat" 2>/dev/null || true)
	p=${p//[^0-9]/}
done

# 1. Processes recorded under $KBT_RUN. kbridge (the DPDK secondary) goes first so
#    that it detaches before its primary disappears; the rest stop together.
if [ -d "$KBT_RUN" ]; then
	stop_pidfile "$KBT_RUN/kbridge.pid"
	stop_pidfile "$KBT_RUN/kbridge-kb1.pid" # KBT_PORTS=2
	pids=()
	for f in "$KBT_RUN"/*.pid; do
		[ -f "$f" ] || continue
		pid=$(tr -dc '0-9' <"$f" 2>/dev/null || true)
		if [ -n "$pid" ] && pid_in_bed "$pid"; then
			say "stopping $(basename "$f" .pid) (pid $pid, $(pid_comm "$pid"))"
			pids+=("$pid")
		elif [ -n "$pid" ] && pid_alive "$pid"; then
			say "not stopping pid $pid from $f: it is not in a kbt-* namespace (stale pid file)"
		fi
	done
	stop_pids "${pids[@]}"
	rm -f "$KBT_RUN"/*.pid "$KBT_RUN"/*.stdin
fi

# 2. Anything else still running inside the bed's namespaces (started by a test
#    that crashed before it could clean up, for example).
for ns in "${KBT_NAMESPACES[@]}"; do
	ns_exists "$ns" || continue
	pids=()
	for pid in $(ip netns pids "$ns" 2>/dev/null || true); do
		[ -n "${self[$pid]:-}" ] && continue
		pid_alive "$pid" || continue
		say "stopping leftover pid $pid ($(pid_comm "$pid")) in $ns"
		pids+=("$pid")
	done
	stop_pids "${pids[@]}"
done

# 2b. Mode xdp (KBT_MODE=xdp): what a killed kbridge or app leaves behind. DPDK
#     22.11 attaches its program to kbt-nic through netlink, so it outlives a
#     killed app; kbridge's pins in /sys/fs/bpf and its object file outlive a
#     killed kbridge. Only what this bed recorded is removed: a pin is removed
#     only if it still holds the map ID the bed's kbridge created.
if ns_exists "$KBT_NS_DUT" && ip -n "$KBT_NS_DUT" link show "$KBT_XDP_NIC" 2>/dev/null | grep -q 'prog/xdp'; then
	ip -n "$KBT_NS_DUT" link set dev "$KBT_XDP_NIC" xdp off 2>/dev/null || true
	say "removed the XDP program left on $KBT_XDP_NIC"
fi
if [ -f "$KBT_RUN/xdp-pins" ]; then
	while read -r pin id; do
		if [ -z "$pin" ] || [ ! -e "$pin" ]; then continue; fi
		if [ "$(bpf_pin_id "$pin")" = "$id" ]; then
			rm -f "$pin"
			say "removed pin $pin (map $id) left by the bed's kbridge"
		fi
	done <"$KBT_RUN/xdp-pins"
	rm -f "$KBT_RUN/xdp-pins"
fi
if [ -f "$KBT_RUN/xdp-object" ]; then
	obj=$(cat "$KBT_RUN/xdp-object")
	if [ -n "$obj" ] && [ -e "$obj" ]; then
		rm -f "$obj"
		say "removed $obj"
	fi
	rm -f "$KBT_RUN/xdp-object"
fi
# 2c. Mode vhost (KBT_MODE=vhost): the vhost-user socket a killed kbridge (or, with
#     vhost.client: true, a killed testpmd, its server) left behind.
if [ -f "$KBT_RUN/vhost-socket" ]; then
	sock=$(cat "$KBT_RUN/vhost-socket")
	if [ -n "$sock" ] && [ -S "$sock" ]; then
		rm -f "$sock"
		say "removed the vhost-user socket $sock"
	fi
	rm -f "$KBT_RUN/vhost-socket"
fi
rm -f "$KBT_RUN/mode" "$KBT_RUN/ports"

# 3. Namespaces. Deleting a namespace deletes the veths and TAPs inside it.
for ns in "${KBT_NAMESPACES[@]}"; do
	if ns_exists "$ns"; then
		ip netns del "$ns"
		say "removed namespace $ns"
	fi
done
# Veths of a run that crashed before moving them (never created in the root
# namespace by up.sh, but cheap to check): only these exact names.
for l in "${KBT_LINKS[@]}"; do
	if ip link show dev "$l" >/dev/null 2>&1; then
		ip link del dev "$l" 2>/dev/null || true
		say "removed stray link $l from the root namespace"
	fi
done
if ip link show dev kb0 >/dev/null 2>&1; then
	say "WARNING: an interface kb0 exists in the root namespace; not ours, left alone"
fi

# 4. Ganesha's per-bed state (recovery dirs, krb5 ccache); logs are kept for
#    post-mortems and truncated by the next up.sh.
rm -rf "$KBT_RUN/ganesha"
# kbridge's control socket, left by a killed kbridge (every process is gone now).
rm -f "$KBT_RUN/kbridge.sock" "$KBT_RUN/kbridge-kb1.sock"

# 5. DPDK runtime dirs and hugepage files of the bed's prefixes, if nothing uses them.
for prefix in $(dpdk_bed_prefixes); do
	dpdk_cleanup_prefix "$prefix"
done

# 6. Nothing of ours may remain.
remaining=$(ip netns list 2>/dev/null | awk '{ print $1 }' | grep -E '^kbt-(peer|dut|direct)$' || true)
[ -z "$remaining" ] || die "namespaces still present: $remaining"

echo "testbed down"
