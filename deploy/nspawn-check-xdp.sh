#!/usr/bin/env bash
# nspawn-check-xdp.sh: boot a real systemd in a throwaway container and run
# deploy/kbridge.service with `mode: xdp` (loader kbridge) on a veth "NIC"
# inside the container's private network. Needs root and systemd-nspawn
# (Debian: systemd-container).
#
#   deploy/nspawn-check-xdp.sh KBRIDGE_BIN|KBRIDGE_DEB
#
# A .deb is installed with dpkg -i and purged at the end, as in
# nspawn-check.sh.
#
# Inside the container's network namespace:
#
#   netns kbxu-peer                     container root netns
#   kbxu-wire 198.18.3.1/24 <-veth-> kbxu-nic (kbridge_steer) ==> kb0-x | kb0 198.18.3.2/24
#
# As on a production host, bpffs is provided for the unit: systemd mounts it
# on /sys/fs/bpf on a host, not in a container, and the unit cannot mount
# it itself (no CAP_SYS_ADMIN, no @mount system calls). The script mounts it
# in the container before it starts the unit.
#
# Checks: the unit reaches active (running) without CAP_SYS_ADMIN, kb0
# exists, kbridge_steer is on the NIC, the pins exist, a ping from the peer
# reaches kb0 through the redirect and the counters show it, a reload keeps
# it running, stop leaves no program, pin or veth, a restart after a clean
# stop comes back. Nothing outside the container changes.
set -euo pipefail

bin=$(readlink -f "${1:?usage: $0 KBRIDGE_BIN|KBRIDGE_DEB}")
. "$(dirname "$0")/nspawn-lib.sh"
# mode xdp needs no DPDK app; the drop-in's BindsTo= still names one.
nspawn_prepare "$bin" "/bin/sleep infinity"
nic=kbxu-nic wire=kbxu-wire peerns=kbxu-peer
addr=198.18.3.2 peeraddr=198.18.3.1
pins=/sys/fs/bpf/kbridge/$nic
cat >"$work/etc/kbridge.yaml" <<EOF
mode: xdp
interface:
  name: kb0
  addresses: [$addr/24]
xdp:
  nic: $nic
  loader: kbridge
  fast_path:
    - {proto: udp, port: 4789}
stats:
  metrics: ""
EOF
nspawn_config "$work/etc/kbridge.yaml"

# The same container as nspawn-check.sh, plus CAP_PERFMON (a host's PID 1
# has it; the unit grants it) and bpf(2): nspawn's own seccomp
# filter (systemd 252) refuses it to everything in the container with EPERM,
# whatever the capabilities; a host has no such filter. The unit's bounding
# set (no CAP_SYS_ADMIN) and its SystemCallFilter= stay the real limits.
nspawn_boot kbxu --capability=CAP_IPC_LOCK,CAP_BPF,CAP_PERFMON,CAP_SYS_NICE,CAP_NET_RAW \
	--system-call-filter=bpf

# Mode xdp's privileges come from its drop-in, enabled as deploy/README.md
# tells an operator to: the example copied to /etc/systemd/system (the
# package's copy, for a .deb). Purge leaves it, as it leaves any drop-in an
# operator made (nspawn_purge_checks checks that).
operator_dropin=/etc/systemd/system/kbridge.service.d/30-mode-xdp.conf
if [ -n "$deb" ]; then
	inside install -D -m 0644 /usr/share/doc/kbridge/examples/30-mode-xdp.conf.example "$operator_dropin"
else
	install -D -m 0644 "$(dirname "$0")/kbridge.service.d/30-mode-xdp.conf.example" "$sys/kbridge.service.d/30-mode-xdp.conf"
fi
inside systemctl daemon-reload

