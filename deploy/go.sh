#!/usr/bin/env bash
# go.sh: finds, or installs, a Go that can build kbridge.
#
#   deploy/go.sh            prints the path of the go of the toolchain go.mod
#                           names, found through the newest usable go (or
#                           that go itself, or "go" when there is none): the
#                           Makefile's GO
#   deploy/go.sh --install  installs Debian's own Go package when there is
#                           none (root), then fetches the toolchain go.mod
#                           names and prints its `go version` (make deps)
#
# Usable means Go 1.21 or later: from 1.21 on, the go command fetches the
# toolchain go.mod asks for (its `toolchain` line) from the Go module proxy
# by itself (GOTOOLCHAIN=go1.N.M, that line's), so any such Go builds kbridge.
# Candidates, in order: go on PATH, /usr/local/go (the upstream tarball),
# then Debian's /usr/lib/go-1.N (golang-1.N-go, which puts no go on PATH by
# itself). Their go.env says GOTOOLCHAIN=local, which ignores the line: this
# script and the Makefile name the toolchain instead. The Makefile's GO is
# the switched-to toolchain's own binary, not the one that switches: the
# Makefile exports GOEXPERIMENT=norandomizedheapbase64 (docs/DPDK.md),
# which Go before 1.26 does not know, and Debian 13's Go 1.24 panics on it
# (in fips140.Init) before it switches.
#
# Debian 13 (trixie) and later: golang-go (1.24 in trixie). Debian 12
# (bookworm): its golang-go is 1.19, too old to switch, so golang-1.23-go
# comes from bookworm-backports, added from the mirror the machine's apt
# sources already name.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The toolchain go.mod names (go1.N.M).
want=$(sed -n 's/^toolchain //p' "$here/../go.mod")
[ -n "$want" ] || { echo "go: go.mod has no toolchain line" >&2; exit 1; }

# usable GO: GO is a go command of version 1.21 or later. Run outside any
# module with GOTOOLCHAIN=local and without the Makefile's GOEXPERIMENT,
# which a Go older than 1.26 refuses to know: the question is what this binary is, not
# what it would switch to.
usable() {
	local v
	v=$(cd / && env -u GOEXPERIMENT GOTOOLCHAIN=local "$1" env GOVERSION 2>/dev/null) || return 1
	[[ $v =~ ^go([0-9]+)\.([0-9]+) ]] || return 1
	((BASH_REMATCH[1] > 1 || BASH_REMATCH[2] >= 21))
}

find_go() {
	local g
	for g in "$(command -v go || true)" /usr/local/go/bin/go \
		$(printf '%s\n' /usr/lib/go-1.*/bin/go | sort -t. -k2,2nr); do
		[ -n "$g" ] && [ -x "$g" ] && usable "$g" && { echo "$g"; return 0; }
	done
	return 1
}

# mirror: the Debian mirror apt already uses for SUITE (one-line and deb822
# sources), so backports comes from the same place.
mirror() {
	local suite=$1 f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk -v s="$suite" '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) break;
			if ($(i + 1) == s) { print $i; exit } }' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v s="$suite" 'BEGIN { RS = ""; FS = "\n" }
			{ u = ""; ok = 0
			  for (i = 1; i <= NF; i++) {
				if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i); split($i, a, /[ \t]+/); u = a[1] }
				if ($i ~ /^Suites:/) { n = split($i, b, /[ \t]+/); for (j = 2; j <= n; j++) if (b[j] == s) ok = 1 }
			  }
			  if (ok && u != "") { print u; exit } }' "$f"
	done
}

install_go() {
	[ "$(id -u)" = 0 ] || {
		echo "go: no Go 1.21 or later found (PATH, /usr/local/go, /usr/lib/go-1.*); run make deps as root to install Debian's" >&2
		exit 1
	}
	local codename pkg
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	export DEBIAN_FRONTEND=noninteractive
	case $codename in
	bookworm)
		pkg=golang-1.23-go
		if ! apt-cache policy 2>/dev/null | grep -q 'bookworm-backports'; then
			local uri
			uri=$(mirror bookworm | head -1)
			[ -n "$uri" ] || uri=http://deb.debian.org/debian
			echo "go: adding bookworm-backports from $uri" >&2
			cat >/etc/apt/sources.list.d/bookworm-backports.sources <<EOF
Types: deb
URIs: $uri
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
		fi
		;;
	*) pkg=golang-go ;;
	esac
	echo "go: installing $pkg" >&2
	apt-get update -qq
	# ca-certificates: the toolchain comes from the Go module proxy over TLS.
	apt-get install -y -qq --no-install-recommends "$pkg" ca-certificates >/dev/null
}

# toolchain GO: the go binary of the toolchain go.mod names, which GO
# (GOTOOLCHAIN=$want) runs; GO itself if that cannot be had.
toolchain() {
	local root
	root=$(cd "$here/.." && env -u GOEXPERIMENT GOTOOLCHAIN="$want" "$1" env GOROOT 2>/dev/null) &&
		[ -x "$root/bin/go" ] && { echo "$root/bin/go"; return 0; }
	echo "$1"
}

case ${1:-} in
"") if g=$(find_go); then toolchain "$g"; else echo go; fi ;;
--install)
	go=$(find_go) || {
		install_go
		go=$(find_go) || { echo "go: installed Debian's Go, still no Go 1.21 or later" >&2; exit 1; }
	}
	# The first build would fetch the toolchain anyway; doing it here makes
	# a proxy that cannot be reached a set-up error, not a build error.
	(cd "$here/.." && env -u GOEXPERIMENT GOTOOLCHAIN="$want" "$go" version) || {
		echo "go: $go could not fetch $want, the toolchain go.mod names (GOPROXY $(env -u GOEXPERIMENT GOTOOLCHAIN=local "$go" env GOPROXY))" >&2
		exit 1
	}
	;;
*)
	echo "usage: $0 [--install]" >&2
	exit 2
	;;
esac
