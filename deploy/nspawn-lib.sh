# nspawn-lib.sh: what deploy/nspawn-check.sh and deploy/nspawn-check-xdp.sh
# share: a throwaway container that boots a real systemd with
# deploy/kbridge.service in it, and the helpers the checks use. Sourced.
# shellcheck shell=bash

# nspawn_prepare KBRIDGE_BIN|KBRIDGE_DEB APP_CMD: makes $work with a
# dpdk-app.service running APP_CMD and, for a binary, the unit, its
# drop-ins and kbridge in $work/bin (bound to /opt/kbridge/bin); a drop-in
# rewrites ExecStart/ExecStopPost, so the host's /usr stays untouched.
# For a .deb (make deb), nothing of kbridge is copied: nspawn_boot installs
# the package with dpkg -i, over an overlay of the host's /usr whose upper
# layer is in $work and a copy of the host's dpkg database, and
# nspawn_purge_checks purges it. Sets work, sys, deb, kb (kbridge's path in the container) and binds.
# NSPAWN_ROOT=DIR boots another Debian root than the host's (default /):
# a Debian root of tests/dpdkroot, for a package built in it.
nspawn_prepare() {
	local bin=$1 app=$2 here
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	nsroot=$(readlink -f "${NSPAWN_ROOT:-/}")
	work=$(mktemp -d /tmp/kbridge-nspawn.XXXXXX)
	sys=$work/system
	mkdir -p "$sys" "$work/bin" "$work/etc"
	deb=
	kb=/opt/kbridge/bin/kbridge
	case $bin in
	*.deb)
		deb=$work/pkg/$(basename "$bin")
		# shellcheck disable=SC2034 # kb is for the scripts that source this
		kb=/usr/bin/kbridge
		mkdir -p "$work/pkg" "$work/usr"
		# The host's dpkg database, copied: dpkg -i checks Depends against it.
		# (An overlay needs its mount point in the image; /var/lib is not in
		# a volatile root until systemd makes it.)
		cp -a "$nsroot/var/lib/dpkg" "$work/dpkg"
		# Its overrides name groups (ssl-cert) that the container's fresh
		# /etc lacks, and dpkg refuses to start then; none are kbridge's.
		: >"$work/dpkg/statoverride"
		cp "$bin" "$deb"
		;;
	*)
		mkdir -p "$sys/kbridge.service.d" "$sys/kbridge@.service.d"
		cp "$here/kbridge.service" "$sys/"
		cp "$here/kbridge.service.d/10-dpdk-app.conf" "$sys/kbridge.service.d/"
		sed 's|/usr/local/bin/kbridge|/opt/kbridge/bin/kbridge|g' "$here/kbridge.service" |
			bash "$here/instance-unit.sh" /dev/stdin >"$sys/kbridge@.service"
		cp "$here/kbridge.service.d/10-dpdk-app.conf" "$sys/kbridge@.service.d/"
		cp "$bin" "$work/bin/kbridge"
		cat >"$sys/kbridge.service.d/99-nspawn-check.conf" <<'EOT'
[Service]
ExecStart=
ExecStart=/opt/kbridge/bin/kbridge run --config /etc/kbridge/kbridge.yaml
ExecStopPost=
ExecStopPost=-/opt/kbridge/bin/kbridge cleanup --config /etc/kbridge/kbridge.yaml
EOT
		;;
	esac
	cat >"$sys/dpdk-app.service" <<EOT
[Unit]
Description=DPDK app (nspawn-check stand-in)
[Service]
ExecStart=$app
EOT
	# Units that wait for a console or for services this host does not run.
	for u in systemd-firstboot.service console-getty.service getty.target; do
		ln -sf /dev/null "$sys/$u"
	done
	binds=(--bind="$sys:/etc/systemd/system" --bind-ro="$work/bin:/opt/kbridge/bin" --bind-ro="$work/etc:/opt/kbridge/etc")
	[ -n "$deb" ] && binds+=(--bind-ro="$work/pkg:/opt/kbridge/pkg"
		--overlay="$nsroot/usr:$work/usr:/usr" --bind="$work/dpkg:/var/lib/dpkg")
	nspawn_pid=
	init_pid=
	trap nspawn_cleanup EXIT
}

nspawn_cleanup() {
	if [ -n "$init_pid" ] && kill -0 "$init_pid" 2>/dev/null; then
		nsenter -t "$init_pid" -a systemctl poweroff >/dev/null 2>&1 || true
		for _ in $(seq 20); do kill -0 "$init_pid" 2>/dev/null || break; sleep 0.5; done
		kill -9 "$init_pid" 2>/dev/null || true
	fi
	[ -n "$nspawn_pid" ] && kill "$nspawn_pid" 2>/dev/null || true
	# The app's hugepage files (nspawn_hugepages) outlive it in the bound
	# /dev/hugepages, holding their pages until its prefix is used again.
	[ -n "${huge_prefix:-}" ] && rm -f /dev/hugepages/"$huge_prefix"map_*
	rm -rf "$work"
}

