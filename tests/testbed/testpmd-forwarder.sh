#!/usr/bin/env bash
# dpdk-testpmd as a comparison forwarder in place of the DPDK app + kbridge:
# io forwarding between net_af_packet (kbt-nic) and net_tap (kb0) in kbt-dut,
# forwarding lcore on the app CPU, main lcore (and EAL's control threads) off it,
# file prefix kbt-testpmd. Needs a bed brought up with KBT_NO_BRIDGE=1.
#   usage: tests/testbed/testpmd-forwarder.sh start|stop|status
#   start: starts testpmd, gives kb0 $KBT_TESTPMD_ADDR (default 198.18.0.2/24; empty:
#          leave kb0 unconfigured) and waits for 198.18.0.1 to answer a ping through
#          kb0; prints "testpmd forwarder up".
#   KBT_TESTPMD_LCORES overrides the --lcores map. Default "0@OTHER,1@APP": the
#          forwarding lcore 1 alone on the app CPU, the main lcore 0 on the first of
#          the other CPUs (README.md, CPU placement); "0@APP,1@APP" on 1 CPU.
#   KBT_TESTPMD_FWD=5tswap|txonly: the test bed's own ceiling instead of a
#          forwarder: testpmd on kbt-nic alone (no kb0, no kernel side in kbt-dut).
#          5tswap bounces every frame back to the peer with MACs, IPs and L4 ports
#          swapped; txonly sends 1500-byte UDP frames to the peer as fast as it can
#          (198.18.0.1 -> 198.18.0.2, dropped by the peer's IP layer: not its address).
#          Default: io (the forwarder above).
#   stop:  stops it (SIGTERM, 5 s, SIGKILL); prints "testpmd forwarder down".
# Files: /run/kbt/testpmd.pid, testpmd.log, testpmd.stdin (a FIFO held open
# read-write as testpmd's stdin, so it never sees EOF and needs no feeder process).
set -euo pipefail
# shellcheck source=tests/testbed/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
kbt_cpus

PIDFILE=$KBT_RUN/testpmd.pid
LOG=$KBT_RUN/testpmd.log
FIFO=$KBT_RUN/testpmd.stdin
ADDR=${KBT_TESTPMD_ADDR-$KBT_DUT_IP/24}
FWD=${KBT_TESTPMD_FWD:-io}
# Main lcore off the forwarding CPU when there is another one (lib.sh).
# The CPUs the process may use: those named in the lcore map. EAL pins each
# lcore thread; its control threads get what is left, or the main lcore's CPU.
kbt_testpmd_lcores
LCORES=$KBT_TESTPMD_LCORE_MAP
PIN_CPUS=$KBT_TESTPMD_PIN_CPUS

running_pid() {
	local pid
	[ -f "$PIDFILE" ] || return 1
	pid=$(tr -dc '0-9' <"$PIDFILE")
	[ -n "$pid" ] && pid_in_bed "$pid" && echo "$pid"
}

