# shellcheck shell=bash
# cost-lib.sh: what ab-cost.sh and floor-cost.sh share, sourced by both: a
# forwarder's bed brought up for one measurement, iperf3 at a fixed rate
# (RATE, SECS) and the CPU and frames it took. The caller sets RATE, SECS,
# POLICY and RUN, then calls cost_start.

# cost_start NAME VAR...: refuses any bed but the ring bed and any VAR set
# (the script chooses the forwarder, its bed and its config); makes out (the
# raw figures) and cfg (the configuration); on exit takes down the bed of
# tree, when set, and says where out is.
cost_start() {
	local name=$1 v
	shift
	case ${KBT_MODE:-ring} in ring) ;; *) echo "$name: KBT_MODE=$KBT_MODE: the ring bed only" >&2; exit 2 ;; esac
	for v in "$@"; do
		[ -z "${!v:-}" ] || { echo "$name: $v is set: the script chooses the forwarder, its bed and its config" >&2; exit 2; }
	done
	out=$(mktemp) cfg=$(mktemp --suffix=.yaml) tree=
	cost_name=$name
	trap 'cost_cleanup "$cost_name"' EXIT
}
cost_cleanup() {
	[ -z "$tree" ] || make -C "$tree" testbed-down >/dev/null 2>&1 || true
	rm -f "$cfg"
	echo "$1: raw figures kept in $out" >&2
}

# cost_bed_up TREE LABEL [VAR=VALUE...]: the ring bed from TREE's bin/ with
# its config at policy.mode POLICY, the environment given on top (the
# floor: KBT_KBRIDGE); a 2-second iperf3 to warm it up. Sets pid to the
# forwarder's.
cost_bed_up() {
	local t=$1 label=$2
	shift 2
	sed -E "s/^  mode: [a-z]+$/  mode: $POLICY/" "$t/tests/testbed/kbridge.yaml" >"$cfg"
	grep -q "^  mode: $POLICY\$" "$cfg" || { echo "cost: no policy.mode in $t/tests/testbed/kbridge.yaml" >&2; return 1; }
	make -C "$t" testbed-down >/dev/null 2>&1 || true
	echo "$label bed up, policy.mode $POLICY" >&2
	env "$@" KBRIDGE_CONFIG="$cfg" make -C "$t" testbed-up >"${TMPDIR:-/tmp}/cost-up.log" 2>&1 ||
		{ tail "${TMPDIR:-/tmp}/cost-up.log" >&2; return 1; }
	pid=$(cat "$RUN/kbridge.pid")
	ip netns exec kbt-dut taskset -c 0 iperf3 -c 198.18.0.1 -p 5201 -t 2 >/dev/null ||
		{ echo "cost: $label: the warm-up iperf3 failed" >&2; return 1; }
}

