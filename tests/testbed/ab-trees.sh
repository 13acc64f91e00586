#!/usr/bin/env bash
# ab-trees.sh TREE_A TREE_B [ROUNDS]: two builds of kbridge compared on the ring
# bed in interleaved rounds (A B, then B A, ...). Each measurement brings the bed
# up from that tree (its own bin/: reference app and kbridge, the default
# config), runs a continuous and a cold (10 requests/s) sockperf ping-pong
# through kb0, reads kbridge's parks, and takes the bed down. Root; run it under
# nothing else (tests/README.md). SECS (default 8) sets the ping-pong's length.
# Example: git worktree add /tmp/before <rev> && make -C /tmp/before build &&
#   tests/testbed/ab-trees.sh /tmp/before . 3
set -euo pipefail
A=$1 B=$2 ROUNDS=${3:-2} SECS=${SECS:-8}
pp() {
	ip netns exec kbt-dut taskset -c 0 sockperf pp --tcp -i 198.18.0.1 -p 11111 -t "$1" "${@:2}" 2>&1 |
		awk '/percentile 50.000/ { p50 = $NF } /percentile 99.000/ { p99 = $NF } END { printf "%s %s", p50, p99 }'
}
parks() { "$1/bin/kbridge" stats --config "$1/tests/testbed/kbridge.yaml" 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); q=d["queues"][0] if "queues" in d else d; print(q.get("parks", q.get("snapshot",{}).get("parks","?")))' 2>/dev/null || echo "?"; }
for ((r = 1; r <= ROUNDS; r++)); do
	order="A B"; [ $((r % 2)) -eq 0 ] && order="B A"
	for v in $order; do
		t=$A; [ "$v" = B ] && t=$B
		make -C "$t" testbed-down >/dev/null 2>&1 || true
		make -C "$t" testbed-up >"${TMPDIR:-/tmp}/ab-trees-up.log" 2>&1 || { tail "${TMPDIR:-/tmp}/ab-trees-up.log"; exit 1; }
		pp 2 >/dev/null  # warm
		p0=$(parks "$t")
		res=$(pp "$SECS"); cold=$(pp 10 --mps 10)
		p1=$(parks "$t")
		echo "round $r $v ($(git -C "$t" log -1 --format=%h)): pp p50/p99 $res us, cold p50/p99 $cold us, parks $p0 -> $p1"
		make -C "$t" testbed-down >/dev/null 2>&1
	done
done
