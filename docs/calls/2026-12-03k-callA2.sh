# Session 22 (2026-12-03k) call A2: the rest of layer_backward (failed to start: --exact given twice; rerun in call B), then
# `bash next-patches.sh perf` (docs/calls/2026-12-03k-callA.sh): ncu WarpStateStats of dswiglu base vs new, per-kernel
# ncu at 30B, the 30B layer bench new then base.
set -uo pipefail
cd "$(dirname "$0")/bN"
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
s=$(date +%s)
skips=""; for t in backward_rejects_mismatched_buffers bf16_weight_gradients_half_empty bf16_weight_gradients_qwen3_30b_a3b_t1024 bf16_weight_gradients_ragged every_slot_on_one_expert half_the_experts_empty invalid_id_e_backward_writes_nothing invalid_id_minus_two_backward_writes_nothing nan_in_one_token_stays_in_what_it_touches one_token qwen3_30b_a3b_t1024_half_empty qwen3_30b_a3b_t256_all_on_one_expert; do skips="$skips --skip $t --exact"; done
timeout 200 ./layer_backward --include-ignored --test-threads=1 --exact $skips > $OUT/layer_backward_rest.txt 2>&1; echo "== layer_backward rest rc $? at $(( $(date +%s) - s )) s: $(grep 'test result' $OUT/layer_backward_rest.txt)"
grep -E "FAILED|panicked|^test " $OUT/layer_backward_rest.txt | cut -c1-300 | head -12
cd .. && bash next-patches.sh perf
