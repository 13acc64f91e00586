#!/usr/bin/env bash
# version.sh: prints kbridge's version, the one string a build carries:
# `kbridge version`, the Debian package's Version and kbridge.pc's all take
# it from here (the Makefile builds it into the binary; deploy/deb.sh reads
# it back from the binary). docs/PACKAGING.md has the tag scheme.
#
#   deploy/version.sh [REPO]      (default: this script's repository)
#
# `git describe` made Debian-valid: a tag v1.2.3 gives 1.2.3, four commits
# on 1.2.3+git4.gabcdef0; no tag 0.0~git<commit time UTC>.<hash>, which
# sorts by commit and before any release; +dirty marks uncommitted changes;
# outside git 0.0~dev.
set -euo pipefail
top=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
d=
dirty=
if ! d=$(git -C "$top" describe --tags --long --match 'v[0-9]*' 2>/dev/null); then
	d=
fi
git -C "$top" diff --quiet HEAD 2>/dev/null || dirty=+dirty
if [[ $d =~ ^v(.+)-([0-9]+)-g([0-9a-f]+)$ ]]; then
	if [ "${BASH_REMATCH[2]}" = 0 ]; then
		d=${BASH_REMATCH[1]}
	else
		d=${BASH_REMATCH[1]}+git${BASH_REMATCH[2]}.g${BASH_REMATCH[3]}
	fi
elif git -C "$top" rev-parse -q --verify HEAD >/dev/null 2>&1; then
	d=0.0~git$(TZ=UTC git -C "$top" log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S).$(git -C "$top" rev-parse --short=7 HEAD)
else
	d=0.0~dev
	dirty=
fi
# Debian's upstream version: alphanumerics and . + ~ only (no "-": the
# package is native, it has no revision), starting with a digit.
d=$(printf '%s' "$d" | tr -c 'A-Za-z0-9.+~' '.')
[[ $d =~ ^[0-9] ]] || d=0.0~$d
echo "$d$dirty"
