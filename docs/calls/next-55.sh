#!/usr/bin/env bash
# Fifty-first session, second call (any card): b124 = main after the FP8 dh's producer prefetches into L2 the z that
# its epilogue reads (tensor-map prefetches of the tile's 16 boxes of 64 x 64: the gathering producer's thread 32
# for the previous tile once its barriers pass, the plain producer's thread with its last 4 k-steps). The first
# call (next-54.sh, b123, an H100) measured the FP8 dh kernel at 769 us under ncu against the FP8 dx's 959 us for
# twice the FLOPs: ~290 us over its main loop at dx's rate, i.e. its epilogue's z reads (403 MB) exposed while
# every SM's epilogue runs at about the same time. next-54.sh's steps on b124. Carry [".dev/b124"].
# Predicted: every test passes (the prefetch is a hint: same bits); the FP8 dh kernel 600-700 us under ncu (the z
# reads found in L2; the dz and s h stores drain while the next tile's main loop runs); the layer bench's
# `Dx, Fp8Dh::Fp8` step within 0.99-1.03x the `Dx, Fp8Dh::Bf16` one (it was 0.972x: the dy gather pass for dW2
# that the bf16 dh's producer saves remains).
BDIR=b124 exec bash "$(dirname "$0")/next-54.sh"
