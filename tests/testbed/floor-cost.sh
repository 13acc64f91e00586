#!/usr/bin/env bash
# floor-cost.sh [ROUNDS]: what a frame costs kbridge against the floor, a
# plain C forwarder on the same rings and TAP (tests/floor), in interleaved
# rounds (kbridge floor, then floor kbridge, ...; default 4). Each
# measurement brings the ring bed up from this tree with kbridge or with
# bin/kbridge-floor in its place, then runs iperf3 each way at a fixed rate
# (RATE, default 1500M; SECS, default 10; kbridge at policy.mode POLICY,
# default interrupt, which parks after every empty poll as the floor does)
# and takes the forwarder's CPU time from /proc/PID/stat and the frames from
# the app's NIC (kbt-nic's counters). /proc splits user from system time by
# the tick that lands in each (HZ a second), which at this rate swings by
# half from run to run; the split given is a cpu-clock profile's instead
# (perf record -F 4999, a timer of its own): the share of samples in user
# space times the CPU time from /proc. The profiler adds kernel time of its
# own at each context switch of the forwarder's threads, the more the more
# they switch: SPLIT=0 measures without it, for CPU time to compare (the
# split then /proc's). Per frame means per data
# frame of the direction measured (1500-byte frames; the ACKs the other way
# are work too, counted in acks/frame). COST_LOCK=FILE: flock FILE around
# each measurement; EVENTS=1: what the forwarder did meanwhile, per data
# frame (both in cost-lib.sh).
# Root; run it under nothing else (tests/README.md). Progress on stderr; one
# line per measurement, then a min-max table, on stdout.
set -euo pipefail
ROUNDS=${1:-4} RATE=${RATE:-1500M} SECS=${SECS:-10} POLICY=${POLICY:-interrupt}
RUN=${KBT_RUN:-/run/kbt}
TREE=$(cd "$(dirname "$0")/../.." && pwd)
. "$(dirname "$0")/cost-lib.sh"
cost_start floor-cost.sh KBT_PORTS KBT_KBRIDGE KBRIDGE_CONFIG
make -C "$TREE" build >/dev/null

# split_start, then wait for splitpid and split_share: the share of the
# forwarder's cpu-clock samples in user space over SECS.
split_start() {
	perf record -q -e cpu-clock -F 4999 -p "$pid" -o "$out.data" -- sleep "$SECS" >/dev/null 2>&1 &
	splitpid=$!
}
split_share() {
	perf report -i "$out.data" --no-children --sort dso --stdio -g none 2>/dev/null |
		awk '/%/ { sub("%", "", $1); if ($2 == "[kernel.kallsyms]") k += $1; else u += $1 } END { printf "%.4f\n", u / (u + k) }'
}
rev=$(git -C "$TREE" describe --always --dirty)
for ((r = 1; r <= ROUNDS; r++)); do
	order="kbridge floor"; [ $((r % 2)) -eq 0 ] && order="floor kbridge"
	for v in $order; do
		cost_lock
		env=(); [ $v = floor ] && env=(KBT_KBRIDGE="$TREE/bin/kbridge-floor")
		tree=$TREE
		cost_bed_up "$TREE" "round $r: $v ($rev)" "${env[@]}" || exit 1
		for dir in up down; do
			flags=; [ $dir = down ] && flags=-R
			[ "${EVENTS:-}" != 1 ] || events_start "$TREE" "$v"
			[ "${SPLIT:-1}" = 0 ] || split_start
			res=$(cost_measure "$pid" "$flags") || { echo "floor-cost.sh: round $r $v $dir: the measurement failed" >&2; exit 1; }
			read -r gbit k _ u s fin fout <<<"$res"
			if [ "${SPLIT:-1}" != 0 ]; then
				# The CPU time is /proc's; its split, the profile's.
				wait "$splitpid" || true
				us=$(split_share)
				read -r u s <<<"$(python3 -c 'import sys; t = int(sys.argv[1]) + int(sys.argv[2]); f = float(sys.argv[3]); print(round(t * f), round(t * (1 - f)))' "$u" "$s" "$us")"
			fi
			cost_check_rate "$gbit" "round $r $v $dir"
			# up: data to the peer (kbt-nic sends it); down: from the peer.
			data=$fout acks=$fin; [ $dir = down ] && data=$fin acks=$fout
			echo "$r $v $dir $gbit $k $u $s $data $acks" >>"$out"
			python3 -c 'import sys; r, v, d, g, k, u, s, n, a = sys.argv[1:]; n = int(n)
print("round %s %-7s %-4s %.2f Gbit/s, %s%% of a core: user %.0f ns, system %.0f ns a frame (%d frames, %.2f acks a frame)" % (
    r, v, d, float(g), k, int(u) / n, int(s) / n, n, int(a) / n))' "$r" "$v" "$dir" "$gbit" "$k" "$u" "$s" "$data" "$acks"
			[ "${EVENTS:-}" != 1 ] || events_print "$TREE" "$v" "$data"
		done
		make -C "$TREE" testbed-down >/dev/null 2>&1
		tree=
		cost_unlock
	done
done

printf '\nmin-max over %s rounds at %s for %ss (%s; kbridge at policy.mode %s); ns per data frame\n' \
	"$ROUNDS" "$RATE" "$SECS" "$rev" "$POLICY"
python3 - "$out" <<'EOF'
import sys
rows = {}
for r, v, d, g, k, u, s, n, a in (l.split() for l in open(sys.argv[1])):
    n = int(n)
    rows.setdefault((d, v), []).append((float(g), float(k), int(u) / n, int(s) / n, int(a) / n))
rng = lambda xs, f: "%s-%s" % (f % min(xs), f % max(xs))
print("| direction | forwarder | Gbit/s | % of a core | user ns/frame | system ns/frame | acks/frame |")
print("|---|---|---:|---:|---:|---:|---:|")
for d in ("down", "up"):
    for v in ("kbridge", "floor"):
        m = rows.get((d, v))
        if not m:
            continue
        col = lambda i, f: rng([x[i] for x in m], f)
        print("| %s | %s | %s | %s | %s | %s | %s |" % ("from the peer" if d == "down" else "to the peer", v,
            col(0, "%.2f"), col(1, "%.1f"), col(2, "%.0f"), col(3, "%.0f"), col(4, "%.2f")))
    if rows.get((d, "kbridge")) and rows.get((d, "floor")):
        med = lambda xs: sorted(xs)[len(xs) // 2]
        kb, fl = rows[(d, "kbridge")], rows[(d, "floor")]
        print("| %s | kbridge / floor, medians | | | %.1fx | %.1fx | |" % ("from the peer" if d == "down" else "to the peer",
            med([x[2] for x in kb]) / max(med([x[2] for x in fl]), 1), med([x[3] for x in kb]) / max(med([x[3] for x in fl]), 1)))
EOF
