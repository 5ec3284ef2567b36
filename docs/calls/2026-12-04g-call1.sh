#!/usr/bin/env bash
# Prepared in the twenty-second session as next-*.sh; run unchanged as 2026-12-04g call 1 (twenty-third session, docs/RESULTS.md). Call A of docs/wip/wgrad-expert-maps.patch: the GPU tests.
# The patch: the K-grouped weight gradients load A and B through tensor maps of each expert's own rows
# (`wgrad_expert_maps`, a small kernel launched just before each `grouped_wgrad_*`, under the device's lock with
# the tile counter's zeroing: copies the whole-buffer map, `tensormap.replace` of its address and row extent,
# `fence.proxy.tensormap::generic.release`; the producer acquires each expert's maps before its loads), so the copy
# engine fills the rows past an expert's end with zeros: the consumers' zeroing of those rows and the barrier
# between the two consumer warpgroups are gone (the probe without them, 2026-12-04f call 10: 1.5-4.7% faster).
# PTX ISA 8.3 for the whole module (tools/llbc-link +ptx83; SASS unchanged but register names in 9 non-default or
# FP8 kernels: grouped_gemm_fp8*, _swiglu_mv, _bt_dswiglu(_mc), _bf16_mcb). New tests: rows past an expert's end
# (the next experts' rows NaN, rows past the last NaN) never reach a gradient (f32, f32 accumulating, bf16); two
# weight gradients back to back on different buffers and permuted row counts each read their own maps (a stale map
# would read the other buffers or NaN rows). A helper reviewed the patch (no blocking bug; its points applied: the
# maps acquired once per expert in a block, not per tile, then prefetched; the back-to-back test; the 4096-expert
# limit one constant). The clusters and k16 patches on top: call A2 (2026-12-04g-call2.sh).
# Binaries .dev/b29/maps (built in the twenty-second session from main 8c8f692 + the patch, the same code as 25b4c93 + it; if gone: `git am
# docs/wip/wgrad-expert-maps.patch`, BDIR=.dev/b29 bash docs/calls/2026-12-04c-build.sh maps grouped_gemm
# layer_backward layer_forward ep graph fp8, then `git reset --hard` back to main). Command `bash docs/calls/2026-12-04g-call1.sh`,
# carry [".dev/b29"] (~7.5 min).
. "$(dirname "$0")/prelude.sh" b29
for v in maps/grouped_gemm maps/fp8 maps/ep maps/graph maps/layer_backward maps/layer_forward; do
  t=${v/\//_}
  timeout 175 b29/$v --include-ignored --test-threads=1 > $OUT/r/$t.txt 2>&1
  echo "== $v rc $? at $(el) s: $(grep 'test result' $OUT/r/$t.txt)"
  grep -E "FAILED|panicked" $OUT/r/$t.txt | cut -c1-300 | head -6
done

echo "total $(el) s"
