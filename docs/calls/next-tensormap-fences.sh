#!/usr/bin/env bash
# Prepared in the twenty-ninth session (not run; branch tensormap-fences = docs/wip/tensormap-fences.patch, two
# commits, CPU-checked: check-kernels clean, registers / stack / spills unchanged in all 73 kernels). From a helper's
# memory-ordering audit of the kernels:
# (1) tensor maps the host copies into global memory are now acquired (`fence.proxy.tensormap::generic.acquire.sys
#     [map], 128`, as the CUDA Programming Guide asks) by every thread that copies through them, at the start of its
#     role; before, a map address the host's caches freed and reused for another map could in principle be read
#     through a stale cached descriptor (no test ever showed it);
# (2) ffn_fused (`Forward::Persistent`) makes its block agree on the routing error word at entry, which its own
#     timeouts can write during the launch (a possible hang of the block otherwise).
# The call: the GPU tests that run every kernel the fences touch (grouped_gemm, layer_forward incl. the persistent
# forward, layer_backward, graph, fp8), then the 30B gemm bench alternating with cuBLAS, the branch's (b48) then
# main's (b41), to see the fences cost nothing measurable (predicted: every GEMM within the bench's 1-2% noise).
# If all pass, `git am docs/wip/tensormap-fences.patch`.
# Command `bash docs/calls/next-tensormap-fences.sh`, carry [".dev/b41", ".dev/b48"]; expected ~8 min (bound 565 s).
. "$(dirname "$0")/prelude.sh" b48
for f in b41/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b48/tf
t grouped_gemm 70 470
t layer_forward 70 400
t layer_backward 120 280
t graph 40 240
t fp8 120 120
for who in tf main; do
  d=$B; [ $who = main ] && d=b41/main
  MEGAMOE_BENCH_ONLY=30B timeout $(to 60 $([ $who = tf ] && echo 60 || echo 0)) $d/gemm --bench > $OUT/r/gemm_$who.txt 2>&1
  echo "== gemm $who rc $? at $(el) s"; alt_summary $OUT/r/gemm_$who.txt
done
echo "total $(el) s"