cmd_start() {
	local pid
	kbt_lock
	if pid=$(running_pid); then
		say "testpmd already running (pid $pid)"
		echo "testpmd forwarder up"
		return 0
	fi
	ns_exists "$KBT_NS_DUT" || die "namespace $KBT_NS_DUT missing: run KBT_NO_BRIDGE=1 tests/testbed/up.sh first"
	ip -n "$KBT_NS_DUT" link show kbt-nic >/dev/null 2>&1 || die "kbt-nic missing in $KBT_NS_DUT"
	case $FWD in
	io | 5tswap | txonly) ;;
	*) die "KBT_TESTPMD_FWD=$FWD: must be io (default), 5tswap or txonly" ;;
	esac
	if ip -n "$KBT_NS_DUT" link show kb0 >/dev/null 2>&1; then
		die "kb0 already exists in $KBT_NS_DUT: another forwarder (kbridge?) is running"
	fi
	command -v dpdk-testpmd >/dev/null || die "dpdk-testpmd not installed"
	"$KBT_DIR/hugepages.sh" >&2
	dpdk_cleanup_prefix "$KBT_TESTPMD_PREFIX"
	mkdir -p "$KBT_RUN"
	rm -f "$FIFO"
	mkfifo "$FIFO"

	# The commas are DPDK's devargs' and testpmd's lists, not array syntax.
	# shellcheck disable=SC2054
	local vdevs=(--vdev net_af_packet0,iface=kbt-nic --vdev net_tap0,iface=kb0) fwdargs=(--forward-mode=io)
	# shellcheck disable=SC2054
	if [ "$FWD" != io ]; then
		local wire_mac
		wire_mac=$(ip netns exec "$KBT_NS_PEER" cat /sys/class/net/kbt-wire/address)
		vdevs=(--vdev net_af_packet0,iface=kbt-nic)
		fwdargs=(--forward-mode="$FWD")
		[ "$FWD" = txonly ] && fwdargs+=(--eth-peer="0,$wire_mac" --txpkts=1500 --tx-ip=198.18.0.1,198.18.0.2)
	fi
	say "starting dpdk-testpmd ($FWD forwarding$([ "$FWD" = io ] && echo " kbt-nic <-> kb0")), lcores $LCORES (CPUs $PIN_CPUS)"
	: >"$LOG"
	# Main lcore 0 only blocks in read(stdin); forwarding lcore 1 polls, alone on
	# the app CPU like the reference app's lcore. stdin: the FIFO opened read-write (<>).
	# stdbuf: testpmd's stdout to a file is block-buffered otherwise, and the
	# "Press enter to exit" line we wait for would sit in the buffer.
	# --disable-link-check: kb0 is down until we configure it; testpmd would
	# otherwise wait 9 s for its link.
	setsid ip netns exec "$KBT_NS_DUT" taskset -c "$PIN_CPUS" stdbuf -oL -eL dpdk-testpmd \
		--lcores "$LCORES" --main-lcore 0 \
		--file-prefix "$KBT_TESTPMD_PREFIX" --proc-type primary --no-pci \
		"${vdevs[@]}" \
		-- "${fwdargs[@]}" --auto-start --nb-cores=1 --rxq=1 --txq=1 \
		--total-num-mbufs=16384 --disable-link-check \
		<>"$FIFO" >>"$LOG" 2>&1 9>&- &
	pid=$!
	echo "$pid" >"$PIDFILE"

	wait_for "testpmd to start forwarding" 30 "$pid" "$LOG" \
		grep -q 'Press enter to exit' "$LOG"
	if [ "$FWD" != io ]; then
		echo "testpmd forwarder up"
		return 0
	fi
	wait_for "kb0 to appear in $KBT_NS_DUT" 10 "$pid" "$LOG" \
		ip -n "$KBT_NS_DUT" link show kb0
	if [ -n "$ADDR" ]; then
		ip -n "$KBT_NS_DUT" addr replace "$ADDR" dev kb0
		ip -n "$KBT_NS_DUT" link set kb0 mtu 1500 up
		wait_for "$KBT_PEER_IP to answer a ping through kb0 (testpmd)" 20 "$pid" "$LOG" \
			ip netns exec "$KBT_NS_DUT" ping -c1 -W1 "$KBT_PEER_IP"
	fi
	echo "testpmd forwarder up"
}

cmd_stop() {
	kbt_lock
	stop_pidfile "$PIDFILE"
	rm -f "$FIFO"
	dpdk_cleanup_prefix "$KBT_TESTPMD_PREFIX"
	echo "testpmd forwarder down"
}

cmd_status() {
	local pid
	if pid=$(running_pid); then
		echo "testpmd running (pid $pid)"
	else
		echo "testpmd not running"
		return 1
	fi
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
*) die "usage: $0 start|stop|status" ;;
esac
