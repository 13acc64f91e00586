#!/usr/bin/env bash
# copp-flood.sh: a flood from kbt-peer to kb0's address on the ring bed, with
# control-plane protection off, on (the defaults) and on with the default
# class policed, in interleaved rounds.
#
#   tests/bench/copp-flood.sh            # as root, from the repository root
#
# The variants are switched live (SIGHUP): `off` (copp.enabled: false), `on`
# (the defaults: control and neighbour classes policed, the rest not, the
# reserves), `policed` (the defaults with copp.default.pps KBT_FLOOD_PPS).
# Every round runs each variant (even rounds in reverse order, so that drift
# on this noisy machine falls on all alike):
#   - a TCP ping-pong (sockperf pp --tcp, 200 requests/s) from kbt-peer to a
#     sockperf server on kb0's address, port 22 (where sshd would listen),
#     for QUIET s without flood, then for FLOOD s while three hping3 --flood
#     run from kbt-peer to 198.18.0.2: UDP to a closed port (9), UDP to an
#     open port (a sockperf UDP server's, 11112), TCP SYN to port 22;
#   - meanwhile the peer deletes its neighbour entry for kb0's address every
#     second and checks that it resolves again within that second (ARP);
#   - a BGP session over kb0 (tests/testbed/bgp.sh: keepalive 1 s, hold 3 s)
#     runs throughout: it must stay Established (its start time unchanged);
#   - kbridge's CPU (utime + stime from /proc) over the flood.
#   - before that, iperf3 each way for BULK s without flood: Gbit/s, and the
#     frames toward the kernel per second (ACKs, or data): what a default
#     class rate would have to spare.
# Per variant and round it prints one line; at the end a table with ranges.
# The counters' check: after the flood and a settle, what the app queued
# (app.to_kernel) less what kbridge wrote, policed and dropped ("unaccounted").
# Nothing is asserted: read the ranges.
#
# Variables: KBT_FLOOD_ROUNDS (2), KBT_FLOOD_SECONDS (FLOOD, 60),
# KBT_FLOOD_QUIET (QUIET, 15), KBT_FLOOD_PPS (5000), KBT_FLOOD_BULK (BULK,
# 8), KBT_FLOOD_SETTLE (15 s after each flood), KBT_FLOOD_KEEP=1 leaves
# the bed up. Needs hping3, sockperf, bird2 (make deps installs them).
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
KBT_DIR=$TOP/tests/testbed
. "$KBT_DIR/lib.sh"
need_root

ROUNDS=${KBT_FLOOD_ROUNDS:-2}
FLOOD=${KBT_FLOOD_SECONDS:-60}
QUIET=${KBT_FLOOD_QUIET:-15}
PPS=${KBT_FLOOD_PPS:-5000}
BULK=${KBT_FLOOD_BULK:-8}
SETTLE=${KBT_FLOOD_SETTLE:-15}
VARIANTS=(off on policed)
kbt_cpus
for tool in hping3 sockperf jq bird; do command -v "$tool" >/dev/null || die "missing tool: $tool"; done

work=$(mktemp -d /tmp/kbt-flood.XXXXXX)
cfg=$work/kbridge.yaml
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	if [ "${KBT_FLOOD_KEEP:-0}" != 1 ]; then
		"$KBT_DIR/bgp.sh" down >/dev/null 2>&1 || true
		"$KBT_DIR/down.sh" >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# write_config VARIANT: the bed's configuration with VARIANT's copp section.
write_config() {
	cp "$KBT_DIR/kbridge.yaml" "$cfg.new"
	case $1 in
	off) printf 'copp:\n  enabled: false\n' >>"$cfg.new" ;;
	on) ;;
	policed) printf 'copp:\n  default: {pps: %d, burst: %d}\n' "$PPS" "$PPS" >>"$cfg.new" ;;
	esac
	mv "$cfg.new" "$cfg"
}

write_config on
KBRIDGE_CONFIG=$cfg "$KBT_DIR/up.sh" >/dev/null
pid=$(cat "$KBT_RUN/kbridge.pid")
"$KBT_DIR/bgp.sh" up >/dev/null

apply() {
	write_config "$1"
	kbt_reload "$pid" || die "kbridge did not reload for '$1' (see $KBT_RUN/kbridge.log)"
}

# Background processes start as plain commands ("${PEER[@]}" cmd &), never
# through dut or peer: `f &` forks a subshell, $! names it, and killing it
# left the command running (the floods of every earlier variant went on).
DUT=(ip netns exec "$KBT_NS_DUT" "${KBT_PIN_OTHER[@]}")
PEER=(ip netns exec "$KBT_NS_PEER" "${KBT_PIN_OTHER[@]}")
dut() { "${DUT[@]}" "$@"; }
peer() { "${PEER[@]}" "$@"; }

