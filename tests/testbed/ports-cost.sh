#!/usr/bin/env bash
# ports-cost.sh: what a second port costs when each port has a kbridge of its
# own (kbridge@NAME.service, one instance per port), on the ring bed with two
# ports (up.sh KBT_PORTS=2). The bed comes up once; each round measures
#   idle: each kbridge's CPU over KBT_PC_IDLE seconds (default 20) with no
#         traffic (utime + stime from /proc, % of one core), its threads
#         and its resident anonymous memory (RssAnon; the app's hugepages it
#         maps are not counted there, they are the app's);
#   nfs:  an NFS `ls -R` of the export (6001 entries, checked) through kb0
#         alone, through kb1 alone, and two at once (each listing's own
#         time): one through each port (two kbridges), both through kb0
#         (one kbridge), both through kbt-direct (the floor, no forwarder);
# alternating which port is listed first. Prints a table of ranges over the
# rounds (KBT_PC_ROUNDS, default 3). Nothing is asserted. Root only; the bed
# is claimed as bench scripts claim it, and taken down at the end
# (KBT_PC_KEEP=1 leaves it up).
set -euo pipefail
KBT_DIR=$(cd "$(dirname "$0")" && pwd)
. "$KBT_DIR/lib.sh"
need_root
kbt_cpus
ROUNDS=${KBT_PC_ROUNDS:-3}
IDLE=${KBT_PC_IDLE:-20}
for tool in nfs-ls bc; do command -v "$tool" >/dev/null || die "missing tool: $tool"; done
kbt_claim_bed
cleanup() { [ "${KBT_PC_KEEP:-0}" = 1 ] || "$KBT_DIR/down.sh" >/dev/null 2>&1 || true; }
trap cleanup EXIT
KBT_PORTS=2 "$KBT_DIR/up.sh" >/dev/null
k0=$(cat "$KBT_RUN/kbridge.pid")
k1=$(cat "$KBT_RUN/kbridge-kb1.pid")
tck=$(getconf CLK_TCK)

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
threads() { awk '/^Threads:/ { print $2 }' "/proc/$1/status"; }
rss_mb() { awk '/^RssAnon:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }

# nfs NS IP OUT: one full listing, checked; its seconds go to file OUT.
nfs() {
	local t0 t1 n
	t0=$(date +%s.%N)
	n=$(ip netns exec "$1" "${KBT_PIN_OTHER[@]}" nfs-ls -R "nfs://$2/export?version=4" | wc -l)
	t1=$(date +%s.%N)
	[ "$n" -ge "$KBT_TREE_ENTRIES" ] || die "nfs-ls from $1 to $2 listed $n entries, want $KBT_TREE_ENTRIES"
	printf '%.2f\n' "$(echo "$t1 - $t0" | bc)" >"$3"
}

declare -A R
tmp=$(mktemp -d /tmp/kbt-ports.XXXXXX)
# The server's first listing after a start reads its disk: not measured.
nfs "$KBT_NS_DUT" "$KBT_PEER_IP" "$tmp/warm"
nfs "$KBT_NS_DIRECT" "$KBT_ALT_IP" "$tmp/warm"
for ((r = 1; r <= ROUNDS; r++)); do
	a0=$(ticks "$k0") a1=$(ticks "$k1") t0=$(date +%s.%N)
	sleep "$IDLE"
	b0=$(ticks "$k0") b1=$(ticks "$k1") t1=$(date +%s.%N)
	el=$(echo "$t1 - $t0" | bc)
	R[$r,cpu0]=$(echo "scale=2; ($b0 - $a0) * 100 / $tck / $el" | bc)
	R[$r,cpu1]=$(echo "scale=2; ($b1 - $a1) * 100 / $tck / $el" | bc)
	R[$r,thr0]=$(threads "$k0") R[$r,thr1]=$(threads "$k1")
	R[$r,rss0]=$(rss_mb "$k0") R[$r,rss1]=$(rss_mb "$k1")
	if [ $((r % 2)) -eq 1 ]; then
		nfs "$KBT_NS_DUT" "$KBT_PEER_IP" "$tmp/a0"
		nfs "$KBT_NS_DUT" "$KBT_PEER2_IP" "$tmp/a1"
	else
		nfs "$KBT_NS_DUT" "$KBT_PEER2_IP" "$tmp/a1"
		nfs "$KBT_NS_DUT" "$KBT_PEER_IP" "$tmp/a0"
	fi
	nfs "$KBT_NS_DIRECT" "$KBT_ALT_IP" "$tmp/d"
	# Two listings at once: one through each port (two kbridges), two
	# through kb0 (one kbridge), two through kbt-direct (the floor).
	at_once() { # NS IP-A IP-B OUT-A OUT-B
		nfs "$1" "$2" "$4" &
		local p=$!
		nfs "$1" "$3" "$5"
		wait "$p"
	}
	at_once "$KBT_NS_DUT" "$KBT_PEER_IP" "$KBT_PEER2_IP" "$tmp/b0" "$tmp/b1"
	at_once "$KBT_NS_DUT" "$KBT_PEER_IP" "$KBT_PEER_IP" "$tmp/s0" "$tmp/s1"
	at_once "$KBT_NS_DIRECT" "$KBT_ALT_IP" "$KBT_ALT_IP" "$tmp/d0" "$tmp/d1"
	for f in a0 a1 d b0 b1 s0 s1 d0 d1; do R[$r,$f]=$(cat "$tmp/$f"); done
	R[$r,s]="${R[$r,s0]} ${R[$r,s1]}" R[$r,dd]="${R[$r,d0]} ${R[$r,d1]}"
	say "round $r: idle CPU kb0 ${R[$r,cpu0]}% kb1 ${R[$r,cpu1]}%; threads ${R[$r,thr0]}/${R[$r,thr1]}; RssAnon ${R[$r,rss0]}/${R[$r,rss1]} MB; ls -R alone kb0 ${R[$r,a0]} s kb1 ${R[$r,a1]} s direct ${R[$r,d]} s; two at once: kb0+kb1 ${R[$r,b0]}/${R[$r,b1]} s, both through kb0 ${R[$r,s]} s, both direct ${R[$r,dd]} s"
done
rm -rf "$tmp"

range() { tr ' ' '\n' | grep . | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (lo == hi) printf "%s", lo; else printf "%s-%s", lo, hi }'; }
col() { local s='' r; for ((r = 1; r <= ROUNDS; r++)); do s+="${R[$r,$1]} "; done; range <<<"$s"; }
echo "| | kbridge of kb0 | kbridge of kb1 (instance) |"
echo "|---|---:|---:|"
echo "| idle CPU, % of a core (${IDLE} s) | $(col cpu0) | $(col cpu1) |"
echo "| threads | $(col thr0) | $(col thr1) |"
echo "| RssAnon, MB | $(col rss0) | $(col rss1) |"
echo "| NFS ls -R alone, s | $(col a0) | $(col a1) |"
echo "| NFS ls -R, one through each port at once, s | $(col b0) | $(col b1) |"
echo
echo "Two listings at once through kb0 (one kbridge): $(col s) s; through kbt-direct (the floor): $(col dd) s."
echo "One listing through kbt-direct alone: $(col d) s. $ROUNDS rounds; ranges are min-max; kbridge $(git -C "$KBT_DIR" rev-parse --short HEAD 2>/dev/null || echo '?'); $(date -u +%FT%TZ)"
