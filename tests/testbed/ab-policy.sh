#!/usr/bin/env bash
# ab-policy.sh: compare two kbridge policies on one ring bed, interleaved.
#
#   tests/testbed/ab-policy.sh 'spin: 20us' 'spin: 50us'
#
# Each argument is YAML put under `policy:` of the bed's kbridge.yaml (keys
# separated by ';', e.g. 'mode: interrupt; park_timeout: 50ms'). The bed comes up
# once; every round applies A, measures, applies B (live: SIGHUP reloads the
# policy), measures, and the next round runs B before A, so that drift on this
# noisy machine falls on both alike. The floor, kbt-direct, is measured in
# every round too. Per variant and round:
#   nfs-ls -R of the export (6001 entries, checked) through kb0 and direct, s
#   sockperf pp --tcp -t T:  one-way p50 / p99, us
#   sockperf pp --tcp --mps 10 -t C (cold: a request every 100 ms):  one-way
#   p50 / p99, us
# and a summary with each figure's range over the rounds. Nothing is asserted:
# read the ranges, and claim a difference only where they do not overlap.
#
# Variables: KBT_AB_ROUNDS (4), KBT_AB_SECONDS (T, 3), KBT_AB_COLD_SECONDS (C, 10),
# KBT_AB_KEEP=1 leaves the bed up. Root only; the bed is claimed as up.sh
# claims it, so it waits for another user of the bed.
set -euo pipefail
KBT_DIR=$(cd "$(dirname "$0")" && pwd)
. "$KBT_DIR/lib.sh"

[ $# -eq 2 ] || die "usage: $0 'POLICY-A' 'POLICY-B' (YAML under policy:, keys separated by ';')"
A=$1 B=$2
ROUNDS=${KBT_AB_ROUNDS:-4}
SECS=${KBT_AB_SECONDS:-3}
COLD_SECS=${KBT_AB_COLD_SECONDS:-10}
kbt_cpus
for tool in sockperf nfs-ls; do command -v "$tool" >/dev/null || die "missing tool: $tool"; done

work=$(mktemp -d /tmp/kbt-ab.XXXXXX)
cfg=$work/kbridge.yaml
cleanup() {
	[ "${KBT_AB_KEEP:-0}" = 1 ] || "$KBT_DIR/down.sh" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

# write_config POLICY: the bed's config with POLICY appended under policy:.
write_config() {
	awk -v pol="$1" '
		{ print }
		/^policy:/ { n = split(pol, kv, ";"); for (i = 1; i <= n; i++) { sub(/^ +/, "", kv[i]); if (kv[i] != "") print "  " kv[i] } }
	' "$KBT_DIR/kbridge.yaml" >"$cfg.new"
	mv "$cfg.new" "$cfg"
}

write_config "$A"
KBRIDGE_CONFIG=$cfg "$KBT_DIR/up.sh" >/dev/null
pid=$(cat "$KBT_RUN/kbridge.pid")

# apply POLICY: rewrite the config and reload it; wait for kbridge to say so.
apply() {
	write_config "$1"
	kbt_reload "$pid" || die "kbridge did not reload '$1' (see $KBT_RUN/kbridge.log)"
}

# nfs NS IP: seconds for one full listing, checked.
nfs() {
	local t0 t1 n
	t0=$(date +%s.%N)
	n=$(ip netns exec "$1" "${KBT_PIN_OTHER[@]}" nfs-ls -R "nfs://$2/export?version=4" | wc -l)
	t1=$(date +%s.%N)
	[ "$n" -ge 6001 ] || die "nfs-ls from $1 listed $n entries, want 6001"
	printf '%.2f\n' "$(echo "$t1 - $t0" | bc)"
}

# pp SECONDS [--mps 10]: "p50 p99" one-way, us, through kb0.
pp() {
	local secs=$1
	shift
	ip netns exec "$KBT_NS_DUT" "${KBT_PIN_OTHER[@]}" sockperf pp --tcp -i "$KBT_PEER_IP" -p 11111 -t "$secs" "$@" 2>&1 |
		awk '/percentile 50.000/ { p50 = $NF } /percentile 99.000/ { p99 = $NF } END { if (p50 == "") exit 1; printf "%.1f %.1f\n", p50, p99 }'
}

declare -A R
measure() { # variant round
	local v=$1 r=$2
	R[$v,$r,nfs]=$(nfs "$KBT_NS_DUT" "$KBT_PEER_IP")
	R[$v,$r,direct]=$(nfs "$KBT_NS_DIRECT" "$KBT_ALT_IP")
	R[$v,$r,pp]=$(pp "$SECS")
	R[$v,$r,cold]=$(pp "$COLD_SECS" --mps 10)
	say "round $r, $v: nfs ${R[$v,$r,nfs]} s (direct ${R[$v,$r,direct]}), pp ${R[$v,$r,pp]}, cold ${R[$v,$r,cold]}"
}

for ((r = 1; r <= ROUNDS; r++)); do
	order="A B"
	[ $((r % 2)) -eq 0 ] && order="B A"
	for v in $order; do
		if [ "$v" = A ]; then apply "$A"; else apply "$B"; fi
		measure "$v" "$r"
	done
done

range() { tr ' ' '\n' | grep . | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (lo == hi) printf "%s", lo; else printf "%s-%s", lo, hi }'; }
echo "| variant | policy | NFS ls -R s | x direct | pp p50 us | pp p99 us | cold p50 us | cold p99 us |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for v in A B; do
	pol=$A
	[ "$v" = B ] && pol=$B
	nfs_s='' ratio='' p50='' p99='' c50='' c99=''
	for ((r = 1; r <= ROUNDS; r++)); do
		nfs_s+="${R[$v,$r,nfs]} "
		ratio+="$(echo "scale=2; ${R[$v,$r,nfs]} / ${R[$v,$r,direct]}" | bc) "
		read -r a b <<<"${R[$v,$r,pp]}"
		p50+="$a " p99+="$b "
		read -r a b <<<"${R[$v,$r,cold]}"
		c50+="$a " c99+="$b "
	done
	echo "| $v | \`$pol\` | $(range <<<"$nfs_s") | $(range <<<"$ratio") | $(range <<<"$p50") | $(range <<<"$p99") | $(range <<<"$c50") | $(range <<<"$c99") |"
done
echo
echo "$ROUNDS rounds, interleaved (odd rounds A then B, even rounds B then A); ranges are min-max over rounds; kbridge $(git -C "$KBT_DIR" rev-parse --short HEAD 2>/dev/null || echo '?'); $(date -u +%FT%TZ)"
