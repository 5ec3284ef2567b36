#!/usr/bin/env bash
# RUN in the thirty-second session as 2026-12-05g call 1 (an H100): docs/RESULTS.md 2026-12-05g, raw outputs docs/bench-2026-12-05g-call1-*.
# Thirty-first session (not run). The M-grouped GEMMs' run-time tile counter (branch gemm-dyn-ew7,
# docs/wip/gemm-dyn.patch, five commits): with MEGAMOE_GEMM_SCHED=dynamic every single-CTA M-grouped bf16 GEMM of the
# layer runs a `_dyn` kernel (grouped_gemm_bf16_dyn, grouped_gemm_bt_bf16_dyn: GEMM1 plain, GEMM2, dh plain, dx;
# grouped_gemm_swiglu_ew7_dyn / _ew7_mv_dyn: GEMM1 + SwiGLU; grouped_gemm_bt_dswiglu_ew7_dyn: dh + SwiGLU backward)
# that takes each next tile from a grid-wide counter instead of every grid-th, so the tiles in flight stay the next
# `grid` of the order however the blocks' paces drift. (The default kernels' SASS: the ew / ew7 ones identical to
# main's, the cooperative ones a predicate renamed.) Why: the H100 of 2026-12-05f
# gave 0.63-0.76 of cuBLAS at 235B (0.78 of cuBLAS's batched GEMM, 0.90 at 30B), worst where an expert's weights
# are largest (GEMM1 / dx: 25 MB; GEMM2 / dh: 12.6 MB, 0.76-0.87; at 30B 3-6 MB, fine): the suspect is the weights
# re-read from HBM once the static walk's blocks drift apart (each expert's B tiles then stay live over more than a
# wave, ~2-3 experts x 25 MB against the 50 MB L2), which the H100's slower HBM exposes.
# (1) tests: grouped_gemm's dyn_sched tests (bitwise the static walk; the counter left at the tile count; repeated
# launches re-zero it; the ew7 kernels' h, z, dz and partials), memcheck of one, grouped_gemm whole (the cooperative
# kernels' loops were split into produce_tile / consume_tile), layer_forward / layer_backward subsets with the knob
# (every M-grouped GEMM of the layer through a `_dyn` kernel);
# (2) the gemm bench at 235B alternating with cuBLAS: knob off, on, off again (the repeat bounds the drift); 30B off
# and on; (3) ncu (base clocks) of GEMM1 plain at 235B, two launches each, knob off and on, and cuBLAS's dense GEMM:
# DRAM bytes read (floor 5.1 GB: W1 3.2, x rows 1.07, C 0.8), L2 hit rate.
# Predicted if the suspect holds: off reads >= 2x the floor, on ~1.0-1.3x; 235B GEMM1 (plain and + SwiGLU), dx,
# GEMM2, dh (plain and + SwiGLU) 5-15% faster on (toward 30B's ratios), 30B level (+-1%). If off already reads ~1x, the suspect is wrong: then the 235B gap is
# not the weights' bytes (the tensor duty and stalls next).
# Binaries .dev/b54/dyn (in the gemm-dyn worktree: `BDIR=/work/main/.dev/b54 bash docs/calls/2026-12-04c-build.sh dyn
# grouped_gemm layer_forward layer_backward`). Command `bash docs/calls/next-gemm-dyn.sh`, carry [".dev/b54"]; ~8 min
# (bound 565 s).
. "$(dirname "$0")/prelude.sh" b54
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b54/dyn
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
t grouped_gemm 60 500 dyn_sched --nocapture
grep -h "rel err\|repeated" $OUT/r/t_grouped_gemm.txt | head -8
mv $OUT/r/t_grouped_gemm.txt $OUT/r/t_grouped_gemm_dyn.txt
timeout $(to 40 460) compute-sanitizer --tool memcheck --error-exitcode 3 $B/grouped_gemm kn_dyn_sched_many_tiles --exact \
  --include-ignored --test-threads=1 > $OUT/r/memcheck.txt 2>&1
echo "== memcheck rc $? at $(el) s: $(grep -E 'ERROR SUMMARY|test result' $OUT/r/memcheck.txt | tr '\n' ' ')"
t grouped_gemm 90 380
MEGAMOE_GEMM_SCHED=dynamic timeout $(to 60 330) $B/layer_forward ragged_shape half_the_experts_empty one_token \
  overlapped_gather_masked_save_z qwen3_30b_a3b_t4096 --include-ignored --test-threads=1 > $OUT/r/t_layer_forward_dyn.txt 2>&1
echo "== layer_forward (dyn) rc $? at $(el) s: $(grep 'test result' $OUT/r/t_layer_forward_dyn.txt)"
MEGAMOE_GEMM_SCHED=dynamic timeout $(to 70 270) $B/layer_backward ragged_shape one_token half_the_experts_empty \
  qwen3_30b_a3b_t1024_half_empty --include-ignored --test-threads=1 > $OUT/r/t_layer_backward_dyn.txt 2>&1
echo "== layer_backward (dyn) rc $? at $(el) s: $(grep 'test result' $OUT/r/t_layer_backward_dyn.txt)"
grep -hE "FAILED|panicked" $OUT/r/t_layer_*_dyn.txt | cut -c1-300 | head -6
for run in 235B:static:off 235B:dynamic:on 235B:static:off2 30B:static:off 30B:dynamic:on; do
  IFS=: read shape v name <<< "$run"
  MEGAMOE_GEMM_SCHED=$v MEGAMOE_BENCH_ONLY=$shape timeout $(to 60 110) $B/gemm --bench > $OUT/r/gemm_${shape}_$name.txt 2>&1
  echo "== gemm $shape $name rc $? at $(el) s ($(grep -m1 '^MEGAMOE_GEMM_SCHED' $OUT/r/gemm_${shape}_$name.txt))"
  alt_summary $OUT/r/gemm_${shape}_$name.txt | grep -v "dW"
done
m="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,launch__grid_size"
for run in static:'^grouped_gemm_bf16$' dynamic:'^grouped_gemm_bf16_dyn$' static:nvjet; do
  v=${run%%:*}; k=${run#*:}
  MEGAMOE_GEMM_SCHED=$v MEGAMOE_BENCH_ONLY=235B timeout $(to 90 0) ncu -k "regex:$k" --launch-skip 1 --launch-count 2 \
    --metrics "$m" --csv $B/gemm --bench > $OUT/r/ncu_$v.$(echo $k | tr -dc a-z_).csv 2> /dev/null
  echo "== ncu $v $k rc $? at $(el) s"
  grep -h '"dram__bytes\|"gpu__time\|"lts__t_sector_hit' $OUT/r/ncu_$v.$(echo $k | tr -dc a-z_).csv | awk -F'","' '{print $5, $(NF-2), $NF}' | cut -c1-160
done
echo "total $(el) s"
