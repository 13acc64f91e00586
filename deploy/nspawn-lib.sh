# nspawn-lib.sh: what deploy/nspawn-check.sh and deploy/nspawn-check-xdp.sh
# share: a throwaway container that boots a real systemd with
# deploy/kbridge.service in it, and the helpers the checks use. Sourced.
# shellcheck shell=bash

# nspawn_prepare KBRIDGE_BIN APP_CMD: makes $work with the unit, its
# drop-ins, a dpdk-app.service running APP_CMD and kbridge in $work/bin
# (bound to /opt/kbridge/bin); a drop-in rewrites ExecStart/ExecStopPost, so
# the host's /usr stays untouched. Sets work, sys and binds.
nspawn_prepare() {
	local bin=$1 app=$2 here
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	work=$(mktemp -d /tmp/kbridge-nspawn.XXXXXX)
	sys=$work/system
	mkdir -p "$sys/kbridge.service.d" "$work/bin" "$work/etc"
	cp "$here/kbridge.service" "$sys/"
	cp "$here/kbridge.service.d/10-dpdk-app.conf" "$sys/kbridge.service.d/"
	cp "$bin" "$work/bin/kbridge"
	cat >"$sys/kbridge.service.d/99-nspawn-check.conf" <<'EOT'
[Service]
ExecStart=
ExecStart=/opt/kbridge/bin/kbridge run --config /etc/kbridge/kbridge.yaml
ExecStopPost=
ExecStopPost=-/opt/kbridge/bin/kbridge cleanup --config /etc/kbridge/kbridge.yaml
EOT
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
	binds=(--bind="$sys:/etc/systemd/system" --bind-ro="$work/bin:/opt/kbridge/bin")
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
	rm -rf "$work"
}

# nspawn_boot NAME [nspawn options...]: boots the container with a private
# network and a tmpfs root over the host's /usr, and waits until its systemd
# runs. Sets init_pid. Read-only console: pid 1 blocks on a passive console
# nobody reads.
nspawn_boot() {
	local name=$1
	shift
	setsid systemd-nspawn -D / --volatile=yes --boot --private-network \
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
}

inside() { nsenter -t "$init_pid" -a "$@"; }
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
