#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's per-SASS-instruction stall samples.

Input: the CSV of `ncu --import REP --page source --print-source sass --csv` (one kernel; a .gz file is read as
well). Output: the samples by stall reason over the whole kernel, the instructions with the most samples (address,
SASS, samples, their two largest reasons), and the samples of the instructions around each opcode class that marks
a warp role (LDGSTS / UTMALDG: producers, HGMMA: consumers, UTMASTG / STG: epilogues, SYNCS: barrier waits), each
instruction charged to the class of the nearest marker on either side within WINDOW instructions (a wait is
next to it: just after the SYNCS it polls, or just before the instruction that needed the data).

    python3 benches/sass_stalls.py FILE [TOP] [WINDOW]
"""
import collections
import csv
import gzip
import sys

MARKERS = [("LDGSTS", "copies (LDGSTS)"), ("UTMALDG", "TMA loads"), ("HGMMA", "wgmma"), ("UTMASTG", "TMA stores"),
           ("STG", "global stores"), ("SYNCS", "mbarrier"), ("BAR", "named barrier"), ("ATOMG", "atomics")]


def rows(path):
    f = gzip.open(path, "rt") if path.endswith(".gz") else open(path)
    r = [x for x in csv.reader(f)]
    start = next(i for i, x in enumerate(r) if x and x[0] == "Address")
    return r[start], [x for x in r[start + 1:] if len(x) == len(r[start])]


def num(v):
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    window = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    head, body = rows(path)
    col = {h: i for i, h in enumerate(head)}
    reasons = [h for h in head if h.startswith("stall_") and "(Not Issued)" not in h]
    samples = "Warp Stall Sampling (All Samples)"
    total = sum(num(x[col[samples]]) for x in body)
    print(f"{path}: {len(body)} instructions, {total:.0f} samples")
    by_reason = collections.Counter()
    for x in body:
        for r in reasons:
            by_reason[r] += num(x[col[r]])
    print("by reason: " + ", ".join(f"{r[6:]} {100 * v / max(total, 1):.1f}%" for r, v in by_reason.most_common(8)))
    print(f"top {top} instructions:")
    order = sorted(range(len(body)), key=lambda i: -num(body[i][col[samples]]))
    for i in order[:top]:
        x = body[i]
        rs = sorted(((num(x[col[r]]), r[6:]) for r in reasons), reverse=True)[:2]
        print(f"  {x[col['Address']][-5:]} {num(x[col[samples]]) / max(total, 1) * 100:5.1f}%  "
              f"{' '.join(x[col['Source']].split())[:60]:60s} " + ", ".join(f"{n} {v:.0f}" for v, n in rs))
    # each instruction charged to the nearest role marker on either side (within `window`): a wait sits just after
    # the SYNCS it polls (its branch) or just before the instruction that needed the data
    marks = []
    for i, x in enumerate(body):
        words = x[col["Source"]].split()
        if words and words[0].startswith("@"):
            words = words[1:]
        opcode = words[0] if words else ""
        for op, name in MARKERS:
            if opcode.startswith(op):
                marks.append((i, name))
                break
    cls = [None] * len(body)
    j = 0
    for i in range(len(body)):
        while j + 1 < len(marks) and abs(marks[j + 1][0] - i) <= abs(marks[j][0] - i):
            j += 1
        if marks and abs(marks[j][0] - i) <= window:
            cls[i] = marks[j][1]
    by_cls = collections.Counter()
    for i, x in enumerate(body):
        by_cls[cls[i] or "other"] += num(x[col[samples]])
    print(f"by the nearest role marker (window {window}): "
          + ", ".join(f"{k} {100 * v / max(total, 1):.1f}%" for k, v in by_cls.most_common()))


if __name__ == "__main__":
    main()
