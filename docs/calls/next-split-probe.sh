#!/usr/bin/env bash
# Forty-fifth session, first call (any card): the forty-fourth session's two prepared calls in one machine start
# (starts were the scarce thing then). 1. next-racecheck-split.sh on b102 (~2 min), 2. next-fp8w-probe.sh on b103
# (~5-6 min). Carry [".dev/b102", ".dev/b103"]. Predictions: in each script's header.
d=$(dirname "$0"); O=$OUT
OUT=$O/split BOUND=120 bash "$d/next-racecheck-split.sh"
OUT=$O/probe BOUND=440 bash "$d/next-fp8w-probe.sh"
