#!/usr/bin/env bash
# nspawn-check.sh: boot a real systemd in a throwaway container and put
# deploy/kbridge.service through start, crash, watchdog, stop and
# BindsTo. Needs root and systemd-nspawn (Debian: systemd-container).
#
#   deploy/nspawn-check.sh KBRIDGE_BIN|KBRIDGE_DEB [APP_CMD] [CONFIG]
#
# EXTRA_BINS="path ..." copies more programs (the reference DPDK app) next
# to kbridge, into /opt/kbridge/bin inside the container; /dev/hugepages is
# bound in when it is mounted, so a real DPDK primary and kbridge can run.
#
# A KBRIDGE_DEB (make deb) is installed in the container with dpkg -i, the
# checks run on the package's unit and paths, and a dpkg --purge at the end
# must leave nothing behind (nspawn-lib.sh); UPGRADE_DEB=FILE, a newer
# version of it, is installed over the running kbridge before the stop. A
# KBRIDGE_BIN is copied into the container and replaces
# /usr/local/bin/kbridge (a drop-in rewrites ExecStart/ExecStopPost, so the
# host's /usr stays untouched). APP_CMD is what dpdk-app.service runs
# (default: sleep infinity, a stand-in primary). CONFIG is bound to
# /etc/kbridge/kbridge.yaml. The container has a private network and a
# tmpfs root over the host's /usr; nothing outside it changes.
set -euo pipefail

bin=$(readlink -f "${1:?usage: $0 KBRIDGE_BIN|KBRIDGE_DEB [APP_CMD] [CONFIG]}")
app=${2:-/bin/sleep infinity}
cfg=${3:-}
. "$(dirname "$0")/nspawn-lib.sh"
nspawn_prepare "$bin" "$app"
for b in ${EXTRA_BINS:-}; do cp "$b" "$work/bin/"; done
[ -n "$cfg" ] && nspawn_config "$cfg"
nspawn_hugepages "$app"
# EAL probes VFIO through /sys/module, which nspawn does not show; a real
# host has it.
[ -n "${EXTRA_BINS:-}" ] && binds+=(--bind-ro=/sys/module)

nspawn_boot kbcheck --capability=CAP_IPC_LOCK,CAP_BPF,CAP_SYS_NICE,CAP_NET_RAW

restarts_at_least() { [ "$(prop NRestarts)" -ge "$1" ] && active; }
no_tap() { ! inside ip link show kb0 >/dev/null 2>&1; }

inside systemctl start dpdk-app.service
# /run/dpdk is the app's: as a non-root primary's would be, owned by
# another user with its own mode. kbridge's start must not change either.
inside mkdir -p /run/dpdk
inside chown 65534:65534 /run/dpdk
inside chmod 0755 /run/dpdk
run_dpdk_kept() { [ "$(inside stat -c %a:%u:%g /run/dpdk)" = 755:65534:65534 ]; }
check "start: Type=notify reaches active (running)" inside systemctl start kbridge.service
check "start: active" active
if ! active; then
	# Nothing below means anything without a running daemon (and a
	# MainPID of 0 would make "kill 0" hit this script).
	inside journalctl -u kbridge.service --no-pager -o cat | tail -40
	echo "--- journal (dpdk-app.service)"
	inside journalctl -u dpdk-app.service --no-pager -o cat | tail -20
	exit 1
fi
echo "      STATUS=$(prop StatusText)"
echo "      capabilities: $(inside grep CapBnd "/proc/$(prop MainPID)/status")"
# CAP_NET_ADMIN, CAP_NET_RAW, CAP_IPC_LOCK: no CAP_BPF or CAP_PERFMON outside mode xdp's drop-in.
check "start: the bounding set is the base unit's, no BPF capability" capbnd 0000000000007000
check "start: no writable /sys/fs/bpf, no /dev/vhost-net in the base unit" base_sandbox
check "start: a pre-existing /run/dpdk keeps its mode and owner" run_dpdk_kept
# Mode vhost's default socket is in /run/kbridge: an app that is not root
# must pass through it (its socket's mode and group then decide), and
# must not list it.
run_kbridge_passable() {
	[ "$(inside stat -c %a:%U /run/kbridge)" = 711:root ] &&
		inside setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'cd /run/kbridge && ! ls . >/dev/null 2>&1'
}
check "start: /run/kbridge is 0711 root: a non-root app passes through, lists nothing" run_kbridge_passable

ifindex() { inside cat /sys/class/net/kb0/ifindex 2>/dev/null; }
before=$(ifindex)
pid=$(prop MainPID)
inside kill -9 "$pid"
check "crash: kill -9 is restarted (Restart=on-failure)" wait_for 15 restarts_at_least 1
check "crash: /run/dpdk still keeps its mode and owner after the restart" run_dpdk_kept
# The unit's fd store held kb0's queues while no kbridge ran.
kb0_kept() { [ -n "$before" ] && [ "$(ifindex)" = "$before" ]; }
check "crash: kb0 kept through the restart (the fd store held its queues): same ifindex" kb0_kept
adopted_logged() {
	inside journalctl -u kbridge.service --no-pager -o cat |
		grep -q "adopted kb0 (ifindex $before) from pid $pid, kept in systemd's fd store"
}
check "crash: the next kbridge adopted kb0 from the fd store" wait_for 5 adopted_logged

