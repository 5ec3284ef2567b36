#!/usr/bin/env bash
# A prepared device-call script run here, on stubs, before it costs device time: `bash docs/calls/dry-run.sh
# docs/calls/next-X.sh [ENV=VALUE ...]`. In a throw-away worktree of HEAD (prelude.sh unpacks the carried binaries
# in place, so the real .dev must not be used), every gzipped binary under .dev/b*/*/ is mirrored as a stub that
# prints its arguments, the knobs the benches print (MEGAMOE_SKIP_IDLE, MEGAMOE_A_MAPS) and a passing test result;
# nvidia-smi, ncu and compute-sanitizer are stubs too (python3 and the repo's scripts are real; PyTorch is absent here, so its steps
# fail). Shows each step's line (rc, elapsed seconds), shell errors, and what the call would bring back under $OUT.
# Catches what shell alone gets wrong (the twenty-eighth session's: a `local s` in a bench function hid prelude's
# start time, so every bench of next-energy-both.sh would have run under a 5 s timeout).
set -euo pipefail
script=$(realpath "$1"); shift
repo=$(git -C "$(dirname "$script")" rev-parse --show-toplevel)
rel=${script#"$repo"/}
dry=$(mktemp -d /tmp/megamoe-dry.XXXX)
git -C "$repo" worktree add -q --detach "$dry/tree" HEAD
trap 'git -C "$repo" worktree remove --force "$dry/tree"; rm -rf "$dry"' EXIT
cp "$script" "$dry/tree/$rel" # the script as it is now, committed or not
mkdir -p "$dry/bin" "$dry/out"
cat >"$dry/stub" <<'EOF'
#!/bin/sh
echo "stub $0 $*"
echo "MEGAMOE_SKIP_IDLE=${MEGAMOE_SKIP_IDLE:-0}"
echo "MEGAMOE_A_MAPS=${MEGAMOE_A_MAPS:-shared}"
echo "test result: ok. 1 passed"
sleep 1
EOF
chmod +x "$dry/stub"
for f in "$repo"/.dev/b*/*/*.gz; do
    [ -f "$f" ] || continue
    d="$dry/tree/.dev/${f#"$repo"/.dev/}"
    mkdir -p "$(dirname "$d")"
    gzip -c "$dry/stub" >"$d"
done
cat >"$dry/bin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
*-lms*) while true; do echo "2026/01/01 00:00:00.000, 1400, 690.0, 60"; sleep 0.1; done ;;
*) echo "2026/01/01 00:00:00.000" ;;
esac
EOF
cat >"$dry/bin/ncu" <<'EOF'
#!/bin/sh
echo "stub ncu $*" >&2
case "$*" in *query-metrics*) seq 1 300 | sed 's/^/stub_metric_/; s/$/ Counter stub/' ;; esac
EOF
# compute-sanitizer runs the program it is given (a stub binary here) and reports no errors
cat >"$dry/bin/compute-sanitizer" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in --tool|--error-exitcode) shift 2 ;; --*) shift ;; *) break ;; esac; done
"$@"; rc=$?
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
EOF
chmod +x "$dry/bin/"*
cd "$dry/tree"
set +e
env PATH="$dry/bin:$PATH" OUT="$dry/out" "$@" timeout 600 bash "$rel" >"$dry/log" 2>&1
echo "dry run of $rel: rc $?"
set -e
grep -E "^== |rror|No such file|command not found|unbound variable|syntax" "$dry/log" | head -60
echo "-- under \$OUT:"
find "$dry/out" -type f | sed "s|$dry/out/||"
for t in $(find "$dry/out" -name '*.tgz'); do echo "-- ${t#"$dry/out/"}:"; tar tzf "$t" | head -40; done
