#!/usr/bin/env bash
# Prepared (not run; branch energy-both = skip-idle merged with a-maps, CPU-checked only). Both energy knobs of the
# M-grouped GEMMs together: `MEGAMOE_SKIP_IDLE=1` (a consumer warpgroup whose 64 rows of a tile are all padding
# issues no wgmma: docs/calls/next-skip-idle.sh) and `MEGAMOE_A_MAPS=expert` (per-expert A tensor maps: the padding
# rows of an expert's last m-tile load as TMA zeros: docs/calls/next-a-maps.sh). One binary, each knob per process
# (both default off). Run it only if both knobs saved joules alone (calls (2) and (3) of docs/NOTES.md "Next
# session" item 0a): if both then win together they land together (this branch, or the two patches, merged by hand
# as here: `GroupedGemm` ends a_maps, a_base, flags, pad).
# What it tests: (1) the merge: every test of grouped_gemm (skip_idle_*, a_maps_* and the new both_knobs_*: plain
# both layouts with every cluster form, 300 experts, scatter, GEMM1 + SwiGLU `_ew7` / cooperative / clusters, dh +
# SwiGLU backward `_ew7` / `_ew` / ping-pong, NaN rows past experts' ends, bad offsets: both on bit for bit both off)
# and layer_backward's both_knobs_* (forward + backward + accumulating backward, SMALL / RAGGED with every gather,
# SwiGLU and SwiGLU-backward kernel and both save modes, 30B at T = 1024: both on bit for bit both off; 40
# configurations); (2) whether the two savings add: the 30B GEMM bench soaked (MEGAMOE_SOAK=3, each GEMM 3 s of ours
# then 3 s of cuBLAS's, the same MEGAMOE_SEED routing draw) with both off, skip-idle alone, a-maps alone and both
# on; then the layer soaked (MEGAMOE_SOAK=6, 6 s a weight-gradient type) off and both on; nvidia-smi every 100 ms
# beside all of it, benches/energy.py per file, and a table of each GEMM's time and joules a launch against both off.
# Prediction: at 30B (~1024 +- 32 rows an expert, uniform routing) an expert's last m-tile holds ~64 padding rows on
# average (~6% of the M-grouped rows): in the half of the experts above 1024 rows the tile holds r <= 64 real rows
# and 128 - r padding, of which skip-idle removes the second warpgroup's 64 (leaving 64 - r); in the half below 1024
# the tile holds r > 64 and its < 64 padding rows are in a warpgroup with real rows, which skip-idle cannot skip. So
# skip-idle removes about half the padding MMAs and leaves the other half, which a-maps turns into zeros. If
# skip-idle alone saves s% and a-maps alone a% of a GEMM's joules a launch, both together save about
# s + 0.5 a (a-maps' share of padding rows left by skip-idle ~0.5; less a-maps' fixed cost, the `expert_a_maps`
# launch, a few us, which stays whole): e.g. s = 2, a = 1 -> ~2.5% fewer joules (and, at the power cap, ~2.5%
# faster sustained) on GEMM1, GEMM1 + SwiGLU, GEMM2, dh, dh + SwiGLU backward and dx; bounded by what balanced
# routing (no padding at all) saved in 2026-12-05 call 3, 4-7%. The weight gradients (dW1, dW2: neither knob
# reaches them) and every cuBLAS window are the controls: unchanged within ~1% (call 3 moved unchanged kernels up
# to 0.8% between soaks). The layer (M-grouped GEMMs ~0.6 of the step's joules): ~0.6 (s + 0.5 a) fewer joules a
# step with both on. If both's saving is under the larger of s and a, the knobs interfere (e.g. the idle
# warpgroup's skipped wgmma already took most of what zeros would save): land the better one alone.
# Binaries .dev/b43/both (branch energy-both: `BDIR=.dev/b43 bash docs/calls/2026-12-04c-build.sh both grouped_gemm
# layer_forward layer_backward graph`; the gemm and layer benches print MEGAMOE_SKIP_IDLE and MEGAMOE_A_MAPS in their
# header). Everything raw in $OUT/r.tgz (a call returns at most 8 files).
# Command `bash docs/calls/next-energy-both.sh`, carry [".dev/b43"]; expected ~8 min (under 9.5): unpacking ~10 s,
# the tests ~1-1.5 min (grouped_gemm whole ~45 s, layer_backward both_knobs ~30 s), each gemm bench ~75 s (10 GEMMs
# soaked 6 s each, the alternating lines, the references; 2026-12-05 call 3's took 72 s), each layer bench ~50 s.
# Every step's timeout keeps the expected time of the steps after it free inside 565 s (a late step is cut, not
# the call).
. "$(dirname "$0")/prelude.sh" b43
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b43/both
# a step's timeout: `want` s, less if the call's 565 s would not leave `rest` s for the steps after it (at least 5)
to() { local l=$(( 565 - $(el) - $2 )); (( l < 5 )) && l=5; (( l < $1 )) && echo $l || echo $1; }
t() { local n=$1 want=$2 rest=$3; shift 3
  timeout $(to $want $rest) $B/$n "$@" --include-ignored --test-threads=1 > $OUT/r/t_$n.txt 2>&1
  echo "== $n $* rc $? at $(el) s: $(grep 'test result' $OUT/r/t_$n.txt)"
  grep -E "FAILED|panicked|\.\.\. $" $OUT/r/t_$n.txt | cut -c1-300 | head -6; }
