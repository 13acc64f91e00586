# Shared helpers for the kbridge test bed scripts. Sourced, not executed.
# shellcheck shell=bash disable=SC2034

# ---- names and addresses (README.md) ----------------------------------------
KBT_NS_PEER=kbt-peer
KBT_NS_DUT=kbt-dut
KBT_NS_DIRECT=kbt-direct
KBT_NAMESPACES=("$KBT_NS_PEER" "$KBT_NS_DUT" "$KBT_NS_DIRECT")
KBT_LINKS=(kbt-wire kbt-nic kbt-alt kbt-base kbt-wire2 kbt-nic2)

KBT_PEER_IP=198.18.0.1
KBT_DUT_IP=198.18.0.2
KBT_ALT_IP=198.18.1.1
KBT_BASE_IP=198.18.1.2
# IPv6 from 2001:2::/48, the benchmarking range (RFC 5180): kb0 is 2001:2::2.
KBT_PEER_IP6=2001:2::1
KBT_DUT_IP6=2001:2::2
KBT_ALT_IP6=2001:2:0:1::1
KBT_BASE_IP6=2001:2:0:1::2
# KBT_PORTS=2: the app's second port (kbt-nic2, wired to the peer's kbt-wire2)
# and its interface kb1, served by a second kbridge (instance kb1).
KBT_PEER2_IP=198.18.2.1
KBT_DUT2_IP=198.18.2.2
KBT_PEER2_IP6=2001:2:0:2::1
KBT_DUT2_IP6=2001:2:0:2::2

KBT_NFS_PORT=2049
KBT_SOCKPERF_PORT=11111
KBT_IPERF_PORT=5201
KBT_IPERF2_PORT=5202 # KBT_PORTS=2: a second iperf3 server, for traffic through kb1 at once

# ---- files -----------------------------------------------------------------
KBT_RUN=${KBT_RUN:-/run/kbt}              # per-bed state: pids, logs, ganesha state
KBT_LIB=${KBT_LIB:-/var/lib/kbt}          # cache: the generated export tree
KBT_EXPORT=$KBT_LIB/export
KBT_EXPORT_MARKER=$KBT_LIB/export.complete
KBT_BIG_SHA=$KBT_LIB/big.bin.sha256
KBT_TREE_DIRS=2000
KBT_BIG_BYTES=$((256 * 1024 * 1024))
KBT_TREE_ENTRIES=$((KBT_TREE_DIRS * 3 + 1))   # dirs + 2 files each + big.bin
KBT_LOCKFILE=/run/kbt.lock

KBT_DPDK_PREFIX=kbt
KBT_TESTPMD_PREFIX=kbt-testpmd
KBT_VHOST_PREFIX=kbt-vhost # the app (testpmd) of KBT_MODE=vhost; kbridge's own EAL runs --in-memory

KBT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KBT_ROOT=$(cd "$KBT_DIR/../.." && pwd)

