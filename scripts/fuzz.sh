#!/usr/bin/env bash
# Run every Go fuzz target under collectors/ for a bounded number of executions (FUZZTIME, default
# 100000x each: a count, not a duration — a duration that expires while the fuzzer minimizes a new
# input fails with "context deadline exceeded", a known go test -fuzz flake).
# `make test-system` runs this so parsers meet fresh random input on every CI run; crashers land in
# the package's testdata/fuzz/ and fail the run.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-100000x}
for pkg in $(go list ./collectors/...); do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "fuzz $pkg $target ($fuzztime)"
    go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" -fuzzminimizetime=10x -parallel=1 "$pkg" >/tmp/ccab-fuzz.log 2>&1 \
      || { cat /tmp/ccab-fuzz.log; echo "fuzz: $target in $pkg failed"; exit 1; }
  done
done
