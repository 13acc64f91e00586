#!/usr/bin/env bash
# Ensure at least N (default 512, or $KBT_HUGEPAGES) 2 MB hugepages are reserved
# and hugetlbfs is mounted on /dev/hugepages. Idempotent; never lowers a reservation.
#   usage: tests/testbed/hugepages.sh [N]
set -euo pipefail
# shellcheck source=tests/testbed/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root

want=${1:-${KBT_HUGEPAGES:-512}}
[[ $want =~ ^[0-9]+$ ]] || die "usage: $0 [number of 2 MB pages]"
nr=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
[ -w "$nr" ] || die "$nr not available: this kernel has no 2 MB hugepages"

have=$(cat "$nr")
if [ "$have" -lt "$want" ]; then
	say "reserving $want 2 MB hugepages (had $have)"
	echo "$want" >"$nr"
	have=$(cat "$nr")
	# Memory fragmentation can make the first attempt fall short; compact and retry once.
	if [ "$have" -lt "$want" ] && [ -w /proc/sys/vm/compact_memory ]; then
		echo 1 >/proc/sys/vm/compact_memory
		echo "$want" >"$nr"
		have=$(cat "$nr")
	fi
	[ "$have" -ge "$want" ] || die "could reserve only $have of $want 2 MB hugepages"
fi

if ! findmnt -n -t hugetlbfs /dev/hugepages >/dev/null 2>&1; then
	say "mounting hugetlbfs on /dev/hugepages"
	mkdir -p /dev/hugepages
	mount -t hugetlbfs -o pagesize=2M nodev /dev/hugepages
fi

free=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages)
say "hugepages: $have x 2 MB reserved, $free free, hugetlbfs on /dev/hugepages"
