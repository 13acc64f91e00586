#!/usr/bin/env bash
# copp-nic.sh: floods from the NIC's side, on the ring bed, while a BGP
# session (with BFD) and an SSH-like session run through kb0.
#
#   tests/bench/copp-nic.sh            # as root, from the repository root
#
# The floods are made by the reference app's generator (--flood,
# tests/refapp/flood.h) on its own lcore, CPU 1, and enter kbridge's path
# where the NIC's frames do: CPU 0 carries kbridge, both kernels and the
# sessions, but no flood sender (copp-flood.sh's hping3 shared it). Each
# window floods one kind at PPS frames a second:
#   none     no flood: the reference
#   udp      UDP to a closed port (9): class unwanted, freed in the burst core
#   syn      SYN to an unopened port (80): unwanted
#   syn22    SYN to port 22, where the session's server listens: management_syn
#   bgp      SYN from port 179 to port 80, TTL 64 (forged BGP): unwanted, never bgp
#   arp      ARP requests for kb0's address: neighbor
#   udp-off, syn-off  the same with copp.unwanted.enabled false (every frame
#            written to kb0, answered by the kernel): what the filter saves
#   KIND@PPS any of them at PPS instead (udp@1000000: a rate sweep)
# Throughout: BIRD's BGP session over kb0 (tests/testbed/bgp.sh: hold 3 s)
# with BFD (interval BFD ms, multiplier 3), and pingpong.py's session: one
# TCP connection from kbt-peer to a server on kb0's port 22, 64-byte round
# trips at 200/s, opened before the first window, as an operator's SSH.
# Per window (SECONDS after 1 s of ramp): the session's round trips (p50,
# p99, max, count); kbridge's CPU (utime + stime) and CPU 0's softirq time,
# as % of a CPU; what the generator made and kbridge_to_kernel() queued, and
# kbridge's counters over the same interval: the kind's class passed and
# policed, what the app freed for want of room, and "unaccounted": queued
# less the kind's class (passed + policed); the BGP session's and BFD
# session's start times before and after (kept or lost) and the bgp and bfd
# classes' policed frames. The kinds run in interleaved rounds (even rounds
# in reverse order). At the end a table of ranges. Nothing is asserted.
#
# Variables: KBT_NIC_ROUNDS (3), KBT_NIC_SECONDS (SECONDS, 20), KBT_NIC_PPS
# (PPS, 200000), KBT_NIC_BFD (BFD, 100; 0: no BFD), KBT_NIC_SETTLE (5 s
# after each window), KBT_NIC_KINDS (the list above), KBT_NIC_KEEP=1 leaves
# the bed up. Needs bird2, jq, python3.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
KBT_DIR=$TOP/tests/testbed
. "$KBT_DIR/lib.sh"
need_root

ROUNDS=${KBT_NIC_ROUNDS:-3}
SECS=${KBT_NIC_SECONDS:-20}
PPS=${KBT_NIC_PPS:-200000}
BFD=${KBT_NIC_BFD:-100}
SETTLE=${KBT_NIC_SETTLE:-5}
read -r -a KINDS <<<"${KBT_NIC_KINDS:-none udp syn syn22 bgp arp udp-off syn-off}"
kbt_cpus
for tool in jq python3 bird birdc; do command -v "$tool" >/dev/null || die "missing tool: $tool"; done
[ -x "$TOP/bin/kbridge-refapp" ] || die "bin/kbridge-refapp missing: make build"

work=$(mktemp -d /tmp/kbt-nic.XXXXXX)
cfg=$work/kbridge.yaml spec=$work/flood.spec
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	if [ "${KBT_NIC_KEEP:-0}" != 1 ]; then
		"$KBT_DIR/bgp.sh" down >/dev/null 2>&1 || true
		"$KBT_DIR/down.sh" >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# write_config UNWANTED: the bed's configuration, copp.unwanted.enabled
# UNWANTED.
write_config() {
	cp "$KBT_DIR/kbridge.yaml" "$cfg.new"
	printf 'copp:\n  unwanted:\n    enabled: %s\n' "$1" >>"$cfg.new"
	mv "$cfg.new" "$cfg"
}
: >"$spec"
write_config true
KBRIDGE_CONFIG=$cfg KBT_FLOOD=$spec "$KBT_DIR/up.sh" >/dev/null
kb=$(cat "$KBT_RUN/kbridge.pid") app=$(cat "$KBT_RUN/refapp.pid")
# The wire's frames reach the app addressed to kb0's MAC (kb0 answers the
# peer's ARP): so are the flood's, or the kernel drops them as another
# host's before any socket or answer.
mac=$(ip netns exec "$KBT_NS_DUT" cat /sys/class/net/kb0/address)
if [ "$BFD" -gt 0 ]; then KBT_BGP_BFD=$BFD "$KBT_DIR/bgp.sh" up >/dev/null; else "$KBT_DIR/bgp.sh" up >/dev/null; fi
unwanted=true

