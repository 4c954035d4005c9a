package config

import (
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/collectors/metrics"
	"github.com/ccab-dev/ccab/internal/netnstest"
)

// A host that is a network namespace (the lab) has its own default congestion control: with
// --cc-netns the collector stamps http records with that one, not the init namespace's.
func TestHostCCIsReadInsideCCNetns(t *testing.T) {
	netnstest.Require(t, "ip", "sysctl")
	ns := netnstest.Namespace(t, "ccabcfg"+netnstest.Tag())
	own, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		t.Fatal(err)
	}
	want := "reno"
	if strings.TrimSpace(string(own)) == want {
		want = "cubic"
	}
	netnstest.Cmd(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control="+want)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	state := t.TempDir() + "/state.json"

	c := Default()
	c.Host, c.Kernel, c.RolloutStateFile, c.CCNetns = "h", "k", state, ns
	h, err := NewHost(&c, metrics.New(), log)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Meta().CC; got != want {
		t.Fatalf("cc in namespace %s: got %q, want %q", ns, got, want)
	}

	c2 := Default()
	c2.Host, c2.Kernel, c2.RolloutStateFile = "h", "k", state
	h2, err := NewHost(&c2, metrics.New(), log)
	if err != nil {
		t.Fatal(err)
	}
	if got := h2.Meta().CC; got != strings.TrimSpace(string(own)) {
		t.Fatalf("own cc: got %q, want %q", got, strings.TrimSpace(string(own)))
	}
}
