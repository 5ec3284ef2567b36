#!/usr/bin/env bash
# Prepared in the twenty-sixth session (not run). The headline again on main after the weight gradients' clusters
# became the default (b72d1f4): the 30B forward + backward (z saved) against PyTorch's torch._grouped_mm layer,
# medians of 20 (each bench's own lines) and then 6 s of steps back to back each (MEGAMOE_SOAK: f32 and bf16
# weight gradients; PyTorch bf16), nvidia-smi every 100 ms, joules a step by benches/energy.py. As 2026-12-04g
# call 4 (then: megamoe 7632 us / 5.28 J a step with bf16 weight gradients, PyTorch 14848 us / 10.02 J: 1.95x).
# Prediction: megamoe's sustained step 1-2% faster than then (the clusters' 1.2-1.6% in 2026-12-05 call 3), so
# 1.97-1.99x sustained; the medians 1.99-2.04x. Run it last in the session (after next-energy.sh,
# next-skip-idle.sh, next-a-maps.sh); if one of those lands as the default, rebuild the binary with it first.
# Binary .dev/b41/main/layer (main 2d17144's layer bench: `cargo bench --bench layer --no-run`, stripped,
# gzipped). Command `bash docs/calls/next-headline.sh`, carry [".dev/b41"] (~3 min).
# Another build's layer bench: HEADLINE_BIN=DIR/NAME (under .dev, carried), e.g. once the energy knobs win, before
# they are rebuilt as the default: `HEADLINE_BIN=b43/both MEGAMOE_SKIP_IDLE=1 MEGAMOE_A_MAPS=expert bash
# docs/calls/next-headline.sh`, carry [".dev/b43"] (the bench prints both knobs in its header).
HB=${HEADLINE_BIN:-b41/main}
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
grep -h "^RESULT megamoe forward Qwen\|^RESULT megamoe forward+backward (z saved\|^RESULT pytorch torch._grouped_mm" $OUT/r/layer.txt $OUT/r/torch.txt | cut -c1-220
python3 ../benches/energy.py $OUT/r layer.txt torch.txt
echo "total $(el) s"
