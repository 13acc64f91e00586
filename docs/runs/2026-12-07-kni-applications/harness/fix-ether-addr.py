#!/usr/bin/env python3
"""Renames rte_ether_hdr's s_addr/d_addr (DPDK <= 21.08) to src_addr/dst_addr
(21.11+) exactly where the compiler says so: reads gcc's
'FILE:LINE:COL: error: 'struct rte_ether_hdr' has no member named 'd_addr''
lines on stdin and edits that column only (in_addr's s_addr is left alone)."""
import re, sys, collections
pat = re.compile(r"^(\S+?):(\d+):(\d+): error: .struct rte_ether_hdr. has no member named .([sd]_addr).")
edits = collections.defaultdict(set)
for line in sys.stdin:
    m = pat.match(line)
    if m:
        edits[m[1]].add((int(m[2]), int(m[3]), m[4]))
for path, es in edits.items():
    lines = open(path).read().split("\n")
    # right to left on a line, so earlier columns stay valid
    for ln, col, name in sorted(es, key=lambda e: (e[0], -e[1])):
        s = lines[ln - 1]
        # gcc counts display columns: a tab runs to the next multiple of 8
        i, disp = 0, 1
        while disp < col:
            disp = (disp - 1) // 8 * 8 + 9 if s[i] == "\t" else disp + 1
            i += 1
        if s[i:i + len(name)] != name:
            sys.exit(f"{path}:{ln}:{col}: expected {name}, found {s[i:i+10]!r}")
        lines[ln - 1] = s[:i] + {"s_addr": "src_addr", "d_addr": "dst_addr"}[name] + s[i + len(name):]
    open(path, "w").write("\n".join(lines))
    print(f"{path}: {len(es)} renamed")