# The servers on kb0's address: TCP 22 for the ping-pong and the SYN flood,
# UDP 11112 for the open-port flood.
"${DUT[@]}" sockperf server --tcp -i "$KBT_DUT_IP" -p 22 >"$work/pp-server.log" 2>&1 &
pids+=($!)
"${DUT[@]}" sockperf server -i "$KBT_DUT_IP" -p 11112 >"$work/udp-server.log" 2>&1 &
pids+=($!)
sleep 1

# pp SECONDS: "p50 p99" of sockperf's one-way latency (RTT/2), us.
pp() {
	peer sockperf pp --tcp -i "$KBT_DUT_IP" -p 22 --mps 200 -t "$1" 2>&1 |
		awk '/percentile 50.000/ { p50 = $NF } /percentile 99.000/ { p99 = $NF } END { if (p50 == "") exit 1; printf "%.1f %.1f\n", p50, p99 }'
}

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
peer_tx() { ip netns exec "$KBT_NS_PEER" cat /sys/class/net/kbt-wire/statistics/tx_packets; }
stats() { "$TOP/bin/kbridge" stats --socket "$KBT_RUN/kbridge.sock"; }
bgp_since() { { "$KBT_DIR/bgp.sh" state 2>/dev/null || true; } | awk '$1 == "dut" && $2 == "Established" { print $3 }'; }

# arp_watch SECONDS: deletes the peer's entry for kb0's address every second
# and counts the seconds it did not resolve again: "failed/tries".
arp_watch() {
	local fail=0 n=0 end=$((SECONDS + $1))
	while [ $SECONDS -lt "$end" ]; do
		ip -n "$KBT_NS_PEER" neigh del "$KBT_DUT_IP" dev kbt-wire 2>/dev/null || true
		ip netns exec "$KBT_NS_PEER" ping -c 1 -W 1 "$KBT_DUT_IP" >/dev/null 2>&1 || true
		ip -n "$KBT_NS_PEER" neigh show "$KBT_DUT_IP" dev kbt-wire | grep -q lladdr || fail=$((fail + 1))
		n=$((n + 1))
		sleep 0.5
	done
	echo "$fail/$n"
}

# bulk [-R]: "Gbit/s kpps" of iperf3 from kbt-dut to the peer (-R: from the
# peer), BULK s, and the frames toward the kernel per second meanwhile (its
# ACKs, or its data).
bulk() {
	local s0 s1 out
	s0=$(stats)
	out=$(dut timeout $((BULK + 20)) iperf3 -c "$KBT_PEER_IP" -p "$KBT_IPERF_PORT" -t "$BULK" -J "$@") || { echo "- -"; return; }
	s1=$(stats)
	jq -rn --argjson o "$out" --argjson a "$s0" --argjson b "$s1" --arg t "$BULK" \
		'"\($o.end.sum_received.bits_per_second / 1e9 * 100 | round / 100) \((($b.queues[0].to_kernel_packets - $a.queues[0].to_kernel_packets) / ($t | tonumber) / 100 | round) / 10)"' 2>/dev/null ||
		echo "- -"
}

