#!/usr/bin/env bash
# Prepared in the twenty-second session as next-*.sh; run unchanged as 2026-12-04g call 4 (twenty-third session, docs/RESULTS.md). Energy per step, ours against PyTorch's: the 30B forward +
# backward (z saved) back to back for 6 s each (MEGAMOE_SOAK: f32 and bf16 weight gradients; PyTorch's
# torch._grouped_mm layer, bf16), nvidia-smi sampling power and SM clock every 100 ms beside the runs; each SOAK
# window's mean power and clock, and joules per step = mean power x time per step. The sustained step is
# power-bound (2026-12-04f call 4: one pass 6.6 ms, sustained 7.4-7.9): this says how much of the 2x against
# PyTorch is energy. Binary .dev/b30/main/layer (main with the soak option; rebuild: BDIR=.dev/b30 bash
# docs/calls/2026-12-04c-build.sh main). Command `bash docs/calls/2026-12-04g-call4.sh`, carry [".dev/b30"] (~2.5 min).
. "$(dirname "$0")/prelude.sh" b30
python3 -c 'import subprocess,time; t=time.time(); s=subprocess.run(["nvidia-smi","--query-gpu=timestamp","--format=csv,noheader"],capture_output=True,text=True).stdout.strip(); print(t, "|", s)' > $OUT/r/clock.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 > $OUT/r/smi.csv &
smi=$!
MEGAMOE_SOAK=6 MEGAMOE_BENCH_ONLY=30B timeout 150 b30/main/layer --bench > $OUT/r/layer.txt 2>&1
echo "== layer rc $? at $(el) s"
MEGAMOE_SOAK=6 MEGAMOE_TORCH_LOOP=0 MEGAMOE_BENCH_ONLY=30B PYTHONUNBUFFERED=1 timeout 120 python3 ../benches/torch_layer.py > $OUT/r/torch.txt 2>&1
echo "== torch rc $? at $(el) s"
kill $smi
grep -h "^SOAK\|^RESULT megamoe forward+backward (z saved\|^RESULT pytorch torch._grouped_mm forward+backward" $OUT/r/layer.txt $OUT/r/torch.txt | cut -c1-200
python3 - "$OUT/r" <<'P'
import re, sys, datetime as dt
d = sys.argv[1]
def parse(s):
    return dt.datetime.strptime(s.strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=dt.timezone.utc).timestamp()
t, s = open(f"{d}/clock.txt").read().split("|")
off = float(t) - parse(s)
samples = []
for line in open(f"{d}/smi.csv"):
    f = [x.strip() for x in line.split(",")]
    try:
        samples.append((parse(f[0]) + off, float(f[1]), float(f[2])))
    except (ValueError, IndexError):
        pass
for path in ("layer.txt", "torch.txt"):
    for line in open(f"{d}/{path}"):
        m = re.match(r"SOAK (.*): (\d+) steps, ([\d.]+) us a step .* from ([\d.]+) to ([\d.]+)", line)
        if not m:
            continue
        us, t0, t1 = float(m.group(3)), float(m.group(4)), float(m.group(5))
        w = [x for x in samples if t0 + 1.0 <= x[0] <= t1]
        if not w:
            print(f"ENERGY {m.group(1)}: no samples"); continue
        p = sum(x[2] for x in w) / len(w)
        c = sorted(x[1] for x in w)
        print(f"ENERGY {m.group(1)}: {us:.0f} us a step, {len(w)} samples, mean {p:.0f} W, SM clock median "
              f"{c[len(c)//2]:.0f} MHz (min {c[0]:.0f}, max {c[-1]:.0f}), {p * us / 1e6:.2f} J a step")
P
echo "total $(el) s"
