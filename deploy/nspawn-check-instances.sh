#!/usr/bin/env bash
# nspawn-check-instances.sh: boot a real systemd in a throwaway container,
# install kbridge's package and run two instances of the template unit,
# kbridge@kb0.service and kbridge@kb1.service, beside one DPDK app with
# two ports: each instance reads /etc/kbridge/NAME.yaml over defaults
# named after it (port, interface, control socket /run/kbridge/NAME/),
# a crash or a stop of one leaves the other running, `kbridge stats
# --instance NAME` reads each, `systemctl clean --what=runtime` of one
# leaves the other's control socket, stopping the app stops both (BindsTo),
# and dpkg --purge with both running stops them and leaves nothing.
#
#   deploy/nspawn-check-instances.sh KBRIDGE_DEB APP_CMD
#
# APP_CMD is the DPDK app of dpdk-app.service; it must create the kbridge
# ports kb0 and kb1. EXTRA_BINS as in nspawn-check.sh. Needs root and
# systemd-nspawn; nothing outside the container changes.
set -euo pipefail

bin=$(readlink -f "${1:?usage: $0 KBRIDGE_DEB APP_CMD}")
app=${2:?usage: $0 KBRIDGE_DEB APP_CMD}
case $bin in *.deb) ;; *) echo "nspawn-check-instances.sh: $bin is not a .deb (make deb)" >&2; exit 2 ;; esac
. "$(dirname "$0")/nspawn-lib.sh"
nspawn_prepare "$bin" "$app"
for b in ${EXTRA_BINS:-}; do cp "$b" "$work/bin/"; done
nspawn_hugepages "$app"
[ -n "${EXTRA_BINS:-}" ] && binds+=(--bind-ro=/sys/module)
# Only what differs between the two: their addresses (and kb1's metrics,
# to show that an instance's file sets what its defaults leave off).
printf 'dpdk:\n  file_prefix: kbns\ninterface:\n  addresses: [198.18.9.2/24]\n' >"$work/etc/kb0.yaml"
printf 'dpdk:\n  file_prefix: kbns\ninterface:\n  addresses: [198.18.10.2/24]\nstats:\n  metrics: 127.0.0.1:9479\n' >"$work/etc/kb1.yaml"

nspawn_boot kbinst --capability=CAP_IPC_LOCK,CAP_BPF,CAP_SYS_NICE,CAP_NET_RAW
inside install -m 0644 /opt/kbridge/etc/kb0.yaml /etc/kbridge/kb0.yaml
inside install -m 0644 /opt/kbridge/etc/kb1.yaml /etc/kbridge/kb1.yaml

iprop() { inside systemctl show "kbridge@$1.service" -p "$2" --value; }
iactive() { [ "$(iprop "$1" ActiveState)" = active ] && [ "$(iprop "$1" SubState)" = running ]; }
iinactive() { [ "$(iprop "$1" ActiveState)" = inactive ]; }
both_active() { iactive kb0 && iactive kb1; }
has_tap() { inside ip link show "$1" >/dev/null 2>&1; }
addr_on() { inside ip -o addr show dev "$1" | grep " $2/" >/dev/null; } # no -q: an early exit fails the pipe (pipefail)
restarts_at_least() { [ "$(iprop "$1" NRestarts)" -ge "$2" ] && iactive "$1"; }
stats_of() { # instance, what its stats must show
	inside /usr/bin/kbridge stats --instance "$1" | grep "$2" >/dev/null
}
template_unit() {
	local frag
	frag=$(inside systemctl show kbridge@kb0.service -p FragmentPath --value)
	case $frag in /lib/systemd/system/kbridge@.service | /usr/lib/systemd/system/kbridge@.service) ;; *) return 1 ;; esac
	iprop kb0 ExecStart | grep 'argv\[\]=/usr/bin/kbridge run --instance kb0 ' >/dev/null &&
		iprop kb1 ExecStopPost | grep 'argv\[\]=/usr/bin/kbridge cleanup --instance kb1 ' >/dev/null &&
		iprop kb1 BindsTo | grep -w dpdk-app.service >/dev/null
}

inside systemctl start dpdk-app.service
check "package: systemd loads the template kbridge@.service, its instances run --instance NAME and bind to the app" template_unit
check "start: systemctl start kbridge@kb0 kbridge@kb1 reaches active (running)" \
	inside systemctl start kbridge@kb0.service kbridge@kb1.service
check "start: both active" both_active
if ! both_active; then
	for i in kb0 kb1; do echo "--- journal (kbridge@$i.service)"; inside journalctl -u "kbridge@$i.service" --no-pager -o cat | tail -30; done
	echo "--- journal (dpdk-app.service)"
	inside journalctl -u dpdk-app.service --no-pager -o cat | tail -20
	exit 1
