#!/usr/bin/env bash
# Prepared in the twenty-sixth session (not run). A probe of data-dependent power: do MMAs on zero operands cost
# fewer joules? Every GEMM runs at the 700 W cap (docs/RESULTS.md 2026-12-05, call 3), so a kernel's time is its
# joules a launch; an expert's last m-tile multiplies its padding rows (the next expert's data) in full. If zero
# rows are much cheaper, per-expert A maps (branch a-maps, docs/calls/next-a-maps.sh: padding rows load as TMA
# zeros) save joules wherever there is padding; if not, only skipping the MMAs can (branch skip-idle,
# docs/calls/next-skip-idle.sh).
# The probe: the gemm bench with `MEGAMOE_PROBE_X=zero-halves` (x's rows in odd 64-row blocks zero: half of
# GEMM1's A rows; the references alike, so the checks still hold) against random x, GEMM1 (plain, and + SwiGLU)
# soaked 3 s a launch kind, twice each in the order random, probe, random, probe; nvidia-smi every 100 ms;
# benches/energy.py. This times on zeros on purpose: a probe, not a benchmark (no figure from it goes in README).
# Prediction: GEMM1 with half its A rows zero 3-8% fewer joules a launch (and time) than random x; cuBLAS's
# dense GEMM1 on the same x likewise (its own control). Known: an 8192^3 bf16 matmul on an H100 ran at 295 TFLOP/s
# on all-zero inputs against 257 on randn (H. He, thonking.ai, "Strangely, matrix multiplications on GPUs run
# faster when given predictable data", 2024): >= 13% with both operands zero, capped by the max clock. Scaled to
# the padding (~6% of the M-grouped rows against the probe's 50%), per-expert A maps would save ~0.12x the probe's
# joules: 0.4-1% if the probe gives 3-8%, so a-maps' soak decides only if the probe gives more than ~10%; under
# ~3%: zeros are not the lever, skip-idle (which drops the MMAs) is.
# Binary .dev/b41/main/gemm (main bab4cc3's gemm bench: `cargo bench --bench gemm --no-run`, stripped, gzipped).
# Run 2026-12-05b (call 1; docs/RESULTS.md). Was `bash docs/calls/next-energy.sh`, carry [".dev/b41"] (~2.5 min). Run it first, then next-skip-idle.sh
# (carry [".dev/b40"]) and next-a-maps.sh (carry [".dev/b42"]) back to back: ~20 min with the start.
. "$(dirname "$0")/prelude.sh" b41
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
python3 -c 'import subprocess,time; t=time.time(); s=subprocess.run(["nvidia-smi","--query-gpu=timestamp","--format=csv,noheader"],capture_output=True,text=True).stdout.strip(); print(t, "|", s)' > $OUT/r/clock.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 > $OUT/r/smi.csv &
smi=$!
for v in random zero-halves random zero-halves; do
  f=$OUT/r/gemm_${v}_$(el).txt
  MEGAMOE_PROBE_X=$v MEGAMOE_SEED=4242 MEGAMOE_SOAK=3 MEGAMOE_SOAK_ONLY=GEMM1 MEGAMOE_BENCH_ONLY=30B timeout 70 b41/main/gemm --bench > $f 2>&1
  echo "== gemm 30B x $v rc $? at $(el) s"
  grep -E "RESULT gemm-alternating" $f | grep GEMM1 | sed -E "s/.*(fwd|bwd) ([^(]*(\([^)]*\))?) \((K|M)-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1 \2: \5 \6 \7/"
  grep -E "PROBE|rel err [0-9.e+-]+ .*all written: false|FAILED" $f | cut -c1-200 | head -3
done
kill $smi
for f in $OUT/r/gemm_*.txt; do echo "-- $(basename $f)"; python3 ../benches/energy.py $OUT/r $(basename $f) | sed -E 's/Qwen3-30B-A3B //'; done
echo "total $(el) s"
