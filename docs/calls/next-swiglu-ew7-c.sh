#!/usr/bin/env bash
# Prepared in the twentieth session (not run): call C of docs/wip/swiglu-ew7.patch (see next-swiglu-ew7-a.sh):
# graph and layer_backward with the patch's default, then the layer bench at 30B with ew7, with the patched
# default and with main (separate processes: compare with the +-1.5% between binaries in mind). Carry [".dev/b23"]
# (~8 min).
set -uo pipefail
cd "$(dirname "$0")/../../.dev"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/r
for f in b23/*/*.gz; do [ -f $f ] && gunzip -f $f && chmod +x ${f%.gz}; done
for t in graph layer_backward; do
  timeout 170 b23/sw/$t --include-ignored --test-threads=1 > $OUT/r/${t}_coop.txt 2>&1
  echo "== $t (patched default) rc $? at $(el) s: $(grep 'test result' $OUT/r/${t}_coop.txt)"
  grep -E "FAILED|panicked" $OUT/r/${t}_coop.txt | cut -c1-300 | head -6
done
for v in sw:ew7 sw:coop base:coop; do
  name=${v%%:*}; sw=${v##*:}
  MEGAMOE_SWIGLU=$sw MEGAMOE_BENCH_ONLY=30B timeout 90 b23/$name/layer --bench > $OUT/r/layer_30B_${name}_$sw.txt 2>&1
  echo "== layer 30B $name $sw rc $? at $(el) s"
  grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z saved)" $OUT/r/layer_30B_${name}_$sw.txt | cut -c1-200
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
echo "total $(el) s"
