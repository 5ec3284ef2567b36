#!/usr/bin/env bash
# Prepared in the twenty-fourth session (not run). Call 2 of 2 of next-all-1.sh's binary (branch next-all: the
# run-time cluster pairs, the weight gradients' consumer lead, the M-grouped consumer lead): the gemm bench at
# Zipf 1.0 routing (four knob sets, one draw), then the 30B layer bench, forward and forward + backward, in
# rotation over the knobs; run it right after call 1 (the machine warm), and
# only if call 1's tests passed. Edit the list to the leads call 1 found best before running if they differ.
# Predicted (against W 0 G 0 in the same call): the forward -20..-40 us (GEMM2 with the M-grouped lead), forward
# + backward -120..-270 us (GEMM2 and dx -60..-120, the f32 weight gradients -60..-150); the clusters' run-time
# pairs a further 0..-60 us; the cooperative SwiGLU with lead t2 level with `_ew7` in the forward. At Zipf 1.0 the
# run-time pairs 1-3% faster than the single-CTA default on the weight gradients (their static walk modelled 6-13%
# over ideal there), and the leads' gains as at random routing.
# Twenty-fifth session: also the A/B of docs/wip/dy-in-recompute.patch (b38 = next-all + it + the guards): predicted, forward +
# backward with z recomputed -150..-200 us (the 237 us dy gather pass gone; the recompute of z slower by 30-80 us,
# its movers' 604 MB more beside GEMM1's ~1.3 ms, which is bound by L2, not DRAM); every other line unchanged.
# Binaries .dev/b38/all (as next-all-1.sh). Command `bash docs/calls/next-all-2.sh`, carry [".dev/b38"] (~8 min: expected ~480 s; the tests at the end may be cut by the call's 600 s).
. "$(dirname "$0")/prelude.sh" b38
# the weight gradients under Zipf 1.0 routing, one draw (MEGAMOE_SEED): W lead : G lead : schedule
for v in 0:0:dynamic 0:0:clusters 2:2:dynamic t2:t2:clusters; do
  IFS=: read w g sc <<< "$v"
  f=$OUT/r/gemm_w${w}_g${g}_${sc}_zipf1.0_$(el).txt
  MEGAMOE_WGRAD_SKEW=$w MEGAMOE_GEMM_SKEW=$g MEGAMOE_WGRAD_SCHED=$sc MEGAMOE_SEED=4242 MEGAMOE_BENCH_ROUTING=zipf:1.0 \
    MEGAMOE_BENCH_ONLY=30B timeout 40 b38/all/gemm --bench > $f 2>&1
  echo "== gemm 30B W $w G $g $sc zipf:1.0 rc $? at $(el) s"
  grep -E "^RESULT gemm " $f | grep -oE "rel err [0-9A-Za-z.+-]+|all written: [a-z]+" | awk '/rel err/ { n++; if ($3 + 0 > m || $3 !~ /^[0-9]/) m = $3 } /written: false/ { u++ } END { print "  " n " checks, max rel err " m ", not all written " u + 0 }'
  grep -E "RESULT gemm-alternating" $f | sed -E "s/.*(fwd|bwd) ([^(]*(\([^)]*\))?) \((K|M)-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1 \2: \5 \6 \7/" | paste -sd'|' | sed 's/  */ /g'
done
# the last field: where the backward gathers dy (MEGAMOE_DY_GATHER): it changes only the "z recomputed" line, so
# the repeats of 0:0 and 2:2 with dy in the recompute are both the leads' repeats (z saved) and its A/B (z recomputed)
for v in 0:0:dynamic:ew7:pass 2:2:dynamic:ew7:pass t2:t2:dynamic:ew7:pass t2:t2:clusters:ew7:pass \
         0:0:dynamic:ew7:recompute 2:2:dynamic:ew7:recompute t2:t2:dynamic:coop:pass; do
  IFS=: read w g sc sw dy <<< "$v"
  f=$OUT/r/layer_w${w}_g${g}_${sc}_${sw}_dy${dy}_$(el).txt
  MEGAMOE_WGRAD_SKEW=$w MEGAMOE_GEMM_SKEW=$g MEGAMOE_WGRAD_SCHED=$sc MEGAMOE_SWIGLU=$sw MEGAMOE_DY_GATHER=$dy \
    MEGAMOE_BENCH_ONLY=30B timeout 75 b38/all/layer --bench > $f 2>&1
  echo "== layer 30B W $w G $g $sc $sw dy $dy rc $? at $(el) s"
  grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z (saved|recomputed)\) |forward\+backward \(z saved, bf16)" $f | cut -c1-200
done
# last (a hang here costs no measurement): the fp8 and ep tests whole, the f64 references they compare with being
# the packed ones since main 1addf1a (never yet run on the GPU machine; agree with the old loops to 1.9e-15 on the CPU)
for t in fp8 ep; do
  timeout 100 b38/all/$t --include-ignored --test-threads=1 > $OUT/r/$t.txt 2>&1
  echo "== $t rc $? at $(el) s: $(grep 'test result' $OUT/r/$t.txt)"
  grep -E "FAILED|panicked|\.\.\. $" $OUT/r/$t.txt | cut -c1-300 | head -6
done
python3 ../benches/rotation.py $OUT/r
echo "total $(el) s"
