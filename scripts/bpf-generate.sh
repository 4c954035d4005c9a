#!/usr/bin/env bash
# Regenerates the committed BPF objects and their Go bindings (bpf2go, run by `go generate` in
# every Go package under rollout/ whose gen.go calls bpf2go), or checks that regenerating them
# gives the committed bytes. Needs clang (make setup installs it as root); building ccab does not.
#   scripts/bpf-generate.sh            regenerate in place (make bpf)
#   scripts/bpf-generate.sh --check    regenerate in a scratch copy and compare (make bpf-check)
#   scripts/bpf-generate.sh --vmlinux  rewrite rollout/bpf/include/vmlinux.h from this kernel's BTF
set -euo pipefail
cd "$(dirname "$0")/.."
die() { printf 'bpf-generate: %s\n' "$*" >&2; exit 1; }

mode=${1:-generate}
case "$mode" in
  generate|--check|--vmlinux) ;;
  -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown option $mode (see --help)" ;;
esac

if [ "$mode" = --vmlinux ]; then
  command -v bpftool >/dev/null 2>&1 || die "bpftool not found (Debian package 'bpftool')"
  bpftool btf dump file /sys/kernel/btf/vmlinux format c > rollout/bpf/include/vmlinux.h.tmp
  mv rollout/bpf/include/vmlinux.h.tmp rollout/bpf/include/vmlinux.h
  exit 0
fi

command -v clang >/dev/null 2>&1 || die "clang not found (Debian packages clang llvm libbpf-dev; make setup installs them as root)"
pkgs=$(grep -l 'go:generate go tool bpf2go' rollout/*/gen.go | xargs -n1 dirname | sort)
[ -n "$pkgs" ] || die "no rollout/*/gen.go calls bpf2go"

if [ "$mode" = generate ]; then
  for p in $pkgs; do (cd "$p" && go generate ./) || die "go generate in $p failed"; done
  exit 0
fi

# --check: the objects are built from the same sources in a scratch copy, so a stale or
# hand-edited object in the tree is found without touching it.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r go.mod go.sum rollout "$scratch/"
status=0
for p in $pkgs; do
  (cd "$scratch/$p" && go generate ./) || die "go generate in $p failed"
  for f in "$scratch/$p"/*_bpfel.go "$scratch/$p"/*_bpfel.o; do
    rel=${f#"$scratch/"}
    if ! cmp -s "$f" "$rel"; then
      echo "bpf-check: $rel differs from what its sources generate (run make bpf and commit)" >&2
      status=1
    fi
  done
done
[ $status = 0 ] && echo "bpf-check: every committed BPF object is what its sources generate ($(echo $pkgs | wc -w) package(s))"
exit $status
