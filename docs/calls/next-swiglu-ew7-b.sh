#!/usr/bin/env bash
# Prepared in the twentieth session (not run): call B of docs/wip/swiglu-ew7.patch (see next-swiglu-ew7-a.sh):
# layer_forward and layer_backward with GEMM1 + SwiGLU by epilogue warps (MEGAMOE_SWIGLU=ew7), then layer_forward
# with the patch's default (the cooperative kernels computing h from bf16 z; its persistent forward is tested bit
# for bit against two launches). Carry [".dev/b23"] (~8 min). Then next-swiglu-ew7-c.sh.
# Read call A's grouped_gemm line "bitwise the cooperative kernel's" first: under MEGAMOE_SWIGLU=ew7,
# layer_forward's `gather_in_producer` and its Forward::Persistent variants compare the 192-column kernel with the
# 128-column ones bit for bit (gathering producer, ffn_fused_fwd). If m64n192 and m64n256 wgmma do not give the same
# bits, those asserts fail with no kernel bug: then compare them against the reference instead under that policy.
set -uo pipefail
cd "$(dirname "$0")/../../.dev"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/r
for f in b23/*/*.gz; do [ -f $f ] && gunzip -f $f && chmod +x ${f%.gz}; done
for v in ew7:layer_forward ew7:layer_backward coop:layer_forward; do
  sw=${v%%:*}; t=${v##*:}
  MEGAMOE_SWIGLU=$sw timeout 170 b23/sw/$t --include-ignored --test-threads=1 > $OUT/r/${t}_$sw.txt 2>&1
  echo "== $t MEGAMOE_SWIGLU=$sw rc $? at $(el) s: $(grep 'test result' $OUT/r/${t}_$sw.txt)"
  grep -E "FAILED|panicked" $OUT/r/${t}_$sw.txt | cut -c1-300 | head -6
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
echo "total $(el) s"
