#!/usr/bin/env bash
# Prepared in the nineteenth session (not run): docs/wip/wgrad-f32-staged.patch, the f32 weight gradients with the
# whole 128 x 256 tile staged (`grouped_wgrad_f32_st`, `MEGAMOE_WGRAD=staged`): 32-row ring stages (4 x 24 KiB) and
# eight staging boxes per consumer warp (128 KiB), so a tile's TMA stores are waited for only at the next tile's
# epilogue. Predicted: dW1 / dW2 f32 0.75 -> ~0.76-0.80 of cuBLAS at 30B, with doubt (docs/NOTES.md "Next session"
# 1: the seventh session's probes put ~11% in the copy engine's reads of the two-box staging, but the twelfth's
# held-stage epilogue removed most of those waits for 0.99x; the ring's lead halves, 3 x 32 rows against 3 x 64).
# C is bitwise the two-box kernel's (same wgmma order).
# Binaries (built in the nineteenth session on this machine): .dev/b13/st = main 996a3ff + the patch (layer, gemm
# benches; grouped_gemm, layer_backward, ep tests), .dev/b11/base = main (layer, gemm). If they are gone: `git apply
# docs/wip/wgrad-f32-staged.patch`, then BDIR=.dev/b13 bash docs/calls/2026-12-04c-build.sh st grouped_gemm
# layer_backward ep (and `git checkout .` after); base: the same script on main with `base` and no tests.
# Also the `_ew` probe of docs/wip/probe-ew-no-wgmma.patch (.dev/b13/probe/layer; rebuild: apply the patch, `cargo
# bench --bench layer --no-run`, strip, gzip).
# Call: command `bash docs/calls/next-wgrad-staged.sh`, carry [".dev/b13", ".dev/b11/base"] (~7 min).
# Note: the patch also moves the two-box kernel's fill into a function: its SASS has 16 more instructions (1632
# -> 1648, the same loop), so "boxes" below is run from the patched binary as well as from main.
set -uo pipefail
cd "$(dirname "$0")/../../.dev"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/r
for f in b13/st/*.gz b13/probe/*.gz b11/base/*.gz; do [ -f $f ] && gunzip -f $f && chmod +x ${f%.gz}; done
timeout 120 b13/st/grouped_gemm --include-ignored --test-threads=1 > $OUT/r/grouped_gemm_st.txt 2>&1
echo "== grouped_gemm (patched: every f32 wgrad case also runs the staged kernel, bitwise) rc $? at $(el) s: $(grep 'test result' $OUT/r/grouped_gemm_st.txt)"
grep -E "FAILED|panicked" $OUT/r/grouped_gemm_st.txt | cut -c1-300 | head -6
# the _ew SwiGLU backward's probe (docs/wip/probe-ew-no-wgmma.patch, .dev/b13/probe): the consumers issue no wgmma
# (they wait for and give back the ring's stages; dh = 0), so the epilogue warps run beside idle tensor cores.
# Question (NOTES "Next session" 2b): do they run much faster than the 758 us of main? Then the tensor cores'
# register-file / dispatch traffic is what bounds them.
for v in base probe; do
  b=b11/base/layer; [ $v = probe ] && b=b13/probe/layer
  MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:grouped_gemm_bt_dswiglu_ew \
    --launch-count 3 --metrics gpu__time_duration.sum,sm__inst_executed.avg.per_cycle_active,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    --csv $b --bench > $OUT/r/ncu_ew_$v.csv 2> $OUT/r/ncu_ew_$v.err
  echo "== ncu _ew $v rc $? at $(el) s"
  python3 -c "import csv,sys; r=[x for x in csv.reader(open(sys.argv[1])) if len(x)>10]; h=r[0]; [print('  ',x[h.index('Metric Name')][:40],x[h.index('Metric Value')]) for x in r[1:]]" $OUT/r/ncu_ew_$v.csv
done
# the gemm bench at 30B: main, patched two-box, patched staged; twice, alternating
for round in 1 2; do
  for v in base boxes staged; do
    b=b13/st/gemm; [ $v = base ] && b=b11/base/gemm
    MEGAMOE_WGRAD=$([ $v = staged ] && echo staged || echo boxes) MEGAMOE_BENCH_ONLY=30B timeout 60 $b --bench > $OUT/r/gemm_${v}_$round.txt 2>&1
    echo "== gemm 30B $v rc $? at $(el) s"
    grep -E "RESULT gemm-alternating .*bwd dW[12] \(K-grouped\)" $OUT/r/gemm_${v}_$round.txt | sed -E "s/.*bwd (dW[12]).*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1 \2 \3 \4/"
  done
done
MEGAMOE_WGRAD=staged timeout 90 b13/st/ep --include-ignored --test-threads=1 > $OUT/r/ep_staged.txt 2>&1
echo "== ep (MEGAMOE_WGRAD=staged: the EP layer's weight gradients) rc $? at $(el) s: $(grep 'test result' $OUT/r/ep_staged.txt)"
grep -E "FAILED|panicked" $OUT/r/ep_staged.txt | cut -c1-300 | head -6
MEGAMOE_WGRAD=staged timeout 220 b13/st/layer_backward --include-ignored --test-threads=1 > $OUT/r/layer_backward_staged.txt 2>&1
echo "== layer_backward (MEGAMOE_WGRAD=staged) rc $? at $(el) s: $(grep 'test result' $OUT/r/layer_backward_staged.txt)"
grep -E "FAILED|panicked" $OUT/r/layer_backward_staged.txt | cut -c1-300 | head -6
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
echo "total $(el) s"
