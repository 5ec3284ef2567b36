#!/usr/bin/env bash
# Fiftieth session (any card): b122 = this session's tree (ep, fp8, graph tests, layer bench): the FP8 dh
# (`Fp8Dh::Fp8`, `grouped_gemm_fp8w_dswiglu[_gather]`) with its epilogue's whole 64-row groups of dz and s h staged
# and stored by the copy engine, the rest from registers, z read 64 columns at a time by `ld.global` at constant
# offsets (the first form, b120, read z and stored dz by generic accesses: each load waited for the store before
# it, so ~64 load latencies a row a tile). Runs the new tests with their rel errs, the fp8_ep ones, the layer bench
# at 30B (its FP8 step line `Dx, Fp8Dh::Fp8` against `Dx, Fp8Dh::Bf16`), memcheck of the FP8 dh test, then the
# whole ep, graph and fp8 suites as the bound leaves time. Carry [".dev/b122"].
# Order as run: the whole fp8 suite (the new FP8-dh tests in it, --nocapture for their rel errs), the fp8_ep tests,
# the layer bench at 30B, the ep bench (b122's ep_bench = main 1bdc6d1's: its new line, the FP8 step with
# `Fp8Dy::Codes` + `Fp8Dh::Fp8` against the bf16-dy FP8 step).
# Predicted: every test passes; dx, dtopk, dW1 within ~1e-2 of the FP8-dh model (2.5e-2 asserted); dW2 bitwise the
# bf16-dh backward's; the EP FP8-dh backward bitwise its single-GPU twin. Timing (30B, the layer bench's
# alternating FP8 steps): `Dx, Fp8Dh::Fp8` 1.03-1.08x the `Dx, Fp8Dh::Bf16` step (dh's GEMM ~0.8 ms -> ~0.5-0.6).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b122
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b122/main
BOUND=${BOUND:-580}
# the fp8 suite whole first (every FP8 kernel's parameter block grew `map_sh`), with the rel-err lines
timeout $(to 240 330) $B/fp8 --include-ignored --test-threads=1 --nocapture > $OUT/r/t_fp8.txt 2>&1
echo "== fp8 rc $? at $(el) s: $(grep 'test result' $OUT/r/t_fp8.txt)"
grep -E "FAILED|panicked|Fp8Dh|Fp8D|dw1_from|dy_codes" $OUT/r/t_fp8.txt | grep -v "^test .* ok$" | cut -c1-300 | head -14
timeout $(to 70 260) $B/ep fp8_ep --include-ignored --test-threads=1 --nocapture > $OUT/r/t_ep_fp8.txt 2>&1
echo "== ep fp8_ep rc $? at $(el) s: $(grep 'test result' $OUT/r/t_ep_fp8.txt)"
grep -E "FAILED|panicked|FP8 EP" $OUT/r/t_ep_fp8.txt | cut -c1-330 | head -16
MEGAMOE_BENCH_ONLY=30B timeout $(to 200 60) $B/layer_bench --bench > $OUT/r/layer.txt 2>&1
echo "== layer 30B rc $? at $(el) s"
grep -h "^RESULT megamoe forward Qwen\|^RESULT megamoe forward+backward (z saved\|FP8\|FAILED\|panicked" $OUT/r/layer.txt | cut -c1-330
timeout $(to 150 5) $B/ep_bench --bench > $OUT/r/ep_bench.txt 2>&1
echo "== ep bench rc $? at $(el) s"
grep -h "FP8\|FAILED\|skipped" $OUT/r/ep_bench.txt | cut -c1-330
echo "total $(el) s"
