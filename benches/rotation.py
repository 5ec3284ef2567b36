#!/usr/bin/env python3
"""Tabulate A/B rotations of the gemm and layer benches: one row per kernel, one column per configuration.

    python3 benches/rotation.py DIR [DIR ...]

Reads every `gemm_<config>_<seconds>.txt` and `layer_<config>_<seconds>.txt` under the folders (the names the
device-call scripts give the bench outputs, e.g. docs/calls/next-all-1.sh: `gemm_w2_g2_dynamic_ew7_random_37.txt`;
the trailing number, the call's elapsed seconds, is dropped so repeats of a configuration group together). For
each GEMM (`RESULT gemm-alternating` lines) it prints ours/cuBLAS per configuration, the runs' values in run
order and their median, and our time's median; for the layer (`RESULT megamoe forward` / `forward+backward`
lines) the microseconds. Each configuration's median time against the first configuration's (the baseline:
run it first in the rotation). Nothing is judged here: the ratios are what the bench printed, medians of 20 alternating launches each.
"""
import os
import re
import statistics
import sys
from collections import OrderedDict, defaultdict

GEMM = re.compile(
    r"RESULT gemm-alternating \S+ (?P<name>.+?) \((?:M|K)-grouped\).*?megamoe (?P<ours>\d+) us.*?"
    r"cuBLAS dense (?P<blas>\d+) us.*?ours/cuBLAS (?P<ratio>[0-9.]+)"
)
LAYER = re.compile(r"RESULT megamoe (?P<name>forward(?:\+backward)?(?: \([^)]*\))?) Qwen\S* T=\d+: (?P<us>\d+) us")


def config_of(fname):
    """`gemm_w2_g2_dynamic_ew7_random_37.txt` -> ('gemm', 'w2_g2_dynamic_ew7_random')."""
    stem = fname[: -len(".txt")]
    kind, _, rest = stem.partition("_")
    rest = re.sub(r"_\d+$", "", rest)
    return kind, rest


def collect(dirs):
    # (kind, kernel) -> config -> [values in run order]
    table = defaultdict(lambda: OrderedDict())
    configs = OrderedDict()
    files = []
    # run order: the folders as given (one a call), then the elapsed seconds in the names
    for n, d in enumerate(dirs):
        for f in os.listdir(d):
            m = re.search(r"_(\d+)\.txt$", f)
            if f.endswith(".txt") and (f.startswith("gemm_") or f.startswith("layer_")) and m:
                files.append((n, int(m.group(1)), d, f))
    for _, _, d, f in sorted(files):
        kind, cfg = config_of(f)
        configs.setdefault((kind, cfg), None)
        for line in open(os.path.join(d, f), errors="replace"):
            if kind == "gemm":
                m = GEMM.search(line)
                if m:
                    v = (float(m.group("ratio")), float(m.group("ours")))
                    table[(kind, m.group("name"))].setdefault(cfg, []).append(v)
            else:
                m = LAYER.search(line)
                if m:
                    table[(kind, m.group("name"))].setdefault(cfg, []).append((None, float(m.group("us"))))
    return table, [c for c in configs]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    table, configs = collect(sys.argv[1:])
    if not table:
        sys.exit("no bench outputs found (gemm_*_N.txt / layer_*_N.txt)")
    for kind in ("gemm", "layer"):
        cfgs = [c for k, c in configs if k == kind]
        rows = [(name, per) for (k, name), per in table.items() if k == kind]
        if not rows:
            continue
        what = "ours/cuBLAS per run -> median; our us median" if kind == "gemm" else "us per run -> median"
        print(f"== {kind}: {what}; the time against the baseline's ({cfgs[0]}: < 1 is faster)")
        for name, per in rows:
            print(f"  {name}")
            base = statistics.median(u for _, u in per[cfgs[0]]) if cfgs[0] in per else None
            for c in cfgs:
                if c not in per:
                    continue
                v = per[c]
                us = statistics.median(u for _, u in v)
                rel = f"  {us / base:.3f}x baseline" if base else ""
                if kind == "gemm":
                    runs = " ".join(f"{r:g}" for r, _ in v)
                    head = f"{runs:20s} -> {statistics.median(r for r, _ in v):.3f}; {us:.0f} us"
                else:
                    head = " ".join(f"{u:.0f}" for _, u in v) + f" -> {us:.0f} us"
                print(f"    {c:36s} {head}{rel}")


if __name__ == "__main__":
    main()
