// Package cgrouptest gives a test a cgroup v2 directory of its own, to attach BPF programs
// to and start processes in. Never the root cgroup: other tests run on the same host, and a
// program attached there would decide their connections too.
package cgrouptest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/internal/netnstest"
)

// Dir creates an empty cgroup below the cgroup v2 mount and removes it at cleanup (after
// the cleanups registered later, so processes started in it must be gone by then). The test
// is skipped when not root or without a cgroup v2 hierarchy.
func Dir(t testing.TB, prefix string) string {
	t.Helper()
	netnstest.Require(t)
	mnt := Mount(t)
	dir := filepath.Join(mnt, prefix+"-"+netnstest.Tag())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("create test cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("cleanup: remove cgroup %s: %v", dir, err)
		}
	})
	return dir
}

// Mount is where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or
// /sys/fs/cgroup/unified on a hybrid layout); the test is skipped without one.
func Mount(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[2] == "cgroup2" {
			return f[1]
		}
	}
	t.Skip("no cgroup v2 hierarchy mounted")
	return ""
}
