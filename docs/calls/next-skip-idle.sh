#!/usr/bin/env bash
# Prepared (not run). MEGAMOE_SKIP_IDLE (branch skip-idle): the M-grouped kernels skip the wgmma of a consumer
# warpgroup whose 64 rows of a tile all lie past the expert's end; one binary, the knob per process (default off).
# What it tests: whether the idle halves' MMAs on padding rows (the rows past an expert's end, which are the next
# expert's data, multiplied in full and discarded) cost energy under the 700 W cap. 2026-12-05 call 3 found every
# GEMM at the cap (its time is its energy a launch) and the forward GEMMs 4-7% fewer joules a launch with balanced
# routing (no partial m-tiles) than with random routing; at 30B (~1024 +- 32 rows an expert) about half the experts'
# last m-tile holds <= 64 rows, so one of the two consumer warpgroups only computes padding there (~3% of the
# M-grouped tensor work). The knob reaches the cooperative consumers (plain GEMM1, GEMM2 plain and scattered, dh, dx,
# the cluster forms) and the epilogue-warp kernels (GEMM1 + SwiGLU `_ew7` / `_ew7_mv`, the layer's default; dh +
# SwiGLU backward `_ew7` / `_ew`); not the ping-pong SwiGLU backward, the persistent forward, FP8 or the weight
# gradients.
# Prediction: the M-grouped GEMMs 1-3% fewer joules a launch and so 1-3% faster sustained with the knob (GEMM1,
# GEMM1 + SwiGLU, GEMM2, dh, dh + SwiGLU backward, dx); the weight gradients (dW1, dW2: not touched) unchanged
# within the noise (~1%); the layer's sustained step ~1-2% faster. Against it: the old alternating measurement
# (seventeenth session, ncu per launch, base and new alternating twice) found GEMM2 -2.3% / -0.3%, dx -1.2% /
# +0.9%, and GEMM1 + SwiGLU (the cooperative `_mv`, then the layer's form) 2.5% SLOWER: with one warpgroup issuing,
# a tile's loads (48 KB a k-step, unchanged) need twice the L2 rate. That was time at free clocks; this is energy
# under the cap (the loads' energy stays, the MMAs' goes). The noise: unchanged kernels moved up to 0.8% between
# two soaked runs in call 3; each window's cuBLAS line (same process, right after ours) is the control, and the
# `SKIP` table at the end gives both off -> on. If ours move <= 0.5% beyond cuBLAS's, the knob stays off and the
# padding rows' MMAs are not the energy lever.
# Binaries .dev/b40/skip (branch skip-idle; `BDIR=.dev/b40 bash docs/calls/2026-12-04c-build.sh skip grouped_gemm
# layer_forward layer_backward`). The tests first (the knob on and off bitwise: grouped_gemm whole, with its
# skip_idle_* and the bad-offsets tests under the knob; the layer's skip_idle_* tests), then the gemm bench at 30B
# soaked (MEGAMOE_SOAK=3: each GEMM's alternating line, then 3 s of ours and 3 s of cuBLAS's back to back) knob off
# then on, then the layer soaked (6 s a weight-gradient type) off then on; the same MEGAMOE_SEED (routing draw) in
# every bench; nvidia-smi every 100 ms beside the benches as in 2026-12-05a-call3.sh; benches/energy.py per file and a
# table off -> on. Everything raw in $OUT/r.tgz (a call returns at most 8 files).
# Command `bash docs/calls/next-skip-idle.sh`, carry [".dev/b40"], expected ~6.5-8 min (under 9).
. "$(dirname "$0")/prelude.sh" b40
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b40/skip
t() { local n=$1 to=$2; shift 2; timeout $to $B/$n "$@" --include-ignored --test-threads=1 > $OUT/r/t_$n.txt 2>&1
  echo "== $n $* rc $? at $(el) s: $(grep 'test result' $OUT/r/t_$n.txt)"
  grep -E "FAILED|panicked|\.\.\. $" $OUT/r/t_$n.txt | cut -c1-300 | head -6; }
