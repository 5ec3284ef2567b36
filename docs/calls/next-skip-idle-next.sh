#!/usr/bin/env bash
# Prepared in the fifty-second session: a probe. The plain M-grouped GEMMs with a warpgroup whose 64 rows of a tile
# all lie past the expert's end issuing no wgmma (`grouped_gemm_bf16_dyn_si`, `grouped_gemm_bt_bf16_dyn_si`,
# `MEGAMOE_SKIP_IDLE=1`, read at each call; the default kernels' SASS unchanged), at Qwen3-Next's shape (320 rows
# an expert: ~20% of the tensor work is padding, 2026-12-07e call 8) and at 30B. b130 = main + the twins: the
# gemm bench and the grouped_gemm tests. Carry [".dev/b130"] (~4 min).
# 1. grouped_gemm whole with MEGAMOE_SKIP_IDLE=1 (the plain and transposed GEMMs on the twins, against f64).
# 2. the gemm bench's M-grouped part (GEMM1 plain, GEMM2, dh plain and dx run the twins; the SwiGLU kernels do
#    not), off / on / off at next, then off / on at 30B.
# Predicted: tests pass; at next GEMM1 plain 1542 -> 1400-1470 us, GEMM2 920 -> 850-880, dh 790 -> 740-760, dx
# 1513 -> 1420-1470 (a cooperative tile's tensor time roughly halves when one warpgroup idles, and about half the
# experts' last m-tile has <= 64 rows); at 30B level (+-2%).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
BDIR=${BDIR:-b130}
. "$(dirname "$0")/prelude.sh" $BDIR
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-400}
B=$BDIR/main
MEGAMOE_SKIP_IDLE=1 t grouped_gemm 150 200
gemm_run() { local label=$1; shift
  local f=$OUT/r/gemm_${label// /_}.txt
  env "$@" MEGAMOE_BENCH_PART=m MEGAMOE_BENCH_HEAT=1 timeout $(to 60 20) $B/gemm --bench > $f 2>&1
  echo "== gemm $label rc $? at $(el) s"
  alt_summary $f | grep -v SwiGLU
  grep -E "FAILED|all written: false|panicked" $f | head -4; }
N=MEGAMOE_BENCH_SHAPE=2048,512,512,10
gemm_run "next off 1" $N MEGAMOE_SKIP_IDLE=0
gemm_run "next on" $N MEGAMOE_SKIP_IDLE=1
gemm_run "next off 2" $N MEGAMOE_SKIP_IDLE=0
gemm_run "30B off" MEGAMOE_BENCH_ONLY=30B MEGAMOE_SKIP_IDLE=0
gemm_run "30B on" MEGAMOE_BENCH_ONLY=30B MEGAMOE_SKIP_IDLE=1
echo "total $(el) s"
