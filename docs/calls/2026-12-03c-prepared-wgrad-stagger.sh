#!/usr/bin/env bash
# RAN in the ninth session (2026-12-03, call D, docs/calls/2026-12-03d-callD.sh): rejected, see docs/RESULTS.md; kept for the record.
# Prepared 2026-12-03 (eighth session), not run: `git apply docs/wip/wgrad-stagger.patch`, `cargo xtask gpu-bundle
# .dev/bundle`, copy gemm and layer_backward into .dev/bS, this script to .dev/callS.sh; carry [".dev/bS",
# ".dev/callS.sh"]. Tests the synchronised-epilogue hypothesis of the weight gradients (docs/NOTES.md, next
# session item 4): odd blocks start MEGAMOE_WGRAD_STAGGER_NS late. Predicted, if the hypothesis holds: 30B dW1 /
# dW2 from ~0.72 toward 0.8+ of cuBLAS at a stagger of about half a tile (~6000 ns); no change if it does not.
set -uo pipefail
cd "$(dirname "$0")/bS"
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
MEGAMOE_WGRAD_STAGGER_NS=3000 timeout 150 ./layer_backward --include-ignored --test-threads=1 > $OUT/layer_backward.txt 2>&1
echo "layer_backward (stagger 3000 ns): $(grep 'test result' $OUT/layer_backward.txt | tail -1)"
for round in 1 2; do
  for ns in 0 3000 6000 9000; do
    MEGAMOE_WGRAD_STAGGER_NS=$ns MEGAMOE_BENCH_ONLY=30B timeout 60 ./gemm --bench > /tmp/g.txt 2>&1
    cat /tmp/g.txt >> $OUT/gemm_$ns.txt
    echo "== stagger $ns ns, round $round"; grep RESULT /tmp/g.txt | grep dW | sed 's/(sample rel err[^)]*)//; s/| rel err.*//' | cut -c1-150
  done
done
