#!/usr/bin/env bash
# builds ${BDIR:-.dev/b11}/$1 with the current tree: layer + gemm benches and the named tests (release), stripped + gzipped
set -euo pipefail
v=$1; shift
d=${BDIR:-.dev/b11}/$v; mkdir -p $d
exe() { grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | grep /deps/ | tail -1; }
for b in layer gemm; do
  e=$(cargo bench --bench $b --no-run --message-format=json 2>/dev/null | exe); cp $e $d/$b
done
for t in "$@"; do
  e=$(cargo test --release --test $t --no-run --message-format=json 2>/dev/null | exe); cp $e $d/$t
done
for f in $d/*; do case $f in *.gz) ;; *) strip $f; gzip -f $f;; esac; done
ls -la $d
