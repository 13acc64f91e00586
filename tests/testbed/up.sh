#!/usr/bin/env bash
# make testbed-up: build the namespace test bed of README.md, start the peer's
# services, the reference DPDK app and kbridge, wait until 198.18.0.1 answers a
# ping through kb0, then print exactly one line on stdout: "testbed up".
# Progress goes to stderr.
#
# Variables:
#   KBRIDGE_CONFIG=FILE  kbridge configuration (default tests/testbed/kbridge.yaml)
#   KBT_NO_BRIDGE=1      start neither the DPDK app nor kbridge (another forwarder,
#                        e.g. tests/testbed/testpmd-forwarder.sh, takes their place)
#   KBT_APP=PATH         reference DPDK app (default bin/kbridge-refapp; a relative
#                        path is the repository's: bin/kbridge-refapp-static)
#   KBT_KBRIDGE=PATH     kbridge binary (default bin/kbridge)
#   KBT_VERIFY=1         also run check-nfs.sh from kbt-direct (full listing + hash)
#   KBT_HUGEPAGES=N      2 MB hugepages to reserve (default 512)
#   KBT_APP_CPU / KBT_OTHER_CPUS  override the CPU placement
#   KBT_JUMBO=1          the ring bed at MTU 9000: every link (kbt-wire, kbt-nic,
#                        kbt-alt, kbt-base) and kb0 (a copy of the configuration
#                        with interface.mtu 9000, unless it says so already); the
#                        app's net_af_packet takes frames of up to 10 KiB, as its
#                        mbufs do. kbt-nic's MTU is set by hand: net_af_packet's
#                        ethdev refuses an MTU over 1500 (it reports a 1518-byte
#                        frame limit whatever its frame size). Unset: 1500.
#   KBT_PORTS=2          the ring bed with a second port: the app's kbt-nic2
#                        (wired to the peer's kbt-wire2, 198.18.2.1) bridged to
#                        kb1 (198.18.2.2) by a second kbridge, instance kb1
#                        (kbridge run --instance kb1, config
#                        tests/testbed/kbridge-kb1.yaml), and a second iperf3
#                        server on 5202. Unset or 1: one port.
#   KBT_SW_OFFLOAD=1     the ring bed with a NIC that does LRO and TSO, as real
#                        apps' NICs do: the reference app runs
#                        --sw-offload (librte_gro merges what its port receives
#                        before kbridge, librte_gso cuts kbridge's super-frames
#                        before its port), and GRO is on at the veths'
#                        receivers (kbt-wire, kbt-alt, kbt-base: the floor gets
#                        super-frames too). Unset: neither.
#   KBT_FLOOD=FILE       the ring bed's reference app runs --flood FILE: its flood
#                        generator (tests/refapp/flood.h) makes the floods FILE
#                        names on its lcore, re-read on SIGUSR2 (tests/bench/copp-nic.sh)
#   KBT_NO_TSO=1         the ring bed's reference app runs --no-tso: it declares
#                        no TSO to kbridge even where its port has TSO, as an app
#                        written for KNI (net_af_packet has none: then as unset).
#   KBT_MODE=xdp         the XDP variant: kbridge in mode xdp (loader pmd, config
#                        tests/testbed/kbridge-xdp.yaml) starts first, then the DPDK
#                        app on kbt-nic through net_af_xdp with kbridge's object.
#                        Default (unset or "ring"): the ring bed, unchanged.
#   KBT_XDP_OBJECT=FILE  mode xdp: the object kbridge writes (xdp.object_file of the
#                        config; default: read from it, else /run/kbridge/xdp-kbt-nic.o)
#   KBT_XDP_PIN_WAIT=S   mode xdp: wait up to S s (default 120) for another
#                        loader-pmd path to release the pins in /sys/fs/bpf
#   KBT_MODE=vhost       the vhost variant: the app is an unmodified dpdk-testpmd
#                        forwarding (io) between kbt-nic (net_af_packet) and a
#                        net_virtio_user port on kbridge's vhost-user socket; kbridge
#                        runs mode vhost (config tests/testbed/kbridge-vhost.yaml).
#                        kbridge starts first when it serves the socket (vhost.client:
#                        false); with vhost.client: true testpmd's port runs server=1
#                        and starts first.
#   KBT_MODE=kni         the KNI variant: the app is bin/kbridge-kniapp, written
#                        for KNI (docs/KNI.md); its rte_kni_alloc starts the
#                        kbridge of its KNI, named kb0, which gets kb0's addresses
#                        here. It runs --loop one --busy-poll: one lcore alone on the app
#                        CPU, polling without a yield, as the reference app.
#                        Its kbridge is placed as the ring bed's: KBRIDGE_CHILD_CPUS,
#                        the CPUs off the app's (kbridge_child.h).
#   KBT_VHOST_OFFLOADS   mode vhost: per-port offloads testpmd turns on on its
#                        virtio-user port before forwarding ("rx_offload:NAME" or
#                        "tx_offload:NAME", space-separated; default
#                        "tx_offload:tcp_cksum tx_offload:udp_cksum tx_offload:tcp_tso";
#                        empty: none). See README.md, "The vhost variant".
set -euo pipefail
# shellcheck source=tests/testbed/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
kbt_lock
kbt_cpus

T0=$(now)
trap 'say "testbed-up FAILED (exit $?); logs are in $KBT_RUN; clean up with tests/testbed/down.sh"' ERR

MODE=${KBT_MODE:-ring}
case $MODE in
ring | xdp | vhost | kni) ;;
*) die "KBT_MODE=$MODE: must be ring (the default), xdp, vhost or kni" ;;
esac
if [ "$MODE" = xdp ]; then
	KBRIDGE_CONFIG=${KBRIDGE_CONFIG:-$KBT_DIR/kbridge-xdp.yaml}
