#!/usr/bin/env bash
# Fifty-seventh session's first call, either card: next-65-ep.sh's tests (b144, ~2.5 min), next-64-shared.sh (b143,
# b142, ~1.5 min), then the ep bench (b144) with what is left of ~330 s. Carry [".dev/b144", ".dev/b143", ".dev/b142"].
d=$(dirname "$0"); O=$OUT; mkdir -p $O/e $O/s $O/b; t0=$(date +%s)
OUT=$O/e BENCH_S=0 BOUND=170 bash $d/next-65-ep.sh
OUT=$O/s BOUND=90 bash $d/next-64-shared.sh
left=$(( 320 - ($(date +%s) - t0) )); echo "== $left s left for the ep bench"
if [ $left -gt 60 ]; then
  cd $d/../../.dev && gunzip -f b144/main/ep_bench.gz 2>/dev/null; chmod +x b144/main/ep_bench
  timeout $left b144/main/ep_bench --bench > $O/b/ep_bench.txt 2>&1
  echo "== ep bench rc $?"; grep -E "^RESULT|FAILED|every mode" $O/b/ep_bench.txt | cut -c1-420
fi
