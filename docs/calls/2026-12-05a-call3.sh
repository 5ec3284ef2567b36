#!/usr/bin/env bash
# Run in the twenty-sixth session (2026-12-05) as call 3, command `bash docs/calls/2026-12-05a-call3.sh; cd $OUT &&
# tar czf r.tgz r && rm -rf r` (then named next-soak-clusters.sh; the archive because a call returns at most 8
# files), KNOBS empty, carry [".dev/b38"]: 337 s; results in docs/RESULTS.md 2026-12-05.
# Prepared in the twenty-third session (not run). Energy per launch under sustained load, each GEMM of the 30B layer
# against cuBLAS's dense GEMM, single-CTA kernels against the 2-CTA cluster forms, and the layer likewise.
# Why: 2026-12-04g call 4 found the sustained 30B step power-bound (692 W, SM clock ~1440 MHz of 1980): its time
# is its energy. cuBLAS's kernels are 2-CTA clusters (2026-12-04f call 7); every cluster form of ours lost 2-3% in
# short alternating runs (at whatever clock those ran), but a cluster sharing an operand by multicast reads ~25%
# fewer L2 -> SM bytes per FLOP, which costs energy, not only time. So: under a soak, do the cluster forms take
# less energy per launch, and so less time, than the single-CTA ones?
# Predicted: (1) every soak window at the cap (>= 680 W) but perhaps the weight gradients' f32 epilogue phases;
# (2) ours / cuBLAS in sustained time within +-3% of the alternating ratio; (3) the clusters (`MEGAMOE_MC=ab`:
# `tiles::choose` ranks B sharing first, so the plain GEMM1, GEMM2, dh and dx run `_mcb`; GEMM1 + SwiGLU and dh +
# SwiGLU backward stay the single-CTA `_ew7` kernels, which have no cluster form (checked on the CPU, twenty-fourth
# session); `MEGAMOE_WGRAD_SCHED=clusters` for dW1 / dW2)
# take 2-5% fewer joules per launch than single-CTA, which under the cap makes them 0-3% faster sustained even
# where they were 2-3% slower alternating; the layer's sustained step 1-3% faster with them. If (3) holds, make
# the cluster forms the default (the weight gradients' then need a run-time pair schedule for skewed routing).
# Also the forward GEMMs soaked with balanced routing (every expert 1024 rows: no partial m-tiles): predicted 4-6%
# fewer joules a launch than random routing (the padding rows' MMAs, ~6% of the M-grouped tensor work, on real
# data); if so, zeroing or skipping them (per-expert A maps, as the weight gradients have) is worth building.
# Binaries: .dev/b38/all (branch next-all-dy-g, whose kernels at the knobs' defaults are main's with the guards; twenty-fifth session:
# so that the leads next-all-1.sh finds best can be soaked too, set in KNOBS, e.g.
# `KNOBS="MEGAMOE_WGRAD_SKEW=t2 MEGAMOE_GEMM_SKEW=t2" bash docs/calls/next-soak-clusters.sh`; empty: main's kernels).
# Rebuild as next-all-1.sh's header says. Command `bash docs/calls/next-soak-clusters.sh`, carry [".dev/b38"] (~7 min with the graph tests at the end).
. "$(dirname "$0")/prelude.sh" b38
export ${KNOBS:-MEGAMOE_KNOBS_NONE=1}
echo "knobs: ${KNOBS:-none}"
python3 -c 'import subprocess,time; t=time.time(); s=subprocess.run(["nvidia-smi","--query-gpu=timestamp","--format=csv,noheader"],capture_output=True,text=True).stdout.strip(); print(t, "|", s)' > $OUT/r/clock.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 > $OUT/r/smi.csv &
smi=$!
MEGAMOE_SOAK=3 MEGAMOE_BENCH_ONLY=30B timeout 150 b38/all/gemm --bench > $OUT/r/gemm.txt 2>&1
echo "== gemm single-CTA rc $? at $(el) s"
MEGAMOE_SOAK=3 MEGAMOE_MC=ab MEGAMOE_WGRAD_SCHED=clusters MEGAMOE_BENCH_ONLY=30B timeout 150 b38/all/gemm --bench > $OUT/r/gemm_mc.txt 2>&1
echo "== gemm clusters rc $? at $(el) s"
MEGAMOE_SOAK=3 MEGAMOE_SOAK_ONLY=GEMM MEGAMOE_BENCH_ROUTING=balanced MEGAMOE_BENCH_ONLY=30B timeout 90 b38/all/gemm --bench > $OUT/r/gemm_balanced.txt 2>&1
echo "== gemm balanced rc $? at $(el) s"
MEGAMOE_SOAK=6 MEGAMOE_BENCH_ONLY=30B timeout 120 b38/all/layer --bench > $OUT/r/layer.txt 2>&1
echo "== layer single-CTA rc $? at $(el) s"
MEGAMOE_SOAK=6 MEGAMOE_MC=ab MEGAMOE_WGRAD_SCHED=clusters MEGAMOE_BENCH_ONLY=30B timeout 120 b38/all/layer --bench > $OUT/r/layer_mc.txt 2>&1
echo "== layer clusters rc $? at $(el) s"
kill $smi
for f in gemm gemm_mc gemm_balanced; do
  echo "-- $f"
  grep -E "RESULT gemm-alternating" $OUT/r/$f.txt | sed -E "s/.*(fwd|bwd) ([^(]*(\([^)]*\))?) \((K|M)-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1 \2: \5 \6 \7/"
  grep -E "FAILED|rel err [0-9.e+-]+ .*all written: false" $OUT/r/$f.txt | cut -c1-200 | head -4
done
grep -h "^RESULT megamoe forward+backward (z saved" $OUT/r/layer.txt $OUT/r/layer_mc.txt | cut -c1-200
python3 ../benches/energy.py $OUT/r gemm.txt gemm_mc.txt gemm_balanced.txt layer.txt layer_mc.txt | sed -E 's/Qwen3-30B-A3B //'
# last (twenty-fifth session; a hang here costs no measurement): the CUDA-graph tests whole, not run since main
# gained the layer's policy pre-check, Saved's owner / completeness flags, the map cache's trim at a call's start
# and the EP layer's prepare pass (every tensor map of a call encoded before its first launch)
timeout 100 b38/all/graph --include-ignored --test-threads=1 > $OUT/r/graph.txt 2>&1
echo "== graph rc $? at $(el) s: $(grep 'test result' $OUT/r/graph.txt)"
grep -E "FAILED|panicked|\.\.\. $" $OUT/r/graph.txt | cut -c1-300 | head -6
echo "total $(el) s"
