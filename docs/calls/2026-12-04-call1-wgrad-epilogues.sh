#!/usr/bin/env bash
# Next session's first call (prepared 2026-12-03, not run): docs/wip/wgrad-epilogues.patch applied, bundle built from it
# (`cargo xtask gpu-bundle .dev/bundle`), copied to .dev/call1.sh, carry [".dev/bundle", ".dev/call1.sh"].
# One binary, three weight-gradient epilogues: MEGAMOE_WGRAD=tma (the copy engine, default), =stg (each warp
# stages a box, reads it back by rows, 16-byte global stores), =shfl (16-byte global stores from registers after
# a lane-pair shuffle). Tests first (grouped_gemm with wgrad_epilogues_match, bitwise; the layer backward with
# stg, EP with shfl), then the gemm bench tma / stg / shfl twice, then the 30B layer tma / stg / shfl twice.
# Predicted (probe, docs/RESULTS.md 2026-12-03 seventh session: waits on the copy engine ~11% of dW1 / dW2,
# staging writes ~5%): stg removes most of the 11% and adds shared-memory reads (~3-5%): dW1 / dW2 5-8% faster;
# shfl removes the staging too but writes 16 rows x 32 bytes per warp instruction (16 lines, against 4): unknown.
set -uo pipefail
cd "$(dirname "$0")/bundle"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/t
for t in grouped_gemm layer_backward ep; do
  t0=$(date +%s)
  w=stg; [ $t = grouped_gemm ] && w=tma; [ $t = ep ] && w=shfl
  MEGAMOE_WGRAD=$w timeout 150 ./$t --include-ignored --test-threads=1 > $OUT/t/$t.txt 2>&1; rc=$?
  echo "== $t (MEGAMOE_WGRAD=$w) rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/t/$t.txt | tail -1)"
  grep -E "FAILED|panicked" $OUT/t/$t.txt | head -5
done
(cd $OUT && tar czf tests.tgz t && rm -r t)
for round in 1 2; do
  for w in tma stg shfl; do
    late 360 && break
    t0=$(date +%s); echo "== gemm $w round $round ($(( t0 - start )) s)"
    MEGAMOE_WGRAD=$w timeout 75 ./gemm --bench > /tmp/g.txt 2>&1; echo "rc $? in $(( $(date +%s) - t0 )) s"
    cat /tmp/g.txt >> $OUT/gemm_$w.txt
    grep RESULT /tmp/g.txt | grep -E "dW" | sed 's/(sample rel err[^)]*)//; s/(throughput; target[^)]*)//; s/| rel err.*//; s/RESULT gemm Qwen3-//' | cut -c1-160
  done
done
for round in 1 2; do
  for w in tma stg shfl; do
    late 480 && break
    echo "== layer $w round $round ($(( $(date +%s) - start )) s)"
    MEGAMOE_WGRAD=$w MEGAMOE_BENCH_ONLY=30B timeout 45 ./layer --bench >> $OUT/layer_$w.txt 2>&1; echo "rc $?"
    tail -4 $OUT/layer_$w.txt | grep -hE "^RESULT" | cut -c1-110
  done
done
echo "total $(( $(date +%s) - start )) s"
