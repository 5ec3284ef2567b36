#!/usr/bin/env bash
# Thirty-third session, call 4: the gathering producers with each thread's eight row addresses set up once a tile
# (`GatherRows`; b59 = main 4df4110 + that + the layer bench's alternating alt forward). Call 3 (H100) had
# grouped_gemm_swiglu_ew7_gather_dyn at 2.19 ms, tensor pipe 51%, 383 M instructions, against _ew7_dyn's
# 1.25 ms / 92% / 219 M: the SASS read each row's token from shared memory, a constant and the address in series
# before its cp.async (an asm! the loads could not pass), ~8 x 60 cycles a k-step. Predicted now: ~1.30-1.40 ms,
# tensor >= 80%, instructions ~240 M; the in-producer forward 5-9% faster than the overlapped default. First the
# gathering tests (all three forms, bitwise the pass), then ncu, then the layer bench (in-producer alternating).
# Carry [".dev/b59"].
. "$(dirname "$0")/prelude.sh" b59
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-300}
B=b59/main
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
t layer_forward 60 150 in_producer
grep -h "rel err" $OUT/r/t_layer_forward.txt | head -3
m="gpu__time_duration.sum,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,dram__bytes_read.sum,lts__t_bytes.sum"
MEGAMOE_GATHER=in-producer MEGAMOE_BENCH_REPS=1 MEGAMOE_BENCH_HEAT=0 MEGAMOE_BENCH_ONLY=30B \
  timeout $(to 70 80) ncu -k 'regex:grouped_gemm_swiglu' --launch-skip 1 --launch-count 2 --metrics "$m" --csv \
  $B/layer --bench > $OUT/r/ncu.csv 2> $OUT/r/ncu.err
echo "== ncu rc $? at $(el) s"; tail -1 $OUT/r/ncu.err
python3 - $OUT/r/ncu.csv <<'P2'
import csv, sys, collections
rows = [x for x in csv.reader(open(sys.argv[1])) if len(x) > 10]
if rows:
    h = rows[0]; i, k, m, v = (h.index(c) for c in ("ID", "Kernel Name", "Metric Name", "Metric Value"))
    by = collections.OrderedDict()
    for x in rows[1:]: by.setdefault((x[i], x[k]), {})[x[m]] = x[v]
    for (i, k), d in by.items():
        print(" ", i, k[:60], "; ".join(f"{a.split('__')[-1]}={b}" for a, b in d.items()))
P2
f=$OUT/r/layer.txt
MEGAMOE_BENCH_ONLY=30B timeout $(to 70 5) $B/layer --bench > $f 2>&1
echo "== layer rc $? at $(el) s"
grep -h "^RESULT megamoe forward Q\|^RESULT megamoe forward, x gathered\|^RESULT megamoe forward, two launches\|^RESULT megamoe forward+backward (z saved, bf16 weight gradients) Q" $f | cut -c1-300
echo "total $(el) s"
