#!/usr/bin/env bash
# Twenty-first session, call 2 (calls B and C of docs/wip/swiglu-ew7.patch in one): the layer bench at 30B with
# GEMM1 + SwiGLU by epilogue warps (MEGAMOE_SWIGLU=ew7), with the patched cooperative default and with main
# (separate processes), then layer_forward, layer_backward and graph under ew7 (the default this session makes).
# Binaries: .dev/b23 (see next-swiglu-ew7-a.sh). Carry [".dev/b23"].
set -uo pipefail
cd "$(dirname "$0")/../../.dev"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/r
for f in b23/*/*.gz; do [ -f $f ] && gunzip -f $f && chmod +x ${f%.gz}; done
for v in sw:ew7 base:coop sw:coop sw:ew7; do
  name=${v%%:*}; sw=${v##*:}
  MEGAMOE_SWIGLU=$sw MEGAMOE_BENCH_ONLY=30B timeout 80 b23/$name/layer --bench > $OUT/r/layer_30B_${name}_${sw}_$(el).txt 2>&1
  echo "== layer 30B $name $sw rc $? at $(el) s"
  grep -hE "^RESULT megamoe (forward Qwen|forward\+backward \(z saved)" $OUT/r/layer_30B_${name}_${sw}_*.txt | tail -2 | cut -c1-220
done
for t in layer_forward layer_backward graph; do
  MEGAMOE_SWIGLU=ew7 timeout 175 b23/sw/$t --include-ignored --test-threads=1 > $OUT/r/${t}_ew7.txt 2>&1
  echo "== $t MEGAMOE_SWIGLU=ew7 rc $? at $(el) s: $(grep 'test result' $OUT/r/${t}_ew7.txt)"
  grep -E "FAILED|panicked" $OUT/r/${t}_ew7.txt | cut -c1-300 | head -6
done
echo "total $(el) s"
