#!/usr/bin/env bash
# Prepared in the forty-third session (not run: the device budget was spent). Settles docs/RESULTS.md 2026-12-06f
# call 7: compute-sanitizer racecheck reported write-write hazards at the FP8 gathering producer's eight LDGSTS
# (cp.async) sites, each the same instruction rewriting its stage slot a ring cycle later, ordered by mbarriers only.
# Here: racecheck on the landed bf16 gathering producers (layer_forward in_producer_ragged_save_z: GEMM1 + SwiGLU
# `_ew7_gather_dyn`; in_producer_dy_ragged_save_z: the dh + SwiGLU backward's dy gather), then the FP8 test again,
# each also with `--racecheck-memcpy-async no` where this sanitizer takes it (its help is printed first). b96 =
# main bb219ad's test binaries (fp8, layer_forward; rebuild as next-pick7.sh's header says). Carry [".dev/b96"].
# Predicted: the same LDGSTS write-write reports on the bf16 kernels (the tool's model of cp.async completed by
# mbarrier arrivals, not by cp.async.wait_group), none on the non-gathering TMA kernels; with memcpy-async race
# detection off, none.
# RC=b100 (forty-fourth session): b96's layer_forward with b98's fp8; carry [".dev/b100"].
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" ${RC:-b96}
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-300}
cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
"$cs" --help 2>&1 | grep -i -A2 "racecheck-memcpy-async\|racecheck-" | head -12
mca=""; "$cs" --help 2>&1 | grep -q "racecheck-memcpy-async" && mca="--racecheck-memcpy-async no"
# SPECS: "BINARY TEST;BINARY TEST;..." (forty-fourth session: the ragged layer tests' rings never wrap, so a 30B one)
SPECS=${SPECS:-"layer_forward in_producer_ragged_save_z;layer_forward in_producer_dy_ragged_save_z;fp8 fp8_x_gathered_in_the_producer_is_bitwise_the_pass"}
IFS=';' read -ra specs <<< "$SPECS"
for spec in "${specs[@]}"; do
  set -- $spec
  for tag in default no_memcpy_async; do
    opt=""; [ "$tag" = no_memcpy_async ] && { [ -n "$mca" ] || continue; opt="$mca"; }
    timeout $(to ${EACH:-60} 20) "$cs" --tool racecheck $opt --error-exitcode 9 ${RC:-b96}/main/$1 --include-ignored --exact $2 \
      --test-threads=1 > $OUT/r/racecheck_${2}_$tag.txt 2>&1
    echo "== racecheck $2 ($tag) rc $? at $(el) s"
    grep -E "SUMMARY|test result" $OUT/r/racecheck_${2}_$tag.txt | head -2
    grep -E "Race reported" $OUT/r/racecheck_${2}_$tag.txt | sed -E 's/\+0x[0-9a-f]+//g' | sort | uniq -c | head -6
  done
done
echo "total $(el) s"
