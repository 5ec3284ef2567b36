#!/usr/bin/env bash
# Prepared in the twenty-ninth session (not run; branch uniform-desc, three commits, CPU-checked only). Two changes that
# cut the instructions the consumer warps issue around the wgmma, found by reading the SASS against a CUTLASS kernel
# of the weight gradients' shape (a helper's static comparison; cuBLAS's own nvjet kernels are built at run time, so
# their SASS is not in the library):
# (1) uniform descriptors: the consumer warpgroup index (`regs::warpgroup`) and each k-step's stage addresses
#     (`warp::uniform`, one shfl) broadcast from lane 0, so ptxas keeps the wgmma descriptor arithmetic on the uniform
#     datapath: before, every wgmma's descriptors were rebuilt with ~6 vector ops and four R2UR moves (the weight
#     gradients: 99 issued instructions a k-step a warp against CUTLASS's 48; grouped_wgrad_f32 2088 -> 1688 static
#     SASS instructions; the M-grouped k-step ~40 vector ops -> ~12; the FP8 GEMMs' `issue_block` alike, third
#     commit: grouped_gemm_fp8 R2UR 72 -> 24). Registers, stack, spills unchanged in all 73 kernels; the same
#     descriptors, so the same bits.
# (2) the weight gradients' producer hands each tile's rows to the consumers with its index (the tile queue's slots
#     hold two words), so a consumer starts a tile's main loop without two global loads of the expert's offsets
#     (both consumer warpgroups stalled on them between tiles: ~0.3-0.8k of ~24k cycles a tile, the helper's estimate).
# Under the 700 W cap a kernel's time is its joules a launch / ~692 W, so what fewer issued instructions save shows
# as time. Predicted (30B, gemm soaks, ud against main): dW2 / dW1 f32 and bf16 1-4% fewer joules a launch and the
# same in time (both changes reach them); the M-grouped GEMMs (GEMM1, GEMM1 + SwiGLU, GEMM2, dh, dh + SwiGLU
# backward, dx) 0-1.5% (only (1)); cuBLAS's windows (the controls) within ~1%; the layer's step 0.5-2% fewer joules.
# If the weight gradients gain and the M-grouped GEMMs do not, (2) is the part that counts (land it alone:
# `git checkout uniform-desc~0 -- ...` of its files, or revert the first commit on the branch).
# Tests first (b45 = branch uniform-desc: `BDIR=.dev/b45 bash docs/calls/2026-12-04c-build.sh ud grouped_gemm
# layer_forward layer_backward graph fp8 ep`): grouped_gemm whole, layer_backward whole, fp8 whole (its GEMMs'
# descriptors and its weight gradients' tile queue changed), ep's backward; then the 30B gemm bench soaked (MEGAMOE_SOAK=3, the same MEGAMOE_SEED
# draw) with main (b41/main: main's kernels, PTX-identical to today's main) then ud, then the layer soaked
# (MEGAMOE_SOAK=6) main then ud; nvidia-smi every 100 ms beside it, benches/energy.py, and a table of each window's
# time and joules, ud against main (also normalised by the same process's cuBLAS window, which removes drift).
# Command `bash docs/calls/next-uniform-desc.sh`, carry [".dev/b41", ".dev/b45"]; expected ~8.5 min (bound 565 s: a
# late step is cut short, not the call).
. "$(dirname "$0")/prelude.sh" b45
for f in b41/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
U=b45/ud M=b41/main
B=$U
t grouped_gemm 120 420
t layer_backward 90 340
t fp8 120 300
t ep 30 280 backward
export MEGAMOE_SEED=20261207
# the host clock against nvidia-smi's timestamps (benches/energy.py aligns the soak windows with the samples by it)
python3 -c 'import subprocess,time; t=time.time(); s=subprocess.run(["nvidia-smi","--query-gpu=timestamp","--format=csv,noheader"],capture_output=True,text=True).stdout.strip(); print(t, "|", s)' > $OUT/r/clock.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 > $OUT/r/smi.csv &
smi=$!
bench() { local dir=$1 b=$2 soak=$3 name=$4 want=$5 rest=$6
  MEGAMOE_SOAK=$soak MEGAMOE_BENCH_ONLY=30B timeout $(to $want $rest) $dir/$b --bench > $OUT/r/$name.txt 2>&1
  echo "== $name rc $? at $(el) s"; }
bench $M gemm 3 gemm_main 95 190
bench $U gemm 3 gemm_ud 95 110
bench $M layer 6 layer_main 55 55
bench $U layer 6 layer_ud 55 0
kill $smi
for f in gemm_main gemm_ud; do
  [ -f $OUT/r/$f.txt ] || continue
  echo "-- $f (alternating with cuBLAS)"; alt_summary $OUT/r/$f.txt
  grep -E "FAILED|all written: false|panicked|Error" $OUT/r/$f.txt | cut -c1-200 | head -4
done
for f in layer_main layer_ud; do
  [ -f $OUT/r/$f.txt ] && { echo "-- $f"; grep -hE "^RESULT megamoe forward\+backward \(z saved|FAILED|panicked|Error" $OUT/r/$f.txt | cut -c1-200 | head -6; }
done
for f in gemm_main gemm_ud layer_main layer_ud; do
  [ -f $OUT/r/$f.txt ] && python3 ../benches/energy.py $OUT/r $f.txt | sed -E 's/Qwen3-30B-A3B //' > $OUT/r/energy_$f.txt
done
for kind in gemm layer; do
  python3 ../benches/energy.py --compare $OUT/r energy_${kind}_main.txt energy_${kind}_ud.txt UD
done
echo "total $(el) s"
