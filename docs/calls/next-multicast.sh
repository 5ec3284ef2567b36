#!/usr/bin/env bash
# Prepared in the sixteenth session for the next: does a TMA multicast read L2 once? (docs/NOTES.md "Next session" 1)
# Build: `cargo xtask gpu-bundle .dev/bundle`, copy gpu_primitives into .dev/bM, carry .dev/bM and this script.
# ~60 s. The two tests check that both CTAs of every pair see their boxes (word sums); ncu then gives each mode's
# L2 read sectors: 66 pairs x 16 boxes x 16 KiB = 33792 KiB per CTA copy, i.e. per-CTA loads ~2.16M sectors, a
# multicast read once ~1.08M. If the multicast reads ~1.08M, the clusters' +15% L2 reads on the SwiGLU backward
# (sixteenth session, call D) come from elsewhere (the pair walk); if ~2.16M, the metric counts per destination.
set -uo pipefail
cd "$(dirname "$0")/bM"
timeout 60 ./gpu_primitives --include-ignored --test-threads=1 --exact tma_2d_loaded_per_cta_in_clusters tma_2d_multicast_into_both_ctas \
  > $OUT/tests.txt 2>&1; echo "== tests rc $?: $(grep 'test result' $OUT/tests.txt)"; grep -E "FAILED|panicked" $OUT/tests.txt | head -4
timeout 120 ncu --clock-control none -k regex:selftest_tma_mc --metrics lts__t_sectors_op_read.sum,lts__t_requests_srcunit_tex_op_read.sum,gpu__time_duration.sum \
  --csv ./gpu_primitives --include-ignored --test-threads=1 --exact tma_2d_loaded_per_cta_in_clusters tma_2d_multicast_into_both_ctas \
  > $OUT/ncu.csv 2> $OUT/ncu.err; echo "== ncu rc $?"
grep -E "selftest_tma_mc" $OUT/ncu.csv | cut -d, -f5,12- | head -8
