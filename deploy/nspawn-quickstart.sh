#!/usr/bin/env bash
# nspawn-quickstart.sh: README.md's quick start, run as written, in a
# throwaway container that boots a real systemd over the host's /usr (the
# tests/service harness, nspawn-lib.sh). Needs root and systemd-nspawn.
#
#   deploy/nspawn-quickstart.sh KBRIDGE_DEB BLOCK APP_CMD
#
# BLOCK is the quick start's shell block (TestQuickStart cuts it out of
# README.md). It runs in a directory holding bin/<the .deb>, as after make
# deb, with bash -e: every command must succeed. APP_CMD is the app the
# quick start runs beside, as dpdk-app.service, started first ("with the
# app running"). EXTRA_BINS as for nspawn-check.sh. Then: kbridge active,
# kb0 with the block's address, and dpkg --purge leaving no kb0.
set -euo pipefail

deb=$(readlink -f "${1:?usage: $0 KBRIDGE_DEB BLOCK APP_CMD}")
block=$(readlink -f "${2:?usage: $0 KBRIDGE_DEB BLOCK APP_CMD}")
app=${3:?usage: $0 KBRIDGE_DEB BLOCK APP_CMD}
. "$(dirname "$0")/nspawn-lib.sh"
nspawn_prepare "$deb" "$app"
for b in ${EXTRA_BINS:-}; do cp "$b" "$work/bin/"; done
nspawn_hugepages "$app"
# EAL probes VFIO through /sys/module, which nspawn does not show.
binds+=(--bind-ro=/sys/module)
mkdir -p "$work/qs/bin"
cp "$deb" "$work/qs/bin/"
cp "$block" "$work/qs/quickstart.sh"
binds+=(--bind-ro="$work/qs:/opt/kbridge/qs")
NSPAWN_NO_INSTALL=1 nspawn_boot kbquick --capability=CAP_IPC_LOCK,CAP_SYS_NICE,CAP_NET_RAW
inside rm -f /usr/sbin/policy-rc.d

inside systemctl start dpdk-app.service
echo "--- the quick start"
check "quick start: README's block runs as written, every command succeeding" \
	inside sh -c 'cd /opt/kbridge/qs && bash -e -x ./quickstart.sh'
check "quick start: kbridge.service active (running)" active
# grep reads all (no -q): pipefail would fail the check on ip's SIGPIPE.
kb0_address() { inside ip -o address show kb0 | grep 'inet 198\.18\.0\.2/24' >/dev/null; }
check "quick start: kb0 has the file's address" kb0_address
check "quick start: kbridge stats answers for port kb0" sh -c "nsenter -t $init_pid -a kbridge stats | grep -q '\"port\": \"kb0\"'"
inside systemctl stop kbridge.service dpdk-app.service
check "quick start: dpkg --purge kbridge leaves no kb0 and no kbridge" \
	inside sh -c 'dpkg --purge kbridge >/dev/null && ! ip link show kb0 >/dev/null 2>&1 && ! command -v kbridge'
if [ "$failures" != 0 ]; then
	echo "--- journal (kbridge.service)"
	inside journalctl -u kbridge.service --no-pager -o cat | tail -30
fi
echo "--- $failures failure(s)"
[ "$failures" -eq 0 ]
