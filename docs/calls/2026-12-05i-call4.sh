#!/usr/bin/env bash
# Thirty-fourth session, call 4: tests/graph.rs whole on b61 (dy gathered in the producer the default); call 3 gave
# it 60 s and cut it inside graph_qwen3_30b_a3b_t512 (its f64 reference of the 30B step is the slow part, or a hang:
# this call tells). If that test does not pass, it runs again with MEGAMOE_DY_GATHER=pass. Carry [".dev/b61"].
. "$(dirname "$0")/prelude.sh" b61
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b61/main
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
BOUND=400
t graph 300 60
grep -q "graph_qwen3_30b_a3b_t512 ... ok" $OUT/r/t_graph.txt || {
  MEGAMOE_DY_GATHER=pass timeout $(to 200 0) $B/graph graph_qwen3_30b_a3b_t512 --include-ignored > $OUT/r/t_graph_pass.txt 2>&1
  echo "== graph t512 with dy by the pass rc $? at $(el) s: $(grep 'test result' $OUT/r/t_graph_pass.txt)"; }
echo "total $(el) s"
