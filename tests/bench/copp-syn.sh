#!/usr/bin/env bash
# copp-syn.sh: what control-plane protection does for kbridge's CPU and for an
# established session to port 22 under a flood, on the ring bed.
#
#   tests/bench/copp-syn.sh cpu    # as root, from the repository root
#   tests/bench/copp-syn.sh ssh
#
# cpu: policy.mode interrupt (the worker runs only while frames wait, so its
#   CPU is the work it does, not a spin); a UDP flood from kbt-peer (hping3
#   --flood to a closed port, 9, and an open one, a sockperf server's 11112)
#   for SECONDS per variant, one variant per copp.default.pps in RATES (0:
#   unlimited) and one without flood, in interleaved rounds. Per variant:
#   frames per second offered (the peer's tx), written to kb0
#   (to_kernel_packets), policed, freed by the app for want of room; kbridge's
#   CPU (utime + stime) as % of a core, and per frame written.
# ssh: the bed's policy (adaptive); a TCP ping-pong (pingpong.py, 200/s) on
#   one connection to a server on kb0's port 22, established before the flood
#   as an operator's session is: QUIET s quiet, then SECONDS under a flood.
#   Variants: none; udp (as above); syn (hping3 -S to port 22) with the
#   defaults; syn with copp.management_syn.pps 0 (every opening written, as
#   when openings were plain management). Round trips p50/p99/max per window,
#   kbridge's CPU, what was written and policed. Before each variant what a
#   flood leaves behind is shown and waited out: the DUT's half-open
#   connections on :22 (SYN-RECV), conntrack entries in both namespaces; the
#   floods' own processes are killed by their pids and checked gone.
# Nothing is asserted: read the lines.
#
# Variables: KBT_SYN_ROUNDS (2), KBT_SYN_SECONDS (SECONDS, 15),
# KBT_SYN_QUIET (QUIET, 10), KBT_SYN_RATES ("0 50000 20000 5000 1000"),
# KBT_SYN_INTERVAL=N: the UDP flood is one hping3 sending every N us
# instead of two at --flood (which saturate the CPU kbridge shares with
# them); KBT_SYN_KEEP=1 leaves the bed up. Needs hping3, sockperf, jq, python3.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
KBT_DIR=$TOP/tests/testbed
. "$KBT_DIR/lib.sh"
need_root

WHAT=${1:-}
[ "$WHAT" = cpu ] || [ "$WHAT" = ssh ] || die "usage: $0 cpu|ssh"
ROUNDS=${KBT_SYN_ROUNDS:-2}
SECS=${KBT_SYN_SECONDS:-15}
QUIET=${KBT_SYN_QUIET:-10}
INTERVAL=${KBT_SYN_INTERVAL:-}
read -r -a RATES <<<"${KBT_SYN_RATES:-0 50000 20000 5000 1000}"
kbt_cpus
for tool in hping3 sockperf jq python3; do command -v "$tool" >/dev/null || die "missing tool: $tool"; done

work=$(mktemp -d /tmp/kbt-syn.XXXXXX)
cfg=$work/kbridge.yaml
pids=() floods=()