pid=$(prop MainPID)
inside kill -STOP "$pid"
check "watchdog: a stopped main process is killed and restarted" wait_for 40 restarts_at_least 2
inside journalctl -u kbridge.service --no-pager -o cat | grep -m1 -i watchdog | sed 's/^/      /' || true

# A restart job keeps the fd store (FileDescriptorStorePreserve=restart
# says so on systemd 254+; 252 does it without).
before=$(ifindex)
pid=$(prop MainPID)
inside systemctl restart kbridge.service
check "restart: kb0 kept through systemctl restart: same ifindex, adopted" \
	wait_for 15 eval 'active && kb0_kept && adopted_logged'

# The package's upgrade: dpkg -i of a newer version over a running kbridge
# restarts it on the new binary (postinst: try-restart), a restart job that
# keeps the fd store, so kb0 stays as it was.
if [ -n "${UPGRADE_DEB:-}" ] && [ -n "$deb" ]; then
	cp "$UPGRADE_DEB" "$work/pkg/"
	before=$(ifindex)
	pid=$(prop MainPID)
	check "upgrade: dpkg -i of $(basename "$UPGRADE_DEB") over the running kbridge succeeds" \
		inside dpkg -i "/opt/kbridge/pkg/$(basename "$UPGRADE_DEB")"
	upgraded() { [ "$(prop MainPID)" != "$pid" ] && [ "$(inside dpkg-query -W -f='${Version}' kbridge)" = "$(dpkg-deb -f "$UPGRADE_DEB" Version)" ]; }
	check "upgrade: kbridge restarted on the new version" wait_for 15 eval 'active && upgraded'
	check "upgrade: kb0 kept through the upgrade: same ifindex, adopted" wait_for 15 eval 'kb0_kept && adopted_logged'
fi

check "stop: systemctl stop succeeds" inside systemctl stop kbridge.service
check "stop: inactive" inactive
check "stop: ExecStopPost cleanup left no kb0" no_tap

inside systemctl start kbridge.service
inside systemctl stop dpdk-app.service
check "bindsto: stopping the app stops kbridge" wait_for 10 inactive

# The journal: a bad configuration fails the start with exit 2 (restarted
# as any failure: Go's runtime exits 2 on a panic too) and its error is in
# the journal at priority err; kbridge's lines carry their own priority
# and no time of kbridge's (the journal stamps them).
printf 'workers:\n  batch: 3.5\n' >"$work/etc/bad.yaml"
# (A package's run has no drop-in directory of its own in /etc.)
mkdir -p "$sys/kbridge.service.d"
cat >"$sys/kbridge.service.d/zz-journal-check.conf" <<EOT
[Service]
ExecStart=
ExecStart=$kb run --config /opt/kbridge/etc/bad.yaml
EOT
inside systemctl daemon-reload
inside systemctl start kbridge.service >/dev/null 2>&1 || true
bad_exits_2() { [ "$(prop ExecMainStatus)" = 2 ] && [ "$(prop ExecMainCode)" = 1 ]; }
check "journal: a bad configuration exits 2" wait_for 10 bad_exits_2
inside systemctl stop kbridge.service
journal() { inside journalctl -u kbridge.service --no-pager -o cat "$@"; }
check "journal: journalctl -p err -u kbridge shows the configuration's error" \
	sh -c "nsenter -t $init_pid -a journalctl -u kbridge.service --no-pager -o cat -p err | grep -q 'workers.batch: 3.5: must be a whole number'"
info_not_err() {
	# grep reads all (no -q): pipefail would count journalctl's SIGPIPE as no match.
	journal -p info | grep 'level=INFO' >/dev/null && ! journal -p err | grep 'level=INFO' >/dev/null &&
		! journal -p warning | grep 'level=INFO' >/dev/null
}
check "journal: kbridge's info lines are at priority info, not err or warning" info_not_err
check "journal: no line of kbridge's carries a time of its own" sh -c "! nsenter -t $init_pid -a journalctl -u kbridge.service --no-pager -o cat | grep -q 'time='"
rm "$sys/kbridge.service.d/zz-journal-check.conf"
rmdir "$sys/kbridge.service.d" 2>/dev/null || true # the package's purge leaves no drop-in directory
inside systemctl daemon-reload
# Stopped, the unit may be unloaded already: nothing to reset then.
inside systemctl reset-failed kbridge.service 2>/dev/null || true

nspawn_purge_checks

echo "--- journal (kbridge.service)"
inside journalctl -u kbridge.service --no-pager -o cat | tail -40
echo "--- $failures failure(s)"
[ "$failures" -eq 0 ]
