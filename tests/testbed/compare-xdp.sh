#!/usr/bin/env bash
# The XDP path vs the ring path vs kbt-direct, side by side in one run.
#
# Brings up the ring bed (make testbed-up), measures, tears it down, then the
# XDP bed (KBT_MODE=xdp), measures, tears it down. In each bed it measures the
# path through kb0 (kbt-dut -> 198.18.0.1) and kbt-direct (kbt-direct ->
# 198.18.1.1, the same servers over a plain veth) interleaved, clients pinned
# off the app's CPU (taskset -c 0 on 2 CPUs):
#   sockperf pp --tcp -i IP -p 11111 -t T        TCP ping-pong, one-way p50/p99 (usec)
#   nfs-ls -R nfs://IP/export?version=4          best of N (s), all 6001 entries checked
#   iperf3 -c IP -p 5201 -t T [-R]               Gbit/s to and from the peer
# Prints a markdown table on stdout (with the load average before and after
# each bed); progress on stderr. Needs root and bin/kbridge, bin/kbridge-refapp.
#
# The bed is shared with other users of the machine: before each bed this
# script waits until no one else's bed is up, and holds /run/kbt.lock while
# its own bed is up (kbt_claim_bed in lib.sh), so others' up.sh waits for it.
#
# Variables: KBT_CMP_SOCKPERF_T (5), KBT_CMP_IPERF_T (5), KBT_CMP_NFS_RUNS (3),
#   KBT_CMP_MODES ("ring xdp"), KBT_CMP_WAIT (max seconds to wait for the bed, 1800).
set -euo pipefail
# shellcheck source=tests/testbed/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
kbt_cpus

SOCKPERF_T=${KBT_CMP_SOCKPERF_T:-5}
IPERF_T=${KBT_CMP_IPERF_T:-5}
NFS_RUNS=${KBT_CMP_NFS_RUNS:-3}
MODES=${KBT_CMP_MODES:-ring xdp}
WAIT=${KBT_CMP_WAIT:-1800}
unset KBRIDGE_CONFIG KBT_NO_BRIDGE KBT_MODE

client=()
[ -n "$KBT_OTHER_CPUS" ] && client=(taskset -c "$KBT_OTHER_CPUS")
for tool in sockperf iperf3 nfs-ls; do command -v "$tool" >/dev/null || die "missing tool: $tool"; done

