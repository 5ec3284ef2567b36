#!/usr/bin/env bash
# Prepared in the twenty-first session (not run): docs/wip/wgrad-busiest-first.patch, the weight gradients' run-time
# schedule (a) taking the experts busiest first (every thread of the block ranks one expert by rows into shared
# memory, up to 256 experts; the counter's index i is tile i % per of the expert ranked i / per) and (b) with a
# helper review's fixes: the counter zeroed by the host before each launch (`gemm::launch_wgrad`, a memset node
# under capture) instead of reset by the last block (no launch depends on the one before), the next index asked
# for (relaxed) once the current tile's loads are issued, not before; a test accumulating three launches onto
# finite C (a tile taken twice would show). Also the first full GPU test run of the run-time schedule itself (landed
# in 1092134 with grouped_gemm and six layer_backward cases only): grouped_gemm (incl. a 300-expert case past the
# ranking's 256), fp8, ep, graph, layer_backward, all with the patch.
# Predicted: 30B Zipf 1.0 dW2 914 -> ~850 us (the host model: busiest-first ~0.1-0.4% over ideal, in expert order
# 1-5%), dW1 unchanged (~1600), uniform routing unchanged (+-1%).
# Binaries (built in the twenty-first session; if gone: `git apply docs/wip/wgrad-busiest-first.patch`,
# BDIR=.dev/b27 bash docs/calls/2026-12-04c-build.sh lpt grouped_gemm layer_backward ep graph fp8, `git checkout
# README.md host kernels-gpu tests`, then BDIR=.dev/b27 bash docs/calls/2026-12-04c-build.sh base, and remove
# .dev/b27/base/layer.gz): .dev/b27/lpt = main cb537e5 + the patch, .dev/b27/base = main cb537e5 (gemm).
# Command `bash docs/calls/next-wgrad-busiest-first.sh`, carry [".dev/b27"] (~8 min).
set -uo pipefail
cd "$(dirname "$0")/../../.dev"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/r
for f in b27/*/*.gz; do [ -f $f ] && gunzip -f $f && chmod +x ${f%.gz}; done
for v in lpt:zipf:1.0 base:zipf:1.0 lpt:random base:random; do
  b=${v%%:*}; rt=${v#*:}
  MEGAMOE_BENCH_ROUTING=$rt MEGAMOE_BENCH_ONLY=30B timeout 40 b27/$b/gemm --bench > $OUT/r/gemm_30B_${rt/:/}_$b.txt 2>&1
  echo "== gemm 30B $rt $b rc $? at $(el) s: $(grep 'rows per expert' $OUT/r/gemm_30B_${rt/:/}_$b.txt)"
  grep -E "RESULT gemm-alternating .*dW" $OUT/r/gemm_30B_${rt/:/}_$b.txt | sed -E "s/.*bwd ([^(]*(\([^)]*\))?) \(K-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1: \3 \4 \5/"
done
for t in grouped_gemm fp8 ep graph layer_backward; do
  timeout 175 b27/lpt/$t --include-ignored --test-threads=1 > $OUT/r/$t.txt 2>&1
  echo "== $t rc $? at $(el) s: $(grep 'test result' $OUT/r/$t.txt)"
  grep -E "FAILED|panicked" $OUT/r/$t.txt | cut -c1-300 | head -6
done
MEGAMOE_BENCH_ROUTING=zipf:1.0 MEGAMOE_BENCH_ONLY=30B timeout 80 b27/lpt/layer --bench > $OUT/r/layer_30B_zipf1.0.txt 2>&1
echo "== layer 30B zipf:1.0 rc $? at $(el) s: $(grep 'rows per expert' $OUT/r/layer_30B_zipf1.0.txt)"
grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z saved)" $OUT/r/layer_30B_zipf1.0.txt | cut -c1-160
echo "total $(el) s"
