package sockpolicy

// The BPF object is compiled from rollout/bpf/sockpolicy/sockpolicy.bpf.c by bpf2go (clang,
// the tool pinned in go.mod) and committed with its Go bindings, so building ccab needs no
// clang: `make bpf` regenerates them and `make bpf-check` checks that regenerating is identical.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type conn_value sockpolicy ../bpf/sockpolicy/sockpolicy.bpf.c -- -I../bpf/include
