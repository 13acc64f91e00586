#!/usr/bin/env bash
# ab-cost.sh TREE_A TREE_B [ROUNDS]: what a frame costs, two builds of kbridge
# compared on the ring bed in interleaved rounds (A B, then B A, ...). Each
# measurement brings the bed up from that tree (its own bin/ and default
# config) and runs iperf3 each way at a fixed rate (RATE, default 1500M; SECS,
# default 10), below what either build can move, so that both move the same
# traffic and what differs is what it costs: kbridge's CPU (utime+stime from
# /proc/PID/stat) and CPU 0's busy time (/proc/stat), each per Gbit/s received.
# A throughput run (make bench) lets the CPU kbridge saves go to the workload,
# where the machine's noise hides it; at a fixed rate it shows as CPU. kbridge
# runs with policy.mode POLICY (default interrupt): adaptive spins through a
# paced flow's gaps, so its CPU would be the spin's, not the frames'. Also
# kbridge's CPU time per data frame of the direction (utime+stime over the
# frames the app's NIC counted). COST_LOCK=FILE: flock FILE around each
# measurement; EVENTS=1: what kbridge did meanwhile, per data frame (both in
# cost-lib.sh). B_ENV="VAR=VALUE ...": B's bed brought up with these on top,
# e.g. B_ENV=KBT_SW_OFFLOAD=1 with A and B the same tree: the offload bed
# against the plain one; both beds inherit the caller's environment
# (KBT_SW_OFFLOAD=1 ab-cost.sh A B: two trees on the offload bed). RATE may list rates, each measured in turn on every
# bed ("1500M 0"; 0: unpaced, iperf3 -b 0). COUNTERS=1: per measurement, the
# bytes a packet kbridge moved each way, its offload counters and the app's
# merging (cost-lib.sh's counters_*), cheap enough to leave the CPU figures be.
# Root; run it under nothing else (tests/README.md). Progress on stderr; one
# line per measurement, then a min-max summary, on stdout.
# Example: git worktree add /work/wt/before <rev> && make -C /work/wt/before build &&
#   tests/testbed/ab-cost.sh /work/wt/before . 3
set -euo pipefail
A=$1 B=$2 ROUNDS=${3:-3} RATES=${RATE:-1500M} SECS=${SECS:-10} POLICY=${POLICY:-interrupt}
RUN=${KBT_RUN:-/run/kbt}
# The ring bed with one port and each tree's own binaries, or the comparison
# means nothing.
. "$(dirname "$0")/cost-lib.sh"
cost_start ab-cost.sh KBT_PORTS KBT_KBRIDGE KBT_APP KBRIDGE_CONFIG

for ((r = 1; r <= ROUNDS; r++)); do
	order="A B"; [ $((r % 2)) -eq 0 ] && order="B A"
	for v in $order; do
		t=$A; [ "$v" = B ] && t=$B
		rev=$(git -C "$t" describe --always --dirty)
		cost_lock
		tree=$t # only now: the exit trap takes down tree's bed
		env=(); [ "$v" = B ] && read -ra env <<<"${B_ENV:-}"
		cost_bed_up "$t" "round $r: $v ($rev)" "${env[@]}" || exit 1
		for RATE in $RATES; do for dir in up down; do
			flags=; [ $dir = down ] && flags=-R
			[ "${EVENTS:-}" != 1 ] || events_start "$t" kbridge
			[ "${COUNTERS:-}" != 1 ] || counters_snap "$t" 0
			res=$(cost_measure "$pid" "$flags") || { echo "ab-cost.sh: round $r $v $dir: the measurement failed" >&2; exit 1; }
			read -r gbit k c u s fin fout <<<"$res"
			cost_check_rate "$gbit" "round $r $v $dir"
			# up: data to the peer (kbt-nic sends it); down: from the peer.
			data=$fout; [ $dir = down ] && data=$fin
			ns=$(((u + s) / data))
			line=$(printf '%s %s %s %s %s %s %s %s %s' "$r" "$v" "$rev" "$dir" "$gbit" "$k" "$c" "$ns" "$RATE")
			echo "$line" >>"$out"
			printf 'round %d %s (%s) %-4s at %s: %.2f Gbit/s, kbridge %s%% of a core (%s ns a frame), CPU 0 %s%% busy\n' \
				"$r" "$v" "$rev" "$dir" "$RATE" "$gbit" "$k" "$ns" "$c"
			[ "${EVENTS:-}" != 1 ] || events_print "$t" kbridge "$data"
			[ "${COUNTERS:-}" != 1 ] || { counters_snap "$t" 1; counters_print; }
		done; done
		make -C "$t" testbed-down >/dev/null 2>&1
		tree=
		cost_unlock
	done
done

echo
echo "min-max over $ROUNDS rounds at $RATES (0: unpaced) for ${SECS}s, policy.mode $POLICY; per Gbit/s: % of a core per Gbit/s received"
python3 - "$out" <<'EOF'
import sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r, v, rev, d, g, k, c, ns, rate = line.split()
    rows[(v, rev, d, rate)].append((float(g), float(k), float(c), int(ns)))
print("| build | direction | rate | Gbit/s | kbridge, % of a core | kbridge per Gbit/s | kbridge, ns a frame | CPU 0 busy, % | CPU 0 per Gbit/s |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|")
rng = lambda xs, f: "%s-%s" % (f % min(xs), f % max(xs))
for (v, rev, d, rate), m in sorted(rows.items(), key=lambda x: (x[0][3], x[0][2], x[0][0])):
    g = [x[0] for x in m]; k = [x[1] for x in m]; c = [x[2] for x in m]
    print("| %s (%s) | %s | %s | %s | %s | %s | %s | %s | %s |" % (v, rev, "to the peer" if d == "up" else "from the peer", rate,
        rng(g, "%.2f"), rng(k, "%.1f"), rng([a / b for a, b in zip(k, g)], "%.1f"), rng([x[3] for x in m], "%d"),
        rng(c, "%.0f"), rng([a / b for a, b in zip(c, g)], "%.1f")))
EOF
