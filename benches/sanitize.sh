#!/usr/bin/env bash
# compute-sanitizer on small cases (issue 5: memcheck and racecheck clean), from a gpu-bundle folder:
#   bash sanitize.sh [OUT_DIR]        (one file back: OUT_DIR/sanitize.txt)
# Each tool over one emulated EP test (dispatch, combine, bounded waits), one layer forward and one layer backward;
# then racecheck over two cases whose rings are refilled (the gathering producers).
# The EP waits are bounded by a 10 s default timeout; the tools slow kernels down, so a timeout here is reported
# as such, not as a race.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-.}"
mkdir -p "$out"
: > "$out/sanitize.txt"
cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
rc=0
for tool in memcheck racecheck; do
  for t in "ep ep2_uneven_one_rank_empty" "layer_forward small_uniform" "layer_backward small_recompute"; do
    set -- $t
    echo "== $tool $1 $2"
    timeout 90 "$cs" --tool "$tool" --error-exitcode 9 "$here/$1" --include-ignored --exact "$2" --test-threads=1 \
      > /tmp/sanitize_one.txt 2>&1
    r=$?
    { echo "######## $tool $1 $2 (rc $r)"; cat /tmp/sanitize_one.txt; } >> "$out/sanitize.txt"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result|Timeout" /tmp/sanitize_one.txt | head -5
    [ $r -eq 0 ] || { echo "rc $r"; rc=1; }
  done
done
# racecheck where the rings are refilled many times (the small cases above fit a block's tiles in one pass of its
# ring): the bf16 gathering layer at 30B, forward and backward (~100 s under the tool on an H100, clean), and the FP8
# gather with the tool's tracking of `cp.async` off: with it on, racecheck reports the FP8 gathering producer's own
# `cp.async` rewrites of its ring slots, which the ring's mbarriers order (docs/NOTES.md 2026-12-06g)
for t in "layer_forward in_producer_qwen3_30b_a3b_t4096_save_z" \
         "fp8 fp8_x_gathered_in_the_producer_is_bitwise_the_pass --racecheck-memcpy-async no"; do
  set -- $t
  bin=$1 name=$2; shift 2
  echo "== racecheck $bin $name $*"
  timeout 240 "$cs" --tool racecheck "$@" --error-exitcode 9 "$here/$bin" --include-ignored --exact "$name" \
    --test-threads=1 > /tmp/sanitize_one.txt 2>&1
  r=$?
  { echo "######## racecheck $bin $name $* (rc $r)"; cat /tmp/sanitize_one.txt; } >> "$out/sanitize.txt"
  grep -E "RACECHECK SUMMARY|test result|Timeout" /tmp/sanitize_one.txt | head -5
  [ $r -eq 0 ] || { echo "rc $r"; rc=1; }
done
exit $rc