# cost_ticks PID: its user and system time in clock ticks (/proc/PID/stat).
cost_ticks() { awk '{ print $14, $15 }' "/proc/$1/stat"; }
cost_cpu0() { awk '$1 == "cpu0" { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }
# cost_frames: frames the app's NIC (kbt-nic) received and sent: what crossed
# the forwarder each way, one per MTU frame (the peer's veth has no TSO).
cost_frames() {
	ip netns exec kbt-dut cat /sys/class/net/kbt-nic/statistics/rx_packets /sys/class/net/kbt-nic/statistics/tx_packets | xargs
}

# cost_measure PID FLAGS: one iperf3 at RATE (FLAGS: -R from the peer);
# prints "gbit fwd_pct cpu0_pct user_ns sys_ns frames_in frames_out": the
# forwarder's CPU per second of traffic (SECS: it idles outside it), CPU 0's
# over the whole window, the forwarder's user and system time in ns and the
# frames the app's NIC received from the peer and sent to it meanwhile.
cost_measure() {
	local pid=$1 flags=$2 k0 k1 c0 c1 f0 f1 json
	k0=$(cost_ticks "$pid") c0=$(cost_cpu0) f0=$(cost_frames)
	json=$(ip netns exec kbt-dut taskset -c 0 iperf3 -c 198.18.0.1 -p 5201 -b "$RATE" -t "$SECS" -J $flags)
	k1=$(cost_ticks "$pid") c1=$(cost_cpu0) f1=$(cost_frames)
	python3 -c '
import json, sys, os
d = json.loads(sys.argv[1])
gbit = d["end"]["sum_received"]["bits_per_second"] / 1e9
hz = os.sysconf("SC_CLK_TCK")
u0, s0, u1, s1 = map(int, sys.argv[2:6])
secs = float(sys.argv[10])
k = (u1 + s1 - u0 - s0) / hz / secs * 100
b0, t0, b1, t1 = map(int, sys.argv[6:10])
c = (b1 - b0) / (t1 - t0) * 100
fi0, fo0, fi1, fo1 = map(int, sys.argv[11:15])
if gbit <= 0:
    sys.exit("cost: iperf3 received nothing")
print("%.3f %.1f %.1f %d %d %d %d" % (gbit, k, c, (u1 - u0) * 1e9 / hz, (s1 - s0) * 1e9 / hz, fi1 - fi0, fo1 - fo0))
' "$json" $k0 $k1 $c0 $c1 "$SECS" $f0 $f1
}

# cost_check_rate GBIT LABEL: warns when a measurement moved less than RATE.
cost_check_rate() {
	python3 -c 'import sys; sys.exit(float(sys.argv[1]) < 0.97 * float(sys.argv[2]))' "$1" \
		"$(numfmt --from=si "$RATE")e-9" ||
		echo "cost: $2: $1 Gbit/s, below the fixed rate $RATE: not the same traffic" >&2
}

# cost_lock, cost_unlock: COST_LOCK=FILE: flock FILE around each
# measurement, so that others can use the bed between them.
cost_lock() { [ -z "${COST_LOCK:-}" ] || { exec 9>"$COST_LOCK"; flock 9; }; }
cost_unlock() { [ -z "${COST_LOCK:-}" ] || flock -u 9; }

# EVENTS=1: what the forwarder did during a measurement, per data frame, with
# perf stat's software events and tracepoints (no hardware counters needed):
# syscalls by kind (reads that found nothing apart: one per empty poll),
# signals delivered (Go's preemption signals, SIGURG), context switches; and
# kbridge's own counters (parks, wakeups, writes). The tracing taxes the CPU
# figures: run it apart from them.
# events_start TREE FORWARDER: perf stat on pid for SECS, and kbridge's
# counters (TREE's bin/kbridge asks for them).
EV=(-e syscalls:sys_enter_read -e syscalls:sys_exit_read --filter 'ret < 0' -e syscalls:sys_enter_writev
	-e syscalls:sys_enter_write -e syscalls:sys_enter_epoll_wait -e syscalls:sys_enter_epoll_pwait
	-e syscalls:sys_enter_epoll_pwait2 -e syscalls:sys_enter_futex -e syscalls:sys_enter_nanosleep
	-e syscalls:sys_enter_sched_yield -e signal:signal_deliver -e context-switches -e cpu-migrations)
events_start() {
	[ "$2" != kbridge ] || "$1/bin/kbridge" stats --socket "$RUN/kbridge.sock" >"$out.stats0"
	perf stat -x, -o "$out.perf" "${EV[@]}" -p "$pid" -- sleep "$SECS" &
	perfpid=$!
}
# events_print TREE FORWARDER FRAMES: the counts per data frame.
events_print() {
	wait "$perfpid" || true
	[ "$2" != kbridge ] || "$1/bin/kbridge" stats --socket "$RUN/kbridge.sock" >"$out.stats1"
	python3 - "$out.perf" "$3" "$out.stats0" "$out.stats1" "$2" <<'PY'
import sys, json
perf, n, s0, s1, fwd = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
c = {}
for line in open(perf):
    f = line.strip().split(",")
    if len(f) > 2 and f[0].replace(".", "").isdigit():
        name = f[2].replace("syscalls:sys_enter_", "").replace("syscalls:sys_exit_read", "read_failed")
        c[name] = c.get(name, 0) + float(f[0])
out = " ".join("%s=%.3f" % (k, v / n) for k, v in c.items())
if fwd == "kbridge":
    a, b = (json.load(open(p))["queues"][0] for p in (s0, s1))
    d = lambda k, o=None: ((b[o] if o else b)[k] - (a[o] if o else a)[k]) / n
    out += " | parks=%.3f wakeups=%.3f timeouts=%.3f coalesce_writes=%.3f merged_writes=%.3f" % (
        d("parks"), d("wakeups"), d("timeouts"), d("coalesce_writes", "offload"), d("merged_writes", "offload"))
print("  events a data frame:", out)
PY
}

# COUNTERS=1: what kbridge and the app did during a measurement, from their
# own counters (one control-socket request and one SIGUSR1 each side of it,
# outside the CPU window): bytes a packet each way, the writes and reads
# behind them, the app's merging (--sw-offload's gro counters, else none).
# counters_snap TREE N: kbridge's stats and the app's stats line, as snapshot N.
counters_snap() {
	local n0 i
	"$1/bin/kbridge" stats --socket "$RUN/kbridge.sock" >"$out.k$2"
	n0=$(grep -c '^kbridge-refapp: stats' "$RUN/refapp.log" || true)
	kill -USR1 "$(cat "$RUN/refapp.pid")"
	for ((i = 0; i < 40; i++)); do
		[ "$(grep -c '^kbridge-refapp: stats' "$RUN/refapp.log" || true)" -gt "$n0" ] && break
		sleep 0.05
	done
	grep '^kbridge-refapp: stats' "$RUN/refapp.log" | tail -n1 >"$out.a$2"
}
# counters_print: the differences between snapshots 0 and 1.
counters_print() {
	python3 - "$out.k0" "$out.k1" "$out.a0" "$out.a1" <<'PY'
import sys, json
a, b = (json.load(open(p))["queues"][0] for p in sys.argv[1:3])
app = [dict(kv.split("=", 1) for kv in open(p).read().split() if "=" in kv) for p in sys.argv[3:5]]
d = lambda k, o=None: (b[o] if o else b).get(k, 0) - (a[o] if o else a).get(k, 0)
o = lambda k: d(k, "offload")
ap = lambda k: int(app[1].get(k, 0)) - int(app[0].get(k, 0))
div = lambda x, y: x / y if y else 0
tkp, tkb, fkp, fkb = d("to_kernel_packets"), d("to_kernel_bytes"), d("from_kernel_packets"), d("from_kernel_bytes")
reads = fkp - o("split_frames") + o("split_reads")
print("  to the kernel: %d packets, %.0f bytes a packet; %.2f packets and %.0f bytes a write (coalesce %d/%d), lro_writes %d (lro_merged %d), merged %d packets in %d writes"
      % (tkp, div(tkb, tkp), div(o("coalesce_packets"), o("coalesce_writes")), div(tkb, o("coalesce_writes")), o("coalesce_packets"), o("coalesce_writes"),
         o("lro_writes"), o("lro_merged"), o("merged_packets"), o("merged_writes")))
print("  from the kernel: %d packets to the app, %.0f bytes a packet; %d reads, %.0f bytes a read; tso_to_app %d, split_reads %d into %d frames"
      % (fkp, div(fkb, fkp), reads, div(fkb, reads), o("tso_to_app"), o("split_reads"), o("split_frames")))
print("  the app: rx %d frames, to_kernel %d packets; gro %d packets of %d frames (%.1f a packet, %.0f%% of rx); gso %d into %d"
      % (ap("rx"), ap("to_kernel"), ap("gro"), ap("gro_segments"), div(ap("gro_segments"), ap("gro")),
         100 * div(ap("gro_segments"), ap("rx")), ap("gso"), ap("gso_segments")))
PY
}
