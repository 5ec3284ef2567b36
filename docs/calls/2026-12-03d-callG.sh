#!/usr/bin/env bash
# Session 2026-12-03 (ninth), call G (main ee3b8ba): is the sustained layer power-capped, and do the 2-CTA
# cluster variants (TMA multicast: less L2 -> SM traffic, less energy) help there? The 30B layer bench with
# MEGAMOE_MC=0 / a / ab alternating, two rounds; power, SM clock and throttle reasons sampled every 100 ms
# during the first round. Predicted: power at the 700 W cap with SW-power-cap throttling in the fwd+bwd phases;
# MC=a 0-2% faster in phase 1 if energy is what limits.
set -uo pipefail
cd "$(dirname "$0")/bG"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
for round in 1 2; do
  for mc in 0 a ab; do
    late 300 && break
    [ $round = 1 ] && { nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,clocks_throttle_reasons.active,temperature.gpu --format=csv,noheader -lms 100 > $OUT/smi_$mc.csv 2>&1 & smi=$!; }
    t0=$(date +%s); MEGAMOE_MC=$mc MEGAMOE_BENCH_ONLY=30B timeout 60 ./layer --bench > $OUT/layer_${mc}_$round.txt 2>&1; rc=$?
    [ $round = 1 ] && kill $smi
    echo "== MC=$mc round $round rc $rc in $(( $(date +%s) - t0 )) s"
    grep RESULT $OUT/layer_${mc}_$round.txt | grep -E 'forward Qwen|z saved' | sed 's/(3x the forward.*//' | cut -c1-260
    [ $round = 1 ] && python3 - $OUT/smi_$mc.csv <<'PY'
import sys, collections
rows=[l.strip().split(', ') for l in open(sys.argv[1]) if l.count(',')>=4]
p=[float(r[1].split()[0]) for r in rows if r[1].split()[0].replace('.','').isdigit()]
c=[int(r[2].split()[0]) for r in rows if r[2].split()[0].isdigit()]
t=collections.Counter(r[3] for r in rows)
busy=[(pp,cc) for pp,cc in zip(p,c) if pp>300]
print(f"  samples {len(rows)}; busy (>300 W) {len(busy)}: power median {sorted(b[0] for b in busy)[len(busy)//2] if busy else 0:.0f} W max {max(p) if p else 0:.0f}; SM clock busy min {min((b[1] for b in busy), default=0)} median {sorted(b[1] for b in busy)[len(busy)//2] if busy else 0} MHz; throttle reasons {dict(t.most_common(4))}")
PY
  done
done
echo "total $(( $(date +%s) - start )) s"
