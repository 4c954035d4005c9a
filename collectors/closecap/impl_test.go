package closecap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/collectors/record"
)

// A cc pinned by rollout/bpfcc (<dir>/<cc>/link) is ccab's BPF one; others are the kernel's;
// answers are re-read after a second (an algorithm loaded or unloaded meanwhile).
func TestImplCache(t *testing.T) {
	dir := t.TempDir()
	c := NewImplCache(dir)
	if got := c.Of("bbr2", 1000); got != record.CCImplKernel {
		t.Fatalf("bbr2 not pinned: %q", got)
	}
	if err := os.MkdirAll(filepath.Join(dir, "bbr2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bbr2", "link"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := c.Of("bbr2", 1500); got != record.CCImplKernel {
		t.Errorf("cached answer within the second: %q", got)
	}
	if got := c.Of("bbr2", 2001); got != record.CCImplBPF {
		t.Errorf("bbr2 pinned: %q", got)
	}
	if got := c.Of("cubic", 2001); got != record.CCImplKernel {
		t.Errorf("cubic: %q", got)
	}
	if got := c.Of("", 2001); got != "" {
		t.Errorf("unknown cc: %q", got)
	}
	b, err := record.AppendConn(nil, &record.TCPConn{Schema: "tcp_conn/1", CC: "bbr2", CCImpl: record.CCImplBPF, SampleRate: 1})
	if err != nil || !contains(string(b), `"cc_source":"","cc_impl":"ccab-bpf"`) {
		t.Errorf("encoded: %s %v", b, err)
	}
	b, _ = record.AppendConn(nil, &record.TCPConn{Schema: "tcp_conn/1", CC: "bbr", SampleRate: 1})
	if contains(string(b), "cc_impl") {
		t.Errorf("cc_impl written while unknown: %s", b)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
