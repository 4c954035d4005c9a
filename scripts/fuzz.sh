#!/usr/bin/env bash
# Run every Go fuzz target under collectors/ for a bounded time (FUZZTIME, default 10s each).
# `make test` runs this so parsers meet fresh random input on every CI run; crashers land in
# the package's testdata/fuzz/ and fail the run.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
for pkg in $(go list ./collectors/...); do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "fuzz $pkg $target ($fuzztime)"
    go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" -fuzzminimizetime=10x -parallel=1 "$pkg" >/tmp/ccab-fuzz.log 2>&1 \
      || { cat /tmp/ccab-fuzz.log; echo "fuzz: $target in $pkg failed"; exit 1; }
  done
done
