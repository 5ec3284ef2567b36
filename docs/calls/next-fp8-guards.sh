#!/usr/bin/env bash
# Prepared in the twenty-seventh session (not run). The FP8 kernels' guards against any device offsets (branch
# fp8-guards = docs/wip/fp8-guards.patch, a helper's, CPU-checked: xtask test green, ptxas unchanged, +10..13 PTX
# instructions in the 9 FP8 GEMM kernels, the other 64 byte-identical): the walk bounded by m_tiles_bound, tiles
# clamped to rows_max, the z recompute's h^T block stored only below Kp / 128. Tests: tests/fp8.rs whole (its
# new gemm_fp8_, quantize_cols_grouped_, wgrad_fp8_ and wgrad_fp8_bf16_bad_offsets_stay_inside_the_buffers on the
# bf16 tests' bad layouts, now shared from tests/common/bad_offsets.rs, nine since the 28th session's review (a
# tile count wrapping to a few tiles; inputs behind NaN guard zones, outputs started at zero: a read past an input
# shows as a NaN); and every old FP8 test: valid layouts must be bitwise unchanged) and tests/grouped_gemm.rs whole
# (its bad-offset tests through the moved helper, now on the ninth layout too).
# Predicted: all pass; each bad-layout launch ends within 5 s (else the test process exits).
# Binaries .dev/b44/guards (branch fp8-guards, two commits, rebuilt in the 28th session: `BDIR=.dev/b44 bash docs/calls/2026-12-04c-build.sh guards fp8
# grouped_gemm`). Command `bash docs/calls/next-fp8-guards.sh`, carry [".dev/b44"] (~3 min). If all pass: `git am
# docs/wip/fp8-guards.patch` lands it (README Limits and host/src/fp8.rs's doc already say what it guarantees).
. "$(dirname "$0")/prelude.sh" b44
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
t() { local n=$1 to=$2; timeout $to b44/guards/$n --include-ignored --test-threads=1 > $OUT/r/t_$n.txt 2>&1
  echo "== $n rc $? at $(el) s: $(grep 'test result' $OUT/r/t_$n.txt)"
  grep -E "FAILED|panicked|\.\.\. $" $OUT/r/t_$n.txt | cut -c1-300 | head -8; }
t fp8 280
t grouped_gemm 250
grep -E "bad_offsets" $OUT/r/t_*.txt | cut -c1-160
echo "total $(el) s"
