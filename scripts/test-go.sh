#!/usr/bin/env bash
# The Go half of `make test`: unit tests and fuzz, side by side (README, "Tests").
#
# - rollout/... and collectors/ccmodel one package at a time (-p 1): their BPF tests register
#   congestion controls kernel-wide and the agent's real-kernel tests expect bbr2 absent, so no
#   two of them may overlap;
# - every other package two at a time (-p 2; the slowest, lab/cmd/ccab-link, mostly waits on
#   its namespaces' clocks);
# - scripts/fuzz.sh beside them (one fuzz worker: the tests above are mostly waiting on sockets
#   and timers, so the two share the machine's cores instead of queueing).
# Each half's output is printed whole when both are done; any failure fails the run.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
start=$SECONDS

scripts/fuzz.sh >"$logs/fuzz" 2>&1 &
fuzz_pid=$!

serial="./rollout/... ./collectors/ccmodel"
others=$(go list ./... | grep -v -e '/rollout/' -e '/rollout$' -e '/collectors/ccmodel$')
{ go test -count=1 -p 1 $serial && go test -count=1 -p 2 $others; } >"$logs/unit" 2>&1
unit_rc=$?
wait "$fuzz_pid"
fuzz_rc=$?

grep -v 'no test files' "$logs/unit"
cat "$logs/fuzz"
printf 'test-go: unit tests exit %d, fuzz exit %d, %dm%02ds wall\n' "$unit_rc" "$fuzz_rc" \
  $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60))
[ "$unit_rc" -eq 0 ] && [ "$fuzz_rc" -eq 0 ]
