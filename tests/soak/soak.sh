#!/usr/bin/env bash
# make soak (root; not in CI): builds kbt-soak (tests/soak), waits
# until the namespace test bed is free and claims it (kbt_claim_bed: holds
# /run/kbt.lock, so other users' up.sh wait), then runs kbt-soak, which
# brings the bed up, runs the soak for SOAK_MINUTES (default 30) and tears
# the bed down. The report goes to stdout and results/soak-<UTC>.md.
#
# Variables:
#   SOAK_MODE=ring|vhost   the app side (default ring): the reference app
#                          (kbridge.h), or dpdk-testpmd on a virtio-user port
#                          with kbridge its vhost-user backend
#   SOAK_MINUTES=N         length of the run (default 30)
#   SOAK_WINDOW_MINUTES=N  reporting window (default 5)
#   SOAK_FUZZ_MINUTES=N    then FuzzVhostSequences against a kbridge of its
#                          own (make fuzz-vhost) for N minutes, its result
#                          added to the report (default 5; 0: none)
#   SOAK_BED_WAIT=S        how long to wait for the bed to be free (default 3600)
# Exit status: 0 pass; 1 a leak, a data mismatch, a crash or a fuzz finding;
# 2 set-up failed.
set -euo pipefail
# shellcheck source=tests/testbed/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../testbed/lib.sh"
need_root
cd "$KBT_ROOT"
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
MODE=${SOAK_MODE:-ring}
case $MODE in
ring | vhost) ;;
*) die "SOAK_MODE=$MODE: must be ring (the default) or vhost" ;;
esac
FUZZ_MINUTES=${SOAK_FUZZ_MINUTES:-5}
case $FUZZ_MINUTES in
'' | *[!0-9]*) die "SOAK_FUZZ_MINUTES=$FUZZ_MINUTES: must be a whole number of minutes" ;;
esac
"$GO" build -o bin/kbt-soak ./tests/soak
REPORT=$KBT_ROOT/results/soak-$(date -u +%Y%m%dT%H%M%SZ)-$MODE.md
mkdir -p "$KBT_ROOT/results"
export SOAK_MODE=$MODE
export KBT_SOAK_COMMAND=${KBT_SOAK_COMMAND:-"SOAK_MODE=$MODE SOAK_MINUTES=${SOAK_MINUTES:-30} SOAK_FUZZ_MINUTES=$FUZZ_MINUTES make soak"}
say "soak: waiting until the test bed is free (up to ${SOAK_BED_WAIT:-3600}s), then claiming it"
(
	kbt_claim_bed "${SOAK_BED_WAIT:-3600}"
	# fd 9 (the claim) stays open in kbt-soak; KBT_LOCK_HELD=1 tells up.sh
	# and down.sh not to take the lock again.
	exec bin/kbt-soak -root "$KBT_ROOT" -report "$REPORT"
) && rc=0 || rc=$?
[ "$rc" = 2 ] || [ "$rc" = 130 ] && exit "$rc"
[ "$FUZZ_MINUTES" = 0 ] && exit "$rc"

# The vhost-user fuzz target, longer than CI's seeds: its own bed (kbvh-*),
# its own kbridge; the soak's bed is down by now.
say "soak: FuzzVhostSequences for ${FUZZ_MINUTES} min (make fuzz-vhost)"
FUZZ_LOG=$(mktemp)
t0=$(date +%s)
if make --no-print-directory fuzz-vhost FUZZTIME="${FUZZ_MINUTES}m" >"$FUZZ_LOG" 2>&1; then
	fuzz=PASS
else
	fuzz=FAIL
	rc=1
fi
{
	echo
	echo "## The vhost-user fuzz target"
	echo
	echo "\`make fuzz-vhost FUZZTIME=${FUZZ_MINUTES}m\` (\`FuzzVhostSequences\`, tests/vhost: vhost-user message sequences against a running kbridge, one worker) after the soak, $(($(date +%s) - t0)) s: $fuzz. Its last lines:"
	echo
	echo '```'
	grep -E '^(fuzz:|--- |ok|FAIL|PASS)' "$FUZZ_LOG" | tail -n 6
	echo '```'
} >>"$REPORT"
tail -n 20 "$FUZZ_LOG"
rm -f "$FUZZ_LOG"
say "soak: report $REPORT"
exit "$rc"
