#!/usr/bin/env bash
# ci.sh [build] [root] [crossver]: the DPDK 24.11 part of CI (.ci/run runs it
# after `make test`, which covers the host's DPDK). With no argument, all
# three steps:
#   build     make build in the root (kbridge, the reference app and the KNI
#             app, shared and static, kbridge.h as C and C++, -Wall -Wextra
#             -Werror) against its DPDK 24.11;
#   root      the packages that exercise DPDK, run in the root: ring and
#             vhost (their root tests), tests/ring, tests/app, tests/restart,
#             tests/kernel, tests/requests, tests/link, tests/vhost,
#             tests/kni (the KNI app), tests/e2e (the bed in modes ring,
#             jumbo, ports, offload and static: KBT_MODE; tests/vhost runs
#             its vhost mode);
#   crossver  tests/crossver on the host: each side's kbridge serving the
#             other side's apps in mode vhost, and refusing them in ring mode
#             (the host's bin/ must be built: make build).
# Root only, under the machine's root-test lock (tests/README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
cd "$here/../.."
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(build root crossver)
bash "$here/root.sh" >/dev/null
for s in "${steps[@]}"; do
	t0=$(date +%s)
	case $s in
	build)
		bash "$here/run.sh" -- 'pkg-config --modversion libdpdk && make build' ;;
	root)
		# The bed in ring and vhost modes only: XDP mode involves no
		# DPDK (the host's run covers it), and the root has no bpftool.
		bash "$here/run.sh" -- 'bash tests/testbed/hugepages.sh && go test -p 1 -count=1 -timeout 30m ./ring/... ./vhost/... ./tests/ring/ ./tests/app/ ./tests/restart/ ./tests/kernel/ ./tests/requests/ ./tests/link/ ./tests/vhost/ ./tests/kni/ && KBT_MODE=ring,jumbo,ports,offload,static go test -count=1 -timeout 30m ./tests/e2e/' ;;
	crossver)
		bash "$here/run.sh" --host -- 'go test -count=1 -v -timeout 10m ./tests/crossver/' ;;
	*)
		kbr_die "unknown step $s (build, root, crossver)" ;;
	esac
	kbr_say "step $s passed in $(( $(date +%s) - t0 )) s"
done
