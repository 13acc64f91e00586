#!/usr/bin/env bash
# restart-gap.sh: what the host sees of kb0 while kbridge is replaced, on the
# ring bed with a BGP session over kb0 (tests/testbed/bgp.sh). One row per
# event, as a markdown table on stdout; progress on stderr. Root.
#
#   tests/bench/restart-gap.sh [takeover] [restart] [kill] [upgrade]
#
# takeover: on the bed directly, `kbridge run --takeover` started beside the
#   serving kbridge. restart, kill, upgrade: under a real systemd (the nspawn
#   container of deploy/nspawn-lib.sh, with the package installed by dpkg -i):
#   dpdk-app.service (the reference app) and kbridge.service run in the bed's
#   kbt-dut (NetworkNamespacePath=), then `systemctl restart kbridge`,
#   `kill -9` of its main process, and `dpkg -i` of a second package with a
#   higher version. Default: all four.
#
# Per event, started 2 s before it and running through it: ping both ways
# every 2 ms (peer -> dut and dut -> peer through kb0), an NFS read of big.bin
# (its sha256 checked), iperf3 from kbt-dut at 500 Mbit/s for 10 s. Columns:
#   BGP: both sessions Established after, their start time unchanged (uptime
#        continued), no route withdrawn (bird's import withdraws stay 0);
#   kb0: the same ifindex, a hand-added address (198.18.77.2/24) and route
#        (198.19.77.0/24 dev kb0) still there;
#   gap: the longest interval without a ping reply through kb0, either way;
#   queued: replies that came late (RTT over 20 ms): frames that waited in a
#        queue across the event and were delivered;
#   lost: pings without a reply; kb0's tx_dropped delta beside it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
tb=$top/tests/testbed
# shellcheck source=tests/testbed/lib.sh
. "$tb/lib.sh"
need_root
kbt_cpus

cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(takeover restart kill upgrade)
for c in "${cases[@]}"; do
	case $c in takeover | restart | kill | upgrade) ;; *) die "unknown event $c: takeover, restart, kill or upgrade" ;; esac
done
want() { printf '%s\n' "${cases[@]}" | grep -qx "$1"; }
for tool in bird birdc iperf3 nfs-cat ping python3 systemd-nspawn; do
	command -v "$tool" >/dev/null || die "missing tool: $tool"
done

out=$(mktemp -d /tmp/kbt-gap.XXXXXX)
cpu=${KBT_OTHER_CPUS%%[-,]*}
cpu=${cpu:-0}
IN() { ip netns exec "$1" taskset -c "$cpu" "${@:2}"; }

