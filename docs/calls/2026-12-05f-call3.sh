#!/usr/bin/env bash
# Thirty-first session. The swapped tail tile's joules (after next-swap-tail-tests.sh passes): the same binaries
# (.dev/b53/st, branch swap-scatter), the 30B GEMMs soaked (MEGAMOE_SOAK=3, one MEGAMOE_SEED draw) with
# MEGAMOE_SWAP_TAIL off, on, off again (the repeat bounds the drift), then the layer (MEGAMOE_SOAK=4) off and on;
# nvidia-smi every 100 ms; joules a launch per window, drift-normalised by each process's cuBLAS window
# (benches/energy.py --compare).
# Prediction (docs/wip/swap-ab-tail.md): the padding MMAs of an expert's last m-tile fall from ~64 rows to ~12-14,
# so GEMM1 (+ SwiGLU and plain), GEMM2, dh (+ SwiGLU and plain) and dx 2.5-5% fewer joules a launch (balanced
# routing, with no padding at all, saved 4-7% in 2026-12-05 call 3); the weight gradients and the cuBLAS windows
# level within ~1%; the layer's step 1.5-3% fewer joules. If the small-N wgmma's lower efficiency costs more than
# the MMAs saved, the covered GEMMs come out level or worse: then padding MMAs do not cost their share of joules.
# Command `bash docs/calls/next-swap-tail-soak.sh`, carry [".dev/b53"]; ~6.5 min (bound 565 s).
. "$(dirname "$0")/prelude.sh" b53
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b53/st
export MEGAMOE_SEED=20261211
smi_start
bench() { knob_bench MEGAMOE_SWAP_TAIL $3 $1 $2 $4 $5 $6; }  # bench, soak seconds, knob value, output name, want, rest
bench gemm 3 0 gemm_off 80 300
bench gemm 3 1 gemm_on 80 220
bench gemm 3 0 gemm_off2 80 140
bench layer 4 0 layer_off 70 70
bench layer 4 1 layer_on 70 0
smi_stop
alt_of gemm_off gemm_on gemm_off2
for f in layer_off layer_on; do
  [ -f $OUT/r/$f.txt ] && { echo "-- $f"; grep -hE "^RESULT megamoe forward\+backward \(z saved|FAILED|panicked|Error" $OUT/r/$f.txt | cut -c1-200 | head -6; }
done
energy_of gemm_off gemm_on gemm_off2 layer_off layer_on
python3 ../benches/energy.py --compare $OUT/r energy_gemm_off.txt energy_gemm_on.txt SWAP
python3 ../benches/energy.py --compare $OUT/r energy_gemm_off.txt energy_gemm_off2.txt DRIFT
python3 ../benches/energy.py --compare $OUT/r energy_layer_off.txt energy_layer_on.txt SWAP
grep -h "RESULT gemm" $OUT/r/gemm_on.txt | grep -o "sample rel err [0-9.e+-]*" | sort | uniq -c | head -4
echo "total $(el) s"