fi
both_addressed() { addr_on kb0 198.18.9.2 && addr_on kb1 198.18.10.2; }
check "start: each has its interface with its file's address (kb0 198.18.9.2, kb1 198.18.10.2)" both_addressed

check "start: each has its control socket, /run/kbridge/kb0/control.sock and /run/kbridge/kb1/control.sock" \
	inside sh -c 'test -S /run/kbridge/kb0/control.sock && test -S /run/kbridge/kb1/control.sock'
check "start: /run/kbridge is 0711 root, as kbridge.service leaves it" \
	inside sh -c '[ "$(stat -c %a:%U /run/kbridge)" = 711:root ]'
check "stats: kbridge stats --instance kb1 reads kb1's daemon" stats_of kb1 '"kb1"'
check "stats: kbridge stats --instance kb0 reads kb0's daemon" stats_of kb0 '"kb0"'
check "metrics: kb1's file sets 127.0.0.1:9479, kb0's instance default leaves metrics off" \
	inside sh -c 'ss -Hltn | grep -q "127.0.0.1:9479 " && ! ss -Hltn | grep -q ":9478 "'

# In kb0's own mount namespace: what the sandbox lets it write under /run.
in_kb0() { inside nsenter -t "$(iprop kb0 MainPID)" -m "$@"; }
run_writes() { in_kb0 sh -c 'touch /run/kbridge/probe && rm /run/kbridge/probe && ! touch /run/probe 2>/dev/null'; }
check "sandbox: in kb0's mount namespace /run/kbridge is writable (mode vhost's default socket is there), the rest of /run is not" run_writes

kb0_pid=$(iprop kb0 MainPID)
inside kill -9 "$(iprop kb1 MainPID)"
check "crash: kill -9 of kb1 is restarted" wait_for 20 restarts_at_least kb1 1
kb0_untouched() { [ "$(iprop kb0 MainPID)" = "$kb0_pid" ] && [ "$(iprop kb0 NRestarts)" = 0 ] && iactive kb0; }
check "crash: kb0 kept running, same pid, not restarted" kb0_untouched

check "stop: systemctl stop kbridge@kb1 succeeds" inside systemctl stop kbridge@kb1.service
kb1_gone() { iinactive kb1 && ! has_tap kb1; }
kb0_on() { iactive kb0 && has_tap kb0; }
check "stop: kb1 inactive, its cleanup left no kb1" kb1_gone
check "stop: kb0 still active with its interface" kb0_on

# Each instance's RuntimeDirectory is its own (kbridge/NAME): cleaning one
# must not take the directory, and the control socket, of the others.
check "clean: systemctl clean --what=runtime kbridge@kb1 succeeds" inside systemctl clean --what=runtime kbridge@kb1.service
kb1_cleaned() { inside sh -c '! [ -e /run/kbridge/kb1 ] && test -S /run/kbridge/kb0/control.sock' && stats_of kb0 '"kb0"'; }
check "clean: /run/kbridge/kb1 is gone, kb0's control socket stays and answers" kb1_cleaned

inside systemctl start kbridge@kb1.service
kb1_back() { iactive kb1 && inside test -S /run/kbridge/kb1/control.sock; }
check "clean: kb1 starts again and makes its directory anew" wait_for 15 kb1_back
inside systemctl stop dpdk-app.service
both_inactive() { iinactive kb0 && iinactive kb1; }
check "bindsto: stopping the app stops both" wait_for 15 both_inactive

inside systemctl start dpdk-app.service
inside systemctl start kbridge@kb0.service kbridge@kb1.service
check "purge: both running before dpkg --purge" both_active
check "purge: dpkg --purge kbridge succeeds" inside dpkg --purge kbridge
both_gone() { ! iactive kb0 && ! iactive kb1 && ! has_tap kb0 && ! has_tap kb1; }
check "purge: both instances stopped, their cleanup left no kb0 or kb1" both_gone
check "purge: no unit, drop-in or link named kbridge@* or kbridge.service* in systemd's paths" \
	test -z "$(inside find /etc/systemd /run/systemd/system /lib/systemd/system /usr/lib/systemd/system \
		\( -name 'kbridge.service*' -o -name 'kbridge@*' \) 2>/dev/null)"
check "purge: no /etc/kbridge, no /run/kbridge" inside sh -c '! [ -e /etc/kbridge ] && ! [ -e /run/kbridge ]'

for i in kb0 kb1; do
	echo "--- journal (kbridge@$i.service)"
	inside journalctl -u "kbridge@$i.service" --no-pager -o cat | tail -15
done
echo "--- $failures failure(s)"
[ "$failures" -eq 0 ]
