#!/usr/bin/env bash
# A BGP session over kb0 on a ring bed that is up: one BIRD 2 in kbt-dut
# (198.18.0.2, AS 64512, speaking over kb0) and one in kbt-peer (198.18.0.1,
# AS 64513, over kbt-wire), each announcing one prefix of 198.18.0.0/15 and
# installing the other's in its namespace's main table. Link checking is on
# (`check link`: the dut's session goes down at once when kb0 loses its carrier
# or vanishes), timers are short (keepalive 1 s, hold 3 s), and KBT_BGP_BFD=MS
# adds BFD on the link (interval MS, multiplier 3). The BIRDs are the bed's own:
# configuration and control sockets under $KBT_RUN/bgp, PIDs and logs as
# $KBT_RUN/bird-{dut,peer}.{pid,log} (down.sh stops them); the system's BIRD is
# never used or touched.
#   usage: tests/testbed/bgp.sh up|down|state
#   up:    starts both and waits (KBT_BGP_WAIT, default 30 s) until both sessions
#          are Established and each side has the other's route; prints "bgp up".
#   down:  stops both; prints "bgp down".
#   state: one line per side, "SIDE STATE since=EPOCH_MS uptime=S imported=N
#          withdraws=N" (withdraws: routes the side has received a withdrawal
#          for since its session came up). Exits 1 unless both are Established.
set -euo pipefail
# shellcheck source=tests/testbed/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root

BGP_DIR=$KBT_RUN/bgp
KBT_BGP_DUT_AS=64512
KBT_BGP_PEER_AS=64513
# The prefixes each side announces: in the benchmarking range, apart from the
# bed's links (198.18.0-2.0/24).
KBT_BGP_DUT_PREFIX=198.19.20.0/24
KBT_BGP_PEER_PREFIX=198.19.10.0/24

sock() { echo "$BGP_DIR/$1.ctl"; }

# conf SIDE: BIRD's configuration of one side.
conf() {
	local side=$1 me peer my_as peer_as ifname prefix bfd=""
	if [ "$side" = dut ]; then
		me=$KBT_DUT_IP peer=$KBT_PEER_IP my_as=$KBT_BGP_DUT_AS peer_as=$KBT_BGP_PEER_AS
		ifname=kb0 prefix=$KBT_BGP_DUT_PREFIX
	else
		me=$KBT_PEER_IP peer=$KBT_DUT_IP my_as=$KBT_BGP_PEER_AS peer_as=$KBT_BGP_DUT_AS
		ifname=kbt-wire prefix=$KBT_BGP_PEER_PREFIX
	fi
	cat <<EOF
# Written by tests/testbed/bgp.sh: the bed's $side side.
log stderr all;
router id $me;
# Millisecond timestamps: bgp.sh state computes the session's uptime from them.
timeformat protocol "%s.%3f";
protocol device { scan time 10; }
protocol static kbt_announce { ipv4; route $prefix blackhole; }
protocol kernel {
	ipv4 { export where source = RTS_BGP; };
}
EOF
	if [ -n "${KBT_BGP_BFD:-}" ]; then
		cat <<EOF
protocol bfd { interface "$ifname" { interval ${KBT_BGP_BFD} ms; multiplier 3; }; }
EOF
		bfd="bfd on;"
	fi
	cat <<EOF
protocol bgp kbt {
	local $me as $my_as;
	neighbor $peer as $peer_as;
	interface "$ifname";
	direct;
	check link yes;
	$bfd
	hold time 3;
	keepalive time 1;
	startup hold time 3;
	connect delay time 1;
	connect retry time 2;
	error wait time 1, 5;
	ipv4 { import all; export where source = RTS_STATIC; };
}
EOF
}

pidfile() { echo "$KBT_RUN/bird-$1.pid"; }

running() {
	local pid
	[ -f "$(pidfile "$1")" ] || return 1
	pid=$(tr -dc '0-9' <"$(pidfile "$1")")
	[ -n "$pid" ] && pid_in_bed "$pid"
}

# state_of SIDE: "SIDE STATE since=... uptime=... imported=N withdraws=N".
state_of() {
	local side=$1 out
	out=$(birdc -s "$(sock "$side")" show protocols all kbt 2>/dev/null) || {
		echo "$side down since=0 uptime=0 imported=0 withdraws=0"
		return 0
	}
	awk -v side="$side" -v now="$(date +%s.%N)" '
		$1 == "kbt" && $2 == "BGP" { since = $5 }
		/BGP state:/ { st = $3 }
		/Routes:/ { imp = $2 }
		/Import withdraws:/ { wd = $3 }
		END {
			if (st == "") st = "down"
			up = (st == "Established" && since != "") ? now - since : 0
			printf "%s %s since=%.0f uptime=%.1f imported=%d withdraws=%d\n",
				side, st, since * 1000, up, imp, wd
		}' <<<"$out"
}

established() {
	local s
	for s in dut peer; do
		state_of "$s" | grep -Eq "^$s Established .* imported=[1-9]" || return 1
	done
}

cmd_up() {
	local side ns
	command -v bird >/dev/null && command -v birdc >/dev/null ||
		die "bird and birdc missing (Debian package bird2; make deps installs it)"
	ip -n "$KBT_NS_DUT" link show kb0 >/dev/null 2>&1 ||
		die "kb0 missing in $KBT_NS_DUT: bring the bed up first (tests/testbed/up.sh)"
	kbt_lock
	mkdir -p "$BGP_DIR"
	for side in dut peer; do
		if running "$side"; then
			say "bird ($side) already running"
			continue
		fi
		ns=$KBT_NS_DUT
		[ "$side" = peer ] && ns=$KBT_NS_PEER
		conf "$side" >"$BGP_DIR/$side.conf"
		rm -f "$(sock "$side")"
		say "starting bird in $ns ($BGP_DIR/$side.conf)"
		# -f: in the foreground, so that the recorded PID is bird's own.
		spawn "bird-$side" "$ns" "${KBT_PIN_OTHER[@]}" bird -f -c "$BGP_DIR/$side.conf" -s "$(sock "$side")"
	done
	wait_for "both BGP sessions Established with a route each" "${KBT_BGP_WAIT:-30}" \
		"$(cat "$(pidfile dut)") $(cat "$(pidfile peer)")" "$KBT_RUN/bird-dut.log $KBT_RUN/bird-peer.log" established
	echo "bgp up"
}

cmd_down() {
	local side
	kbt_lock
	for side in dut peer; do stop_pidfile "$(pidfile "$side")"; done
	rm -f "$BGP_DIR"/*.ctl
	echo "bgp down"
}

cmd_state() {
	local s rc=0
	for s in dut peer; do
		state_of "$s"
		state_of "$s" | grep -q "^$s Established " || rc=1
	done
	return $rc
}

kbt_cpus
case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
state) cmd_state ;;
*) die "usage: $0 up|down|state" ;;
esac