claimed=0
cleanup() {
	local rc=$?
	if [ "$claimed" = 1 ]; then
		"$KBT_DIR/down.sh" >/dev/null || true
		kbt_release_bed
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# sockperf_pp NS IP -> "p50 p99" (one-way usec, as sockperf reports)
sockperf_pp() {
	local out p50 p99
	out=$(ip netns exec "$1" "${client[@]}" sockperf pp --tcp -i "$2" -p "$KBT_SOCKPERF_PORT" -t "$SOCKPERF_T" 2>&1) ||
		{ say "sockperf to $2 from $1 failed:"; printf '%s\n' "$out" | tail -5 >&2; echo "- -"; return 0; }
	p50=$(printf '%s\n' "$out" | awk '/percentile 50.000/ { print $NF; exit }')
	p99=$(printf '%s\n' "$out" | awk '/percentile 99.000/ { print $NF; exit }')
	echo "${p50:--} ${p99:--}"
}

# nfs_ls NS IP -> "seconds entries"
nfs_ls() {
	local t0 n
	t0=$(now)
	n=$(ip netns exec "$1" "${client[@]}" nfs-ls -R "nfs://$2/export?version=4" | wc -l) || n=0
	echo "$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }') $n"
}

# iperf NS IP [-R] -> Gbit/s received (receiver side of the test)
iperf() {
	local ns=$1 ip=$2 out g
	shift 2
	out=$(ip netns exec "$ns" "${client[@]}" iperf3 -c "$ip" -p "$KBT_IPERF_PORT" -t "$IPERF_T" -f g "$@" 2>&1) ||
		{ say "iperf3 $* to $ip from $ns failed:"; printf '%s\n' "$out" | tail -3 >&2; echo -; return 0; }
	g=$(printf '%s\n' "$out" | awk '/receiver/ { for (i = 2; i <= NF; i++) if ($i == "Gbits/sec") v = $(i - 1) } END { print v }')
	echo "${g:--}"
}

declare -A R=()   # R[row,measure]
rows=()
bad=0

measure_bed() {
	local mode=$1 label=$2 row_p row_d lb la a b t n best i row ns ip pair
	row_p=$label
	row_d="kbt-direct (while the $mode bed is up)"
	rows+=("$row_p" "$row_d")

	kbt_claim_bed "$WAIT"
	claimed=1
	lb=$(loadavg)
	say "=== $mode bed: up (load average $lb) ==="
	if [ "$mode" = xdp ]; then
		KBT_MODE=xdp "$KBT_DIR/up.sh" >/dev/null
	else
		"$KBT_DIR/up.sh" >/dev/null
	fi

	say "$mode: sockperf pp --tcp -t $SOCKPERF_T through kb0, then kbt-direct"
	read -r a b < <(sockperf_pp "$KBT_NS_DUT" "$KBT_PEER_IP")
	R["$row_p,p50"]=$a R["$row_p,p99"]=$b
	read -r a b < <(sockperf_pp "$KBT_NS_DIRECT" "$KBT_ALT_IP")
	R["$row_d,p50"]=$a R["$row_d,p99"]=$b

	for row in "$row_p" "$row_d"; do R["$row,nfs"]=; done
	for ((i = 1; i <= NFS_RUNS; i++)); do
		for pair in "$row_p|$KBT_NS_DUT|$KBT_PEER_IP" "$row_d|$KBT_NS_DIRECT|$KBT_ALT_IP"; do
			IFS='|' read -r row ns ip <<<"$pair"
			read -r t n < <(nfs_ls "$ns" "$ip")
			say "$mode: nfs-ls -R from $ns run $i: $n entries in ${t}s"
			if [ "$n" != "$KBT_TREE_ENTRIES" ]; then
				say "WARNING: $n entries, expected $KBT_TREE_ENTRIES"
				bad=1
				continue
			fi
			best=${R["$row,nfs"]}
			if [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN { exit !(a < b) }'; then R["$row,nfs"]=$t; fi
		done
	done

	say "$mode: iperf3 -t $IPERF_T to and from the peer, through kb0 and kbt-direct"
	R["$row_p,up"]=$(iperf "$KBT_NS_DUT" "$KBT_PEER_IP")
	R["$row_d,up"]=$(iperf "$KBT_NS_DIRECT" "$KBT_ALT_IP")
	R["$row_p,down"]=$(iperf "$KBT_NS_DUT" "$KBT_PEER_IP" -R)
	R["$row_d,down"]=$(iperf "$KBT_NS_DIRECT" "$KBT_ALT_IP" -R)

	if [ "$mode" = xdp ]; then
		say "$mode: kbridge stats: $("$KBT_ROOT/bin/kbridge" stats --socket "$KBT_RUN/kbridge.sock" 2>/dev/null | tr -d ' \n' | cut -c1-400)"
	fi
	la=$(loadavg)
	R["$row_p,load"]="$lb / $la"
	R["$row_d,load"]="$lb / $la"
	say "=== $mode bed: down (load average $la) ==="
	"$KBT_DIR/down.sh" >/dev/null
	kbt_release_bed
	claimed=0
	# Let someone else's waiting up.sh have the lock before our next bed.
	sleep 3
}

t0=$(now)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
for mode in $MODES; do
	case $mode in
	ring) measure_bed ring "ring: refapp (net_af_packet) + kbridge, adaptive" ;;
	xdp) measure_bed xdp "xdp: kbridge_steer via refapp's net_af_xdp (loader pmd)" ;;
	*) die "KBT_CMP_MODES: unknown mode $mode (ring, xdp)" ;;
	esac
done

echo "<!-- tests/testbed/compare-xdp.sh, $started, $(uname -r), $(getconf _NPROCESSORS_ONLN) CPUs, clients on CPU ${KBT_OTHER_CPUS:-any}, app on CPU $KBT_APP_CPU; took $(since "$t0") -->"
echo
echo "| path | sockperf p50 (us) | sockperf p99 (us) | nfs-ls -R, best of $NFS_RUNS (s) | iperf3 to peer (Gbit/s) | iperf3 from peer (Gbit/s) | load average before / after |"
echo "|---|---|---|---|---|---|---|"
for row in "${rows[@]}"; do
	printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$row" "${R["$row,p50"]:--}" "${R["$row,p99"]:--}" \
		"${R["$row,nfs"]:--}" "${R["$row,up"]:--}" "${R["$row,down"]:--}" "${R["$row,load"]:--}"
done
[ "$bad" = 0 ] || die "some NFS listings were incomplete (see above)"
