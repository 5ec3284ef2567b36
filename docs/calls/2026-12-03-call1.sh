#!/usr/bin/env bash
# One device call for the two wip patches, applied in this order (the first has six commits: its sixth adds
# gemm::with_clusters and GPU tests that the cluster variants match the single-CTA kernels bit for bit):
#   docs/wip/sched-smem-and-clusters.patch (commits: scheduler offsets in shared memory and 2-CTA cluster
#     variants sharing A (_mc); megamoe::tiles; the row-scattered epilogue, whose tests are in ./grouped_gemm;
#     the cluster walk as pure scheduler logic; cluster variants sharing B (_mcb) of the cooperative kernels)
#   docs/wip/wgrad-s3.patch (weight gradients with a 3-stage ring and 4 staging boxes: MEGAMOE_WGRAD=s3).
# Before it, here: main's benches into .dev/old (`cargo xtask gpu-bundle .dev/oldb && mkdir -p .dev/old && cp
# .dev/oldb/gemm .dev/oldb/layer .dev/old/ && rm -r .dev/oldb`), then `git am docs/wip/sched-smem-and-clusters.patch
# docs/wip/wgrad-s3.patch`, `cargo xtask gpu-bundle .dev/bundle`, copy this script to .dev/ and run
# `bash .dev/call-next.sh` with carry [".dev"] (timeout_s 600).
# Modes: new = both patches, experiments off; a = new + MEGAMOE_MC=a (clusters sharing A) + MEGAMOE_WGRAD=s3;
# b = new + MEGAMOE_MC=b (clusters sharing B where there is such a variant, dswiglu stays single-CTA) +
# MEGAMOE_WGRAD=s3; old = main. The gemm bench prints every GEMM separately, so the wgrad and M-grouped
# experiments do not mix. Questions: (1) scheduler offsets in shared memory (new vs old; session 5: +1% at 30B,
# -4..-7% on two 235B GEMMs in one sample); (2) clusters sharing A with CTA-scope arrivals (session 5's version
# had a cluster-scope fence per k-step and ran at half speed); (3) clusters sharing B; (4) the wgrad s3 ring.
set -uo pipefail
cd "$(dirname "$0")/bundle"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
run() { local n=$1 to=$2; shift 2; local t0=$(date +%s); echo "== $n ($(( t0 - start )) s)"
  timeout $to "$@" > $OUT/$n.txt 2>&1; local rc=$?; echo "rc $rc in $(( $(date +%s) - t0 )) s"
  grep -E "^test .*(FAILED|ignored)$|test result|panicked|FAILED|error" $OUT/$n.txt | grep -v "^test .* ok$" | head -12; return $rc; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
env_of() { case $1 in a) echo "MEGAMOE_MC=a MEGAMOE_WGRAD=s3";; b) echo "MEGAMOE_MC=b MEGAMOE_WGRAD=s3";; *) echo "MEGAMOE_MC=0";; esac; }
run t_grouped_gemm 40 ./grouped_gemm --include-ignored --test-threads=1
ok=""
for v in a b; do
  env $(env_of $v) MEGAMOE_DEBUG=1 timeout 60 ./grouped_gemm --include-ignored --test-threads=1 --nocapture \
    > $OUT/t_grouped_gemm_$v.txt 2>&1 && ok="$ok $v"
  echo "== t_grouped_gemm_$v: $(grep 'test result' $OUT/t_grouped_gemm_$v.txt)"
  grep -E "FAILED|panicked" $OUT/t_grouped_gemm_$v.txt | head -5
  grep -h "active clusters" $OUT/t_grouped_gemm_$v.txt | sort -u | head -4
done
echo "cluster modes that passed:$ok"
modes="new"; for v in $ok; do modes="$modes $v"; done; modes="$modes old"
for round in 1 2; do
  for v in $modes; do
    late 330 && break
    b=./gemm; [ $v = old ] && b=../old/gemm
    t0=$(date +%s); echo "== gemm $v round $round ($(( t0 - start )) s)"
    env $(env_of $v) timeout 60 $b --bench > /tmp/g.txt 2>&1; echo "rc $? in $(( $(date +%s) - t0 )) s"
    cat /tmp/g.txt >> $OUT/gemm_$v.txt
    grep RESULT /tmp/g.txt | grep -v "torch" | sed 's/ (sample.*ours/ ours/; s/(throughput.*//; s/RESULT gemm Qwen3-//' | cut -c1-150
  done
done
for v in $modes; do
  late 420 && break
  b=./layer; [ $v = old ] && b=../old/layer
  echo "== layer $v ($(( $(date +%s) - start )) s)"
  env $(env_of $v) MEGAMOE_BENCH_ONLY=30B timeout 40 $b --bench > $OUT/layer_$v.txt 2>&1; echo "rc $?"
  grep -hE "^RESULT" $OUT/layer_$v.txt | cut -c1-120
done
last=new; for v in $ok; do last=$v; done
late 470 || env $(env_of $last) timeout 110 ./layer_backward --include-ignored --test-threads=1 > $OUT/t_layer_backward_$last.txt 2>&1
grep -h "test result" $OUT/t_layer_backward_$last.txt 2>/dev/null
echo "total $(( $(date +%s) - start )) s"
