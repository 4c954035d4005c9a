package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/lab/link"
)

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--buffer-bdp", "1"},                      // no rate, no delay: no BDP
		{"--rate-bps", "1e6", "--buffer-bdp", "1"}, // no delay
		{"--ge-direction", "sideways"},
		{"--delay-ms", "ten"},
		{"--trace-up", "/nonexistent/trace"},
		{"--dev-a", "x", "--dev-b", "x"},
		{"extra"},
		{"--no-such-flag"},
	} {
		var out, errb bytes.Buffer
		if got := dispatch(context.Background(), args, &out, &errb); got != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, got, exitUsage, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if got := dispatch(context.Background(), []string{"--help"}, &out, &errb); got != exitOK {
		t.Errorf("--help: exit %d", got)
	}
	for _, f := range []string{"--delay-ms", "--delay-up-ms", "--rate-bps", "--rate-down-bps", "--buffer-bytes", "--buffer-bdp",
		"--loss", "--ge-p", "--ge-r", "--trace-up", "--trace-down", "--metrics-addr", "--ready-file"} {
		if !strings.Contains(errb.String(), "-"+strings.TrimLeft(f, "-")+" ") {
			t.Errorf("--help does not explain %s", f)
		}
	}
}

func TestGenTraceDeterministic(t *testing.T) {
	run := func(seed string) string {
		var out, errb bytes.Buffer
		if got := dispatch(context.Background(), []string{"gen-trace", "--seed", seed, "--duration-s", "5", "--rates-mbps", "2,8"}, &out, &errb); got != exitOK {
			t.Fatalf("gen-trace: exit %d: %s", got, errb.String())
		}
		if !strings.Contains(errb.String(), "mean") {
			t.Errorf("no summary on stderr: %q", errb.String())
		}
		return out.String()
	}
	a, b, c := run("3"), run("3"), run("4")
	if a != b || a == c {
		t.Fatalf("same seed must give the same trace, another seed another one")
	}
	tr, err := link.ParseTrace(strings.NewReader(a))
	if err != nil || tr.PeriodMs != 5000 {
		t.Fatalf("not a 5 s Mahimahi trace: %v", err)
	}
	if mean := tr.MeanBps() / 1e6; mean < 1 || mean > 12 {
		t.Fatalf("mean %.1f Mbit/s for states 2 and 8", mean)
	}
}