has_link() { inside ip link show "$1" >/dev/null 2>&1; }
no_link() { ! has_link "$1"; }
nic_has_xdp() { inside ip -d link show "$nic" | grep 'prog/xdp' >/dev/null; }
nic_no_xdp() { ! nic_has_xdp; }
pins_exist() { inside test -e "$pins/steer_config" -a -e "$pins/xsks_map" -a -e "$pins/stats"; }
no_pins() { ! inside test -e "$pins"; }
veth_exists() { has_link kb0 && has_link kb0-x; }
all_gone() { nic_no_xdp && no_pins && no_link kb0 && no_link kb0-x; }
no_sys_admin() { # CAP_SYS_ADMIN is bit 21
	local bnd
	bnd=$(inside grep CapBnd "/proc/$(prop MainPID)/status" | awk '{print $2}')
	[ $(((16#$bnd >> 21) & 1)) -eq 0 ]
}
ping_kb0() { inside ip netns exec "$peerns" ping -c 3 -i 0.2 -W 2 "$addr" >"$work/ping.log" 2>&1; }
counted() { # the exception and returned counters moved
	inside "$kb" stats --socket /run/kbridge/kbridge.sock >"$work/stats.json" 2>&1 &&
		grep -Eiq '"exception":\{"packets":[1-9]' <(tr -d ' \n' <"$work/stats.json") &&
		grep -Eiq '"returned":\{"packets":[1-9]' <(tr -d ' \n' <"$work/stats.json")
}
journal() {
	echo "--- journal (kbridge.service)"
	inside journalctl -u kbridge.service --no-pager -o cat | tail -30
}

# The NIC and the peer, inside the container's private network. The peer
# end needs NAPI (GRO) for native redirects into the NIC's veth and tx
# checksum off (see docs/XDP.md, "the veth facts").
inside ip netns add "$peerns"
inside ip link add "$nic" type veth peer name "$wire" netns "$peerns"
inside ip -n "$peerns" addr add "$peeraddr/24" dev "$wire"
inside ip -n "$peerns" link set lo up
inside ip -n "$peerns" link set "$wire" up
inside ip link set "$nic" up
inside ip netns exec "$peerns" ethtool -K "$wire" gro on tx off >/dev/null

# bpffs: what a host's systemd mounts at boot, the test provides.
# nspawn's /sys is a read-only tmpfs without a fs/bpf directory: make it.
if ! inside mountpoint -q /sys/fs/bpf; then
	if ! inside test -d /sys/fs/bpf; then
		inside mount -o remount,rw /sys
		inside mkdir /sys/fs/bpf
		inside mount -o remount,ro /sys
	fi
	inside mount -t bpf -o mode=0700 bpf /sys/fs/bpf
fi
check "bpffs is mounted on /sys/fs/bpf in the container" inside mountpoint -q /sys/fs/bpf

# Something may have started the unit during boot, before the NIC existed
# (systemctl show reports WantedBy=multi-user.target here): its failed
# attempts must not count against StartLimitBurst.
inside systemctl stop kbridge.service 2>/dev/null || true
inside systemctl reset-failed kbridge.service 2>/dev/null || true
inside systemctl start dpdk-app.service
check "start: Type=notify reaches active (running) in mode xdp" inside systemctl start kbridge.service
check "start: active" active
if ! active; then
	journal
	exit 1
fi
echo "      STATUS=$(prop StatusText)"
echo "      capabilities: $(inside grep CapBnd "/proc/$(prop MainPID)/status")"
check "start: runs without CAP_SYS_ADMIN" no_sys_admin
# CAP_NET_ADMIN, CAP_NET_RAW, CAP_IPC_LOCK (base) + CAP_PERFMON, CAP_BPF (the drop-in).
check "start: the bounding set is the base unit's plus the xdp drop-in's" capbnd 000000c000007000
check "start: kb0 and kb0-x exist" veth_exists
check "start: kbridge_steer is attached to $nic" nic_has_xdp
check "start: the maps are pinned in $pins" pins_exist
check "traffic: ping from the peer reaches kb0 through the redirect" wait_for 5 ping_kb0
sed 's/^/      /' "$work/ping.log" | tail -2
check "traffic: exception and returned counters moved" counted

check "reload: systemctl reload (SIGHUP) succeeds" inside systemctl reload kbridge.service
check "reload: still active" wait_for 5 active

check "stop: systemctl stop succeeds" inside systemctl stop kbridge.service
check "stop: inactive" inactive
check "stop: no XDP program left on $nic" nic_no_xdp
check "stop: no pins left" no_pins
check "stop: no kb0 left" no_link kb0
check "stop: no kb0-x left" no_link kb0-x

check "restart: starts again after a clean stop" inside systemctl start kbridge.service
check "restart: active" active
check "restart: ping reaches kb0 again" wait_for 5 ping_kb0
inside systemctl stop kbridge.service || true
check "restart: stop leaves nothing behind" all_gone

nspawn_purge_checks
[ -z "$deb" ] || check "purge: no program, pin or veth left" all_gone

journal
echo "--- $failures failure(s)"
[ "$failures" -eq 0 ]