# ---- the measurement around one event --------------------------------------
ifindex() { ip -n "$KBT_NS_DUT" -o link show kb0 2>/dev/null | cut -d: -f1; }
txdrop() {
	local n
	n=$(ip -n "$KBT_NS_DUT" -s -j link show kb0 2>/dev/null | sed -n 's/.*"tx":{[^}]*"dropped":\([0-9]*\).*/\1/p')
	echo "${n:-0}"
}
hand_add() {
	ip -n "$KBT_NS_DUT" addr replace 198.18.77.2/24 dev kb0
	ip -n "$KBT_NS_DUT" route replace 198.19.77.0/24 dev kb0
}
# kb0_kept IFINDEX: "kept (IFINDEX)", or what changed.
kb0_kept() {
	local what=()
	# Read whole, not piped into grep -q: under pipefail ip's SIGPIPE
	# would fail the check.
	[ "$(ifindex)" = "$1" ] || what+=("ifindex $1 -> $(ifindex)")
	[[ $(ip -n "$KBT_NS_DUT" addr show dev kb0) == *198.18.77.2/24* ]] || what+=("address gone")
	[[ $(ip -n "$KBT_NS_DUT" route show dev kb0) == *198.19.77.0/24* ]] || what+=("route gone")
	if [ ${#what[@]} = 0 ]; then echo "kept ($1)"; else echo "CHANGED: ${what[*]}"; fi
}
# bgp_field SIDE FIELD: a field of bgp.sh state's line for SIDE.
bgp_field() { sed -n "s/^$1 .* $2=\([^ ]*\).*/\1/p" "$3"; }

# pingstats FILE: "gap_ms delayed lost sent" of a ping -D log.
pingstats() {
	awk '/bytes from/ {
			ts = substr($1, 2, length($1) - 2) + 0
			if (last != "" && ts - last > gap) gap = ts - last
			last = ts
			for (i = 1; i <= NF; i++) if ($i ~ /^time=/) { r = substr($i, 6) + 0; if (r > 20) late++ }
		}
		/packets transmitted/ { sent = $1; got = $4 }
		END { printf "%.0f %d %d %d\n", gap * 1000, late, sent - got, sent }' "$1"
}

# measure NAME CMD...: runs the workloads, CMD 2 s into them, and prints the row.
measure() {
	local name=$1 d=$out/$1 idx drop0 pa pb nfs ip3 t0 t1 took ok_bgp ok_kb0 s
	shift
	mkdir -p "$d"
	idx=$(ifindex)
	drop0=$(txdrop)
	bash "$tb/bgp.sh" state >"$d/bgp.before" || die "$name: BGP not Established before the event: $(cat "$d/bgp.before")"
	# Simple commands, not functions: $! is then ping itself, which the
	# SIGINT below reaches (a subshell would ignore it).
	ip netns exec "$KBT_NS_PEER" taskset -c "$cpu" ping -D -i 0.002 -W 5 "$KBT_DUT_IP" >"$d/ping.in" 2>&1 &
	pa=$!
	ip netns exec "$KBT_NS_DUT" taskset -c "$cpu" ping -D -i 0.002 -W 5 "$KBT_PEER_IP" >"$d/ping.out" 2>&1 &
	pb=$!
	IN "$KBT_NS_DUT" iperf3 -c "$KBT_PEER_IP" -p "$KBT_IPERF_PORT" -t 10 -b 500M -J >"$d/iperf3.json" 2>&1 &
	ip3=$!
	bash -o pipefail -c "ip netns exec $KBT_NS_DUT taskset -c $cpu nfs-cat 'nfs://$KBT_PEER_IP/export/big.bin?version=4' | sha256sum" \
		>"$d/nfs.sha" 2>"$d/nfs.err" &
	nfs=$!
	sleep 2
	say "$name: $*"
	t0=$(now)
	"$@" >"$d/event.log" 2>&1 || say "$name: the event's command failed: $(tail -3 "$d/event.log")"
	t1=$(now)
	wait "$nfs" || true
	wait "$ip3" || true
	sleep 1
	kill -INT "$pa" "$pb" 2>/dev/null || true
	wait "$pa" "$pb" 2>/dev/null || true
	took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	# BGP: both sides Established, the same start as before, nothing withdrawn.
	sleep 0.5
	bash "$tb/bgp.sh" state >"$d/bgp.after" || true
	ok_bgp=yes
	for s in dut peer; do
		grep -q "^$s Established " "$d/bgp.after" || ok_bgp="no ($s $(awk -v s="$s" '$1 == s { print $2 }' "$d/bgp.after"))"
		[ "$(bgp_field "$s" since "$d/bgp.before")" = "$(bgp_field "$s" since "$d/bgp.after")" ] || ok_bgp="no ($s session restarted)"
		[ "$(bgp_field "$s" withdraws "$d/bgp.after")" = 0 ] || ok_bgp="no ($s: $(bgp_field "$s" withdraws "$d/bgp.after") withdrawn)"
	done
	[ "$ok_bgp" = yes ] && ok_bgp="yes, up $(bgp_field dut uptime "$d/bgp.after") s"
	ok_kb0=$(kb0_kept "$idx")
	local want_sha got_sha nfs_ok gap late lost retr
	want_sha=$(cat "$KBT_BIG_SHA")
	got_sha=$(awk '{ print $1 }' "$d/nfs.sha")
	if [ "$got_sha" = "$want_sha" ]; then nfs_ok=match; else nfs_ok="MISMATCH"; fi
	read -r gi li lo si <<<"$(pingstats "$d/ping.in")"
	read -r go lo2 lo3 so <<<"$(pingstats "$d/ping.out")"
	gap=$((gi > go ? gi : go))
	late=$((li + lo2))
	lost=$((lo + lo3))
	read -r mbps retr <<<"$(python3 -c 'import json, sys
try:
    e = json.load(open(sys.argv[1]))["end"]
    print("%.0f %d" % (e["sum_received"]["bits_per_second"] / 1e6, e["sum_sent"]["retransmits"]))
except Exception:
    print("? ?")' "$d/iperf3.json")"
	printf '| %s | %s s | %s | %s | %s | %s Mbit/s, %s retr | %s ms | %s of %s | %s (tx_dropped +%s) |\n' \
		"$name" "$took" "$ok_bgp" "$ok_kb0" "$nfs_ok" \
		"$mbps" "$retr" \
		"$gap" "$late" "$((si + so))" "$lost" "$(($(txdrop) - drop0))"
	sleep 2 # let the peer's iperf3 server settle
}

header() {
	echo "| event | event took | BGP kept | kb0 (ifindex, address, route) | NFS read of big.bin | iperf3 during it | gap | queued, delivered | lost |"
	echo "|---|---|---|---|---|---|---|---|---|"
}

cleanup() {
	local rc=$?
	[ -n "${init_pid:-}" ] && nspawn_cleanup >/dev/null 2>&1
	bash "$tb/down.sh" >/dev/null 2>&1 || true
	if [ "$rc" -ne 0 ]; then say "FAILED; files in $out"; else rm -rf "$out"; fi
	return "$rc"
}
trap cleanup EXIT
kbt_claim_bed
header

# ---- takeover by hand, on the bed ------------------------------------------
if want takeover; then
	say "takeover: the ring bed with its kbridge"
	bash "$tb/up.sh" >/dev/null
	bash "$tb/bgp.sh" up >/dev/null
	hand_add
	takeover() {
		spawn kbridge-next "$KBT_NS_DUT" "${KBT_PIN_OTHER[@]}" "$top/bin/kbridge" run \
			--config "$tb/kbridge.yaml" --takeover
		local old
		old=$(cat "$KBT_RUN/kbridge.pid")
		# The old one exits once it has handed over; the new one serves.
		for _ in $(seq 100); do pid_alive "$old" || break; sleep 0.1; done
		! pid_alive "$old" || return 1
		echo "$SPAWNED_PID" >"$KBT_RUN/kbridge.pid"
		rm -f "$KBT_RUN/kbridge-next.pid"
		for _ in $(seq 100); do [ -S "$KBT_RUN/kbridge.sock" ] && "$top/bin/kbridge" stats --socket "$KBT_RUN/kbridge.sock" >/dev/null 2>&1 && return 0; sleep 0.1; done
		return 1
	}
	measure takeover takeover
	grep -h 'adopted\|handed' "$KBT_RUN/kbridge-next.log" 2>/dev/null | sed 's/^/kbt: takeover: /' >&2 || true
	bash "$tb/bgp.sh" down >/dev/null
	bash "$tb/down.sh" >/dev/null
fi

# ---- under a real systemd: restart, kill -9, upgrade ------------------------
if want restart || want kill || want upgrade; then
	say "systemd: the bed without its app and kbridge, which run as units in a container"
	[ -x "$top/bin/kbridge-refapp" ] || die "bin/kbridge-refapp missing: make build"
	debs=$out/debs
	mkdir -p "$debs/1" "$debs/2"
	deb1=$(DEB_VERSION=1.0~gap1 bash "$top/deploy/deb.sh" "$debs/1")
	deb2=$(DEB_VERSION=1.0~gap2 bash "$top/deploy/deb.sh" "$debs/2")
	KBT_NO_BRIDGE=1 bash "$tb/up.sh" >/dev/null
	bash "$tb/hugepages.sh" >&2
	app="/opt/kbridge/bin/kbridge-refapp -l $KBT_APP_CPU --file-prefix $KBT_DPDK_PREFIX --proc-type primary --no-pci --vdev net_af_packet0,iface=kbt-nic -- --port kb0"
	# shellcheck source=deploy/nspawn-lib.sh
	. "$top/deploy/nspawn-lib.sh"
	nspawn_prepare "$deb1" "$app"
	trap cleanup EXIT
	cp "$top/bin/kbridge-refapp" "$work/bin/"
	cp "$deb2" "$work/pkg/"
	# The bed's kbridge.yaml with the package's control socket, no metrics.
	sed '/^stats:/,$d' "$tb/kbridge.yaml" >"$work/kbridge.yaml"
	printf 'stats:\n  metrics: ""\n' >>"$work/kbridge.yaml"
	nspawn_config "$work/kbridge.yaml"
	nspawn_hugepages "$app"
	binds+=(--bind-ro=/sys/module --bind=/run/netns)
	for u in dpdk-app kbridge; do
		mkdir -p "$sys/$u.service.d"
		printf '[Service]\nNetworkNamespacePath=/run/netns/%s\n' "$KBT_NS_DUT" >"$sys/$u.service.d/50-kbt-bed.conf"
	done
	[ -n "$KBT_OTHER_CPUS" ] && printf 'CPUAffinity=%s\n' "$KBT_OTHER_CPUS" >>"$sys/kbridge.service.d/50-kbt-bed.conf"
	nspawn_boot kbgap --capability=CAP_IPC_LOCK,CAP_BPF,CAP_SYS_NICE,CAP_NET_RAW,CAP_NET_ADMIN >&2
	inside systemctl start dpdk-app.service
	inside systemctl start kbridge.service || { inside journalctl -u kbridge -u dpdk-app --no-pager -o cat | tail -30 >&2; die "kbridge.service did not start"; }
	# From here on wait_for is nspawn-lib.sh's: wait_for SECONDS CMD...
	answers() { ip netns exec "$KBT_NS_DUT" ping -c1 -W1 "$KBT_PEER_IP" >/dev/null 2>&1; }
	wait_for 20 answers || die "no answer through kb0 from kbridge.service"
	bash "$tb/bgp.sh" up >/dev/null
	hand_add
	settle() { wait_for 30 eval '[ "$(prop ActiveState)" = active ] && answers'; } # the unit serves kb0 again
	restart() { inside systemctl restart kbridge.service && settle; }
	kill9() { inside kill -9 "$(prop MainPID)" && sleep 0.5 && settle; }
	upgrade() { inside dpkg -i "/opt/kbridge/pkg/$(basename "$deb2")" && settle; }
	if want restart; then measure "systemctl restart" restart; fi
	if want kill; then measure "kill -9 (Restart=on-failure)" kill9; fi
	if want upgrade; then measure "dpkg -i of a newer package" upgrade; fi
	inside journalctl -u kbridge.service --no-pager -o cat | grep -E 'adopted|fd store' | sed 's/^/kbt: journal: /' >&2 || true
	say "versions: $(inside dpkg-query -W -f='${Version}' kbridge) installed at the end"
fi
