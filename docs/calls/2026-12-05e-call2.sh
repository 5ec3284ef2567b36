#!/usr/bin/env bash
# Thirtieth session, after next-combo-tests.sh: layer_forward whole on branch combo (.dev/b49/combo; see
# next-combo-tests.sh), then the energy A/Bs of next-energy-both.sh and next-uniform-desc.sh in one: the 30B GEMMs
# soaked (MEGAMOE_SOAK=3: each GEMM 3 s of ours then 3 s of cuBLAS's, one MEGAMOE_SEED routing draw) with main's
# binary (b41/main), combo with both knobs off (= main + uniform descriptors + fences + guards) and combo with
# MEGAMOE_SKIP_IDLE=1 MEGAMOE_A_MAPS=expert; then the layer soaked (MEGAMOE_SOAK=4) the same three ways. nvidia-smi
# every 100 ms beside it; joules a launch per window (benches/energy.py), compared by --compare (drift-normalised by
# each process's cuBLAS window).
# Predicted (the two prepared calls' headers): combo off against main: weight gradients 1-4% fewer joules, M-grouped
# GEMMs 0-1.5%, the step 0.5-2%; both knobs against off: the M-grouped GEMMs ~1-3% fewer joules (s + 0.5 a), the
# weight gradients and cuBLAS windows unchanged within ~1%; the layer ~0.6 of that a step.
# Command `bash docs/calls/next-combo-soak.sh`, carry [".dev/b41", ".dev/b49"]; expected ~8.5 min (bound 565 s).
. "$(dirname "$0")/prelude.sh" b49
for f in b41/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b49/combo M=b41/main
t layer_forward 130 375
export MEGAMOE_SEED=20261208
python3 -c 'import subprocess,time; t=time.time(); s=subprocess.run(["nvidia-smi","--query-gpu=timestamp","--format=csv,noheader"],capture_output=True,text=True).stdout.strip(); print(t, "|", s)' > $OUT/r/clock.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 > $OUT/r/smi.csv &
smi=$!
# binary dir, bench, soak seconds, knobs (skip-idle, A maps), output name, want, rest
bench() { local dir=$1 b=$2 soak=$3 skip=$4 maps=$5 name=$6 want=$7 rest=$8
  MEGAMOE_SKIP_IDLE=$skip MEGAMOE_A_MAPS=$maps MEGAMOE_SOAK=$soak MEGAMOE_BENCH_ONLY=30B timeout $(to $want $rest) \
    $dir/$b --bench > $OUT/r/$name.txt 2>&1
  echo "== $name rc $? at $(el) s"; }
bench $M gemm 3 0 shared gemm_main 80 295
bench $B gemm 3 0 shared gemm_off 80 215
bench $B gemm 3 1 expert gemm_both 80 135
bench $M layer 4 0 shared layer_main 45 90
bench $B layer 4 0 shared layer_off 45 45
bench $B layer 4 1 expert layer_both 45 0
kill $smi
for f in gemm_main gemm_off gemm_both; do
  [ -f $OUT/r/$f.txt ] || continue
  echo "-- $f (alternating with cuBLAS)"; alt_summary $OUT/r/$f.txt
  grep -E "FAILED|all written: false|panicked|Error" $OUT/r/$f.txt | cut -c1-200 | head -4
done
for f in layer_main layer_off layer_both; do
  [ -f $OUT/r/$f.txt ] && { echo "-- $f"; grep -hE "^RESULT megamoe forward\+backward \(z saved|FAILED|panicked|Error" $OUT/r/$f.txt | cut -c1-200 | head -6; }
done
for f in gemm_main gemm_off gemm_both layer_main layer_off layer_both; do
  [ -f $OUT/r/$f.txt ] && python3 ../benches/energy.py $OUT/r $f.txt | sed -E 's/Qwen3-30B-A3B //' > $OUT/r/energy_$f.txt
done
for kind in gemm layer; do
  python3 ../benches/energy.py --compare $OUT/r energy_${kind}_main.txt energy_${kind}_off.txt UD
  python3 ../benches/energy.py --compare $OUT/r energy_${kind}_off.txt energy_${kind}_both.txt KNOBS
done
echo "total $(el) s"