elif [ "$MODE" = vhost ]; then
	KBRIDGE_CONFIG=${KBRIDGE_CONFIG:-$KBT_DIR/kbridge-vhost.yaml}
else
	KBRIDGE_CONFIG=${KBRIDGE_CONFIG:-$KBT_DIR/kbridge.yaml}
fi
KBT_APP=${KBT_APP:-$KBT_ROOT/bin/kbridge-refapp}
KBT_KBRIDGE=${KBT_KBRIDGE:-$KBT_ROOT/bin/kbridge}
# A relative path names a file of the repository (bin/kbridge-refapp-static).
case $KBT_APP in /*) ;; *) KBT_APP=$KBT_ROOT/$KBT_APP ;; esac
case $KBT_KBRIDGE in /*) ;; *) KBT_KBRIDGE=$KBT_ROOT/$KBT_KBRIDGE ;; esac
NO_BRIDGE=${KBT_NO_BRIDGE:-0}
[ "$NO_BRIDGE" = 1 ] || NO_BRIDGE=0
PORTS=${KBT_PORTS:-1}
case $PORTS in
1) ;;
2) [ "$MODE" = ring ] && [ "$NO_BRIDGE" = 0 ] && [ "${KBT_JUMBO:-}" != 1 ] ||
	die "KBT_PORTS=2 needs the ring bed at MTU 1500 with its app and kbridge (KBT_MODE=ring; no KBT_NO_BRIDGE or KBT_JUMBO)" ;;
*) die "KBT_PORTS=$PORTS: must be 1 or 2" ;;
esac
KBRIDGE2_CONFIG=$KBT_DIR/kbridge-kb1.yaml
SW_OFFLOAD=${KBT_SW_OFFLOAD:-0}
[ "$SW_OFFLOAD" = 1 ] || SW_OFFLOAD=0
if [ "$SW_OFFLOAD" = 1 ] && { [ "$MODE" != ring ] || [ "$NO_BRIDGE" = 1 ]; }; then
	die "KBT_SW_OFFLOAD=1 needs the ring bed with its app (KBT_MODE=ring, no KBT_NO_BRIDGE)"
fi
NO_TSO=${KBT_NO_TSO:-0}
[ "$NO_TSO" = 1 ] || NO_TSO=0
if [ "$NO_TSO" = 1 ] && { [ "$MODE" != ring ] || [ "$NO_BRIDGE" = 1 ] || [ "$SW_OFFLOAD" = 1 ]; }; then
	die "KBT_NO_TSO=1 needs the ring bed with its app, without KBT_SW_OFFLOAD (which declares TSO by design)"
fi

for tool in ganesha.nfsd nfs-ls nfs-cat sockperf iperf3 ethtool taskset setsid; do
	command -v "$tool" >/dev/null || die "missing tool: $tool"
done
if [ "$MODE" = xdp ]; then
	for tool in nsenter bpftool; do
		command -v "$tool" >/dev/null || die "missing tool for KBT_MODE=xdp: $tool"
	done
fi
if [ "$MODE" = vhost ] && [ "$NO_BRIDGE" = 0 ]; then
	for tool in dpdk-testpmd stdbuf mkfifo; do
		command -v "$tool" >/dev/null || die "missing tool for KBT_MODE=vhost: $tool"
	done
	KBT_APP=$(command -v dpdk-testpmd)
fi
if [ "$NO_BRIDGE" = 0 ]; then
	[ -x "$KBT_APP" ] || die "reference DPDK app not found at $KBT_APP (run make build, or set KBT_APP)"
	[ -x "$KBT_KBRIDGE" ] || die "kbridge not found at $KBT_KBRIDGE (run make build, or set KBT_KBRIDGE)"
	[ -f "$KBRIDGE_CONFIG" ] || die "kbridge config not found: $KBRIDGE_CONFIG"
	KBRIDGE_CONFIG=$(realpath "$KBRIDGE_CONFIG")
	KBT_APP=$(realpath "$KBT_APP")
	KBT_KBRIDGE=$(realpath "$KBT_KBRIDGE")
fi

say "cpu placement: app lcore on CPU $KBT_APP_CPU, everything else on CPUs ${KBT_OTHER_CPUS:-(not pinned: 1 CPU)}"

# ---- 0. leftovers of an earlier (crashed) run ---------------------------------
"$KBT_DIR/down.sh" >&2
mkdir -p "$KBT_RUN"
rm -f "$KBT_RUN"/*.log
# KBT_JUMBO=1: kb0 at 9000 too, through a copy of the configuration.
if [ "$NO_BRIDGE" = 0 ] && [ "${KBT_JUMBO:-}" = 1 ] && ! grep -Eq '^  mtu: 9000$' "$KBRIDGE_CONFIG"; then
	sed -E 's/^  mtu: [0-9]+$/  mtu: 9000/' "$KBRIDGE_CONFIG" >"$KBT_RUN/kbridge-jumbo.yaml"
	grep -Eq '^  mtu: 9000$' "$KBT_RUN/kbridge-jumbo.yaml" ||
		die "KBT_JUMBO=1: $KBRIDGE_CONFIG has no '  mtu:' line under interface: to raise"
	KBRIDGE_CONFIG=$KBT_RUN/kbridge-jumbo.yaml
fi

# ---- 1. namespaces and veths ---------------------------------------------------
say "creating namespaces and veths"
for ns in "${KBT_NAMESPACES[@]}"; do
	ip netns add "$ns"
	ip -n "$ns" link set lo up
done
# Created directly inside the namespaces: nothing ever exists in the root namespace.
ip -n "$KBT_NS_PEER" link add kbt-wire type veth peer name kbt-nic netns "$KBT_NS_DUT"
ip -n "$KBT_NS_PEER" link add kbt-alt type veth peer name kbt-base netns "$KBT_NS_DIRECT"
ip -n "$KBT_NS_PEER" addr add "$KBT_PEER_IP/24" dev kbt-wire
ip -n "$KBT_NS_PEER" addr add "$KBT_ALT_IP/24" dev kbt-alt
ip -n "$KBT_NS_DIRECT" addr add "$KBT_BASE_IP/24" dev kbt-base
# IPv6 too (TCP over IPv6 crosses the offloads differently); no DAD, so that the
# addresses are usable at once. kbt-dut's default keeps kb0, made later, free of DAD.
ip netns exec "$KBT_NS_DUT" sysctl -qw net.ipv6.conf.default.accept_dad=0
ip -n "$KBT_NS_PEER" addr add "$KBT_PEER_IP6/64" dev kbt-wire nodad
ip -n "$KBT_NS_PEER" addr add "$KBT_ALT_IP6/64" dev kbt-alt nodad
ip -n "$KBT_NS_DIRECT" addr add "$KBT_BASE_IP6/64" dev kbt-base nodad
if [ "$PORTS" = 2 ]; then
	ip -n "$KBT_NS_PEER" link add kbt-wire2 type veth peer name kbt-nic2 netns "$KBT_NS_DUT"
	ip -n "$KBT_NS_PEER" addr add "$KBT_PEER2_IP/24" dev kbt-wire2
	ip -n "$KBT_NS_PEER" addr add "$KBT_PEER2_IP6/64" dev kbt-wire2 nodad
	ip -n "$KBT_NS_PEER" link set kbt-wire2 up
fi
if [ "${KBT_JUMBO:-}" = 1 ]; then
	ip -n "$KBT_NS_PEER" link set kbt-wire mtu 9000
	ip -n "$KBT_NS_PEER" link set kbt-alt mtu 9000
	ip -n "$KBT_NS_DUT" link set kbt-nic mtu 9000
	ip -n "$KBT_NS_DIRECT" link set kbt-base mtu 9000
fi
ip -n "$KBT_NS_PEER" link set kbt-wire up
ip -n "$KBT_NS_PEER" link set kbt-alt up
ip -n "$KBT_NS_DIRECT" link set kbt-base up
# kbt-nic belongs to the DPDK app, like a NIC bound to a PMD: the kernel in kbt-dut
# must not use it. Without this it answers ARP for kb0's 198.18.0.2 on kbt-nic
# (weak host model, arp_ignore=0), the peer learns kbt-nic's MAC, and traffic
# reaches the kernel directly, bypassing the forwarder. So: no ARP, no IPv6, and
# strict reverse-path filtering drops any IPv4 that still arrives on it. AF_PACKET
# readers see every frame before any of this applies.
APP_NICS=(kbt-nic)
[ "$PORTS" = 2 ] && APP_NICS+=(kbt-nic2)
for nic in "${APP_NICS[@]}"; do
	ip -n "$KBT_NS_DUT" link set "$nic" arp off
	ip netns exec "$KBT_NS_DUT" sysctl -qw "net.ipv6.conf.$nic.disable_ipv6=1" \
		"net.ipv4.conf.$nic.arp_ignore=8" "net.ipv4.conf.$nic.rp_filter=1"
	ip -n "$KBT_NS_DUT" link set "$nic" promisc on up
	ip netns exec "$KBT_NS_DUT" ethtool -K "$nic" tx off >/dev/null
done
# A veth hands partial checksums to an AF_PACKET reader unfilled: the peer side
# computes full checksums. Off on the other ends too (harmless).
ip netns exec "$KBT_NS_PEER" ethtool -K kbt-wire tx off >/dev/null
[ "$PORTS" = 2 ] && ip netns exec "$KBT_NS_PEER" ethtool -K kbt-wire2 tx off >/dev/null
if [ "$SW_OFFLOAD" = 1 ]; then
	# GRO at every receiver of the bed's kernels: the peer's ends and the
	# floor's (a veth does GRO once it has NAPI, which gro on gives it).
	ip netns exec "$KBT_NS_PEER" ethtool -K kbt-wire gro on >/dev/null
	ip netns exec "$KBT_NS_PEER" ethtool -K kbt-alt gro on >/dev/null
	ip netns exec "$KBT_NS_DIRECT" ethtool -K kbt-base gro on >/dev/null
	[ "$PORTS" = 2 ] && ip netns exec "$KBT_NS_PEER" ethtool -K kbt-wire2 gro on >/dev/null
fi
ip netns exec "$KBT_NS_PEER" ethtool -K kbt-alt tx off >/dev/null
ip netns exec "$KBT_NS_DIRECT" ethtool -K kbt-base tx off >/dev/null

# ---- 2. the exported tree (generated once, cached) -----------------------------
tree_ok() {
	[ -f "$KBT_EXPORT_MARKER" ] && [ -d "$KBT_EXPORT" ] && [ -s "$KBT_BIG_SHA" ] &&
		[ "$(stat -c %s "$KBT_EXPORT/big.bin" 2>/dev/null || echo 0)" = "$KBT_BIG_BYTES" ]
}
if tree_ok; then
	say "export tree: reusing $KBT_EXPORT"
else
	t=$(now)
	say "export tree: generating $KBT_EXPORT ($KBT_TREE_DIRS dirs x 2 files + 256 MiB big.bin), once"
	mkdir -p "$KBT_LIB"
	rm -rf "$KBT_EXPORT_MARKER" "$KBT_EXPORT" "$KBT_LIB"/export.tmp.*
	tmp=$KBT_LIB/export.tmp.$$
	mkdir -p "$tmp"
	for ((i = 0; i < KBT_TREE_DIRS; i++)); do
		d=$(printf 'd%04d' "$i")
		mkdir "$tmp/$d"
		printf 'kbridge test bed: directory %s, file a\n' "$d" >"$tmp/$d/a.txt"
		printf 'kbridge test bed: directory %s, file b (%d)\n' "$d" "$((i * 7919))" >"$tmp/$d/b.txt"
	done
	head -c "$KBT_BIG_BYTES" /dev/urandom >"$tmp/big.bin"
	sha256sum "$tmp/big.bin" | awk '{ print $1 }' >"$KBT_BIG_SHA.tmp"
	mv "$KBT_BIG_SHA.tmp" "$KBT_BIG_SHA"
	chmod -R a+rX "$tmp"
	mv "$tmp" "$KBT_EXPORT"
	sync -f "$KBT_EXPORT/big.bin"
	# Written last: the tree is complete.
	printf 'dirs=%d\nfiles_per_dir=2\nbig_bytes=%d\nentries=%d\nsha256=%s\n' \
		"$KBT_TREE_DIRS" "$KBT_BIG_BYTES" "$KBT_TREE_ENTRIES" "$(cat "$KBT_BIG_SHA")" >"$KBT_EXPORT_MARKER"
	say "export tree: generated in $(since "$t")"
fi

# ---- 3. NFSv4 server (nfs-ganesha, VFS FSAL) in kbt-peer ------------------------
mkdir -p "$KBT_RUN/ganesha/recov" "$KBT_RUN/ganesha/krb5"
cat >"$KBT_RUN/ganesha.conf" <<EOF
# Generated by tests/testbed/up.sh. NFSv4 over TCP only: no rpcbind, mountd, NLM,
# rquota or UDP listeners are needed or opened.
NFS_CORE_PARAM {
	Protocols = 4;
	NFS_Port = $KBT_NFS_PORT;
	Enable_NLM = false;
	Enable_RQUOTA = false;
	Enable_UDP = false;
	# ganesha 6 (Debian 13) stops at start when prctl(PR_SET_IO_FLUSHER)
	# fails, and it needs CAP_SYS_RESOURCE, which a container or a sandbox
	# may withhold even from root; the bed's server needs no such priority.
	# ganesha 4 (Debian 12) warns "Unknown parameter" and goes on.
	Allow_Set_Io_Flusher_Fail = true;
}
NFS_KRB5 {
	Active_krb5 = false;
	CCacheDir = "$KBT_RUN/ganesha/krb5";
}
NFSv4 {
	# No grace period: the bed's server never has state to reclaim, and a grace
	# period would block OPEN for 90 s after every start.
	Graceless = true;
	RecoveryBackend = fs;
	RecoveryRoot = "$KBT_RUN/ganesha/recov";
}
EXPORT {
	Export_Id = 1;
	Path = "$KBT_EXPORT";
	Pseudo = /export;
	Protocols = 4;
	Transports = TCP;
	Access_Type = RO;
	Squash = No_Root_Squash;
	SecType = sys;
	FSAL { Name = VFS; }
}
EOF
ganesha_cmd=(ganesha.nfsd -f "$KBT_RUN/ganesha.conf" -L "$KBT_RUN/ganesha.log"
	-p "$KBT_RUN/ganesha.pid" -N NIV_EVENT)
# The rpcbind client in libtirpc talks to /run/rpcbind.sock, a path in the file
# system and therefore shared by all network namespaces. If a host rpcbind runs,
# hide its socket from ganesha, or ganesha (which unregisters NFS programs at
# start) would touch the host's registrations.
if [ -S /run/rpcbind.sock ]; then
	say "host rpcbind socket present: hiding it from ganesha (private mount namespace)"
	ganesha_cmd=(unshare --mount --propagation private sh -c \
		'mount --bind /dev/null /run/rpcbind.sock && exec "$@"' sh "${ganesha_cmd[@]}")
fi
say "starting nfs-ganesha in $KBT_NS_PEER"
: >"$KBT_RUN/ganesha.log"
rm -f "$KBT_RUN/ganesha.pid"
# ganesha daemonises itself and writes its PID file.
ip netns exec "$KBT_NS_PEER" "${KBT_PIN_OTHER[@]}" "${ganesha_cmd[@]}" </dev/null >/dev/null 2>&1 9>&- ||
	{ log_tail "$KBT_RUN/ganesha.log"; die "ganesha.nfsd failed to start"; }
wait_for "ganesha pid file" 10 "" "$KBT_RUN/ganesha.log" test -s "$KBT_RUN/ganesha.pid"
GANESHA_PID=$(tr -dc '0-9' <"$KBT_RUN/ganesha.pid")
wait_for "ganesha to initialise" 20 "$GANESHA_PID" "$KBT_RUN/ganesha.log" \
	grep -q 'NFS SERVER INITIALIZED' "$KBT_RUN/ganesha.log"

# ---- 4. sockperf and iperf3 servers in kbt-peer ---------------------------------
say "starting sockperf and iperf3 servers in $KBT_NS_PEER"
spawn sockperf "$KBT_NS_PEER" "${KBT_PIN_OTHER[@]}" \
	sockperf sr --tcp -i 0.0.0.0 -p "$KBT_SOCKPERF_PORT"
SOCKPERF_PID=$SPAWNED_PID
spawn iperf3 "$KBT_NS_PEER" "${KBT_PIN_OTHER[@]}" \
	iperf3 -s -p "$KBT_IPERF_PORT" --forceflush
IPERF_PID=$SPAWNED_PID
if [ "$PORTS" = 2 ]; then
	spawn iperf3-2 "$KBT_NS_PEER" "${KBT_PIN_OTHER[@]}" \
		iperf3 -s -p "$KBT_IPERF2_PORT" --forceflush
	wait_for "iperf3 on TCP $KBT_IPERF2_PORT" 10 "$SPAWNED_PID" "$KBT_RUN/iperf3-2.log" \
		tcp_listening "$KBT_NS_PEER" "$KBT_IPERF2_PORT"
fi

wait_for "sockperf on TCP $KBT_SOCKPERF_PORT" 10 "$SOCKPERF_PID" "$KBT_RUN/sockperf.log" \
	tcp_listening "$KBT_NS_PEER" "$KBT_SOCKPERF_PORT"
wait_for "iperf3 on TCP $KBT_IPERF_PORT" 10 "$IPERF_PID" "$KBT_RUN/iperf3.log" \
	tcp_listening "$KBT_NS_PEER" "$KBT_IPERF_PORT"

# ---- 5. NFS answers, locally and over the baseline path -------------------------
wait_for "NFSv4 listing of /export inside $KBT_NS_PEER" 20 "$GANESHA_PID" "$KBT_RUN/ganesha.log" \
	ip netns exec "$KBT_NS_PEER" nfs-ls "nfs://$KBT_PEER_IP/export?version=4"
wait_for "NFSv4 listing of /export from $KBT_NS_DIRECT" 10 "$GANESHA_PID" "$KBT_RUN/ganesha.log" \
	ip netns exec "$KBT_NS_DIRECT" nfs-ls "nfs://$KBT_ALT_IP/export?version=4"
if [ "${KBT_VERIFY:-0}" = 1 ]; then
	"$KBT_DIR/check-nfs.sh" "$KBT_NS_DIRECT" "$KBT_ALT_IP" >&2
fi

# Mode xdp: the remote end of the "NIC" receives what kbridge_return redirects
# out of kbt-nic (a native XDP redirect, ndo_xdp_xmit of the veth), and a veth
# drops such frames unless its peer has NAPI: GRO on kbt-wire gives it NAPI.
# (tx checksum offload is off on kbt-wire already, which TCP into an XDP path
# needs: an XDP frame carries no checksum state.)
if [ "$MODE" = xdp ]; then
	ip netns exec "$KBT_NS_PEER" ethtool -K kbt-wire gro on >/dev/null
fi
echo "$MODE" >"$KBT_RUN/mode"

if [ "$NO_BRIDGE" = 1 ]; then
	say "KBT_NO_BRIDGE=1: not starting the DPDK app or kbridge; kbt-nic in $KBT_NS_DUT is free for another forwarder"
	say "ready in $(since "$T0")"
	echo "testbed up"
	exit 0
fi

if [ "$MODE" = kni ]; then
	# ---- 6k. mode kni: an app written for KNI, whose rte_kni_alloc starts
	# kbridge (KBRIDGE_BIN) and returns once kb0 exists, down and without an
	# address, as KNI made it: the addresses and "up" are the admin's.
	"$KBT_DIR/hugepages.sh" >&2
	for prefix in $(dpdk_bed_prefixes); do dpdk_cleanup_prefix "$prefix"; done
	say "starting the KNI app on CPU $KBT_APP_CPU"
	export KBRIDGE_BIN=$KBT_KBRIDGE
	# Where the ring bed runs its kbridge (taskset -c OTHER): rte_kni_alloc's
	# child would otherwise get every CPU, the app's too.
	[ -n "$KBT_OTHER_CPUS" ] && export KBRIDGE_CHILD_CPUS=$KBT_OTHER_CPUS
	spawn kniapp "$KBT_NS_DUT" "${KBT_PIN_APP[@]}" "$KBT_ROOT/bin/kbridge-kniapp" \
		--lcores "0@(${KBT_OTHER_CPUS:-$KBT_APP_CPU}),1@$KBT_APP_CPU" --main-lcore 0 \
		--file-prefix "$KBT_DPDK_PREFIX" --proc-type primary --no-pci --vdev net_af_packet0,iface=kbt-nic -- --name kb0 --loop one --busy-poll
	APP_PID=$SPAWNED_PID
	wait_for "the KNI app to forward" 60 "$APP_PID" "$KBT_RUN/kniapp.log" \
		grep -q '^kniapp: forwarding' "$KBT_RUN/kniapp.log"
	# The app's child, recorded as the bed's kbridge: down.sh stops it
	# first, as every bed's kbridge, and the app's release finds it gone.
	sed -n 's/^KNI: kb0: kernel interface ready, served by kbridge pid \([0-9]*\)$/\1/p' \
		"$KBT_RUN/kniapp.log" >"$KBT_RUN/kbridge.pid"
	[ -s "$KBT_RUN/kbridge.pid" ] || die "the KNI app named no kbridge pid"
	ip -n "$KBT_NS_DUT" addr add "$KBT_DUT_IP/24" dev kb0
	ip -n "$KBT_NS_DUT" addr add "$KBT_DUT_IP6/64" dev kb0 nodad
	ip -n "$KBT_NS_DUT" link set kb0 up
	wait_for "$KBT_PEER_IP to answer a ping through kb0" 20 "$APP_PID" "$KBT_RUN/kniapp.log" \
		ip netns exec "$KBT_NS_DUT" ping -c1 -W1 "$KBT_PEER_IP"
	say "ready in $(since "$T0")"
	echo "testbed up"
	exit 0
fi

if [ "$MODE" = xdp ]; then
	# ---- 6x. mode xdp: kbridge first, then the DPDK app through net_af_xdp -------
	# kbridge (loader: pmd) pins the maps in /sys/fs/bpf, creates the veth
	# kb0 / kb0-x, attaches kbridge_return to kb0-x and writes the BPF object;
	# the app's net_af_xdp loads that object (xdp_prog=), attaches its first
	# program, kbridge_steer, to kbt-nic, reuses the pinned maps and puts its
	# AF_XDP socket into xsks_map. Both are started with nsenter --net, not
	# ip netns exec, so that they see the same bpffs (see spawn_net).
	XDP_OBJ=${KBT_XDP_OBJECT:-$(awk '/^[[:space:]]+object_file:/ { gsub(/["\047]/, "", $2); print $2; exit }' "$KBRIDGE_CONFIG")}
	XDP_OBJ=${XDP_OBJ:-/run/kbridge/xdp-$KBT_XDP_NIC.o}
	grep -Eq '^mode:[[:space:]]*"?xdp"?[[:space:]]*(#.*)?$' "$KBRIDGE_CONFIG" ||
		die "KBT_MODE=xdp needs a configuration with mode: xdp and loader: pmd; $KBRIDGE_CONFIG has none"
	pin_wait=${KBT_XDP_PIN_WAIT:-120}
	if busy=$(xdp_pins_busy); then
		say "another loader-pmd XDP path holds the pins in $KBT_BPFFS: $busy"
		wait_for "the pins in $KBT_BPFFS to be released" "$pin_wait" "" "" eval '! xdp_pins_busy'
	fi
	rm -f "$XDP_OBJ" "$KBT_RUN/xdp-pins" "$KBT_RUN/xdp-object"
	echo "$XDP_OBJ" >"$KBT_RUN/xdp-object"
	say "starting kbridge run --config $KBRIDGE_CONFIG (mode xdp) on CPUs ${KBT_OTHER_CPUS:-any}"
	spawn_net kbridge "$KBT_NS_DUT" "${KBT_PIN_OTHER[@]}" "$KBT_KBRIDGE" run --config "$KBRIDGE_CONFIG"
	KBRIDGE_PID=$SPAWNED_PID
	wait_for "kbridge to attach (kb0 and $XDP_OBJ)" 20 "$KBRIDGE_PID" "$KBT_RUN/kbridge.log" \
		eval "test -s '$XDP_OBJ' && ip -n '$KBT_NS_DUT' link show kb0"
	# Record the pins this bed's kbridge made: down.sh removes exactly these if
	# a killed kbridge could not.
	for p in "${KBT_XDP_PINS[@]}"; do
		id=$(bpf_pin_id "$KBT_BPFFS/$p")
		[ -n "$id" ] && echo "$KBT_BPFFS/$p $id" >>"$KBT_RUN/xdp-pins"
	done

	"$KBT_DIR/hugepages.sh" >&2
	for prefix in $(dpdk_bed_prefixes); do dpdk_cleanup_prefix "$prefix"; done
	say "starting the DPDK app $KBT_APP on CPU $KBT_APP_CPU (net_af_xdp on $KBT_XDP_NIC, xdp_prog=$XDP_OBJ)"
	spawn_net refapp "$KBT_NS_DUT" "${KBT_PIN_APP[@]}" "$KBT_APP" \
		-l "$KBT_APP_CPU" --file-prefix "$KBT_DPDK_PREFIX" --proc-type primary --no-pci \
		--vdev "net_af_xdp0,iface=$KBT_XDP_NIC,start_queue=0,queue_count=1,xdp_prog=$XDP_OBJ" \
		-- --port kb0 --own-udp-port "$KBT_FAST_UDP_PORT"
	APP_PID=$SPAWNED_PID
	wait_for "the DPDK app to report ready" 30 "$APP_PID $KBRIDGE_PID" "$KBT_RUN/refapp.log $KBT_RUN/kbridge.log" \
		grep -q '^kbridge-refapp: ready' "$KBT_RUN/refapp.log"
	wait_for "an XDP program on $KBT_XDP_NIC" 10 "$APP_PID $KBRIDGE_PID" "$KBT_RUN/refapp.log" \
		eval "ip -n '$KBT_NS_DUT' link show '$KBT_XDP_NIC' | grep -q 'prog/xdp'"
	wait_for "$KBT_PEER_IP to answer a ping through kb0 (XDP redirect)" 20 "$APP_PID $KBRIDGE_PID" \
		"$KBT_RUN/refapp.log $KBT_RUN/kbridge.log" \
		ip netns exec "$KBT_NS_DUT" ping -c1 -W1 "$KBT_PEER_IP"
	for p in "$APP_PID" "$KBRIDGE_PID"; do
		pid_alive "$p" || { log_tail "$KBT_RUN/refapp.log"; log_tail "$KBT_RUN/kbridge.log"; die "pid $p died"; }
	done
	say "ready in $(since "$T0") (mode xdp)"
	echo "testbed up"
	exit 0
fi

if [ "$MODE" = vhost ]; then
	# ---- 6v. mode vhost: kbridge and an unmodified dpdk-testpmd (virtio-user) ---
	grep -Eq '^mode:[[:space:]]*"?vhost"?[[:space:]]*(#.*)?$' "$KBRIDGE_CONFIG" ||
		die "KBT_MODE=vhost needs a configuration with mode: vhost; $KBRIDGE_CONFIG has none"
	# vhost.socket and vhost.client of the configuration (defaults as kbridge's).
	VHOST_SOCK=$(awk '/^vhost:/ { v = 1; next } /^[^[:space:]#]/ { v = 0 }
		v && $1 == "socket:" { gsub(/["\047]/, "", $2); print $2; exit }' "$KBRIDGE_CONFIG")
	if [ -z "$VHOST_SOCK" ]; then
		ifname=$(awk '/^interface:/ { v = 1; next } /^[^[:space:]#]/ { v = 0 }
			v && $1 == "name:" { gsub(/["\047]/, "", $2); print $2; exit }' "$KBRIDGE_CONFIG")
		VHOST_SOCK=/run/kbridge/${ifname:-kb0}.sock
	fi
	VHOST_CLIENT=$(awk '/^vhost:/ { v = 1; next } /^[^[:space:]#]/ { v = 0 }
		v && $1 == "client:" { print $2; exit }' "$KBRIDGE_CONFIG")
	[ "$VHOST_CLIENT" = true ] || VHOST_CLIENT=false
	# down.sh removes the socket a killed kbridge (or, in client mode, testpmd) left.
	echo "$VHOST_SOCK" >"$KBT_RUN/vhost-socket"
	rm -f "$VHOST_SOCK"
	mkdir -p "$(dirname "$VHOST_SOCK")"

	"$KBT_DIR/hugepages.sh" >&2
	for prefix in $(dpdk_bed_prefixes); do dpdk_cleanup_prefix "$prefix"; done
	kbt_testpmd_lcores

	# testpmd's ports: 0 = kbt-nic (net_af_packet), 1 = the virtio-user port, in
	# the order of the --vdev arguments. Offloads cannot be given on the command
	# line (--tx-offloads, --enable-lro and --enable-rx-cksum apply to every port,
	# and net_af_packet has none of them: its configure would fail), so a
	# --cmdline-file restarts port 1 with them before forwarding starts.
	VDEV=net_virtio_user0,path=$VHOST_SOCK,queues=1
	[ "$VHOST_CLIENT" = true ] && VDEV=$VDEV,server=1
	OFFLOADS=${KBT_VHOST_OFFLOADS-tx_offload:tcp_cksum tx_offload:udp_cksum tx_offload:tcp_tso}
	CMDFILE=$KBT_RUN/testpmd-vhost.cmd
	cmdargs=()
	if [ -n "$OFFLOADS" ]; then
		{
			echo "port stop 1"
			for o in $OFFLOADS; do
				case $o in
				rx_offload:* | tx_offload:*) echo "port config 1 ${o%%:*} ${o#*:} on" ;;
				*) die "KBT_VHOST_OFFLOADS: '$o' is not rx_offload:NAME or tx_offload:NAME" ;;
				esac
			done
			echo "port start 1"
			echo "show port 1 rx_offload configuration"
			echo "show port 1 tx_offload configuration"
		} >"$CMDFILE"
		cmdargs=(--cmdline-file="$CMDFILE")
	fi
	FIFO=$KBT_RUN/testpmd-vhost.stdin
	rm -f "$FIFO"
	mkfifo "$FIFO"
	# testpmd exits when its stdin ends: the FIFO is opened read-write (<>), so it
	# never does. stdbuf: line-buffered output, or the "Press enter to exit" line
	# waited for below sits in the buffer. --single-file-segments: one fd per
	# memory segment list, so the memory table fits in a vhost-user message. The
	# main lcore and EAL's threads stay off the forwarding CPU (kbt_testpmd_lcores).
	# The command that starts testpmd, written to a script of its own so that
	# make soak can restart the app exactly as it was started here. With
	# server=1 testpmd owns the socket file, which a killed testpmd leaves
	# and DPDK 22.11 will not bind over: the script removes it first.
	START=$KBT_RUN/testpmd-vhost.start
	{
		echo "#!/usr/bin/env bash"
		echo "# Written by tests/testbed/up.sh: starts dpdk-testpmd as up.sh did (make soak restarts the app with it)."
		[ "$VHOST_CLIENT" = true ] && printf 'rm -f %q\n' "$VHOST_SOCK"
		printf '%q ' setsid ip netns exec "$KBT_NS_DUT" taskset -c "$KBT_TESTPMD_PIN_CPUS" stdbuf -oL -eL dpdk-testpmd \
			--lcores "$KBT_TESTPMD_LCORE_MAP" --main-lcore 0 \
			--file-prefix "$KBT_VHOST_PREFIX" --proc-type primary --no-pci --single-file-segments -m 256 \
			--vdev net_af_packet0,iface=kbt-nic --vdev "$VDEV" \
			-- --forward-mode=io --auto-start --nb-cores=1 --rxq=1 --txq=1 \
			--total-num-mbufs=16384 --disable-link-check "${cmdargs[@]}"
		printf '<>%q >>%q 2>&1 9>&- &\n' "$FIFO" "$KBT_RUN/testpmd-vhost.log"
		printf 'echo "$!" >%q\n' "$KBT_RUN/testpmd-vhost.pid"
	} >"$START"
	start_testpmd() {
		say "starting dpdk-testpmd (io forwarding kbt-nic <-> virtio-user $VHOST_SOCK$([ "$VHOST_CLIENT" = true ] && echo ", server=1")), lcores $KBT_TESTPMD_LCORE_MAP (CPUs $KBT_TESTPMD_PIN_CPUS), offloads on port 1: ${OFFLOADS:-none}"
		: >"$KBT_RUN/testpmd-vhost.log"
		bash "$START"
		APP_PID=$(cat "$KBT_RUN/testpmd-vhost.pid")
	}
	start_kbridge() {
		say "starting kbridge run --config $KBRIDGE_CONFIG (mode vhost, $([ "$VHOST_CLIENT" = true ] && echo client || echo server) of $VHOST_SOCK) on CPUs ${KBT_OTHER_CPUS:-any}"
		spawn kbridge "$KBT_NS_DUT" "${KBT_PIN_OTHER[@]}" "$KBT_KBRIDGE" run --config "$KBRIDGE_CONFIG"
		KBRIDGE_PID=$SPAWNED_PID
	}
	LOGS="$KBT_RUN/testpmd-vhost.log $KBT_RUN/kbridge.log"
	if [ "$VHOST_CLIENT" = true ]; then
		# testpmd's virtio-user port is the server: its probe listens and waits
		# in accept() until kbridge connects.
		start_testpmd
		wait_for "testpmd to listen on $VHOST_SOCK" 30 "$APP_PID" "$KBT_RUN/testpmd-vhost.log" test -S "$VHOST_SOCK"
		start_kbridge
	else
		# kbridge serves the socket; a virtio-user client fails its probe if
		# nothing listens yet.
		start_kbridge
		wait_for "kbridge to serve $VHOST_SOCK" 20 "$KBRIDGE_PID" "$KBT_RUN/kbridge.log" \
			eval "test -S '$VHOST_SOCK' && grep -q 'bridge running' '$KBT_RUN/kbridge.log'"
		start_testpmd
	fi
	wait_for "testpmd to start forwarding" 40 "$APP_PID $KBRIDGE_PID" "$LOGS" \
		grep -q 'Press enter to exit' "$KBT_RUN/testpmd-vhost.log"
	# A port testpmd could not configure (an offload the virtio-user port lacks,
	# such as ipv4_cksum) stays stopped; testpmd forwards anyway.
	if grep -Eq 'Fail to (configure|start) port|Not all ports were started' "$KBT_RUN/testpmd-vhost.log"; then
		log_tail "$KBT_RUN/testpmd-vhost.log" 40
		die "testpmd did not start all its ports (KBT_VHOST_OFFLOADS=${OFFLOADS:-})"
	fi
	wait_for "kbridge to log the frontend" 10 "$APP_PID $KBRIDGE_PID" "$LOGS" \
		grep -q 'vhost-user frontend connected' "$KBT_RUN/kbridge.log"
	wait_for "$KBT_PEER_IP to answer a ping through kb0 (testpmd -> virtio-user -> kbridge)" 20 \
		"$APP_PID $KBRIDGE_PID" "$LOGS" ip netns exec "$KBT_NS_DUT" ping -c1 -W1 "$KBT_PEER_IP"
	for p in "$APP_PID" "$KBRIDGE_PID"; do
		pid_alive "$p" || { log_tail "$KBT_RUN/testpmd-vhost.log"; log_tail "$KBT_RUN/kbridge.log"; die "pid $p died"; }
	done
	feat=$(grep 'vhost-user frontend connected' "$KBT_RUN/kbridge.log" | tail -n1 | grep -o 'features=[^ ]*' || true)
	say "negotiated with testpmd's virtio-user port: ${feat:-?}"
	say "ready in $(since "$T0") (mode vhost)"
	echo "testbed up"
	exit 0
fi

# ---- 6. start the DPDK app (primary) in kbt-dut -------------------------------
"$KBT_DIR/hugepages.sh" >&2
for prefix in $(dpdk_bed_prefixes); do dpdk_cleanup_prefix "$prefix"; done
say "starting the DPDK app $KBT_APP on CPU $KBT_APP_CPU"
APP_NIC=net_af_packet0,iface=kbt-nic APP_ARGS=()
if [ "${KBT_JUMBO:-}" = 1 ]; then
	APP_NIC+=,framesz=10240,blocksz=20480
	APP_ARGS=(--mbuf-size 10368)
fi
[ "$SW_OFFLOAD" = 1 ] && APP_ARGS+=(--sw-offload)
[ "$NO_TSO" = 1 ] && APP_ARGS+=(--no-tso)
[ -n "${KBT_FLOOD:-}" ] && APP_ARGS+=(--flood "$KBT_FLOOD")
APP_VDEVS=(--vdev "$APP_NIC") APP_PORTS=(--port kb0)
if [ "$PORTS" = 2 ]; then
	# The second port: ethdev 1, kbridge port kb1 (the refapp bridges the
	# i-th --port to ethdev i). The comma is DPDK's devargs':
	# shellcheck disable=SC2054
	APP_VDEVS+=(--vdev net_af_packet1,iface=kbt-nic2) APP_PORTS+=(--port kb1)
fi
spawn refapp "$KBT_NS_DUT" "${KBT_PIN_APP[@]}" "$KBT_APP" \
	-l "$KBT_APP_CPU" --file-prefix "$KBT_DPDK_PREFIX" --proc-type primary --no-pci \
	"${APP_VDEVS[@]}" -- "${APP_PORTS[@]}" "${APP_ARGS[@]}"
APP_PID=$SPAWNED_PID
wait_for "the DPDK app to report ready" 30 "$APP_PID" "$KBT_RUN/refapp.log" \
	grep -q '^kbridge-refapp: ready' "$KBT_RUN/refapp.log"

# ---- 7. start kbridge (secondary) in kbt-dut ----------------------------------
say "starting kbridge run --config $KBRIDGE_CONFIG"
spawn kbridge "$KBT_NS_DUT" "${KBT_PIN_OTHER[@]}" "$KBT_KBRIDGE" run --config "$KBRIDGE_CONFIG"
KBRIDGE_PID=$SPAWNED_PID
wait_for "$KBT_PEER_IP to answer a ping through kb0" 20 "$APP_PID $KBRIDGE_PID" \
	"$KBT_RUN/refapp.log $KBT_RUN/kbridge.log" \
	ip netns exec "$KBT_NS_DUT" ping -c1 -W1 "$KBT_PEER_IP"
KBRIDGE2_PID=
if [ "$PORTS" = 2 ]; then
	# The second port's kbridge: an instance, as kbridge@kb1.service runs it,
	# whose defaults (port and interface kb1) the bed's file does not repeat.
	say "starting kbridge run --instance kb1 --config $KBRIDGE2_CONFIG"
	spawn kbridge-kb1 "$KBT_NS_DUT" "${KBT_PIN_OTHER[@]}" "$KBT_KBRIDGE" run --instance kb1 --config "$KBRIDGE2_CONFIG"
	KBRIDGE2_PID=$SPAWNED_PID
	wait_for "$KBT_PEER2_IP to answer a ping through kb1" 20 "$APP_PID $KBRIDGE2_PID" \
		"$KBT_RUN/refapp.log $KBT_RUN/kbridge-kb1.log" \
		ip netns exec "$KBT_NS_DUT" ping -c1 -W1 "$KBT_PEER2_IP"
fi
for p in "$APP_PID" "$KBRIDGE_PID" $KBRIDGE2_PID; do
	pid_alive "$p" || {
		log_tail "$KBT_RUN/refapp.log"
		log_tail "$KBT_RUN/kbridge.log"
		[ -z "$KBRIDGE2_PID" ] || log_tail "$KBT_RUN/kbridge-kb1.log"
		die "pid $p died"
	}
done
echo "$PORTS" >"$KBT_RUN/ports"

say "ready in $(since "$T0")$([ "$PORTS" = 2 ] && echo " (two ports: kb0 and kb1)")"
echo "testbed up"