# ---- output ----------------------------------------------------------------
say() { printf 'kbt: %s\n' "$*" >&2; }
die() { printf 'kbt: ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

# kbt_reload PID: SIGHUP the bed's kbridge and wait (5 s) until its log says
# it reloaded; 1 if it did not.
kbt_reload() {
	local before
	before=$(grep -c 'msg=reloaded' "$KBT_RUN/kbridge.log" || true)
	kill -HUP "$1"
	for _ in $(seq 50); do
		[ "$(grep -c 'msg=reloaded' "$KBT_RUN/kbridge.log" || true)" -gt "$before" ] && return 0
		sleep 0.1
	done
	return 1
}

need_root() { [ "$(id -u)" -eq 0 ] || die "must run as root"; }

# Serialise up/down/forwarder against each other. Nested calls (up.sh -> down.sh)
# inherit the lock through KBT_LOCK_HELD. fd 9 must be closed in every daemon we
# start (9>&-), or the daemon would hold the lock forever.
kbt_lock() {
	[ "${KBT_LOCK_HELD:-}" = 1 ] && return 0
	exec 9>"$KBT_LOCKFILE"
	if ! flock -w 300 9; then die "another test bed script holds $KBT_LOCKFILE"; fi
	export KBT_LOCK_HELD=1
}

# ---- CPU placement ---------------------------------------------------------
# The highest-numbered CPU is the DPDK app's lcore; everything else of the bed runs
# on the remaining CPUs. On a 1-CPU machine nothing is pinned (KBT_OTHER_CPUS="").
kbt_cpus() {
	local n
	n=$(getconf _NPROCESSORS_ONLN)
	KBT_APP_CPU=${KBT_APP_CPU:-$((n - 1))}
	if [ -z "${KBT_OTHER_CPUS+x}" ]; then
		if [ "$n" -gt 1 ]; then
			if [ "$n" -eq 2 ]; then KBT_OTHER_CPUS=0; else KBT_OTHER_CPUS="0-$((n - 2))"; fi
		else
			KBT_OTHER_CPUS=""
		fi
	fi
	# Prefix for commands that must stay off the app CPU.
	KBT_PIN_OTHER=()
	[ -n "$KBT_OTHER_CPUS" ] && KBT_PIN_OTHER=(taskset -c "$KBT_OTHER_CPUS")
	# The app itself is started on every CPU and pins only its lcore
	# (-l APP_CPU): EAL then puts its control threads (interrupt, IPC) on the
	# CPUs that are not lcores, as a production host places them. Started
	# under taskset -c APP_CPU, those threads shared the polling lcore's CPU.
	KBT_PIN_APP=()
	[ -n "$KBT_OTHER_CPUS" ] && KBT_PIN_APP=(taskset -c "$KBT_OTHER_CPUS,$KBT_APP_CPU")
	return 0
}

# kbt_testpmd_lcores: testpmd's --lcores map and the CPUs its process may use,
# for every testpmd the bed starts (testpmd-forwarder.sh, and the app of
# KBT_MODE=vhost). Default "0@OTHER,1@APP": the forwarding lcore 1 alone on the
# app CPU, the main lcore 0 (and EAL's control threads, which get the main
# lcore's CPU) on the first of the other CPUs; "0@APP,1@APP" on 1 CPU.
# KBT_TESTPMD_LCORES overrides the map. Sets KBT_TESTPMD_LCORE_MAP and
# KBT_TESTPMD_PIN_CPUS (the CPUs named in the map, for taskset). Needs kbt_cpus.
kbt_testpmd_lcores() {
	local main=$KBT_APP_CPU
	[ -n "$KBT_OTHER_CPUS" ] && main=${KBT_OTHER_CPUS%%[-,]*}
	KBT_TESTPMD_LCORE_MAP=${KBT_TESTPMD_LCORES:-0@$main,1@$KBT_APP_CPU}
	KBT_TESTPMD_PIN_CPUS=$(echo "$KBT_TESTPMD_LCORE_MAP" | tr ',' '\n' | sed -n 's/.*@//p' | tr -d '()' | sort -un | paste -sd, -)
	[ -n "$KBT_TESTPMD_PIN_CPUS" ] || KBT_TESTPMD_PIN_CPUS=$KBT_APP_CPU
	return 0
}

# ---- namespaces and processes ----------------------------------------------
ns_exists() { [ -e "/run/netns/$1" ]; }

# net namespace inode of one of ours, or empty
ns_inode() { stat -L -c %i "/run/netns/$1" 2>/dev/null || true; }

# true if PID is alive (not a zombie) and lives in one of the bed's namespaces
pid_in_bed() {
	local pid=$1 link ns ino
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	pid_alive "$pid" || return 1
	link=$(readlink "/proc/$pid/ns/net" 2>/dev/null) || return 1
	for ns in "${KBT_NAMESPACES[@]}"; do
		ino=$(ns_inode "$ns")
		[ -n "$ino" ] && [ "$link" = "net:[$ino]" ] && return 0
	done
	return 1
}

# Alive and not a zombie. A dead process may stay a zombie for a while when its
# parent (here: whatever reaps orphans) is slow to reap it; that counts as gone.
# A zombie thread-group leader whose other threads still run counts as alive.
pid_alive() {
	local st thr
	[ -r "/proc/$1/stat" ] || return 1
	st=$(sed -E 's/^.*\) (.).*$/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] || return 1
	if [ "$st" = Z ] || [ "$st" = X ]; then
		thr=$(awk '/^Threads:/ { print $2 }' "/proc/$1/status" 2>/dev/null || true)
		[ "${thr:-0}" -gt 1 ]
		return
	fi
	return 0
}

pid_comm() { cat "/proc/$1/comm" 2>/dev/null || echo '?'; }

# stop_pids PID...: SIGTERM, wait up to 5 s, then SIGKILL; waits until gone.
stop_pids() {
	local pid deadline left=()
	[ $# -eq 0 ] && return 0
	for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
	deadline=$(($(date +%s%N) + 5000000000))
	while :; do
		left=()
		for pid in "$@"; do pid_alive "$pid" && left+=("$pid"); done
		[ ${#left[@]} -eq 0 ] && return 0
		[ "$(date +%s%N)" -ge "$deadline" ] && break
		sleep 0.1
	done
	for pid in "${left[@]}"; do
		say "pid $pid ($(pid_comm "$pid")) ignored SIGTERM for 5 s, sending SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
	done
	for _ in $(seq 50); do
		left=()
		for pid in "$@"; do pid_alive "$pid" && left+=("$pid"); done
		[ ${#left[@]} -eq 0 ] && return 0
		sleep 0.1
	done
	say "WARNING: still alive after SIGKILL: ${left[*]}"
	return 0
}

# stop_pidfile FILE: stop the process recorded in FILE if it is one of the bed's.
stop_pidfile() {
	local f=$1 pid
	[ -f "$f" ] || return 0
	pid=$(tr -dc '0-9' <"$f" 2>/dev/null || true)
	if [ -n "$pid" ] && pid_in_bed "$pid"; then
		say "stopping $(basename "$f" .pid) (pid $pid, $(pid_comm "$pid"))"
		stop_pids "$pid"
	elif [ -n "$pid" ] && pid_alive "$pid"; then
		say "not stopping pid $pid from $f: it is not in a kbt-* namespace (stale pid file)"
	fi
	rm -f "$f"
}

# spawn NAME NS CMD...: start CMD inside NS as a detached background process
# (own session, stdin /dev/null, output to $KBT_RUN/NAME.log), record its PID in
# $KBT_RUN/NAME.pid. ip netns exec, taskset and setsid all exec in place, so $!
# is the PID of CMD itself.
spawn() {
	local name=$1 ns=$2 pid
	shift 2
	: >"$KBT_RUN/$name.log"
	setsid ip netns exec "$ns" "$@" </dev/null >>"$KBT_RUN/$name.log" 2>&1 9>&- &
	pid=$!
	echo "$pid" >"$KBT_RUN/$name.pid"
	SPAWNED_PID=$pid
}

log_tail() {
	local f=$1 n=${2:-30}
	[ -f "$f" ] || return 0
	say "---- last $n lines of $f ----"
	tail -n "$n" "$f" | sed 's/^/  | /' >&2
	say "----"
}

# wait_for DESC TIMEOUT_S "WATCH_PIDS" "LOGS" CMD...: run CMD until it succeeds or
# the timeout expires. If one of WATCH_PIDS (space-separated, may be empty) dies
# meanwhile, show LOGS (space-separated) and fail.
wait_for() {
	local desc=$1 timeout=$2 watch=$3 logs=$4 t0 deadline w l
	shift 4
	t0=$(now)
	deadline=$(($(date +%s) + timeout))
	say "waiting for $desc (up to ${timeout}s)"
	while :; do
		if "$@" >/dev/null 2>&1; then
			say "  ok: $desc after $(since "$t0")"
			return 0
		fi
		for w in $watch; do
			if ! pid_alive "$w"; then
				say "  process $w died while waiting for $desc"
				for l in $logs; do log_tail "$l" 40; done
				return 1
			fi
		done
		if [ "$(date +%s)" -ge "$deadline" ]; then
			say "  timed out after ${timeout}s waiting for $desc"
			for l in $logs; do log_tail "$l" 40; done
			return 1
		fi
		sleep 0.2
	done
}

tcp_listening() { # NS PORT
	[ -n "$(ip netns exec "$1" ss -Hltn "sport = :$2" 2>/dev/null)" ]
}

# ---- DPDK runtime leftovers ------------------------------------------------
# A DPDK prefix is in use if any process maps its runtime dir or hugepage files.
dpdk_prefix_in_use() {
	local prefix=$1
	grep -lsqE "(/var)?/run/dpdk/${prefix}/|/dev/hugepages/${prefix}map_" /proc/[0-9]*/maps 2>/dev/null
}

# Remove runtime dirs and hugepage files of the given prefixes (glob allowed in
# the caller) that no live process uses.
dpdk_cleanup_prefix() {
	local prefix=$1
	[ -e "/var/run/dpdk/$prefix" ] || compgen -G "/dev/hugepages/${prefix}map_*" >/dev/null || return 0
	if dpdk_prefix_in_use "$prefix"; then
		say "DPDK prefix '$prefix' is still in use by a live process; leaving its runtime files"
		return 0
	fi
	rm -rf "/var/run/dpdk/$prefix"
	rm -f /dev/hugepages/"${prefix}"map_*
	say "removed stale DPDK runtime files for prefix '$prefix'"
}

# All DPDK prefixes of the bed that have leftovers: /var/run/dpdk/kbt* and
# /dev/hugepages/kbt*map_*.
dpdk_bed_prefixes() {
	local p f
	{
		for p in /var/run/dpdk/kbt*; do [ -d "$p" ] && basename "$p"; done
		for f in /dev/hugepages/kbt*map_*; do
			[ -e "$f" ] || continue
			f=$(basename "$f")
			echo "${f%map_*}"
		done
	} | sort -u
}

# ---- spawning into a namespace without a new mount namespace ----------------
# spawn_net NAME NS CMD...: like spawn, but enters only the network namespace
# (nsenter --net). "ip netns exec" also unshares the mount namespace and mounts
# a fresh /sys, which hides bpffs (/sys/fs/bpf): kbridge's pins and the PMD's
# libbpf must see the same bpffs, so mode xdp starts both this way.
spawn_net() {
	local name=$1 ns=$2 pid
	shift 2
	: >"$KBT_RUN/$name.log"
	setsid nsenter --net="/run/netns/$ns" "$@" </dev/null >>"$KBT_RUN/$name.log" 2>&1 9>&- &
	pid=$!
	echo "$pid" >"$KBT_RUN/$name.pid"
	SPAWNED_PID=$pid
}

# ---- mode xdp ----------------------------------------------------------------
# With loader: pmd, kbridge pins its maps by name directly in bpffs' root
# (libbpf in DPDK 22.11 looks there and nowhere else), so one such path runs
# per host. These are the pins; $KBT_RUN/xdp-pins records "PATH MAP_ID" for
# the ones the bed's kbridge created, so that down.sh removes exactly those.
KBT_BPFFS=/sys/fs/bpf
KBT_XDP_PINS=(xsks_map steer_config stats)
KBT_XDP_NIC=kbt-nic
KBT_FAST_UDP_PORT=4789 # the fast-path rule of kbridge-xdp.yaml and the refapp's --own-udp-port

# bpf_pin_id PATH: the ID of the map pinned at PATH, or nothing.
bpf_pin_id() {
	[ -e "$1" ] || return 0
	bpftool map show pinned "$1" 2>/dev/null | awk -F: 'NR == 1 && $1 ~ /^[0-9]+$/ { print $1 }'
}

# bpf_map_users MAP_ID: "ID:NAME" of every loaded program that uses the map.
bpf_map_users() {
	bpftool prog show 2>/dev/null | awk -v m="$1" '
		/^[0-9]+:/ { id = $1; sub(":", "", id); name = "?"
			for (i = 1; i < NF; i++) if ($i == "name") name = $(i + 1) }
		/map_ids/ { for (i = 1; i < NF; i++) if ($i == "map_ids") {
			n = split($(i + 1), ids, ",")
			for (j = 1; j <= n; j++) if (ids[j] == m) print id ":" name } }'
}

# xdp_pins_busy: prints and succeeds if maps pinned in bpffs' root under the
# names kbridge uses are in use by a loaded program (another loader-pmd path:
# a bed, or the xdp package's tests). Stale pins that no program uses do not
# count: kbridge removes those itself.
xdp_pins_busy() {
	local p id users busy=1
	for p in "${KBT_XDP_PINS[@]}"; do
		id=$(bpf_pin_id "$KBT_BPFFS/$p")
		[ -n "$id" ] || continue
		users=$(bpf_map_users "$id" | tr '\n' ' ')
		if [ -n "$users" ]; then
			echo "$KBT_BPFFS/$p (map $id) is used by program(s) $users"
			busy=0
		fi
	done
	return $busy
}

# ---- sharing the bed with other users of this machine ----------------------
# up.sh and down.sh hold $KBT_LOCKFILE only while they run; the bed itself may
# stay up for minutes (a benchmark, a test). A script that measures on the bed
# claims it for its whole run: it takes the lock, and if someone else's bed is
# up (live processes recorded in $KBT_RUN or running in the namespaces) it lets
# go of the lock and waits for that bed to come down instead of tearing it down.
# While the claim is held, other up.sh/down.sh calls wait for the lock.

# kbt_bed_users: "PID(comm)" of live processes of the bed, one per line.
kbt_bed_users() {
	local f pid ns
	{
		for f in "$KBT_RUN"/*.pid; do
			[ -f "$f" ] || continue
			pid=$(tr -dc '0-9' <"$f" 2>/dev/null || true)
			[ -n "$pid" ] && pid_in_bed "$pid" && echo "$pid"
		done
		for ns in "${KBT_NAMESPACES[@]}"; do
			ns_exists "$ns" || continue
			for pid in $(ip netns pids "$ns" 2>/dev/null || true); do
				pid_alive "$pid" && echo "$pid"
			done
		done
	} | sort -un | while read -r pid; do echo "$pid($(pid_comm "$pid"))"; done
}

# kbt_claim_bed [TIMEOUT_S]: wait (default 1800 s) until the bed is free, then
# hold $KBT_LOCKFILE on fd 9 until kbt_release_bed or exit. Nested up.sh and
# down.sh see KBT_LOCK_HELD=1 and do not lock again.
kbt_claim_bed() {
	local timeout=${1:-1800} deadline users said=0
	deadline=$(($(date +%s) + timeout))
	while :; do
		exec 9>"$KBT_LOCKFILE"
		if flock -w 60 9; then
			users=$(kbt_bed_users | tr '\n' ' ')
			if [ -z "$users" ]; then
				export KBT_LOCK_HELD=1
				[ "$said" = 0 ] || say "the test bed is free now"
				return 0
			fi
			flock -u 9
		else
			users="(another script holds $KBT_LOCKFILE)"
		fi
		exec 9>&-
		if [ "$(date +%s)" -ge "$deadline" ]; then
			die "the test bed is still in use after ${timeout}s: $users; if that is a crashed run, tests/testbed/down.sh removes it"
		fi
		if [ "$said" = 0 ]; then
			say "the test bed is in use by someone else: $users; waiting (up to ${timeout}s)"
			said=1
		fi
		sleep 10
	done
}

kbt_release_bed() {
	unset KBT_LOCK_HELD
	flock -u 9 2>/dev/null || true
	exec 9>&-
}
