#!/usr/bin/env bash
# The Go tests, in the tiers of README "Tests".
#
# scripts/test-go.sh            make test: every package's unit tests with -short, two packages at a
#                               time (-short skips the kernel tests: internal/netnstest.SkipShort;
#                               the fuzz targets run their seed corpora as unit tests; fuzzing
#                               itself, scripts/fuzz.sh, is part of make test-system).
# scripts/test-go.sh --kernel   make test-system: the kernel tests — the packages whose tests build
#                               network namespaces, register BPF congestion controls kernel-wide or
#                               count packets through ccab-link (those importing a netnstest) — one
#                               package at a time, nothing beside them: the agent's real-kernel tests
#                               expect bbr2 absent while the BPF tests register it, and the link's
#                               packet counts need the CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

case "${1:-}" in
--kernel)
  kernel=$(go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... |
    awk '/\/netnstest( |$)/ {print $1}')
  go test -count=1 -p 1 $kernel 2>&1 | grep -v 'no test files'
  rc=${PIPESTATUS[0]}
  printf 'test-go --kernel: exit %d, %dm%02ds wall\n' "$rc" $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60))
  exit "$rc"
  ;;
"") ;;
*) echo "usage: scripts/test-go.sh [--kernel]" >&2; exit 2 ;;
esac

go test -short -count=1 -p 2 ./... 2>&1 | grep -v 'no test files'
rc=${PIPESTATUS[0]}
printf 'test-go: exit %d, %dm%02ds wall\n' "$rc" $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60))
exit "$rc"
