# Sourced by the device-call scripts written from the twenty-first session on: `. "$(dirname "$0")/prelude.sh" DIR`
# (DIR: the prebuilt binaries' folder under .dev, carried with the call). Moves to .dev, defines `el` (seconds since
# the start), puts PyTorch's pip libcublas on LD_LIBRARY_PATH (for cudarc's cuBLAS), makes $OUT/r and unpacks
# DIR/*/*.gz. The scripts of earlier sessions spell the same lines out.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.dev"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p "$OUT/r"
for f in "$1"/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
# The gemm bench's alternating lines of FILE, one per GEMM: "  fwd NAME: ours us  cuBLAS us  ratio".
alt_summary() { grep -E "RESULT gemm-alternating" "$1" | sed -E "s/.*(fwd|bwd) ([^(]*(\([^)]*\))?) \((K|M)-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1 \2: \5 \6 \7/"; }
# A step's timeout: `want` s, less if the call's bound (BOUND s, default 565) would not leave `rest` s for the steps
# after it (at least 5): a late step is cut short, not the call. (`soak`, never a local `s`: `el` reads `s`.)
to() { local l=$(( ${BOUND:-565} - $(el) - $2 )); (( l < 5 )) && l=5; (( l < $1 )) && echo $l || echo $1; }
# The test binary $B/NAME whole (or as the extra arguments filter it), timed by `to WANT REST`: its result line and
# its failures (scripts written before this one define their own `t`, which replaces this).
t() { local n=$1 want=$2 rest=$3; shift 3
  timeout $(to $want $rest) $B/$n "$@" --include-ignored --test-threads=1 > $OUT/r/t_$n.txt 2>&1
  echo "== $n $* rc $? at $(el) s: $(grep 'test result' $OUT/r/t_$n.txt)"
  grep -E "FAILED|panicked|\.\.\. $|seed" $OUT/r/t_$n.txt | cut -c1-300 | head -8; }
# Power and clock beside the soaks: clock.txt ties nvidia-smi's clock to the host's, smi.csv samples every 100 ms
# until `smi_stop`.
smi_start() {
  python3 -c 'import subprocess,time; t=time.time(); s=subprocess.run(["nvidia-smi","--query-gpu=timestamp","--format=csv,noheader"],capture_output=True,text=True).stdout.strip(); print(t, "|", s)' > $OUT/r/clock.txt
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 > $OUT/r/smi.csv &
  smi_pid=$!; }
smi_stop() { kill $smi_pid; }
# Each gemm bench output NAME ($OUT/r/NAME.txt): its alternating lines and failures (`alt_of NAME...`), its soak
# windows' joules into energy_NAME.txt (`energy_of NAME...`).
alt_of() { local f; for f in "$@"; do [ -f $OUT/r/$f.txt ] || continue
  echo "-- $f (alternating with cuBLAS)"; alt_summary $OUT/r/$f.txt
  grep -E "FAILED|all written: false|panicked|Error" $OUT/r/$f.txt | cut -c1-200 | head -4; done; }
energy_of() { local f; for f in "$@"; do
  [ -f $OUT/r/$f.txt ] && python3 ../benches/energy.py $OUT/r $f.txt | sed -E 's/Qwen3-30B-A3B //' > $OUT/r/energy_$f.txt; done; }
# One 30B bench of $B soaked with a run-time knob: `knob_bench VAR VALUE BENCH SOAK NAME WANT REST` runs
# VAR=VALUE MEGAMOE_SOAK=SOAK $B/BENCH into $OUT/r/NAME.txt under `to WANT REST`, and echoes the knob its header read.
knob_bench() { local var=$1 val=$2 b=$3 soak=$4 name=$5 want=$6 rest=$7
  env "$var=$val" MEGAMOE_SOAK=$soak MEGAMOE_BENCH_ONLY=30B timeout $(to $want $rest) $B/$b --bench > $OUT/r/$name.txt 2>&1
  echo "== $name rc $? at $(el) s ($(grep -m1 "^$var" $OUT/r/$name.txt))"; }
# The metrics of the list `$1` (space-separated) that this ncu knows for gh100, comma-separated (an unknown name would
# fail the whole ncu run; `launch__*` are always kept; a failed query keeps them all). Writes $OUT/r/metrics.txt.
ncu_metrics() { local want="$1" m="" x b
  ncu --query-metrics --chip gh100 > $OUT/r/metrics.txt 2>&1
  if [ $(wc -l < $OUT/r/metrics.txt) -lt 200 ]; then echo $want | tr ' ' ','; return; fi
  for x in $want; do b=${x%%.*}
    if grep -q "^$b " $OUT/r/metrics.txt || [[ $b == launch__* ]]; then m="$m,$x"; else echo "dropped $x" >&2; fi; done
  echo ${m#,}; }
# An ncu --csv file ($1) as one line per launch: id, kernel (first 44 characters), each metric's last name part.
ncu_table() { python3 - "$1" <<'PY'
import csv, sys, collections
rows = [x for x in csv.reader(open(sys.argv[1])) if len(x) > 10]
if rows:
    h = rows[0]; i, k, m, v = (h.index(c) for c in ("ID", "Kernel Name", "Metric Name", "Metric Value"))
    by = collections.OrderedDict()
    for x in rows[1:]: by.setdefault((x[i], x[k]), {})[x[m]] = x[v]
    for (i, k), d in by.items():
        print(" ", i, k[:44], "; ".join(f"{a.split('__')[-1]}={b}" for a, b in d.items()))
PY
}
# The layer's step traced (benches/trace_step.py KEY z) with the environment's extra VAR=VALUE settings:
# `trace_key KEY TAG VAR=VALUE...` into $OUT/r/trace_KEY_TAG.txt under `to 25 5`: its span and its eight longest
# kernels.
trace_key() { local key=$1 tag=$2; shift 2
  local f=$OUT/r/trace_${key}_$tag.txt
  env "$@" PYTHONUNBUFFERED=1 timeout $(to 25 5) python3 ../benches/trace_step.py $key z > $f 2>&1
  echo "== $key $tag rc $? at $(el) s: $(grep -h "^RESULT trace-step .*megamoe.*: span" $f | sed -E 's/.*: span/span/' | cut -c1-90)"
  grep -h "Traceback\|Error" $f | head -3
  grep -h "^RESULT trace-step kernel .*megamoe" $f | sed -E 's/RESULT trace-step kernel [^:]*: //' | head -8 | cut -c1-90; }
