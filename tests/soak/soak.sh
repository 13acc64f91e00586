#!/usr/bin/env bash
# make soak (issue 9; root; not in CI): builds kbt-soak (tests/soak), waits
# until the namespace test bed is free and claims it (kbt_claim_bed: holds
# /run/kbt.lock, so other users' up.sh wait), then runs kbt-soak, which
# brings the bed up, runs the soak for SOAK_MINUTES (default 30) and tears
# the bed down. The report goes to stdout and results/soak-<UTC>.md.
#
# Variables:
#   SOAK_MINUTES=N         length of the run (default 30)
#   SOAK_WINDOW_MINUTES=N  reporting window (default 5)
#   SOAK_BED_WAIT=S        how long to wait for the bed to be free (default 3600)
# Exit status: 0 pass; 1 a leak, a data mismatch or a crash; 2 set-up failed.
set -euo pipefail
# shellcheck source=tests/testbed/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../testbed/lib.sh"
need_root
cd "$KBT_ROOT"
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
"$GO" build -o bin/kbt-soak ./tests/soak
say "soak: waiting until the test bed is free (up to ${SOAK_BED_WAIT:-3600}s), then claiming it"
kbt_claim_bed "${SOAK_BED_WAIT:-3600}"
export KBT_SOAK_COMMAND=${KBT_SOAK_COMMAND:-"SOAK_MINUTES=${SOAK_MINUTES:-30} make soak"}
# fd 9 (the claim) stays open in kbt-soak; KBT_LOCK_HELD=1 tells up.sh and
# down.sh not to take the lock again.
exec bin/kbt-soak -root "$KBT_ROOT"
