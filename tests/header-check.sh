#!/usr/bin/env bash
# make header-check: the DPDK app's headers compile without a warning, each
# alone, as C and as C++ (many DPDK apps are C++), against whichever DPDK
# pkg-config finds; then README.md's example of kbridge.h compiles as C.
#
#   bash tests/header-check.sh HEADER...
#
# CC, CXX and CFLAGS (the warnings, -Werror, DPDK's pkg-config flags, -I for
# the headers' directory) come from the environment, as the Makefile sets them.
set -euo pipefail

CC=${CC:-cc}
CXX=${CXX:-c++}
read -r -a cflags <<<"${CFLAGS:-}"
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Each standard twice: strict ISO, where DPDK's own headers need POSIX's
# declarations (strnlen) and kbridge_child.h syscall(), and GNU's dialect,
# what gcc and g++ use when an app names none.
c_modes=("-std=c11 -D_DEFAULT_SOURCE" "-std=gnu11")
cxx_modes=("-std=c++11" "-std=gnu++17")

for h in "$@"; do
	name=$(basename "$h")
	for m in "${c_modes[@]}"; do
		read -r -a mode <<<"$m"
		printf '#include <%s>\nint main(void) { return 0; }\n' "$name" |
			"$CC" "${mode[@]}" "${cflags[@]}" -x c -c -o /dev/null - ||
			{ echo "header-check: $name does not compile alone as C ($m)" >&2; exit 1; }
	done
	for m in "${cxx_modes[@]}"; do
		read -r -a mode <<<"$m"
		printf '#include <%s>\nint main() { return 0; }\n' "$name" |
			"$CXX" "${mode[@]}" "${cflags[@]}" -x c++ -c -o /dev/null - ||
			{ echo "header-check: $name does not compile alone as C++ ($m)" >&2; exit 1; }
	done
done

# README.md's example: the fenced C block that includes <kbridge.h>, as the
# body of a function (its #include lines included first, above it), after
# the declarations of the names it takes as given: the app's port, queue,
# pool, packet arrays, link and MAC, apply_request. An error names the
# README's line. A name the example starts to use must be declared here, as
# the app around it would declare it.
readme=$top/README.md
block=$(awk '
	/^```c$/ { inblock = 1; start = NR + 1; text = ""; next }
	inblock && /^```$/ { inblock = 0; if (text ~ /#include <kbridge\.h>/) { printf "%d\n%s", start, text; exit } next }
	inblock { text = text $0 "\n" }
' "$readme")
if [ -z "$block" ]; then
	echo "header-check: README.md has no \`\`\`c block that includes <kbridge.h>: the example this check compiles is gone" >&2
	exit 1
fi
start=${block%%$'\n'*}
snippet=${block#*$'\n'}
src=$(mktemp --suffix=.c)
trap 'rm -f "$src"' EXIT
{
	printf '#include <rte_ethdev.h>\n'
	grep -E '^#include' <<<"$snippet"
	cat <<'EOT'
static int apply_request(uint16_t port, const struct kbridge_request *r)
{
	return port == 0 && r->type == KBRIDGE_REQ_MTU ? 0 : -ENOTSUP;
}

int readme_example(struct rte_mempool *mbuf_pool, uint16_t port, uint16_t q, uint16_t nb_queues,
		   struct rte_eth_dev_info dev_info, struct rte_eth_link link,
		   struct rte_ether_addr mac, uint32_t max_mtu)
{
	struct rte_mbuf *pkts[32], *exc[32];
	uint16_t n, k = 0, sent;
EOT
	printf '#line %d "%s"\n' "$start" "$readme"
	sed -E 's/^#include.*//' <<<"$snippet"
	printf '\treturn 0;\n}\n'
} >"$src"
"$CC" -std=gnu11 "${cflags[@]}" -x c -c -o /dev/null "$src" ||
	{ echo "header-check: README.md's example of kbridge.h does not compile (the names around it: tests/header-check.sh)" >&2; exit 1; }
