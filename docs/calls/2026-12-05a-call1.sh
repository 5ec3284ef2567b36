#!/usr/bin/env bash
# Run in the twenty-sixth session (2026-12-05) as call 1, command `bash docs/calls/2026-12-05a-call1.sh` (then named
# next-all-1.sh), carry [".dev/b38"]: 293 s; results in docs/RESULTS.md 2026-12-05 (the leads no gain; the tests' lines
# were cut from the returned output and ran again in call 2).
# Prepared in the twenty-fourth session (not run; no device was lent). The three prepared patches in one binary
# (branch next-all = main bc49e65 + wgrad-pairs + wgrad-skew + mgemm-skew, the shared SKEW_EVERY_TILE kept once,
# the two skew knobs sharing one table): docs/wip/wgrad-cluster-pairs-runtime.patch (`MEGAMOE_WGRAD_SCHED=clusters`
# takes its pairs at run time), docs/wip/wgrad-consumer-skew.patch (`MEGAMOE_WGRAD_SKEW`), docs/wip/mgemm-consumer-
# skew.patch (`MEGAMOE_GEMM_SKEW`). Each knob left at its default gives main's kernels, so one binary times all of
# them against main in the same process, and the tests of all three run once. Replaces next-wgrad-pairs.sh,
# next-wgrad-skew.sh and next-mgemm-skew.sh (their headers hold the reasoning; ~20 min of calls become ~13).
# Call 1 of 2: the GPU tests (grouped_gemm whole: bit for bit the static schedule at every lead, the clusters'
# pairs against single-CTA incl. one hot expert among 199 mostly empty, the cooperative M-grouped kernels under a
# lead; layer_forward with the cooperative SwiGLU and lead t2; layer_backward small cases with both leads at 2;
# the layer's cluster test with the run-time pairs), then the gemm bench at 30B in rotation (random routing; Zipf 1.0 in call 2).
# The tests' f64 references are the packed ones since main 1addf1a (5-16x faster on the CPU; never yet run on the
# GPU machine): a failure against the reference with every bitwise comparison passing would point at them.
# Predicted: tests pass (a wrong hand-over shows as a hang, cut by the timeouts, or as a bit difference);
# lead 2 (or t2) against 0: dW1 / dW2 f32 3-8% faster (0.75 -> 0.78-0.81 of cuBLAS), bf16 2-5%; GEMM2 3-6%, dx 2-4%,
# plain GEMM1 / dh 1-3%; the cooperative GEMM1 + SwiGLU 3-6% faster than itself at lead 0, about level with `_ew7`;
# lead 3 no better than 2, lead 1 about half of 2; clusters (run-time pairs) 1-3% faster than the single-CTA
# default on the weight gradients at random and at Zipf 1.0 routing; clusters with lead 2: the two gains add.
# dh + SwiGLU backward and GEMM1 + SwiGLU `_ew7` unchanged (they ignore the leads).
# Twenty-fifth session: the binaries are b38 (branch next-all-dy-g 558e40a = next-all rebased onto main ec17527
# + docs/wip/dy-in-recompute.patch (`MEGAMOE_DY_GATHER=recompute`, dy's rows copied by z's recompute's movers; its
# layer_backward tests `dy_in_recompute_*` run here, bitwise the pass's outputs, the 30B one at T = 1024; default
# off) + docs/wip/gemm-guards.patch (the bf16 kernels clamp any device offsets: grouped_gemm's
# `*_bad_offsets_stay_inside_the_buffers`, with and without a lead, run in the grouped_gemm binary below; a hang
# there would exit the process after 5 s), with main's input validation (`saved_state_*` runs here, ep's refused
# inputs in call 2). Knobs at their defaults: main's kernels plus the guards (+5..+35 PTX instructions a kernel,
# none in a k-loop; registers unchanged).
# Binaries .dev/b38/all (branch next-all-dy-g 558e40a: `git checkout next-all-dy-g && BDIR=.dev/b38 bash
# docs/calls/2026-12-04c-build.sh all grouped_gemm layer_backward layer_forward fp8 ep graph`). Command
# `bash docs/calls/next-all-1.sh`, carry [".dev/b38"] (~8 min: expected ~470 s, the timeouts' sum ~690).
. "$(dirname "$0")/prelude.sh" b38
timeout 240 b38/all/grouped_gemm --include-ignored --test-threads=1 > $OUT/r/grouped_gemm.txt 2>&1
echo "== grouped_gemm rc $? at $(el) s: $(grep 'test result' $OUT/r/grouped_gemm.txt)"
grep -E "FAILED|panicked|\.\.\. $" $OUT/r/grouped_gemm.txt | cut -c1-300 | head -6
MEGAMOE_SWIGLU=coop MEGAMOE_GEMM_SKEW=t2 timeout 70 b38/all/layer_forward small ragged one_token overlapped_gather_ragged persistent_forward_ragged --include-ignored --test-threads=1 > $OUT/r/layer_forward.txt 2>&1
echo "== layer_forward (M lead t2, cooperative SwiGLU, small cases) rc $? at $(el) s: $(grep 'test result' $OUT/r/layer_forward.txt)"
grep -E "FAILED|panicked|\.\.\. $" $OUT/r/layer_forward.txt | cut -c1-300 | head -6
MEGAMOE_GEMM_SKEW=2 MEGAMOE_WGRAD_SKEW=2 timeout 180 b38/all/layer_backward small ragged one_token half_the_experts bf16 dy_in_recompute saved_state --include-ignored --test-threads=1 > $OUT/r/layer_backward.txt 2>&1
echo "== layer_backward (both leads 2, small cases, dy in the recompute) rc $? at $(el) s: $(grep 'test result' $OUT/r/layer_backward.txt)"
grep -E "FAILED|panicked|\.\.\. $" $OUT/r/layer_backward.txt | cut -c1-300 | head -6
MEGAMOE_WGRAD_SKEW=t2 timeout 60 b38/all/layer_backward clustered --include-ignored --test-threads=1 > $OUT/r/layer_backward_cl.txt 2>&1
echo "== layer_backward clustered (run-time pairs, wgrad lead t2) rc $? at $(el) s: $(grep 'test result' $OUT/r/layer_backward_cl.txt)"
grep -E "FAILED|panicked|\.\.\. $" $OUT/r/layer_backward_cl.txt | cut -c1-300 | head -6
# W (wgrad lead) : G (M-grouped lead) : weight-gradient schedule : SwiGLU form : routing
for v in 0:0:dynamic:ew7:random 2:2:dynamic:ew7:random t2:t2:dynamic:ew7:random 0:0:clusters:ew7:random \
         2:2:clusters:coop:random 3:0:dynamic:coop:random 0:0:dynamic:ew7:random 2:2:dynamic:ew7:random \
         t2:t2:dynamic:ew7:random 0:0:clusters:ew7:random 1:t2:dynamic:coop:random t2:t2:clusters:ew7:random; do
  IFS=: read w g sc sw rt <<< "$v"; seed=""
  [ $rt = zipf ] && { rt=zipf:1.0; seed=4242; }
  f=$OUT/r/gemm_w${w}_g${g}_${sc}_${sw}_${rt/:/}_$(el).txt
  MEGAMOE_WGRAD_SKEW=$w MEGAMOE_GEMM_SKEW=$g MEGAMOE_WGRAD_SCHED=$sc MEGAMOE_SWIGLU=$sw MEGAMOE_SEED=$seed \
    MEGAMOE_BENCH_ROUTING=$rt MEGAMOE_BENCH_ONLY=30B timeout 40 b38/all/gemm --bench > $f 2>&1
  echo "== gemm 30B W $w G $g $sc $sw $rt rc $? at $(el) s"
  grep -E "^RESULT gemm " $f | grep -oE "rel err [0-9A-Za-z.+-]+|all written: [a-z]+" | awk '/rel err/ { n++; if ($3 + 0 > m || $3 !~ /^[0-9]/) m = $3 } /written: false/ { u++ } END { print "  " n " checks, max rel err " m ", not all written " u + 0 }'
  grep -E "RESULT gemm-alternating" $f | sed -E "s/.*(fwd|bwd) ([^(]*(\([^)]*\))?) \((K|M)-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1 \2: \5 \6 \7/" | paste -sd'|' | sed 's/  */ /g'
done
python3 ../benches/rotation.py $OUT/r
echo "total $(el) s"
