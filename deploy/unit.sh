#!/usr/bin/env bash
# unit.sh: prints deploy/kbridge.service for a kbridge installed under
# PREFIX: its ExecStart=, ExecStopPost= and documentation paths name
# PREFIX/bin/kbridge and PREFIX/share. make install writes it with its
# PREFIX (default /usr/local), deploy/deb.sh with /usr.
#
#   deploy/unit.sh PREFIX
set -euo pipefail
prefix=${1:?usage: $0 PREFIX}
prefix=${prefix%/}
[[ $prefix == /* ]] || { echo "unit.sh: PREFIX $prefix: an absolute path" >&2; exit 2; }
sed -e "s|/usr/local/bin/kbridge|$prefix/bin/kbridge|g" \
	-e "s|/usr/local/share/|$prefix/share/|g" \
	"$(dirname "${BASH_SOURCE[0]}")/kbridge.service"
