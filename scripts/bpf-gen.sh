#!/usr/bin/env bash
# Regenerates the BPF objects and their Go bindings (bpf2go, via `go generate`) of every Go
# package under rollout/ that embeds one. With --check: regenerates into a copy and fails when
# the committed files differ (CI: `make bpf-check`, part of `make test`).
# Needs clang and libbpf-dev (scripts/setup.sh installs them as root).
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
[ "${1:-}" = --check ] && check=1
command -v clang >/dev/null 2>&1 || { echo "bpf-gen: clang not found (apt-get install clang llvm libbpf-dev; make setup does it as root)" >&2; exit 1; }
[ -f /usr/include/bpf/bpf_helpers.h ] || { echo "bpf-gen: /usr/include/bpf/bpf_helpers.h not found (apt-get install libbpf-dev)" >&2; exit 1; }
pkgs=$(grep -l '^//go:generate go tool bpf2go' rollout/*/*.go | xargs -n1 dirname | sort -u)
if [ $check = 0 ]; then
  for p in $pkgs; do (cd "$p" && go generate ./); done
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for p in $pkgs; do
  mkdir -p "$tmp/$p"
  cp -a "$p"/. "$tmp/$p"/
  (cd "$p" && go generate ./) || { status=1; continue; }
  for f in "$p"/*_bpfel.go "$p"/*_bpfel.o "$p"/*_bpfeb.go "$p"/*_bpfeb.o; do
    [ -e "$f" ] || continue
    if ! cmp -s "$f" "$tmp/$f"; then
      echo "bpf-check: $f differs from what rollout/bpf/ compiles to: run make bpf and commit" >&2
      status=1
    fi
  done
  # put the committed files back, whatever the result
  cp -a "$tmp/$p"/. "$p"/
done
[ $status = 0 ] && echo "bpf-check: committed BPF objects match their sources ($(echo $pkgs | wc -w) packages)"
exit $status