# The session's server on kb0's port 22 and its client in the peer, both
# started as plain commands so that $! is theirs.
DUT=(ip netns exec "$KBT_NS_DUT" "${KBT_PIN_OTHER[@]}")
PEER=(ip netns exec "$KBT_NS_PEER" "${KBT_PIN_OTHER[@]}")
"${DUT[@]}" python3 "$TOP/tests/bench/pingpong.py" server "$KBT_DUT_IP" 22 >"$work/server.log" 2>&1 &
pids+=($!)
sleep 1
"${PEER[@]}" python3 -u "$TOP/tests/bench/pingpong.py" session "$KBT_DUT_IP" 22 200 >"$work/session.log" 2>&1 &
session=$!
pids+=("$session")
for _ in $(seq 300); do grep -qx connected "$work/session.log" 2>/dev/null && break; sleep 0.1; done
grep -qx connected "$work/session.log" || die "the session did not connect: $(cat "$work/session.log")"
sleep 1

stats() { "$TOP/bin/kbridge" stats --socket "$KBT_RUN/kbridge.sock"; }
ticks() { awk '{ print $14 + $15 }' "/proc/$kb/stat"; }
softirq0() { awk '$1 == "cpu0" { print $8 }' /proc/stat; }
# gen: the generator's "flood" line now, as KIND=MADE/QUEUED words.
gen() {
	local n
	n=$(grep -c '^kbridge-refapp: flood udp=' "$KBT_RUN/refapp.log" || true)
	kill -USR1 "$app"
	for _ in $(seq 50); do
		[ "$(grep -c '^kbridge-refapp: flood udp=' "$KBT_RUN/refapp.log" || true)" -gt "$n" ] && break
		sleep 0.05
	done
	grep '^kbridge-refapp: flood udp=' "$KBT_RUN/refapp.log" | tail -1 | cut -d' ' -f3-
}
# window: ends the session's window, prints its line ("p50 p99 max n"), or
# "lost" once the session has ended (its last line is then Python's error).
window() {
	local n line
	n=$(wc -l <"$work/session.log")
	kill -USR1 "$session" 2>/dev/null || true
	for _ in $(seq 100); do
		[ "$(wc -l <"$work/session.log")" -gt "$n" ] && break
		sleep 0.05
	done
	line=$(tail -1 "$work/session.log")
	if [[ $line =~ ^[0-9.]+\ [0-9.]+\ [0-9.]+\ [0-9]+$ ]]; then echo "$line"; else echo lost; fi
}
flood() { # KIND PPS: the generator makes KIND at PPS (none: nothing)
	if [ "$1" = none ]; then : >"$spec"; else echo "mac=$mac $1=$2" >"$spec"; fi
	kill -USR2 "$app"
}
bgp_since() { { "$KBT_DIR/bgp.sh" state 2>/dev/null || true; } | awk '$1 == "dut" && $2 == "Established" { print $3 }'; }
bfd_since() {
	[ "$BFD" -gt 0 ] || { echo -; return; }
	birdc -s "$KBT_RUN/bgp/dut.ctl" show bfd sessions 2>/dev/null | awk -v p="$KBT_PEER_IP" '$1 == p && $3 == "Up" { print $4 }'
}
class_of() { # the class a kind's frames fall in
	case $1 in
	udp | syn | bgp) echo unwanted ;;
	syn22) echo management_syn ;;
	arp) echo neighbor ;;
	udp-off | syn-off) echo default ;;
	none) echo default ;;
	esac
}

