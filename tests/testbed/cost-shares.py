#!/usr/bin/env python3
"""cost-shares.py PERF_DATA: a forwarder's CPU time by what it was spent on.

PERF_DATA is a cpu-clock profile of the forwarder's process with call
graphs (perf record -g -e cpu-clock -F 4999 -p PID -- sleep N); every
sample goes to the first share below whose rule matches its stack. Go's
sysmon thread and the scheduler's idle paths are apart from the worker;
kernel samples are split by the syscall they are under. Prints each share
in % of the samples, largest first. docs/BENCHMARKS.md says how it is read.
"""
import collections
import subprocess
import sys

SCHED = ("runtime.park_m", "runtime.findRunnable", "runtime.stopm", "runtime.startm",
         "runtime.schedule", "runtime.mstart")


def share(frames):
    s = " ".join(frames)
    leaf = frames[0]
    kern = leaf.endswith("[k]")
    side = " (kernel)" if kern else " (user)"
    if "runtime.sysmon" in s:
        return "Go runtime: sysmon"
    if any(x in s for x in SCHED) and "bridge.(*Worker)" not in s:
        return "Go runtime: scheduler, outside the worker"
    if "policy.(*Waiter).Park" in s or "epoll_pwait" in s:
        return "park: epoll and the wakeup" + side
    if "tap.(*Queue).writev" in s or "tap.init.func1" in s or "tap.(*Queue).rawWritev" in s:
        return "TAP writev" + side
    if "tap.(*Queue).Read" in s and kern:
        return "TAP read (kernel)"
    if kern:
        return "other kernel"
    if "vnet.Sum" in leaf or "vnet.sumChain" in leaf:
        return "user: checksums (vnet.Sum)"
    if "Coalesce" in s or "memeqbody" in leaf:
        return "user: coalescer, its checksums apart"
    if "memmove" in leaf or "memcpy" in leaf:
        return "user: copies"
    if "vnet.(*Super)" in s or "vnet.Checksum" in s:
        return "user: split, its checksums apart"
    if leaf.startswith(("kb_", "rte_", "common_ring", "bucket_", "_cgo_")) or "mempool" in leaf:
        return "user: burst core C, DPDK"
    if any(x in leaf for x in ("cgocall", "asmcgocall", "entersyscall", "exitsyscall")):
        return "user: cgo and syscall entry and exit"
    if "bridge.(*Worker)" in s or "tap.(*Queue)" in s or "ring.(*" in s:
        return "user: the worker's Go (bridge, tap, ring)"
    return "user: the rest"


def main():
    out = subprocess.run(["perf", "script", "-i", sys.argv[1], "-F", "ip,sym,dso"],
                         capture_output=True, text=True, check=True).stdout
    shares, total = collections.Counter(), 0
    for block in out.split("\n\n"):
        frames = []
        for line in block.strip().split("\n"):
            f = line.split(None, 1)
            if len(f) < 2 or " (" not in f[1]:
                continue
            sym, dso = f[1].rsplit(" (", 1)
            frames.append(sym + (" [k]" if "kernel" in dso else ""))
        if frames:
            total += 1
            shares[share(frames)] += 1
    for name, n in shares.most_common():
        print("%5.1f%%  %s" % (100 * n / total, name))
    print("%d samples" % total)


if __name__ == "__main__":
    main()
