#!/usr/bin/env bash
# Prepared in the twenty-ninth session (not run). main's GPU tests whole, built from main after that session's
# changes, none of which ran on a GPU: tests made able to fail (a helper's audit: the accumulating backward's dx and
# dtopk poisoned again and checked bitwise; the forward variants' backward poisons and checks dW1 / dW2; the FP8
# wide-tiles test compares dW2; EP graph replays on alternating inputs; y and dx checked token by token,
# check::close_rows at 3e-2; half-empty routing ragged at k = E/2; the NaN-token row checked written), and host
# fixes (policy names as errors, Fp8Weights' shape checks first, MapCache::trim never during a capture). Kernels: the
# same PTX as b41's (main's kernels have not changed since bab4cc3 but for byte-identical refactors).
# Predicted: every test passes. A failure is first a question about the test (the new per-token bound 3e-2, the
# canonical NaN 0x7fff in the NaN-token test, half-empty's repeats at RAGGED) before one about the kernels.
# Binaries .dev/b47/main (`BDIR=.dev/b47 bash docs/calls/2026-12-04c-build.sh main grouped_gemm layer_forward
# layer_backward graph fp8 ep`, benches removed). Run it once whatever lands first has been landed and rebuilt: then
# build b47 again from that main.
# Command `bash docs/calls/next-main-tests.sh`, carry [".dev/b47"]; expected ~7 min (bound 570 s).
. "$(dirname "$0")/prelude.sh" b47
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b47/main
BOUND=570
t layer_forward 80 480
t layer_backward 140 340
t graph 50 290
t grouped_gemm 80 210
t fp8 150 60
t ep 60 0
echo "total $(el) s"
