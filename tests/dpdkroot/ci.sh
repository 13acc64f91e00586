#!/usr/bin/env bash
# ci.sh [RELEASE...] [build] [root] [crossver]: the DPDK tests on the LTS
# releases beside the host's (.ci/run runs them after the host's, through
# make test). Releases: the roots (lib.sh; default all, 24.11 and 25.11);
# steps (default all three):
#   build     in each root, make build (kbridge, the reference app and the
#             KNI app, shared and linked with DPDK statically, kbridge.h as
#             C and C++, -Wall -Wextra -Werror) against its DPDK, with
#             its vhost-user message layout checked against DPDK's own
#             source where root.sh could fetch it (DPDK_SRC's default);
#   root      in each root, the packages that exercise DPDK: the app's
#             ABI's layout (include/), ring and vhost (their root tests),
#             tests/ring, tests/app, tests/restart, tests/kernel,
#             tests/requests, tests/link, tests/vhost,
#             tests/kni (the KNI app, shared and static, the compat shim's
#             error); in every root the test bed in mode static (tests/e2e,
#             the reference app linked with that DPDK statically); and in
#             the root of KBR_BED_RELEASE only (default the newest; "all"
#             for every root), the bed's other modes: tests/e2e in modes
#             ring, jumbo, ports and offload (KBT_MODE) and tests/vhost's
#             mode vhost (TestTestbed);
#   crossver  tests/crossver on the host, across the host's DPDK and each
#             named root's: each side's kbridge serving the others' apps in
#             mode vhost, and refusing them in ring mode (the host's bin/
#             must be built: make build).
# Root only, under the machine's root-test lock (tests/README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
cd "$here/../.."
releases=() steps=()
for a in "$@"; do
	case $a in
	build | root | crossver) steps+=("$a") ;;
	[0-9]*) kbr_suite "$a" >/dev/null && releases+=("$a") ;;
	*) kbr_die "unknown argument $a: releases (${KBR_RELEASES[*]}) and steps (build, root, crossver)" ;;
	esac
done
[ ${#releases[@]} -gt 0 ] || releases=("${KBR_RELEASES[@]}")
[ ${#steps[@]} -gt 0 ] || steps=(build root crossver)
# The bed's modes (NFS, iperf3 and the rest through the whole bed) run on
# one root, to keep .ci/run within its hour: what they add to the packages
# above is the bed's plumbing, which does not depend on DPDK's version; the
# host runs them on 22.11 too. Mode static runs in every root: a statically
# linked app's mempool handlers and mbuf layout are its DPDK's own, which
# is what it checks (kbridge.h version 7).
bed=${KBR_BED_RELEASE:-${KBR_RELEASES[-1]}}
pkgs='./include/... ./ring/... ./vhost/... ./tests/ring/ ./tests/app/ ./tests/restart/ ./tests/kernel/ ./tests/requests/ ./tests/link/ ./tests/vhost/ ./tests/kni/'

# timed WHAT COMMAND...: runs it, says how long it took.
timed() {
	local what=$1 t0; shift
	t0=$(date +%s)
	"$@"
	kbr_say "step $what passed in $(( $(date +%s) - t0 )) s"
}

for r in "${releases[@]}"; do
	bash "$here/root.sh" "$r" >/dev/null
done
for s in "${steps[@]}"; do
	case $s in
	build)
		for r in "${releases[@]}"; do
			timed "build $r" bash "$here/run.sh" "$r" -- 'v=$(pkg-config --modversion libdpdk) && echo "DPDK $v" && make build &&
				if [ -f /var/cache/kbridge/dpdk-src/$v/VERSION ]; then echo "vhost-layout: checked against DPDK $v'"'"'s source"
				else echo "vhost-layout: no source of DPDK $v in the root: checked against ring/vhost_msg.h'"'"'s table only"; fi'
		done ;;
	root)
		for r in "${releases[@]}"; do
			if [ "$r" = "$bed" ] || [ "$bed" = all ]; then
				cmd="go test -p 1 -count=1 -timeout 30m $pkgs && KBT_MODE=ring,jumbo,ports,offload,static go test -count=1 -timeout 30m ./tests/e2e/"
			else
				cmd="go test -p 1 -count=1 -timeout 30m -skip '^TestTestbed\$' $pkgs && KBT_MODE=static go test -count=1 -timeout 30m ./tests/e2e/"
			fi
			timed "root $r" bash "$here/run.sh" "$r" -- "bash tests/testbed/hugepages.sh && $cmd"
		done ;;
	crossver)
		timed "crossver host ${releases[*]}" bash "$here/run.sh" --host "${releases[@]}" -- 'go test -count=1 -v -timeout 20m ./tests/crossver/' ;;
	esac
done
