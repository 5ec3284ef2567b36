#!/usr/bin/env python3
"""Reads the wide FP8 kernel's timeline records (the fp8 bench with MEGAMOE_TIMELINE_DUMP=DIR writes them:
u64 little-endian [blocks][8 consumer warps][16 k-blocks][5 clocks], the kernel's layout) and tells how long
each column half holds the tensor pipe.

Clocks of warp w of a block, block kb: 0 after the stage's wait (the SASS reads it right after the mbarrier's
try-wait; the forty-sixth session's notes said "before", wrongly), 1 after half 0's wgmma wait, 2 after its
promotion (half 1 is issued right after), 3 after half 1's wait, 4 after its promotion (the probe1 timeline has no
promotion: its clocks 1, 2 and 3, 4 are back to back). Warps w and w + 4 (the two consumer warpgroups' warps on
one sub-partition) share the SM's clock, so their waits' returns, sorted, are the order in which the SM's halves
completed. A half's service = its completion - max(the previous completion on the SM, its issue): 256 cycles is
m64n128k128 e4m3 at the tensor cores' rate; half 1's issue is clock 2, half 0's clock 0 (an upper bound: its
issue follows ~40 instructions later). A lone half: half 1's issue to its wait's return when the other warpgroup
had no half in flight at its issue (the wgmma's latency with the pipe to itself).

usage: python3 benches/fp8w_timeline.py FILE.bin[.gz] [...]   (needs numpy)
"""
import gzip
import sys

import numpy as np


def load(path):
    raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    return np.frombuffer(raw, dtype="<u8").reshape(-1, 8, 16, 5).astype(np.int64)


def lone_halves(d):
    """Half 1's issue-to-return cycles when the other warpgroup of the sub-partition had nothing in flight."""
    out = []
    for b in range(d.shape[0]):
        for sp in range(4):
            ok = {g: [c for c in d[b, sp + 4 * g] if c[0] != 0 and not np.any(np.diff(c) < 0)] for g in (0, 1)}
            for g in (0, 1):
                other = [(c[0], c[1]) for c in ok[1 - g]] + [(c[2], c[3]) for c in ok[1 - g]]
                for c in ok[g]:
                    if not any(s <= c[2] < e for s, e in other):
                        out.append(c[3] - c[2])
    return out


def summary(path):
    d = load(path)
    serv = {0: [], 1: []}
    by_kb = {}
    kblock = []
    for b in range(d.shape[0]):
        for sp in range(4):
            ev = []
            for g in (0, 1):
                w = sp + 4 * g
                for kb in range(16):
                    c = d[b, w, kb]
                    if c[0] == 0 or np.any(np.diff(c) < 0):
                        continue
                    ev.append((c[1], 0, c[0], kb))
                    ev.append((c[3], 1, c[2], kb))
                    if kb + 1 < 16 and d[b, w, kb + 1, 0] > c[0]:
                        kblock.append(d[b, w, kb + 1, 0] - c[0])
            ev.sort()
            for i in range(1, len(ev)):
                done, h, issue, kb = ev[i]
                sv = done - max(ev[i - 1][0], issue)
                serv[h].append(sv)
                by_kb.setdefault((h, kb), []).append(sv)
    pct = lambda v: "/".join(str(int(x)) for x in np.percentile(np.array(v), [10, 50, 90]))
    print(f"{path}: {sum(len(v) for v in serv.values())} half completions")
    print(f"  k-block (a warp's clock 0 to the next's), median {int(np.median(kblock))} cycles")
    for h in (0, 1):
        print(f"  half {h}'s service, cycles 10/50/90%: {pct(serv[h])}")
    lone = lone_halves(d)
    if lone:
        print(f"  a lone half 1 (the other warpgroup idle at its issue), issue to return, cycles 10/50/90%: "
              f"{pct(lone)} over {len(lone)}")
    print("  medians by k-block (half 0, half 1): " + " ".join(
        f"{kb}:{int(np.median(by_kb[(0, kb)]))},{int(np.median(by_kb[(1, kb)]))}"
        for kb in range(16) if (0, kb) in by_kb and (1, kb) in by_kb))


if __name__ == "__main__":
    for p in sys.argv[1:]:
        summary(p)