# stop_floods: kills the floods by their pids and checks that they are gone.
stop_floods() {
	local p
	[ ${#floods[@]} -eq 0 ] && return 0
	kill "${floods[@]}" 2>/dev/null || true
	wait "${floods[@]}" 2>/dev/null || true
	for p in "${floods[@]}"; do
		if [ -e "/proc/$p" ]; then say "flood $p still running"; fi
	done
	floods=()
}
cleanup() {
	stop_floods
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[ "${KBT_SYN_KEEP:-0}" = 1 ] || "$KBT_DIR/down.sh" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

# write_config MODE SECTION: the bed's configuration with policy.mode MODE
# and SECTION (YAML) appended.
write_config() {
	sed "s/^  mode: adaptive$/  mode: $1/" "$KBT_DIR/kbridge.yaml" >"$cfg.new"
	printf '%b' "$2" >>"$cfg.new"
	mv "$cfg.new" "$cfg"
}

mode=interrupt
[ "$WHAT" = ssh ] && mode=adaptive
write_config "$mode" ""
KBRIDGE_CONFIG=$cfg "$KBT_DIR/up.sh" >/dev/null
pid=$(cat "$KBT_RUN/kbridge.pid")

apply() {
	write_config "$mode" "$1"
	kbt_reload "$pid" || die "kbridge did not reload (see $KBT_RUN/kbridge.log)"
}

# Background processes are started as plain commands, not through a shell
# function: `f &` forks a subshell whose pid $! names, and killing it leaves
# the command running (ip netns exec and taskset exec the command itself).
PEER=(ip netns exec "$KBT_NS_PEER" "${KBT_PIN_OTHER[@]}")
DUT=(ip netns exec "$KBT_NS_DUT" "${KBT_PIN_OTHER[@]}")
"${DUT[@]}" python3 "$TOP/tests/bench/pingpong.py" server "$KBT_DUT_IP" 22 >"$work/pp-server.log" 2>&1 &
pids+=($!)
"${DUT[@]}" sockperf server -i "$KBT_DUT_IP" -p 11112 >"$work/udp-server.log" 2>&1 &
pids+=($!)
sleep 1

# start_flood udp|syn
start_flood() {
	case $1 in
	udp)
		if [ -n "$INTERVAL" ]; then
			"${PEER[@]}" hping3 -i "u$INTERVAL" --udp -p 9 "$KBT_DUT_IP" >/dev/null 2>&1 &
			floods+=($!)
			return
		fi
		"${PEER[@]}" hping3 --flood --udp -p 9 "$KBT_DUT_IP" >/dev/null 2>&1 &
		floods+=($!)
		"${PEER[@]}" hping3 --flood --udp -p 11112 "$KBT_DUT_IP" >/dev/null 2>&1 &
		floods+=($!)
		;;
	syn)
		"${PEER[@]}" hping3 --flood -S -p 22 "$KBT_DUT_IP" >/dev/null 2>&1 &
		floods+=($!)
		;;
	esac
}

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
peer_tx() { ip netns exec "$KBT_NS_PEER" cat /sys/class/net/kbt-wire/statistics/tx_packets; }
stats() { "$TOP/bin/kbridge" stats --socket "$KBT_RUN/kbridge.sock"; }
synrecv() { ip netns exec "$KBT_NS_DUT" ss -Htn state syn-recv "( sport = :22 )" | wc -l; }
conntrack() { ip netns exec "$1" cat /proc/sys/net/netfilter/nf_conntrack_count 2>/dev/null || echo -; }
lingers() { echo "syn-recv $(synrecv), conntrack dut $(conntrack "$KBT_NS_DUT") peer $(conntrack "$KBT_NS_PEER")"; }

# settle: waits (up to 120 s) until the DUT holds no half-open connection on
# :22 and the app queues nothing more toward the kernel; prints the seconds.
settle() {
	local t0=$SECONDS a b
	while [ $((SECONDS - t0)) -lt 120 ]; do
		a=$(stats | jq '.queues[0].app.to_kernel')
		sleep 1
		b=$(stats | jq '.queues[0].app.to_kernel')
		[ "$(synrecv)" -eq 0 ] && [ $((b - a)) -lt 50 ] && break
	done
	echo $((SECONDS - t0))
}

# rates S0 S1 SECONDS C0 C1 T0 T1: "offered written policed app-dropped
# wakeups sleeps (k/s) cpu% us/written" over the interval.
rates() {
	local hz
	hz=$(getconf CLK_TCK)
	jq -rn --argjson a "$1" --argjson b "$2" --arg s "$3" --arg c "$(($5 - $4))" --arg t "$(($7 - $6))" --arg hz "$hz" '
		def q(x): x.queues[0];
		($s | tonumber) as $s |
		((q($b).to_kernel_packets - q($a).to_kernel_packets) / $s) as $w |
		((((q($b).copp.policed // [0]) | add) - ((q($a).copp.policed // [0]) | add)) / $s) as $p |
		((q($b).app.to_kernel_dropped - q($a).app.to_kernel_dropped) / $s) as $d |
		((q($b).wakeups - q($a).wakeups) / $s) as $k |
		((q($b).sleeps - q($a).sleeps) / $s) as $z |
		(($c | tonumber) / ($hz | tonumber) / $s) as $cpu |
		"\(($t | tonumber) / $s / 1000 | . * 10 | round / 10) \($w / 1000 | . * 10 | round / 10) \($p / 1000 | . * 10 | round / 10) \($d / 1000 | . * 10 | round / 10) \($k / 1000 | . * 10 | round / 10) \($z / 1000 | . * 10 | round / 10) \($cpu * 1000 | round / 10) \(if $w > 0 then $cpu / $w * 1e6 * 100 | round / 100 else "-" end)"'
}

cpu_variant() { # rate round ("-" rate: no flood)
	local r=$1 s0 s1 c0 c1 t0 t1 x0 x1 el
	if [ "$r" = - ]; then apply ""; else apply "copp:\n  default: {pps: $r, burst: $((r > 0 ? r : 0))}\n"; fi
	[ "$r" != - ] && start_flood udp
	sleep 2
	s0=$(stats) c0=$(cpu_ticks) t0=$(peer_tx) x0=$(now)
	sleep "$SECS"
	s1=$(stats) c1=$(cpu_ticks) t1=$(peer_tx) x1=$(now)
	stop_floods
	el=$(echo "$x1 - $x0" | bc)
	echo "cpu round $2 default.pps ${r}: offered/written/policed/app-dropped kframes/s, wakeups/sleeps k/s, kbridge CPU %, us CPU per frame written: $(rates "$s0" "$s1" "$el" "$c0" "$c1" "$t0" "$t1")"
	sleep 3
}

ssh_variant() { # variant round
	local v=$1 kind=${1%%-*} s0 s1 c0 c1 t0 t1 x0 x1 el waited cl out
	case $v in
	syn-unlimited) apply "copp:\n  management_syn: {pps: 0}\n" ;;
	*) apply "" ;;
	esac
	echo "ssh round $2 $v: before: $(lingers)"
	waited=$(settle)
	rm -f "$work/mark"
	"${PEER[@]}" python3 "$TOP/tests/bench/pingpong.py" client "$KBT_DUT_IP" 22 200 "$QUIET" "$SECS" "$work/mark" >"$work/pp.out" 2>&1 &
	cl=$!
	while [ ! -e "$work/mark" ] && [ -e "/proc/$cl" ]; do sleep 0.05; done
	[ "$kind" != none ] && start_flood "$kind"
	s0=$(stats) c0=$(cpu_ticks) t0=$(peer_tx) x0=$(now)
	wait "$cl" || true
	s1=$(stats) c1=$(cpu_ticks) t1=$(peer_tx) x1=$(now)
	stop_floods
	el=$(echo "$x1 - $x0" | bc)
	out=$(cat "$work/pp.out")
	echo "ssh round $2 $v: waited ${waited}s to settle; rtt us quiet p50/p99/max, flood p50/p99/max, replies: $out; offered/written/policed/app-dropped kframes/s, wakeups/sleeps k/s, CPU %, us/written: $(rates "$s0" "$s1" "$el" "$c0" "$c1" "$t0" "$t1"); policed by class: $(jq -c --argjson a "$s0" '[.queues[0].copp.policed, $a.queues[0].copp.policed] | transpose | map(.[0] - .[1])' <<<"$s1"); after: $(lingers)"
}

say "copp-syn $WHAT: kbridge $(git -C "$TOP" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%FT%TZ)"
for ((round = 1; round <= ROUNDS; round++)); do
	if [ "$WHAT" = cpu ]; then
		order=(- "${RATES[@]}")
		if [ $((round % 2)) -eq 0 ]; then
			order=()
			for ((i = ${#RATES[@]} - 1; i >= 0; i--)); do order+=("${RATES[i]}"); done
			order+=(-)
		fi
		for r in "${order[@]}"; do cpu_variant "$r" "$round"; done
	else
		order=(none udp syn syn-unlimited)
		[ $((round % 2)) -eq 0 ] && order=(syn-unlimited syn udp none)
		for v in "${order[@]}"; do ssh_variant "$v" "$round"; done
	fi
done
say "done $(date -u +%FT%TZ)"
