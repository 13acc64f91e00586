#!/bin/bash
# Runs every build script against one kbridge checkout, one after the other,
# and prints their result lines (the lead's one command).
# usage: validate-all.sh KBRIDGE_TREE
T=${1:?usage: $0 KBRIDGE_TREE}
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
: "${KB_APPS_OUT:?set KB_APPS_OUT to a work directory (README.md)}"
./kbprefix.sh "$T" >/dev/null || exit 1
export KB_SKIP_PREFIX=1
rc=0
for s in examples-kni test-kni libmoon dperf gatekeeper dpvs pcapplusplus f-stack dpvs-2411; do
	t0=$(date +%s)
	./build-$s.sh "$T" 2>&1 | grep -v '^kbridge: '
	[ "${PIPESTATUS[0]}" = 0 ] || rc=1
	echo "  ($s: $(( $(date +%s) - t0 )) s)"
done
exit $rc