# the new tests: grouped_gemm whole (its both_knobs_*, skip_idle_*, a_maps_* and the rest), layer_backward both_knobs_*
t grouped_gemm 150 420
t layer_backward 100 400 both_knobs --nocapture
echo "layer_backward configurations bitwise equal: $(grep -c 'both knobs on bitwise both off' $OUT/r/t_layer_backward.txt) (40 expected)"
grep -E "^test both_knobs" $OUT/r/t_grouped_gemm.txt | cut -c1-120
export MEGAMOE_SEED=20261206
python3 -c 'import subprocess,time; t=time.time(); s=subprocess.run(["nvidia-smi","--query-gpu=timestamp","--format=csv,noheader"],capture_output=True,text=True).stdout.strip(); print(t, "|", s)' > $OUT/r/clock.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 > $OUT/r/smi.csv &
smi=$!
# bench b, soak s seconds, knobs (skip-idle, A maps), output name; `rest`: seconds kept for the benches after it
# (`soak`, not `s`: a local `s` would hide the start time that `el` and `to` read)
bench() { local b=$1 soak=$2 skip=$3 maps=$4 name=$5 want=$6 rest=$7
  MEGAMOE_SKIP_IDLE=$skip MEGAMOE_A_MAPS=$maps MEGAMOE_SOAK=$soak MEGAMOE_BENCH_ONLY=30B timeout $(to $want $rest) \
    $B/$b --bench > $OUT/r/$name.txt 2>&1
  echo "== $name rc $? at $(el) s ($(grep -m1 '^MEGAMOE_SKIP_IDLE' $OUT/r/$name.txt), $(grep -m1 '^MEGAMOE_A_MAPS' $OUT/r/$name.txt))"; }
bench gemm 3 0 shared gemm_off 110 325
bench gemm 3 1 shared gemm_skip 110 250
bench gemm 3 0 expert gemm_maps 110 175
bench gemm 3 1 expert gemm_both 110 100
bench layer 6 0 shared layer_off 80 50
bench layer 6 1 expert layer_both 80 0
kill $smi
for f in gemm_off gemm_skip gemm_maps gemm_both; do
  [ -f $OUT/r/$f.txt ] || continue
  echo "-- $f (alternating with cuBLAS)"
  alt_summary $OUT/r/$f.txt
  grep -E "FAILED|rel err [0-9.e+-]+ .*all written: false|panicked|Error" $OUT/r/$f.txt | cut -c1-200 | head -4
done
for f in layer_off layer_both; do
  [ -f $OUT/r/$f.txt ] || continue
  echo "-- $f"; grep -hE "^RESULT megamoe forward\+backward \(z saved|FAILED|panicked|Error" $OUT/r/$f.txt | cut -c1-200 | head -6
done
for f in gemm_off gemm_skip gemm_maps gemm_both layer_off layer_both; do
  [ -f $OUT/r/$f.txt ] && python3 ../benches/energy.py $OUT/r $f.txt | sed -E 's/Qwen3-30B-A3B //' > $OUT/r/energy_$f.txt
done
# per soak window against both off: time and joules a launch (or step); for ours also the joules normalised by the
# same process's cuBLAS window (drift removed), and the prediction s + 0.5 a from the two knobs alone
python3 - "$OUT/r" <<'EOF'
import os, re, sys
d = sys.argv[1]
pat = re.compile(r"ENERGY (.*): ([\d.]+) us a (\w+), \d+ samples, mean (\d+) W")
def read(f):
    out = {}
    if os.path.exists(f"{d}/{f}"):
        for line in open(f"{d}/{f}"):
            m = pat.match(line)
            if m:
                us, w = float(m.group(2)), int(m.group(4))
                out[m.group(1)] = (us, w * us / 1e6, w)
    return out
pct = lambda a, b: 100 * (a / b - 1)
g = {k: read(f"energy_gemm_{k}.txt") for k in ("off", "skip", "maps", "both")}
print("BOTH gemm soaks: us / J a launch / W per window; % against both off (J normalised by the window's cuBLAS: n)")
for name, (u0, j0, w0) in g["off"].items():
    cells, jn = [], {}
    for k in ("skip", "maps", "both"):
        if name not in g[k]:
            cells.append(f"{k} -"); continue
        u, j, w = g[k][name]
        c = name.replace(" megamoe", " cuBLAS dense")
        if name.endswith(" megamoe") and c in g[k] and c in g["off"]:
            jn[k] = pct(j / g[k][c][1], j0 / g["off"][c][1])
        cells.append(f"{k} {u:.0f} us {pct(u, u0):+.1f}%, {j:.3f} J {pct(j, j0):+.1f}%"
                     + (f" (n {jn[k]:+.1f}%)" if k in jn else "") + f", {w} W")
    line = f"BOTH {name}: off {u0:.0f} us {j0:.3f} J {w0} W | " + " | ".join(cells)
    if all(k in jn for k in ("skip", "maps", "both")):
        line += f" | predicted both n {jn['skip'] + 0.5 * jn['maps']:+.1f}%"
    print(line)
l0, l1 = read("energy_layer_off.txt"), read("energy_layer_both.txt")
for name, (u0, j0, w0) in l0.items():
    if name in l1:
        u, j, w = l1[name]
        print(f"BOTH {name}: off -> both {u0:.0f} -> {u:.0f} us ({pct(u, u0):+.1f}%), {j0:.3f} -> {j:.3f} J "
              f"({pct(j, j0):+.1f}%), {w0} -> {w} W")
EOF
echo "total $(el) s"
