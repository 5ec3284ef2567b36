#!/usr/bin/env python3
"""Where a kernel's warps stall, from `ncu --import R --page source --print-source sass --csv` (gzip or plain).

Prints the stall reasons over all samples, the samples per 100-instruction bucket (with the most executions of an
instruction in it, which tells the producer's code from the consumers' main loop and the once-a-tile epilogue), and
the instructions with the most samples. Usage: ncu_sass_stalls.py FILE [top] [profile]: a file with several profiled
launches (one "Kernel Name" header each) is split, and `profile` (0, 1, ..) picks one; the list is printed first.
"""
import collections, csv, gzip, sys

path = sys.argv[1]
top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
pick = int(sys.argv[3]) if len(sys.argv) > 3 else 0
rows = list(csv.reader((gzip.open if path.endswith(".gz") else open)(path, "rt")))
starts = [i for i, r in enumerate(rows) if len(r) > 1 and r[0] == "Kernel Name"]
if len(starts) > 1:
    print("profiles:", ", ".join(f"{j}: {rows[i][1]}" for j, i in enumerate(starts)))
ends = starts[1:] + [len(rows)]
rows = rows[starts[pick]:ends[pick]]
h = rows[1]
ix = {k: i for i, k in enumerate(h)}
data = [r for r in rows[2:] if len(r) >= len(h)]
num = lambda r, k: int((r[ix[k]] or "0").replace(",", ""))
stalls = [k for k in h if k.startswith("stall_") and "Not Issued" not in k]
total = sum(num(r, "# Samples") for r in data)
print(f"{rows[0][1]}: {len(data)} instructions, {total} samples")
reasons = collections.Counter({k: sum(num(r, k) for r in data) for k in stalls})
for k, v in reasons.most_common(10):
    print(f"  {k:24s} {v:8d} {100 * v / total:5.1f}%")
print("bucket  samples  max executed")
samples, executed = collections.Counter(), collections.Counter()
for i, r in enumerate(data):
    samples[i // 100] += num(r, "# Samples")
    executed[i // 100] = max(executed[i // 100], num(r, "Instructions Executed"))
for b in sorted(samples):
    if samples[b] > total / 200:
        print(f"{100 * b:6d} {samples[b]:8d} {executed[b]:10d}")
print("instruction  samples  executed  source  [top stalls]")
for i in sorted(range(len(data)), key=lambda i: -num(data[i], "# Samples"))[:top]:
    r = data[i]
    st = sorted(((num(r, k), k[6:]) for k in stalls), reverse=True)[:2]
    print(f"{i:6d} {num(r, '# Samples'):7d} {num(r, 'Instructions Executed'):9d}  {r[ix['Source']].strip()[:56]:56s} {st}")
