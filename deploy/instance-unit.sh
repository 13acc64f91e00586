#!/usr/bin/env bash
# instance-unit.sh: print the template unit kbridge@.service, made from
# kbridge.service so that the two never differ in anything but what names
# the instance: kbridge@NAME.service runs `kbridge run --instance NAME`
# (file /etc/kbridge/NAME.yaml; port, interface and control socket named
# after it; docs/CONFIG.md "Several ports: instances").
#
#   deploy/instance-unit.sh [UNIT]    (default: deploy/kbridge.service)
#
# Fails when a line it must change is not there (kbridge.service changed).
set -euo pipefail
unit=${1:-$(dirname "${BASH_SOURCE[0]}")/kbridge.service}
out=$(sed -E \
	-e 's|^Description=(.*)$|Description=\1 (instance %i)|' \
	-e 's|^(ExecStart=.*/kbridge run) --config /etc/kbridge/kbridge\.yaml$|\1 --instance %I|' \
	-e 's|^(ExecStopPost=.*/kbridge cleanup) --config /etc/kbridge/kbridge\.yaml$|\1 --instance %I|' \
	-e 's|^RuntimeDirectory=kbridge$|# An instance'"'"'s own directory (its control socket), so that systemctl clean\
# --what=runtime of one removes nothing of the others'"'"'; the shared parent stays\
# writable for what an instance keeps there (mode vhost'"'"'s default socket).\
# systemd makes that parent 0755; kbridge.service makes it 0711 at every start.\
RuntimeDirectory=kbridge/%I\
ReadWritePaths=-/run/kbridge\
ExecStartPre=+/bin/chmod 0711 /run/kbridge|' \
	"$unit")
for want in '^Description=.*instance %i' '^ExecStart=.* run --instance %I$' '^ExecStopPost=.* cleanup --instance %I$' \
	'^RuntimeDirectory=kbridge/%I$' '^ReadWritePaths=-/run/kbridge$' '^ExecStartPre=\+/bin/chmod 0711 /run/kbridge$'; do
	grep -Eq "$want" <<<"$out" || { echo "instance-unit.sh: $unit has no line to turn into /$want/" >&2; exit 1; }
done
if grep -q 'kbridge\.yaml' <<<"$(grep -E '^(Exec|Environment)' <<<"$out")"; then
	echo "instance-unit.sh: a command line of $unit still names kbridge.yaml" >&2
	exit 1
fi
printf '# Generated from kbridge.service by deploy/instance-unit.sh: edit that, not this.\n%s\n' "$out"