declare -A R
measure() { # variant round
	local v=$1 r=$2 quiet flood c0 c1 t0 t1 s0 s1 since0 since1 hz hp=() arp kpps
	R[$v,$r,out]=$(bulk)
	R[$v,$r,in]=$(bulk -R)
	quiet=$(pp "$QUIET" || echo "- -")
	s0=$(stats)
	since0=$(bgp_since)
	c0=$(cpu_ticks) t0=$(peer_tx)
	"${PEER[@]}" hping3 --flood --udp -p 9 "$KBT_DUT_IP" >/dev/null 2>&1 &
	hp+=($!)
	"${PEER[@]}" hping3 --flood --udp -p 11112 "$KBT_DUT_IP" >/dev/null 2>&1 &
	hp+=($!)
	"${PEER[@]}" hping3 --flood -S -p 22 "$KBT_DUT_IP" >/dev/null 2>&1 &
	hp+=($!)
	arp_watch "$FLOOD" >"$work/arp" &
	local aw=$!
	flood=$(pp "$FLOOD" || echo "- -")
	c1=$(cpu_ticks) t1=$(peer_tx)
	kill "${hp[@]}" 2>/dev/null || true
	wait "${hp[@]}" 2>/dev/null || true
	wait "$aw" || true
	arp=$(cat "$work/arp")
	# Settle: the ring drains, and the SYN flood's half-open connections
	# stop retransmitting before the next measurement.
	sleep "$SETTLE"
	s1=$(stats)
	since1=$(bgp_since)
	hz=$(getconf CLK_TCK)
	kpps=$(echo "scale=1; ($t1 - $t0) / $FLOOD / 1000" | bc)
	R[$v,$r,kpps]=$kpps
	R[$v,$r,quiet]=$quiet
	R[$v,$r,flood]=$flood
	R[$v,$r,cpu]=$(echo "scale=1; ($c1 - $c0) * 100 / $hz / $FLOOD" | bc)
	R[$v,$r,arp]=$arp
	if [ -n "$since0" ] && [ "$since0" = "$since1" ]; then R[$v,$r,bgp]=kept; else R[$v,$r,bgp]=lost; fi
	# The flood's frames over the interval, from the counters: written to
	# kb0, policed, freed by the app for want of room (its control ones too).
	R[$v,$r,ctr]=$(jq -rn --argjson a "$s0" --argjson b "$s1" '
		def q(s): s.queues[0];
		def sum(x): (x // [0,0,0,0]) | add;
		(q($b).to_kernel_packets - q($a).to_kernel_packets) as $w |
		(sum(q($b).copp.policed) - sum(q($a).copp.policed)) as $p |
		(q($b).app.to_kernel_dropped - q($a).app.to_kernel_dropped) as $d |
		((q($b).app.to_kernel_dropped_control // 0) - (q($a).app.to_kernel_dropped_control // 0)) as $dc |
		((q($b).app.to_kernel_reserved // 0) - (q($a).app.to_kernel_reserved // 0)) as $rs |
		(q($b).app.to_kernel - q($a).app.to_kernel) as $queued |
		([q($b).drops | to_entries[] | select(.key | test("oversize|runt|too_many|malformed|tap_write")) | .value] | add) as $kd1 |
		([q($a).drops | to_entries[] | select(.key | test("oversize|runt|too_many|malformed|tap_write")) | .value] | add) as $kd0 |
		"\($w) \($p) \($d) \($dc) \($rs) \($queued - $w - $p - ($kd1 - $kd0))"' || echo "- - - - - -")
	say "round $r, $v: iperf3 out/in ${R[$v,$r,out]} / ${R[$v,$r,in]} (Gbit/s, kpps to kb0); flood ${kpps} kpps; pp quiet $quiet, flood $flood; cpu ${R[$v,$r,cpu]}%; arp failed ${arp}; bgp ${R[$v,$r,bgp]}; written/policed/app-dropped/control-dropped/reserved/unaccounted ${R[$v,$r,ctr]}"
}

for ((r = 1; r <= ROUNDS; r++)); do
	order=("${VARIANTS[@]}")
	[ $((r % 2)) -eq 0 ] && order=(policed on off)
	for v in "${order[@]}"; do
		apply "$v"
		measure "$v" "$r"
	done
done

range() { tr ' ' '\n' | grep . | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (lo == hi) printf "%s", lo; else printf "%s-%s", lo, hi }'; }
echo "| copp | iperf3 out Gbit/s (ACK kpps to kb0) | iperf3 in Gbit/s (kpps to kb0) | flood kpps | pp p50/p99 us, quiet | pp p50/p99 us, flood | kbridge CPU % | ARP failed | BGP | written k | policed k | app dropped (control) | unaccounted |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|"
for v in "${VARIANTS[@]}"; do
	kp='' q50='' q99='' f50='' f99='' cpu='' arp='' bgp='' wr='' po='' dr='' dc='' ok='' og='' ok2='' ig='' ik=''
	for ((r = 1; r <= ROUNDS; r++)); do
		read -r a b <<<"${R[$v,$r,out]}"
		og+="$a " ok2+="$b "
		read -r a b <<<"${R[$v,$r,in]}"
		ig+="$a " ik+="$b "
		kp+="${R[$v,$r,kpps]} " cpu+="${R[$v,$r,cpu]} "
		read -r a b <<<"${R[$v,$r,quiet]}"
		q50+="$a " q99+="$b "
		read -r a b <<<"${R[$v,$r,flood]}"
		f50+="$a " f99+="$b "
		arp+="${R[$v,$r,arp]%/*} " bgp+="${R[$v,$r,bgp]} "
		read -r w p d c _ k <<<"${R[$v,$r,ctr]}"
		wr+="$((w / 1000)) " po+="$((p / 1000)) " dr+="$d " dc+="$c " ok+="$k "
	done
	echo "| $v | $(range <<<"$og") ($(range <<<"$ok2")) | $(range <<<"$ig") ($(range <<<"$ik")) | $(range <<<"$kp") | $(range <<<"$q50")/$(range <<<"$q99") | $(range <<<"$f50")/$(range <<<"$f99") | $(range <<<"$cpu") | $(range <<<"$arp") | $(echo "$bgp" | tr ' ' '\n' | grep . | sort -u | paste -sd,) | $(range <<<"$wr") | $(range <<<"$po") | $(range <<<"$dr") ($(range <<<"$dc")) | $(range <<<"$ok") |"
done
echo
echo "$ROUNDS rounds, interleaved; ${FLOOD} s floods, ${QUIET} s quiet; ranges min-max over rounds; policed: copp.default.pps $PPS; kbridge $(git -C "$TOP" rev-parse --short HEAD 2>/dev/null || echo '?'); $(date -u +%FT%TZ)"