# nspawn_hugepages APP_CMD: binds the host's /dev/hugepages (if mounted) for
# a DPDK app, and has nspawn_cleanup remove the files of the app's
# --file-prefix when the container is gone.
nspawn_hugepages() {
	mountpoint -q /dev/hugepages || return 0
	binds+=(--bind=/dev/hugepages)
	huge_prefix=$(sed -n 's/.*--file-prefix[= ]\([^ ]*\).*/\1/p' <<<"$1")
}

# nspawn_boot NAME [nspawn options...]: boots the container with a private
# network and a tmpfs root over the host's /usr, and waits until its systemd
# runs, then installs a .deb (NSPAWN_NO_INSTALL=1: leaves that to the
# caller). Sets init_pid. Read-only console: pid 1 blocks on a passive console
# nobody reads.
nspawn_boot() {
	local name=$1
	shift
	# Another root's systemd (Debian 13's 257 has no cgroup v1) gets a
	# unified hierarchy of its own on a host that still mounts v1.
	local cg=()
	[ "$nsroot" = / ] || cg=(SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1)
	env "${cg[@]}" setsid systemd-nspawn -D "$nsroot" --volatile=yes --boot --private-network \
		--register=no --keep-unit --machine="$name$$" "$@" \
		"${binds[@]}" --console=read-only >"$work/console.log" 2>&1 </dev/null &
	nspawn_pid=$!
	for _ in $(seq 60); do
		init_pid=$(pgrep -P "$nspawn_pid" | head -1 || true)
		if [ -n "$init_pid" ]; then
			state=$(nsenter -t "$init_pid" -a systemctl is-system-running 2>/dev/null || true)
			case $state in running | degraded) break ;; esac
		fi
		sleep 1
	done
	[ -n "$init_pid" ] || { echo "container did not boot"; cat "$work/console.log"; exit 1; }
	[ -z "$deb" ] || [ -n "${NSPAWN_NO_INSTALL:-}" ] || nspawn_install
}

# nspawn_config FILE: the container's /etc/kbridge/kbridge.yaml. Bound for a
# binary; for a package, copied over the package's conffile once it is
# installed (an edited conffile, which purge must remove all the same).
nspawn_config() {
	if [ -z "$deb" ]; then
		binds+=(--bind-ro="$(readlink -f "$1"):/etc/kbridge/kbridge.yaml")
	elif [ "$(readlink -f "$1")" != "$(readlink -f "$work/etc/kbridge.yaml")" ]; then
		cp "$1" "$work/etc/kbridge.yaml"
	fi
}

