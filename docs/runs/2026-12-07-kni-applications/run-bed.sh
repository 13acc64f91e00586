#!/bin/bash
# Runs the KNI applications built by build-*.sh on kbridge's namespace test
# bed, briefly, and writes what they did to <out>/runs/<time>/.
#
#   run-bed.sh KBRIDGE_TREE CASE...
#
# KBRIDGE_TREE: its tests/testbed/up.sh and down.sh bring the bed up and down
# (KBT_NO_BRIDGE=1: the peer's services and kbt-nic, no app, no kbridge), and
# <out>/prefix/<basename>/bin/kbridge (kbprefix.sh) is the kbridge the
# applications' rte_kni_alloc() starts (KBRIDGE_BIN). Root. The whole run
# holds /tmp/kbridge-root.lock (waits for it) and takes the bed down before
# releasing it.
#
# Cases:
#   examples-kni-shared, examples-kni-static   DPDK's examples/kni on kbt-nic:
#       KNI vEth0 gets 198.18.0.2, then ping 198.18.0.1, then the bed's
#       check-nfs.sh (full listing, big.bin's sha256) through it.
#   test-kni-shared, test-kni-static           DPDK 22.11's kni_autotest, twice:
#       in a mount namespace where /sys/module/rte_kni/parameters/lo_mode
#       exists (tmpfs over /sys/module) with lo_mode_none (the API tests),
#       then lo_mode_fifo (also the processing test, which counts on KNI's
#       kernel loopback).
#   dpvs-static                                DPVS v1.10.2 with harness/dpvs.conf
#       (dpdk0 on kbt-nic, KNI dpdk0.kni): how far it starts in 30 s; if
#       dpdk0.kni appears, it gets 198.18.0.2, pings 198.18.0.1 and runs
#       the bed's check-nfs.sh through it.
#   knipong                                    PcapPlusPlus's KniPong, with
#       harness/fakebin/lsmod on PATH (it looks for rte_kni and igb_uio).
# Each prints one summary line; the logs are beside it.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
EXT=${KB_APPS_OUT:?set KB_APPS_OUT to the work directory of the build scripts (README.md)}
TREE=$(cd "${1:?usage: $0 KBRIDGE_TREE CASE...}" && pwd)
shift
KB=${KBRIDGE_BIN:-$EXT/prefix/$(basename "$TREE")/bin/kbridge}
[ -x "$KB" ] || { echo "$0: no kbridge at $KB (run kbprefix.sh $TREE)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "$0: root only" >&2; exit 1; }
if [ -z "${KBEXT_LOCKED:-}" ]; then
	export KBEXT_LOCKED=1
	exec flock /tmp/kbridge-root.lock "$0" "$TREE" "$@"
fi
OUT=$EXT/runs/$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
NS=kbt-dut PEER=198.18.0.1 ME=198.18.0.2 PFX=kbtext
# kbridge off the app's polling CPU, as the bed places its own
export KBRIDGE_BIN=$KB KBRIDGE_CHILD_CPUS=0


say() { echo "$*" | tee -a "$OUT/summary"; }
bed_up() { KBT_NO_BRIDGE=1 bash "$TREE/tests/testbed/up.sh" >"$OUT/bed-up.log" 2>&1 && bash "$TREE/tests/testbed/hugepages.sh" >>"$OUT/bed-up.log" 2>&1; }
bed_down() { bash "$TREE/tests/testbed/down.sh" >"$OUT/bed-down.log" 2>&1; }
trap 'bed_down' EXIT

# stop PID: SIGINT, then SIGKILL after 20 s; prints how it ended.
stop() {
	local pid=$1 _
	kill -INT "$pid" 2>/dev/null
	for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; echo "killed after 20 s"; else echo "exited"; fi
	wait "$pid" 2>/dev/null
}
# kbridges left behind by a case (their command line names the prefix's dir)
leftovers() { pgrep -f "kbridge run --config /var/run/dpdk/$PFX/" | tr '\n' ' '; }
cleanup_prefix() {
	local p
	for p in $(pgrep -f "kbridge run --config /var/run/dpdk/$PFX/"); do kill -KILL "$p" 2>/dev/null; done
	rm -rf "/var/run/dpdk/$PFX" /dev/hugepages/${PFX}map_* 2>/dev/null
}
wait_link() { local _; for _ in $(seq "$2"); do ip -n "$NS" link show "$1" >/dev/null 2>&1 && return 0; sleep 1; done; return 1; }

run_examples_kni() { # kind
	local bin=$EXT/out/examples-kni/kni-$1 log=$OUT/examples-kni-$1.log pid r ping nfs
	[ -x "$bin" ] || { say "examples-kni-$1: not built"; return; }
	cleanup_prefix
	ip netns exec "$NS" "$bin" -l 0-1 --file-prefix "$PFX" --proc-type primary --no-pci \
		--vdev net_af_packet0,iface=kbt-nic -- -p 0x1 -P --config="(0,0,1)" >"$log" 2>&1 &
	pid=$!
	if ! wait_link vEth0 60; then
		say "examples-kni-$1: no vEth0 within 60 s ($(stop "$pid"); log $log)"
		cleanup_prefix
		return
	fi
	ip -n "$NS" addr add "$ME/24" dev vEth0
	ip -n "$NS" link set vEth0 up
	ping=$(ip netns exec "$NS" ping -c 3 -W 2 "$PEER" 2>&1 | tail -2 | head -1)
	nfs=$(timeout 180 bash "$TREE/tests/testbed/check-nfs.sh" "$NS" "$PEER" 2>>"$log" || echo "check-nfs failed or timed out")
	r=$(stop "$pid")
	say "examples-kni-$1: vEth0 up; ping: $ping; $nfs; app $r; kbridges left: $(leftovers)"
	grep -E "rx_packets|tx_packets|dropped" "$log" | tail -6 | sed 's/^/    /' | tee -a "$OUT/summary"
	cleanup_prefix
}

run_test_kni() { # kind
	local bin=$EXT/out/test-kni/test_kni-$1 mode log rc
	[ -x "$bin" ] || { say "test-kni-$1: not built"; return; }
	for mode in lo_mode_none lo_mode_fifo; do
		log=$OUT/test-kni-$1-$mode.log
		cleanup_prefix
		timeout 300 ip netns exec "$NS" unshare -m sh -c '
			mount -t tmpfs kbext-fake-kni /sys/module &&
			mkdir -p /sys/module/rte_kni/parameters &&
			echo "$1" >/sys/module/rte_kni/parameters/lo_mode &&
			exec "$2" --lcores 0@0,1@1,2@1 --file-prefix "$3" --proc-type primary --no-pci \
				--vdev net_af_packet0,iface=kbt-nic kni_autotest' sh "$mode" "$bin" "$PFX" >"$log" 2>&1
		rc=$?
		say "test-kni-$1 ($mode): exit $rc: $(grep -E '^kni_autotest:' "$log" | tail -1); last lines: $(grep -v '^EAL\|^$' "$log" | tail -3 | tr '\n' '|'); kbridges left: $(leftovers)"
		cleanup_prefix
	done
}

run_knipong() {
	local bin=$EXT/out/pcapplusplus/KniPong log=$OUT/knipong.log pid r had_rte=0
	[ -x "$bin" ] || { say "knipong: not built"; return; }
	# KniPong makes its EAL arguments itself (-n 2 -c 0x3 --main-lcore 0):
	# the default file prefix "rte"; under the lock nobody else runs a primary
	[ -e /var/run/dpdk/rte ] && had_rte=1
	# It reads lines on stdin, sends each as UDP to -d through its KNI, and
	# prints the answer its own lcore made (the "pong").
	(sleep 10; echo kbridge-pong-1; sleep 3; echo kbridge-pong-2; sleep 5) |
		ip netns exec "$NS" env PATH="$HERE/harness/fakebin:$PATH" "$bin" -s "$ME" -d 198.18.0.3 -n kbtpong -p 62604 >"$log" 2>&1 &
	pid=$!
	sleep 20
	r=$(stop "$pid")
	say "knipong: $(grep -v '^EAL\|^$' "$log" | tail -6 | tr '\n' '|') app $r; kbridges left: $(pgrep -f 'instance kbtpong' | tr '\n' ' ')"
	for p in $(pgrep -f 'instance kbtpong'); do kill -KILL "$p"; done
	[ "$had_rte" = 0 ] && rm -rf /var/run/dpdk/rte /dev/hugepages/rtemap_*
}

run_dpvs() { # kind
	local bin=$EXT/out/dpvs/dpvs-$1 log=$OUT/dpvs-$1.log pid r ping=none nfs="nfs not tried"
	[ -x "$bin" ] || { say "dpvs-$1: not built"; return; }
	cleanup_prefix
	ip netns exec "$NS" "$bin" -c "$HERE/harness/dpvs.conf" -p "$OUT/dpvs.pid" -x "$OUT/dpvs.ipc" -- \
		-l 0-1 --main-lcore 0 --file-prefix "$PFX" --proc-type primary --no-pci \
		--vdev net_af_packet0,iface=kbt-nic >"$log" 2>&1 &
	pid=$!
	if wait_link dpdk0.kni 30; then
		ip -n "$NS" addr add "$ME/24" dev dpdk0.kni
		ip -n "$NS" link set dpdk0.kni up
		ping=$(ip netns exec "$NS" ping -c 3 -W 2 "$PEER" 2>&1 | tail -2 | head -1)
		nfs=$(timeout 180 bash "$TREE/tests/testbed/check-nfs.sh" "$NS" "$PEER" 2>>"$log" || echo "check-nfs failed or timed out")
	fi
	if kill -0 "$pid" 2>/dev/null; then r="running after 30 s, $(stop "$pid")"; else wait "$pid"; r="exited by itself, status $?"; fi
	say "dpvs-$1: $r; ping through dpdk0.kni: $ping; $nfs; last lines: $(grep -iv '^$' "$log" | grep -i 'kni\|fail\|error\|panic' | tail -4 | tr '\n' '|'); kbridges left: $(leftovers)"
	cleanup_prefix
}

bed_up || { say "bed did not come up: $OUT/bed-up.log"; exit 1; }
say "# $(date -Is) kbridge $TREE ($(git -C "$TREE" describe --always --dirty 2>/dev/null)), binary $KB"
for c in "$@"; do
	case $c in
	examples-kni-shared | examples-kni-static) run_examples_kni "${c#examples-kni-}" ;;
	test-kni-shared | test-kni-static) run_test_kni "${c#test-kni-}" ;;
	knipong) run_knipong ;;
	dpvs-static | dpvs-shared) run_dpvs "${c#dpvs-}" ;;
	*) say "$c: unknown case" ;;
	esac
done
echo "logs: $OUT"
