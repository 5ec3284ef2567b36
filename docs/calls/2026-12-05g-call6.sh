#!/usr/bin/env bash
# Thirty-second session, call 5: the 235B gemm bench with the run-time walk off / on / off on the card this call gets
# (call 2's 235B "on" ran on an H200, call 1's off / on / off on an H100). Carry [".dev/b54"].
. "$(dirname "$0")/prelude.sh" b54
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b54/dyn
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
for run in 235B:static:off 235B:dynamic:on 235B:static:off2; do
  IFS=: read shape v name <<< "$run"
  MEGAMOE_GEMM_SCHED=$v MEGAMOE_BENCH_ONLY=$shape timeout $(to 60 10) $B/gemm --bench > $OUT/r/gemm_${shape}_$name.txt 2>&1
  echo "== gemm $shape $name rc $? at $(el) s ($(grep -m1 '^MEGAMOE_GEMM_SCHED' $OUT/r/gemm_${shape}_$name.txt))"
  alt_summary $OUT/r/gemm_${shape}_$name.txt | grep -v "dW"
done
echo "total $(el) s"
