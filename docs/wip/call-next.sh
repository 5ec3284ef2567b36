#!/usr/bin/env bash
# One device call for docs/wip/sched-smem-and-clusters.patch (four commits: scheduler offsets in shared memory and
# the 2-CTA cluster variants; megamoe::tiles; the row-scattered epilogue, whose tests are in ./grouped_gemm) and
# docs/wip/wgrad-s3.patch (the weight gradients with a 3-stage ring and 4 staging boxes: MEGAMOE_WGRAD=s3), in
# that order (`git am` both). Modes: new = both patches, experiments off; exp = new with MEGAMOE_MC=1 and
# MEGAMOE_WGRAD=s3 (different kernels: the gemm bench separates them); old = main. Before it, here: main's benches into
# .dev/old (`cargo xtask gpu-bundle .dev/oldb && mkdir -p .dev/old && cp .dev/oldb/gemm .dev/oldb/layer .dev/old/
# && rm -r .dev/oldb`), then `git am docs/wip/sched-smem-and-clusters.patch docs/wip/wgrad-s3.patch`, `cargo
# xtask gpu-bundle .dev/bundle`, copy this script to .dev/ and run `bash .dev/call-next.sh` with carry [".dev"]
# (both bundles fit: ~42 + ~9 MiB). (3) the weight gradients' 3-stage ring with 4 staging boxes (exp) against
# 4 stages and 2 boxes (new, old).
# Questions: (1) the shared-memory scheduler offsets, new vs old alternating twice (session 5: 30B +1%, 235B
# GEMM2 / dh -4..-7% in one sample each: noise or real?); (2) the 2-CTA cluster variants of the M-grouped
# kernels (MEGAMOE_MC=1: A multicast when n_tiles is even) with CTA-scope remote arrivals. Session 5's dswiglu
# version arrived with .release.cluster, which compiled to MEMBAR.ALL.GPU + ERRBAR + CGAERRBAR before every
# arrive (each k-step, each consumer warp), and waited with .acquire.cluster (a CCTL.IVALL, an L1 invalidation,
# after every producer wait): half speed (1604 vs 789 us at 30B). This version has neither in its loops.
set -uo pipefail
cd "$(dirname "$0")/bundle"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
run() { local n=$1 to=$2; shift 2; local t0=$(date +%s); echo "== $n ($(( t0 - start )) s)"
  timeout $to "$@" > $OUT/$n.txt 2>&1; local rc=$?; echo "rc $rc in $(( $(date +%s) - t0 )) s"
  grep -E "^test .*(FAILED|ignored)$|test result|panicked|FAILED|error" $OUT/$n.txt | grep -v "^test .* ok$" | head -12; return $rc; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
run t_grouped_gemm 40 ./grouped_gemm --include-ignored --test-threads=1
MC=0; MEGAMOE_DEBUG=1 MEGAMOE_MC=1 MEGAMOE_WGRAD=s3 run t_grouped_gemm_exp 60 ./grouped_gemm --include-ignored --test-threads=1 --nocapture && MC=1
grep -h "active clusters" $OUT/t_grouped_gemm_exp.txt | sort -u | head -5
modes="new old new old"; [ $MC = 1 ] && modes="new exp old new exp old"
for v in $modes; do
  late 300 && break
  b=./gemm; [ $v = old ] && b=../old/gemm
  t0=$(date +%s); echo "== gemm $v ($(( t0 - start )) s)"
  X=0; W=; [ $v = exp ] && { X=1; W=s3; }
  MEGAMOE_MC=$X MEGAMOE_WGRAD=$W timeout 60 $b --bench > /tmp/g.txt 2>&1; echo "rc $? in $(( $(date +%s) - t0 )) s"
  cat /tmp/g.txt >> $OUT/gemm_$v.txt
  grep RESULT /tmp/g.txt | grep -v "torch" | sed 's/ (sample.*ours/ ours/; s/(throughput.*//; s/RESULT gemm Qwen3-//' | cut -c1-150
done
for v in new exp old; do
  late 370 && break
  [ $v = exp ] && [ $MC = 0 ] && continue
  b=./layer; [ $v = old ] && b=../old/layer
  echo "== layer $v ($(( $(date +%s) - start )) s)"
  X=0; W=; [ $v = exp ] && { X=1; W=s3; }
  MEGAMOE_MC=$X MEGAMOE_WGRAD=$W MEGAMOE_BENCH_ONLY=30B timeout 40 $b --bench > $OUT/layer_$v.txt 2>&1; echo "rc $?"
  grep -hE "^RESULT" $OUT/layer_$v.txt | cut -c1-120
done
W=; [ $MC = 1 ] && W=s3
late 430 || MEGAMOE_MC=$MC MEGAMOE_WGRAD=$W run t_layer_backward 110 ./layer_backward --include-ignored --test-threads=1
late 520 || MEGAMOE_MC=$MC MEGAMOE_WGRAD=$W run t_layer_forward 60 ./layer_forward --include-ignored --test-threads=1
echo "total $(( $(date +%s) - start )) s"
