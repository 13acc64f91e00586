#!/usr/bin/env bash
# nspawn-check-kni.sh: boot a real systemd in a throwaway container and run
# an application written for KNI (tests/kniapp, rte_kni.h) as a unit of its
# own, Type=notify with NotifyAccess=all, that allocates and releases KNIs:
# each rte_kni_alloc() starts a kbridge as the app's child (kbridge_child.h),
# in the app's cgroup, where NotifyAccess=all lets any process speak for
# the unit. The children must not: the unit stays active (running) through
# every release (a child's STOPPING=1 would stop it) and keeps the status
# the app gave (a child's STATUS= would replace it). (A child's FDSTORE=1
# would be refused here anyway: the app's unit has no fd store.) Needs root
# and systemd-nspawn.
#
#   deploy/nspawn-check-kni.sh KBRIDGE_BIN KNIAPP_BIN
#
# The app's wrapper says READY=1 and its STATUS= itself (systemd-notify,
# for the main pid), then execs the KNI app on net_ring0 (no NIC), which
# allocates vEth0, releases and allocates it again twice, and forwards.
# The container has a private network and a tmpfs root over the host's
# /usr; nothing outside it changes.
set -euo pipefail

bin=$(readlink -f "${1:?usage: $0 KBRIDGE_BIN KNIAPP_BIN}")
kniapp=$(readlink -f "${2:?usage: $0 KBRIDGE_BIN KNIAPP_BIN}")
status="kniapp: its own status"
app="/opt/kbridge/bin/kbridge-kniapp -l 0,1 --file-prefix kbkni --proc-type primary --no-pci --vdev net_ring0 -m 128 -- --loop one --realloc 2"
. "$(dirname "$0")/nspawn-lib.sh"
nspawn_prepare "$bin" "$app"
cp "$kniapp" "$work/bin/kbridge-kniapp"
nspawn_hugepages "$app"
# EAL probes VFIO through /sys/module, which nspawn does not show.
binds+=(--bind-ro=/sys/module)
cat >"$sys/kni-app.service" <<EOT
[Unit]
Description=a KNI application under NotifyAccess=all (nspawn-check-kni)
[Service]
Type=notify
NotifyAccess=all
Environment=KBRIDGE_BIN=/opt/kbridge/bin/kbridge
ExecStart=/bin/sh -c 'systemd-notify --pid=\$\$\$\$ --ready --status="$status" && exec $app'
EOT

nspawn_boot kbkni --capability=CAP_IPC_LOCK,CAP_SYS_NICE,CAP_NET_RAW

aprop() { inside systemctl show kni-app.service -p "$1" --value; }
app_running() { [ "$(aprop ActiveState)" = active ] && [ "$(aprop SubState)" = running ]; }
app_log() { inside journalctl -u kni-app.service --no-pager -o cat; }
forwarding() { app_log | grep 'kniapp: forwarding' >/dev/null; }

check "start: systemctl start kni-app reaches active (running)" inside systemctl start kni-app.service
check "alloc: the app allocated, released and allocated vEth0 again twice, and forwards" wait_for 60 forwarding
check "alloc: vEth0 exists, served by a kbridge the app started" inside ip link show vEth0
# A child's notifications would have arrived by now: each release stops a
# kbridge (STOPPING=1), each alloc starts one (READY=1, STATUS=, FDSTORE=1).
sleep 2
check "notify: the app's unit is still active (running) after two releases" app_running
echo "      STATUS=$(aprop StatusText)"
check "notify: the unit keeps the app's own STATUS=" test "$(aprop StatusText)" = "$status"
check "stop: systemctl stop kni-app stops the app, which releases vEth0" inside systemctl stop kni-app.service
check "stop: the app exited 0 and released vEth0" sh -c "nsenter -t $init_pid -a journalctl -u kni-app.service --no-pager -o cat | grep -q 'kniapp: exit 0' && ! nsenter -t $init_pid -a ip link show vEth0 >/dev/null 2>&1"
if [ "$failures" -gt 0 ]; then
	echo "--- journal (kni-app.service)"
	app_log | tail -40
fi
echo "--- $failures failure(s)"
[ "$failures" -eq 0 ]