t grouped_gemm 170
t layer_forward 40 skip_idle
t layer_backward 120 skip_idle --nocapture
echo "layer_backward configurations bitwise equal: $(grep -c 'bitwise the same with the idle halves skipped' $OUT/r/t_layer_backward.txt) (40 expected)"
# a bench's timeout: `want` s, less if the call's 575 s would not leave `rest` s for the benches after it (at least 5)
to() { local l=$(( 575 - $(el) - $2 )); [ $l -lt 5 ] && l=5; [ $l -lt $1 ] && echo $l || echo $1; }
export MEGAMOE_SEED=20261206
python3 -c 'import subprocess,time; t=time.time(); s=subprocess.run(["nvidia-smi","--query-gpu=timestamp","--format=csv,noheader"],capture_output=True,text=True).stdout.strip(); print(t, "|", s)' > $OUT/r/clock.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 > $OUT/r/smi.csv &
smi=$!
for v in 0 1; do
  MEGAMOE_SKIP_IDLE=$v MEGAMOE_SOAK=3 MEGAMOE_BENCH_ONLY=30B timeout $(to 115 $(( 160 + 115 * (1 - v) ))) $B/gemm --bench \
    > $OUT/r/gemm_$v.txt 2>&1
  echo "== gemm 30B soaked, MEGAMOE_SKIP_IDLE=$v rc $? at $(el) s ($(grep -m1 '^MEGAMOE_SKIP_IDLE' $OUT/r/gemm_$v.txt))"
done
for v in 0 1; do
  MEGAMOE_SKIP_IDLE=$v MEGAMOE_SOAK=6 MEGAMOE_BENCH_ONLY=30B timeout $(to 80 $(( 80 * (1 - v) ))) $B/layer --bench \
    > $OUT/r/layer_$v.txt 2>&1
  echo "== layer 30B soaked, MEGAMOE_SKIP_IDLE=$v rc $? at $(el) s ($(grep -m1 '^MEGAMOE_SKIP_IDLE' $OUT/r/layer_$v.txt))"
done
kill $smi
for v in 0 1; do
  echo "-- gemm, MEGAMOE_SKIP_IDLE=$v (alternating with cuBLAS)"
  alt_summary $OUT/r/gemm_$v.txt
  grep -E "FAILED|rel err [0-9.e+-]+ .*all written: false" $OUT/r/gemm_$v.txt | cut -c1-200 | head -4
  grep -E "FAILED|panicked" $OUT/r/layer_$v.txt | cut -c1-200 | head -4
done
grep -h "^RESULT megamoe forward+backward (z saved" $OUT/r/layer_0.txt $OUT/r/layer_1.txt | cut -c1-200
for f in gemm_0 gemm_1 layer_0 layer_1; do
  python3 ../benches/energy.py $OUT/r $f.txt | sed -E 's/Qwen3-30B-A3B //' > $OUT/r/energy_$f.txt
done
# off -> on per soak window: time and joules a launch (or step), and the mean power
python3 - "$OUT/r" <<'EOF'
import re, sys
d = sys.argv[1]
pat = re.compile(r"ENERGY (.*): ([\d.]+) us a (\w+), \d+ samples, mean (\d+) W")
def read(f):
    out = {}
    for line in open(f"{d}/{f}"):
        m = pat.match(line)
        if m:
            # joules a launch from the time and the mean power (energy.py rounds them to 0.01 J)
            us, w = float(m.group(2)), int(m.group(4))
            out[m.group(1)] = (us, w * us / 1e6, w)
    return out
for kind in ("gemm", "layer"):
    off, on = read(f"energy_{kind}_0.txt"), read(f"energy_{kind}_1.txt")
    for name in off:
        if name in on:
            (u0, j0, w0), (u1, j1, w1) = off[name], on[name]
            print(f"SKIP {name}: {u0:.1f} -> {u1:.1f} us ({100 * (u1 / u0 - 1):+.1f}%), {j0:.3f} -> {j1:.3f} J "
                  f"({100 * (j1 / j0 - 1):+.1f}%), {w0} -> {w1} W")
EOF
echo "total $(el) s"
