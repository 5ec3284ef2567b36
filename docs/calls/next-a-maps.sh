#!/usr/bin/env bash
# Prepared (a helper of the twenty-sixth session's successor; branch a-maps, NOT run on a GPU yet): per-expert A
# tensor maps for the M-grouped GEMMs (`MEGAMOE_A_MAPS=expert`, off by default), their GPU tests, and their energy
# under a soak against the shared map.
# Why: every GEMM runs at the 700 W cap (docs/RESULTS.md 2026-12-05, call 3), so a kernel's time is its joules a
# launch. An expert's last m-tile loads 128 rows of A through one tensor map over the whole buffer: its rows past
# the expert's end are the next expert's real rows, multiplied in full and never stored (~6% of the M-grouped MMAs
# at 30B; balanced routing, with no partial m-tiles, took 4-7% fewer joules on the forward GEMMs in call 3). With
# the knob on, `expert_a_maps` writes one map per expert over its own rows before each launch (as the weight
# gradients have done since 2026-12-04g) and the producer loads each tile's A box through its expert's map, so those
# rows arrive as TMA zeros. Outputs bitwise the same either way (the tests check it).
# Covered: the single-CTA TMA-A kernels (plain GEMM1 / GEMM2 / dh / dx `grouped_gemm_bf16` and `_bt_bf16`, the
# scatter GEMM2, GEMM1 + SwiGLU `_ew7` / `_ew7_mv` and the cooperative / `_mv`, dh + SwiGLU backward `_ew7` / `_ew`
# / ping-pong); the cluster forms, the in-producer gather, the persistent forward, FP8 and EP keep the shared map.
# Prediction: (1) every test passes (the new `a_maps_*` tests: each covered kernel bitwise on vs off on ragged
# routing with 0, 1, 63, 64, 65, 127, 128, 129-row experts, NaN rows past experts' ends never reaching C, bad
# offsets still inside the buffers, two launches back to back each on its own maps; the layer forward + backward
# bitwise on vs off; graph capture with the knob on replaying bitwise the eager shared-map step); (2) if MMAs on
# zero operands are cheaper (the zero-halves probe of docs/calls/next-energy.sh asks the same), the 30B M-grouped
# GEMMs (GEMM1, GEMM1 + SwiGLU, GEMM2, dh, dh + SwiGLU backward, dx) take 1-4% fewer joules a launch with the knob
# on (at most what balanced routing saved, 4-7%, which also drops the padding MMAs altogether), the same % faster
# sustained; the weight gradients (unchanged kernels: the control) and cuBLAS level within the noise (~1%);
# `expert_a_maps` adds a few us a GEMM (one 128-thread block a launch, included in the timed launches), so if
# zeros cost the same joules the knob is ~0.2-0.5% slower; (3) the layer's sustained step (z saved) 0.5-2% fewer
# joules with the knob on; nothing would change with balanced routing (no padding rows; not run here).
# Binaries: .dev/b42/amaps, built on branch a-maps with
#   `BDIR=.dev/b42 bash docs/calls/2026-12-04c-build.sh amaps grouped_gemm layer_forward layer_backward graph`.
# Command `bash docs/calls/next-a-maps.sh`, carry [".dev/b42"]; ~7.5 min (under 9): tests ~3 min, each gemm bench
# ~90 s, each layer bench ~45 s. Everything lands in $OUT/r.tgz (a call returns at most 8 files and the output's
# last 12,000 characters).
. "$(dirname "$0")/prelude.sh" b42
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b42/amaps
# each step's timeout capped by what is left of 565 s (the call's limit is 600 s; the archive is written at exit)
cap() { local l=$(( 565 - $(el) )); if (( l < $1 )); then echo $l; else echo $1; fi; }
t() { local n=$1 to=$(cap $2); shift 2; (( to > 5 )) || { echo "== $n skipped at $(el) s"; return; }
  timeout $to $B/$n "$@" --include-ignored --test-threads=1 > $OUT/r/t_$n.txt 2>&1
  echo "== $n $* rc $? at $(el) s: $(grep 'test result' $OUT/r/t_$n.txt)"
  grep -E "FAILED|panicked|\.\.\. $" $OUT/r/t_$n.txt | cut -c1-300 | head -6; }
# the new tests (grouped_gemm whole holds its a_maps_* tests), then graph whole (with its two graph_a_maps_* tests)
t grouped_gemm 120
t layer_forward 60 a_maps
t layer_backward 90 a_maps
t graph 110
grep -h "bitwise with per-expert A maps\|per-expert A maps bitwise" $OUT/r/t_*.txt | cut -c1-160 | head -12
python3 -c 'import subprocess,time; t=time.time(); s=subprocess.run(["nvidia-smi","--query-gpu=timestamp","--format=csv,noheader"],capture_output=True,text=True).stdout.strip(); print(t, "|", s)' > $OUT/r/clock.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 > $OUT/r/smi.csv &
smi=$!
# the benches: each off (`shared`) then on (`expert`); bench b with seconds s, skipped when under 20 s are left
# (`soak`, not `s`: a local `s` would hide the start time that `el` and `cap` read)
bench() { local b=$1 soak=$2 v=$3 to=$(cap $4); (( to > 20 )) || { echo "== $b $v skipped at $(el) s"; return; }
  MEGAMOE_A_MAPS=$v MEGAMOE_SOAK=$soak MEGAMOE_BENCH_ONLY=30B timeout $to $B/$b --bench > $OUT/r/${b}_$v.txt 2>&1
  echo "== $b A maps $v rc $? at $(el) s"; }
bench gemm 3 shared 130
bench gemm 3 expert 130
bench layer 6 shared 80
bench layer 6 expert 80
kill $smi
for f in gemm_shared gemm_expert; do
  echo "-- $f"
  alt_summary $OUT/r/$f.txt
  grep -E "FAILED|rel err [0-9.e+-]+ .*all written: false|panicked|Error" $OUT/r/$f.txt | cut -c1-200 | head -4
done
for f in layer_shared layer_expert; do
  echo "-- $f"; grep -hE "^RESULT megamoe forward\+backward \(z saved|panicked|Error" $OUT/r/$f.txt | cut -c1-200 | head -6
done
for f in gemm_shared gemm_expert layer_shared layer_expert; do
  [ -f $OUT/r/$f.txt ] && { echo "-- energy $f"; python3 ../benches/energy.py $OUT/r $f.txt | sed -E 's/Qwen3-30B-A3B //'; }
done
echo "total $(el) s"
