#!/usr/bin/env bash
# go-check.sh: make deps' Go step on a fresh Debian. Needs root,
# debootstrap and systemd-nspawn, and the network (a Debian mirror, the Go
# module proxy).
#
#   deploy/go-check.sh SUITE        e.g. bookworm (Debian 12), trixie (13)
#
# Makes a minbase root of SUITE with debootstrap under /var/tmp (no Go in
# it), runs deploy/go.sh --install in it with systemd-nspawn, and prints
# the go the Makefile then picks and its `go version` in the source tree
# (the toolchain go.mod names, fetched through GOTOOLCHAIN). The root is
# deleted afterwards; the host is not touched. DEBIAN_MIRROR overrides
# http://deb.debian.org/debian.
set -euo pipefail

suite=${1:?usage: $0 SUITE}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=$(mktemp -d /var/tmp/kbridge-go-check.XXXXXX)
trap 'rm -rf --one-file-system "$dir"' EXIT

debootstrap --variant=minbase "$suite" "$dir/root" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$dir/debootstrap.log" 2>&1 || {
	tail -20 "$dir/debootstrap.log"
	exit 1
}
binds=(--bind-ro="$top:/src")
# The host's trust store, for a host whose HTTPS goes through a proxy with
# its own CA (the root's fresh ca-certificates would not know it).
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
	binds+=(--bind-ro=/etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt --setenv=SSL_CERT_FILE=/run/host-ca.crt)
fi
# Within one make run, as in `make demo` on a fresh machine: a target that
# installs Go (what deps does) and after it one that uses $(GO), which the
# Makefile must find although it was not there when make started. make
# itself is not in a minbase root.
systemd-nspawn -q -D "$dir/root" --machine="kbgo-$suite-$$" --register=no --keep-unit "${binds[@]}" --pipe bash -euc '
	. /etc/os-release
	echo "root: $PRETTY_NAME"
	if command -v go >/dev/null; then echo "root: has a go already"; exit 1; fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends make >/dev/null
	make -s -C /src --no-print-directory \
		--eval "kbgo-install: ; @bash deploy/go.sh --install" \
		--eval "kbgo: kbgo-install ; @echo \"make GO: \$(GO)\"; echo \"make go version: \$\$(\$(GO) version)\"" kbgo
' </dev/null
