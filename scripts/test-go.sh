#!/usr/bin/env bash
# The Go half of `make test`: unit tests and fuzz, side by side (README, "Tests").
#
# - rollout/... and collectors/ccmodel one package at a time (-p 1): their BPF tests register
#   congestion controls kernel-wide and the agent's real-kernel tests expect bbr2 absent, so no
#   two of them may overlap; lab/cmd/ccab-link alone too: its packet-count tests (20,000
#   datagrams through the emulated link) lose datagrams before the link when the CPU is busy;
# - every other package two at a time (-p 2), with scripts/fuzz.sh beside them (one fuzz worker:
#   those tests mostly wait on sockets and timers, so the two share the cores instead of queueing).
# Each part's output is printed whole when all are done; any failure fails the run.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
start=$SECONDS

serial="./rollout/... ./collectors/ccmodel ./lab/cmd/ccab-link"
others=$(go list ./... | grep -v -e '/rollout/' -e '/rollout$' -e '/collectors/ccmodel$' -e '/lab/cmd/ccab-link$')
go test -count=1 -p 1 $serial >"$logs/unit" 2>&1
unit_rc=$?
scripts/fuzz.sh >"$logs/fuzz" 2>&1 &
fuzz_pid=$!
go test -count=1 -p 2 $others >>"$logs/unit" 2>&1 || unit_rc=1
wait "$fuzz_pid"
fuzz_rc=$?

grep -v 'no test files' "$logs/unit"
cat "$logs/fuzz"
printf 'test-go: unit tests exit %d, fuzz exit %d, %dm%02ds wall\n' "$unit_rc" "$fuzz_rc" \
  $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60))
[ "$unit_rc" -eq 0 ] && [ "$fuzz_rc" -eq 0 ]
