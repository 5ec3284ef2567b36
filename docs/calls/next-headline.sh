#!/usr/bin/env bash
# Prepared in the twenty-sixth session, brought up to date in the thirtieth (not run since 2026-12-04g). The headline
# on main: the 30B forward + backward (z saved) against PyTorch's torch._grouped_mm layer, medians of 20 (each
# bench's own lines) and then 6 s of steps back to back each (MEGAMOE_SOAK: f32 and bf16 weight gradients; PyTorch
# bf16), nvidia-smi every 100 ms, joules a step by benches/energy.py. Both benches first run 3 s of untimed steps
# (MEGAMOE_BENCH_HEAT) and PyTorch's gradients are set to None every step (the twenty-ninth session's fixes: before,
# PyTorch accumulated its weight gradients, ~6% in our favour, and our forward was timed cold).
# Last measured 2026-12-04g call 4 (biased as above): megamoe 7632 us / 5.28 J a step with bf16 weight gradients,
# PyTorch 14848 us / 10.02 J: 1.95x sustained. Prediction: PyTorch's step ~0.9 ms shorter without the accumulation,
# ours 2.5-3.5% shorter (the clusters' 1.2-1.6%, the uniform descriptors' 1.0-1.8%), so ~1.88-1.93x sustained; our
# forward hot ~2.4-2.5x PyTorch's. Only on an H200 for the issue's figures (an H100 gives its own, comparable within
# the call only).
# Binary .dev/b50/main/layer (main b79ce99's layer bench, thirtieth session: `BDIR=.dev/b50 bash
# docs/calls/2026-12-04c-build.sh main layer_backward`). Command `bash docs/calls/next-headline.sh`, carry
# [".dev/b50"] (~3 min). Another build's layer bench: HEADLINE_BIN=DIR/NAME (under .dev, carried).
HB=${HEADLINE_BIN:-b50/main}
. "$(dirname "$0")/prelude.sh" "${HB%%/*}"
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
python3 -c 'import subprocess,time; t=time.time(); s=subprocess.run(["nvidia-smi","--query-gpu=timestamp","--format=csv,noheader"],capture_output=True,text=True).stdout.strip(); print(t, "|", s)' > $OUT/r/clock.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 > $OUT/r/smi.csv &
smi=$!
MEGAMOE_SOAK=6 MEGAMOE_BENCH_ONLY=30B timeout 150 $HB/layer --bench > $OUT/r/layer.txt 2>&1
echo "== layer rc $? at $(el) s"
MEGAMOE_SOAK=6 MEGAMOE_TORCH_LOOP=0 MEGAMOE_BENCH_ONLY=30B PYTHONUNBUFFERED=1 timeout 120 python3 ../benches/torch_layer.py > $OUT/r/torch.txt 2>&1
echo "== torch rc $? at $(el) s"
kill $smi
grep -h "^MEGAMOE_SKIP_IDLE\|^MEGAMOE_A_MAPS" $OUT/r/layer.txt
grep -h "^RESULT megamoe forward Qwen\|^RESULT megamoe forward, 10 back\|^RESULT megamoe forward alone\|^RESULT megamoe forward+backward (z saved\|^RESULT pytorch torch._grouped_mm" $OUT/r/layer.txt $OUT/r/torch.txt | cut -c1-260
python3 ../benches/energy.py $OUT/r layer.txt torch.txt
echo "total $(el) s"
