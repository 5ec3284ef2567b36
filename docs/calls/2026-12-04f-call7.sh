#!/usr/bin/env bash
# Call 7 of 2026-12-04f: which kernels cuBLAS runs for the gemm bench's references (dense and strided-batched, 30B):
# their names carry the tile shape, cluster and schedule (nvjet_* / sm90_xmma_*), what ours compare against (the
# K-grouped f32 weight gradients reach 0.75-0.77 of cuBLAS dense, cuBLAS's batched f32 GEMM with the same output
# bytes 0.78-0.83). Names, grid, block and time per launch; main's gemm bench (.dev/b28/main/gemm).
# Command `bash docs/calls/2026-12-04f-call7.sh`, carry [".dev/b28"].
. "$(dirname "$0")/prelude.sh" b28
MEGAMOE_BENCH_ONLY=30B timeout 200 ncu --clock-control none -k 'regex:nvjet|sm90|xmma|cutlass|Kernel|gemm_[a-z]*kernel' \
  --launch-count 480 --metrics gpu__time_duration.sum,launch__shared_mem_per_block_dynamic,launch__registers_per_thread,launch__cluster_dim_x,launch__cluster_dim_y \
  --csv b28/main/gemm --bench > $OUT/r/ncu_cublas.csv 2> $OUT/r/ncu_cublas.err
echo "== ncu cuBLAS rc $? at $(el) s"
python3 - $OUT/r/ncu_cublas.csv <<'P'
import csv, sys, collections
rows = [x for x in csv.reader(open(sys.argv[1])) if len(x) > 10]
if not rows: print("no rows"); sys.exit()
h = rows[0]; k, g, b, m, v = (h.index(c) for c in ("Kernel Name", "Grid Size", "Block Size", "Metric Name", "Metric Value"))
d = collections.OrderedDict()
for x in rows[1:]:
    key = (x[k], x[g], x[b]); d.setdefault(key, collections.defaultdict(list))[x[m]].append(x[v])
for (name, grid, block), ms in d.items():
    t = [float(s.replace(",", "")) / 1000 for s in ms["gpu__time_duration.sum"]]
    other = " ".join(f"{mm.split('__')[1]}={ms[mm][0]}" for mm in ms if mm != "gpu__time_duration.sum")
    print(f"{len(t):3d}x {sorted(t)[len(t)//2]:8.1f} us grid {grid} block {block} {other} {name[:160]}")
P
tail -3 $OUT/r/ncu_cublas.err
echo "total $(el) s"
