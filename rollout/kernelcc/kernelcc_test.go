package kernelcc_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/rollout/kernelcc"
)

// A procfs/sysfs tree of plain files (a v3 kernel: tcp_bbr declares version 3).
func fakeRoots(t *testing.T) kernelcc.Kernel {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"proc/sys/net/ipv4/tcp_available_congestion_control": "reno cubic bbr\n",
		"proc/sys/net/ipv4/tcp_allowed_congestion_control":   "reno cubic bbr\n",
		"proc/sys/net/ipv4/tcp_congestion_control":           "cubic\n",
		"proc/sys/kernel/osrelease":                          "6.18.0-test\n",
		"sys/module/tcp_bbr/version":                         "3\n",
	}
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return kernelcc.Kernel{ProcFS: filepath.Join(root, "proc"), SysFS: filepath.Join(root, "sys")}
}

func TestFakeRoots(t *testing.T) {
	k := fakeRoots(t)
	avail, err := k.Ensure("bbr")
	if err != nil || len(avail) != 3 {
		t.Fatalf("ensure bbr: %v %v", avail, err)
	}
	if v := k.BBRVersion("bbr", avail); v != "3" {
		t.Errorf("bbr version %q, want 3", v)
	}
	if _, err := k.Ensure("bbr2"); !errors.Is(err, kernelcc.ErrNotAvailable) || !strings.Contains(err.Error(), "not available") {
		t.Errorf("bbr2: %v", err)
	}
	if got, err := k.Set("bbr"); err != nil || got != "bbr" {
		t.Errorf("set: %q %v", got, err)
	}
	if k.Release() != "6.18.0-test" {
		t.Errorf("release %q", k.Release())
	}
	os.Remove(filepath.Join(k.SysFS, "module/tcp_bbr/version"))
	if v := k.BBRVersion("bbr", []string{"bbr"}); v != "1" {
		t.Errorf("no MODULE_VERSION: %q, want 1", v)
	}
	// Module loading with a stand-in modprobe that "loads" bbr2 by listing it.
	k.LoadModules = true
	script := filepath.Join(t.TempDir(), "modprobe")
	avail_ := filepath.Join(k.ProcFS, "sys/net/ipv4/tcp_available_congestion_control")
	os.WriteFile(script, []byte("#!/bin/sh\n[ \"$1\" = tcp_bbr2 ] && echo 'reno cubic bbr bbr2' > "+avail_+"\n"), 0o755)
	k.Modprobe = script
	if avail, err := k.Ensure("bbr2"); err != nil || k.BBRVersion("bbr2", avail) != "2" {
		t.Errorf("bbr2 after modprobe: %v %v", avail, err)
	}
	if _, err := k.Ensure("vegas"); !errors.Is(err, kernelcc.ErrNotAvailable) {
		t.Errorf("vegas, modprobe does nothing: %v", err)
	}
}