# nspawn_install: dpkg -i of $deb in the booted container, and what the
# package must give: the unit and drop-in systemd runs, the conffile,
# kbridge.pc, kbridge.h and rte_kni.h for a C build, librte_kni and its .pc
# for a link. Writes down first which of the
# package's paths exist before it (the directories it shares with the
# system): nspawn_purge_checks wants exactly these back.
nspawn_install() {
	dpkg-deb -c "$deb" | awk '{ print $6 }' | sed -e 's|^\./|/|' -e 's|/$||' | grep . >"$work/paths"
	present <"$work/paths" >"$work/before"
	# A host image that forbids maintainer scripts to start or stop services
	# (a policy-rc.d that says 101, as build containers have) would keep
	# prerm from stopping kbridge; the container stands for a plain host.
	# Removed in the /usr overlay's upper layer only.
	inside rm -f /usr/sbin/policy-rc.d
	check "package: dpkg -i installs $(basename "$deb")" inside dpkg -i "/opt/kbridge/pkg/$(basename "$deb")"
	inside dpkg -s kbridge >/dev/null 2>&1 || { echo "--- $failures failure(s)"; exit 1; }
	if [ -f "$work/etc/kbridge.yaml" ]; then
		inside install -m 0644 /opt/kbridge/etc/kbridge.yaml /etc/kbridge/kbridge.yaml
	fi
	check "package: systemd loads the package's unit and its drop-in" pkg_unit
	check "package: one version: dpkg's, kbridge version's and kbridge.pc's ($(dpkg-deb -f "$deb" Version))" one_version
	check "package: man pages for kbridge and each command, bash and zsh completion" \
		inside test -f /usr/share/man/man8/kbridge.8.gz -a -f /usr/share/man/man8/kbridge-check.8.gz -a \
		-f /usr/share/bash-completion/completions/kbridge -a -f /usr/share/zsh/vendor-completions/_kbridge
	check "package: /etc/kbridge/kbridge.yaml is a conffile" \
		sh -c "nsenter -t $init_pid -a dpkg-query -W -f='\${Conffiles}' kbridge | grep -q ' /etc/kbridge/kbridge.yaml '"
	check "package: pkg-config --cflags kbridge names /usr/include/kbridge" \
		sh -c "nsenter -t $init_pid -a pkg-config --cflags kbridge | grep -q -- '-I/usr/include/kbridge'"
	# gcc, not cc: cc is a link through /etc/alternatives, which the
	# container's fresh /etc has not.
	cat >"$work/etc/kbh.c" <<'EOT'
#include <stdio.h>
#include <kbridge.h>
int main(void) { printf("kbridge.h version %u\n", KBRIDGE_VERSION); return 0; }
EOT
	check "package: a C file including <kbridge.h> builds with \$(pkg-config --cflags --libs kbridge libdpdk) and runs" \
		inside sh -c 'gcc -o /tmp/kbh /opt/kbridge/etc/kbh.c $(pkg-config --cflags --libs kbridge libdpdk) && /tmp/kbh'
	# An app written for KNI builds against the package's rte_kni.h as it
	# did against librte_kni: the two pkg-config names of docs/KNI.md.
	cp "$(dirname "${BASH_SOURCE[0]}")/../tests/kniapp/kniapp.c" "$work/etc/kniapp.c"
	check "package: the KNI app (tests/kniapp) builds with \$(pkg-config --cflags --libs kbridge libdpdk)" \
		inside sh -c 'gcc -O2 -Wall -Werror -o /tmp/kniapp /opt/kbridge/etc/kniapp.c $(pkg-config --cflags --libs kbridge libdpdk)'
	# librte_kni, for what includes no kbridge header (tests/libkni): the
	# ldconfig trigger ran, so dlopen("librte_kni.so") finds it, and every
	# function the package's symbols file names, in its version (DPDK's
	# nodes; KBRIDGE_PRIVATE_<ABI> holds the registries); a program
	# declaring KNI's functions itself links -lrte_kni shared and static.
	cp "$(dirname "${BASH_SOURCE[0]}")"/../tests/libkni/testdata/{dlsym,knilink}.c "$work/etc/"
	check "package: dlopen(\"librte_kni.so\") and dlsym find every rte_kni_* of its symbols file, versioned" \
		inside sh -c 'gcc -o /tmp/dlsym /opt/kbridge/etc/dlsym.c -ldl &&
			names=$(sed -n "s/^ \(rte_kni_[a-z_]*@\(DPDK_[0-9]*\|EXPERIMENTAL\)\) .*/\1/p" /var/lib/dpkg/info/kbridge.symbols) &&
			[ "$(echo "$names" | wc -l)" = 12 ] && [ "$(/tmp/dlsym $names | grep -c " found versioned$")" = 12 ]'
	check "package: a program declaring KNI's functions links \$(pkg-config [--static] --libs librte_kni libdpdk), shared and static, and runs" \
		inside sh -c 'gcc -Wl,-z,now -o /tmp/knilink /opt/kbridge/etc/knilink.c $(pkg-config --libs librte_kni libdpdk) &&
			readelf -d /tmp/knilink | grep -q "\[librte_kni\.so\." && /tmp/knilink &&
			gcc -Wl,-z,now -o /tmp/knilink-static /opt/kbridge/etc/knilink.c $(pkg-config --static --libs librte_kni libdpdk) &&
			! readelf -d /tmp/knilink-static | grep -q "\[librte_" && /tmp/knilink-static'
	# meson (make deps installs it): dependency('kbridge') finds kbridge.pc.
	if inside sh -c 'command -v meson && command -v ninja' >/dev/null; then
		cat >"$work/etc/meson.build" <<'EOT'
project('kbh', 'c')
executable('kbh', 'kbh.c', dependencies: [dependency('kbridge'), dependency('libdpdk')])
EOT
		check "package: meson's dependency('kbridge') builds it too" inside sh -c \
			'rm -rf /tmp/kbm && mkdir /tmp/kbm && cp /opt/kbridge/etc/meson.build /opt/kbridge/etc/kbh.c /tmp/kbm/ &&
			 CC=gcc meson setup /tmp/kbm/build /tmp/kbm >/tmp/kbm.log 2>&1 && ninja -C /tmp/kbm/build >>/tmp/kbm.log 2>&1 &&
			 /tmp/kbm/build/kbh || { cat /tmp/kbm.log; exit 1; }'
	else
		echo "SKIP  package: meson's dependency('kbridge') (no meson or ninja: make deps installs them)"
	fi
}
# one_version: the package, the binary and kbridge.pc say the same version.
one_version() {
	local v
	v=$(dpkg-deb -f "$deb" Version)
	[ "$(inside dpkg-query -W -f='${Version}' kbridge)" = "$v" ] &&
		[ "$(inside /usr/bin/kbridge version | sed -n '1s/^kbridge //p')" = "$v" ] &&
		[ "$(inside pkg-config --modversion kbridge)" = "$v" ]
}
# present: which of the paths on stdin exist in the container.
present() { inside sh -c 'while read -r p; do if [ -e "$p" ] || [ -L "$p" ]; then echo "$p"; fi; done'; }
pkg_unit() {
	local frag
	frag=$(prop FragmentPath)
	case $frag in /lib/systemd/system/kbridge.service | /usr/lib/systemd/system/kbridge.service) ;; *) return 1 ;; esac
	prop DropInPaths | grep 'systemd/system/kbridge.service.d/10-dpdk-app.conf' >/dev/null &&
		prop ExecStart | grep 'path=/usr/bin/kbridge ' >/dev/null &&
		prop BindsTo | grep -w dpdk-app.service >/dev/null
}

