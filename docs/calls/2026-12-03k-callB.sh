#!/usr/bin/env bash
# Session 22 call B: the rest of layer_backward on the three patches (call A's 150 s timeout cut it at t4096), then one
# dh + SwiGLU-backward launch at 30B under ncu (full set, SASS source counters: where its warps stall).
set -uo pipefail
cd "$(dirname "$0")/bN"
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
s=$(date +%s)
skips=""; for t in backward_rejects_mismatched_buffers bf16_weight_gradients_half_empty bf16_weight_gradients_qwen3_30b_a3b_t1024 bf16_weight_gradients_ragged every_slot_on_one_expert half_the_experts_empty invalid_id_e_backward_writes_nothing invalid_id_minus_two_backward_writes_nothing nan_in_one_token_stays_in_what_it_touches one_token qwen3_30b_a3b_t1024_half_empty qwen3_30b_a3b_t256_all_on_one_expert; do skips="$skips --skip $t"; done
timeout 280 ./layer_backward --include-ignored --test-threads=1 --exact $skips > $OUT/layer_backward_rest.txt 2>&1; echo "== layer_backward rest rc $? at $(( $(date +%s) - s )) s: $(grep 'test result' $OUT/layer_backward_rest.txt)"
grep -E "FAILED|panicked|^test " $OUT/layer_backward_rest.txt | cut -c1-300 | head -12
export MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1
timeout 150 ncu --clock-control none -k regex:grouped_gemm_bt_dswiglu --launch-skip 2 --launch-count 1 \
  --set full --import-source no -o $OUT/prof ./layer --bench > $OUT/ncu_run.txt 2>&1; echo "ncu rc $? at $(( $(date +%s) - s )) s"
tail -3 $OUT/ncu_run.txt
ncu --import $OUT/prof.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
ncu --import $OUT/prof.ncu-rep --page source --print-source sass --csv > $OUT/ncu_sass.csv 2>&1
gzip $OUT/ncu_sass.csv; rm -f $OUT/prof.ncu-rep
grep -E "Duration|Warp Cycles Per Issued|Eligible|Issued Warp|No Eligible|L2 Cache Throughput|DRAM Throughput|Compute \(SM\)" $OUT/ncu_details.txt | head -20
echo "total $(( $(date +%s) - s )) s"
