package bpfcc

// The BPF objects are compiled from rollout/bpf/cc/*.bpf.c by bpf2go (clang, the tool pinned in
// go.mod) and committed with their Go bindings, so building ccab needs no clang: `make bpf`
// regenerates them and `make bpf-check` checks that regenerating gives the same files.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -DBBR_V=2" -no-global-types -target bpfel bbr2 ../bpf/cc/bbr2.bpf.c -- -I../bpf/include
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -DBBR_V=3" -no-global-types -target bpfel bbr3 ../bpf/cc/bbr2.bpf.c -- -I../bpf/include
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -no-global-types -target bpfel vivace ../bpf/cc/vivace.bpf.c -- -I../bpf/include