# nspawn_purge_checks: for a package, the operator's usual links (add-wants,
# the app starting kbridge), then dpkg --purge with kbridge running: it
# stops kbridge before its binary goes (the cleanup removes the TAP), and
# leaves nothing: no file of the package, no unit or link to it, no
# /etc/kbridge or /run/kbridge, no dpkg record. No-op for a binary.
nspawn_purge_checks() {
	[ -n "$deb" ] || return 0
	inside systemctl stop kbridge.service dpdk-app.service
	inside systemctl add-wants dpdk-app.service kbridge.service
	inside systemctl start dpdk-app.service
	check "package: after add-wants, starting the app starts kbridge" wait_for 30 active
	check "purge: dpkg --purge kbridge succeeds" inside dpkg --purge kbridge
	check "purge: kbridge was stopped and its cleanup left no kb0" sh -c "[ \"\$(nsenter -t $init_pid -a systemctl show kbridge.service -p ActiveState --value)\" != active ] && ! nsenter -t $init_pid -a ip link show kb0 >/dev/null 2>&1"
	check "purge: systemd knows no kbridge.service" test "$(prop LoadState)" = not-found
	# An operator's own drop-in (operator_dropin, a mode's) is theirs: purge leaves it.
	local mine=()
	[ -z "${operator_dropin:-}" ] || mine=(! -path /etc/systemd/system/kbridge.service.d ! -path "$operator_dropin")
	check "purge: no unit, drop-in or link named kbridge.service* or kbridge@* anywhere in systemd's paths" \
		test -z "$(inside find /etc/systemd /run/systemd/system /lib/systemd/system /usr/lib/systemd/system \
			\( -name 'kbridge.service*' -o -name 'kbridge@*' \) "${mine[@]}" 2>/dev/null)"
	[ -z "${operator_dropin:-}" ] || check "purge: the operator's drop-in $operator_dropin is left" inside test -f "$operator_dropin"
	check "purge: no /etc/kbridge, no /run/kbridge" inside sh -c '! [ -e /etc/kbridge ] && ! [ -e /run/kbridge ]'
	present <"$work/paths" >"$work/after"
	check "purge: every path of the package is as before the install ($(wc -l <"$work/paths") paths)" \
		diff "$work/before" "$work/after"
	check "purge: dpkg has no record of kbridge" inside sh -c '! dpkg -L kbridge >/dev/null 2>&1 && ! ls /var/lib/dpkg/info/kbridge.* >/dev/null 2>&1'
}

inside() { nsenter -t "$init_pid" -a "$@"; }
# capbnd HEX: the main process's bounding set is exactly HEX (/proc's CapBnd).
# (No awk inside: it is a link through /etc/alternatives, which the fresh /etc lacks.)
capbnd() { [ "$(inside grep '^CapBnd:' "/proc/$(prop MainPID)/status" | tr -d '[:space:]')" = "CapBnd:$1" ]; }
# base_sandbox: what the base unit leaves to mode xdp's drop-in is not granted.
base_sandbox() {
	! prop ReadWritePaths | grep /sys/fs/bpf >/dev/null &&
		! prop DeviceAllow | grep vhost-net >/dev/null &&
		! prop CapabilityBoundingSet | grep -E 'cap_bpf|cap_perfmon' >/dev/null
}
prop() { inside systemctl show kbridge.service -p "$1" --value; }
failures=0
check() { # name, command...
	local name=$1
	shift
	if "$@"; then echo "PASS  $name"; else echo "FAIL  $name"; failures=$((failures + 1)); fi
}
wait_for() { # seconds, command...
	local n=$1
	shift
	for _ in $(seq "$((n * 2))"); do "$@" && return 0; sleep 0.5; done
	return 1
}
active() { [ "$(prop ActiveState)" = active ] && [ "$(prop SubState)" = running ]; }
inactive() { [ "$(prop ActiveState)" = inactive ]; }