declare -A R
measure() { # KIND[@PPS] ROUND
	local k=$1 r=$2 kind=${1%@*} rate=$PPS base want s0 s1 g0 g1 c0 c1 i0 i1 t0 t1 b0 b1 f0 f1 hz line
	[ "$kind" != "$k" ] && rate=${k#*@}
	base=${kind%-off}
	if [ "$kind" != "$base" ] && [ "$unwanted" = true ]; then
		write_config false; kbt_reload "$kb" || die "kbridge did not reload"; unwanted=false
	elif [ "$kind" = "$base" ] && [ "$unwanted" = false ]; then
		write_config true; kbt_reload "$kb" || die "kbridge did not reload"; unwanted=true
	fi
	b0=$(bgp_since) f0=$(bfd_since)
	flood "$base" "$rate"
	sleep 1
	window >/dev/null
	s0=$(stats) g0=$(gen) c0=$(ticks) i0=$(softirq0) t0=$(date +%s.%N)
	sleep "$SECS"
	line=$(window)
	s1=$(stats) g1=$(gen) c1=$(ticks) i1=$(softirq0) t1=$(date +%s.%N)
	flood none 0
	sleep "$SETTLE"
	b1=$(bgp_since) f1=$(bfd_since)
	hz=$(getconf CLK_TCK)
	R[$k,$r,rtt]=$line
	R[$k,$r,cpu]=$(echo "scale=1; ($c1 - $c0) * 100 / $hz / ($t1 - $t0)" | bc)
	R[$k,$r,sirq]=$(echo "scale=2; ($i1 - $i0) * 100 / $hz / ($t1 - $t0)" | bc)
	if [ -n "$b0" ] && [ "$b0" = "$b1" ]; then R[$k,$r,bgp]=kept; else R[$k,$r,bgp]=lost; fi
	if [ "$BFD" -le 0 ]; then R[$k,$r,bfd]=-; elif [ -n "$f0" ] && [ "$f0" = "$f1" ]; then R[$k,$r,bfd]=kept; else R[$k,$r,bfd]=lost; fi
	want=$(class_of "$kind")
	# made queued (the generator's, for this kind), the class's passed and
	# policed, the app's drops, bgp+bfd policed, unaccounted.
	R[$k,$r,ctr]=$(jq -rn --argjson a "$s0" --argjson b "$s1" --arg g0 "$g0" --arg g1 "$g1" \
		--arg kind "$base" --arg class "$want" --argjson secs "$SECS" '
		def classes: ["control","neighbor","management","default","management_syn","bgp","bfd","link","unwanted"];
		def idx(c): classes | index(c);
		def sum(s; f): [s.queues[] | f] | add // 0;
		def d(f): sum($b; f) - sum($a; f);
		def gen(s): (s | split(" ") | map(split("=")) | map({(.[0]): (.[1] | split("/") | map(tonumber))}) | add)[$kind] // [0, 0];
		(if $kind == "none" then [0, 0] else [gen($g1)[0] - gen($g0)[0], gen($g1)[1] - gen($g0)[1]] end) as $gq |
		d(.copp.passed[idx($class)]) as $p | d(.copp.policed[idx($class)]) as $q |
		d(.app.to_kernel_dropped) as $dr |
		(d(.copp.policed[idx("bgp")]) + d(.copp.policed[idx("bfd")]) + d(.app.to_kernel_dropped_control // 0)) as $ctl |
		"\($gq[0]) \($gq[1]) \($p) \($q) \($dr) \($ctl) \($gq[1] - $p - $q)"')
	say "round $r, $k: rtt p50/p99/max/n ${R[$k,$r,rtt]} us; kbridge cpu ${R[$k,$r,cpu]}%, cpu0 softirq ${R[$k,$r,sirq]}%; made/queued/$want passed/policed/app dropped/bgp+bfd dropped/unaccounted ${R[$k,$r,ctr]}; bgp ${R[$k,$r,bgp]}, bfd ${R[$k,$r,bfd]}"
}

for ((r = 1; r <= ROUNDS; r++)); do
	order=("${KINDS[@]}")
	if [ $((r % 2)) -eq 0 ]; then
		order=()
		for ((i = ${#KINDS[@]} - 1; i >= 0; i--)); do order+=("${KINDS[$i]}"); done
	fi
	for k in "${order[@]}"; do measure "$k" "$r"; done
done

range() { tr ' ' '\n' | grep . | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (lo == hi) printf "%s", lo; else printf "%s-%s", lo, hi }'; }
echo "| flood | class | made kframes/s | queued kframes/s | policed kframes/s | app dropped | unaccounted | session rtt p50/p99 us | max ms | kbridge CPU % | CPU 0 softirq % | BGP, BFD | bgp+bfd dropped |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"
for k in "${KINDS[@]}"; do
	mk='' qu='' po='' dr='' un='' p50='' p99='' mx='' cpu='' sq='' bgp='' ctl='' lost=0
	for ((r = 1; r <= ROUNDS; r++)); do
		read -r a b c d e f g <<<"${R[$k,$r,ctr]}"
		mk+="$(echo "scale=1; $a / $SECS / 1000" | bc) " qu+="$(echo "scale=1; $b / $SECS / 1000" | bc) "
		po+="$(echo "scale=1; $d / $SECS / 1000" | bc) " dr+="$e " ctl+="$f " un+="$g "
		read -r a b c _ <<<"${R[$k,$r,rtt]}"
		if [ "$a" = lost ]; then
			lost=$((lost + 1))
		else
			p50+="$a " p99+="$b " mx+="$(echo "scale=2; $c / 1000" | bc) "
		fi
		cpu+="${R[$k,$r,cpu]} " sq+="${R[$k,$r,sirq]} " bgp+="${R[$k,$r,bgp]}/${R[$k,$r,bfd]} "
	done
	echo "| $k | $(class_of "${k%@*}") | $(range <<<"$mk") | $(range <<<"$qu") | $(range <<<"$po") | $(range <<<"$dr") | $(range <<<"$un") | $(range <<<"$p50")/$(range <<<"$p99")$([ "$lost" = 0 ] || echo ", session lost in $lost") | $(range <<<"$mx") | $(range <<<"$cpu") | $(range <<<"$sq") | $(echo "$bgp" | tr ' ' '\n' | grep . | sort -u | paste -sd,) | $(range <<<"$ctl") |"
done
echo
echo "$ROUNDS rounds, interleaved; ${SECS} s windows at $PPS frames/s; BFD ${BFD} ms; ranges min-max over rounds; kbridge $(git -C "$TOP" rev-parse --short HEAD 2>/dev/null || echo '?'); $(date -u +%FT%TZ)"
