#!/usr/bin/env python3
"""Energy of each SOAK window: `python3 benches/energy.py DIR FILE...`.

DIR holds `smi.csv` (nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,
nounits -lms 100, run beside the benches) and `clock.txt` ("<unix s> | <nvidia-smi timestamp>", taken once at the
start: the offset between the two clocks). Each FILE (relative to DIR) is a bench's output with `SOAK` lines
("SOAK <what>: <n> steps|launches, <us> us a step|launch ... from <t0> to <t1> (unix s)"), printed by the layer and
GEMM benches and benches/torch_layer.py under MEGAMOE_SOAK. For each window, skipping its first second (the clock
settling): the mean power, the SM clock's median and range, and joules per step or launch = mean power x time.

`python3 benches/energy.py --compare DIR A B TAG` sets two of its outputs side by side (A and B: files in DIR of
`ENERGY` lines, e.g. a main binary's and a branch's soaks): per window B's time and joules against A's, and for a
megamoe window also its joules against the same run's cuBLAS window (`n`: drift between the runs removed); lines
`TAG <window>: ...`.
"""
import datetime as dt
import re
import sys


def parse(s):
    return dt.datetime.strptime(s.strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=dt.timezone.utc).timestamp()


def main():
    d, files = sys.argv[1], sys.argv[2:]
    t, s = open(f"{d}/clock.txt").read().split("|")
    off = float(t) - parse(s)
    samples = []
    for line in open(f"{d}/smi.csv"):
        f = [x.strip() for x in line.split(",")]
        try:
            samples.append((parse(f[0]) + off, float(f[1]), float(f[2])))
        except (ValueError, IndexError):
            pass
    pat = re.compile(r"SOAK (.*): (\d+) (?:steps|launches), ([\d.]+) us a (step|launch) .* from ([\d.]+) to ([\d.]+)")
    for path in files:
        for line in open(f"{d}/{path}"):
            m = pat.match(line)
            if not m:
                continue
            us, unit, t0, t1 = float(m.group(3)), m.group(4), float(m.group(5)), float(m.group(6))
            w = [x for x in samples if t0 + 1.0 <= x[0] <= t1]
            if not w:
                print(f"ENERGY {m.group(1)}: no samples")
                continue
            p = sum(x[2] for x in w) / len(w)
            c = sorted(x[1] for x in w)
            j = p * us / 1e6
            print(f"ENERGY {m.group(1)}: {us:.1f} us a {unit}, {len(w)} samples, mean {p:.0f} W, SM clock median "
                  f"{c[len(c) // 2]:.0f} MHz (min {c[0]:.0f}, max {c[-1]:.0f}), "
                  + (f"{j:.2f} J a {unit}" if j >= 0.1 else f"{j * 1e3:.1f} mJ a {unit}"))


def compare(d, a, b, tag):
    pat = re.compile(r"ENERGY (.*): ([\d.]+) us a (\w+), \d+ samples, mean (\d+) W")

    def read(f):
        out = {}
        try:
            lines = open(f"{d}/{f}").readlines()
        except OSError:
            return out
        for line in lines:
            m = pat.match(line)
            if m:
                us, w = float(m.group(2)), int(m.group(4))
                out[m.group(1)] = (us, w * us / 1e6, w)
        return out

    pct = lambda x, y: 100 * (x / y - 1)
    ea, eb = read(a), read(b)
    for name, (u0, j0, w0) in ea.items():
        if name not in eb:
            continue
        u, j, w = eb[name]
        c = name.replace(" megamoe", " cuBLAS dense")
        n = f" (n {pct(j / eb[c][1], j0 / ea[c][1]):+.1f}%)" if name.endswith(" megamoe") and c in ea and c in eb else ""
        print(f"{tag} {name}: {u0:.0f} us {j0:.3f} J {w0} W -> {u:.0f} us {pct(u, u0):+.1f}%, {j:.3f} J "
              f"{pct(j, j0):+.1f}%{n}, {w} W")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--compare":
        compare(*sys.argv[2:])
    else:
        main()
