package agent_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/internal/netns"
	"github.com/ccab-dev/ccab/internal/netnstest"
	"github.com/ccab-dev/ccab/rollout/agent"
	"github.com/ccab-dev/ccab/rollout/assignment"
	"github.com/ccab-dev/ccab/rollout/bpfcc"
	"github.com/ccab-dev/ccab/rollout/internal/testkit"
	"github.com/ccab-dev/ccab/rollout/kernelcc"
	"github.com/ccab-dev/ccab/rollout/qdisc"
	"github.com/ccab-dev/ccab/rollout/statefile"
	"github.com/ccab-dev/ccab/rollout/status"
)

// lab is a host namespace joined to a peer namespace by a veth pair; the host namespace is
// the agent's "host", the peer runs a TCP server.
type lab struct {
	host, peer string
	peerAddr   string
}

func newLab(t *testing.T) lab {
	t.Helper()
	netnstest.Require(t, "tc", "ss")
	// A non-init namespace may only pick names in the init namespace's allowed list.
	testkit.AllowCC(t, "cubic", "reno")
	tag := netnstest.Tag()
	l := lab{host: netnstest.Namespace(t, "ccab-agh-"+tag), peer: netnstest.Namespace(t, "ccab-agp-"+tag)}
	octet := 1 + int(tag[4])%200
	netnstest.Veth(t, l.host, "ag"+tag, fmt.Sprintf("10.213.%d.1/24", octet), l.peer, "pe"+tag, fmt.Sprintf("10.213.%d.2/24", octet))
	l.peerAddr = fmt.Sprintf("10.213.%d.2", octet)
	setCC(t, l.host, "cubic")
	return l
}

func setCC(t *testing.T, ns, cc string) {
	t.Helper()
	k := kernelcc.Kernel{ProcFS: "/proc"}
	if err := netns.Do(netns.Path(ns), func() error { _, err := k.Set(cc); return err }); err != nil {
		t.Fatalf("set %s in %s: %v", cc, ns, err)
	}
}

func nsCC(t *testing.T, ns string) string {
	t.Helper()
	var cur string
	k := kernelcc.Kernel{ProcFS: "/proc"}
	if err := netns.Do(netns.Path(ns), func() error { var err error; cur, err = k.Current(); return err }); err != nil {
		t.Fatal(err)
	}
	return cur
}

// socketCC returns the congestion control ss shows for the socket with local port port
// inside ns.
func socketCC(t *testing.T, ns string, port int) string {
	t.Helper()
	out := netnstest.Cmd(t, "ip", "netns", "exec", ns, "ss", "-tinHO", "state", "established", "sport", fmt.Sprintf("= :%d", port))
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		for _, f := range fields {
			switch f {
			case "cubic", "bbr", "reno", "bbr2":
				return f
			}
		}
	}
	t.Fatalf("no socket with local port %d and a cc in ss output:\n%s", port, out)
	return ""
}

func newAgent(t *testing.T, l lab, stateFile string) *agent.Agent {
	t.Helper()
	pub, err := assignment.PublicKeyFromBase64(string(testkit.Read(t, "test_ed25519_public.b64")))
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Host: "edge-test-1", Pop: "lab1", PublicKey: pub, StateFile: stateFile,
		NetnsPath: netns.Path(l.host), Kernel: kernelcc.Kernel{ProcFS: "/proc", SysFS: "/sys"}, Tc: qdisc.Tc{}},
		agent.NewMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func rec(gen int64, cc string, q *string) testkit.Record {
	return testkit.Record{RolloutID: "lab-canary", Generation: gen, Pop: "lab1", Host: "edge-test-1", Arm: "arm-" + cc, CC: cc, Qdisc: q}
}

func ptr(s string) *string { return &s }

// The feature on a real kernel: a namespace standing for a host flips from cubic to bbr; a
// connection opened before keeps cubic, one opened after uses bbr (ss inside the namespace);
// bbr2 is refused as not available; stale, unknown and tampered records change nothing.
func TestRealKernelFlip(t *testing.T) {
	l := newLab(t)
	ln := netnstest.Listen(t, l.peer, "tcp4", l.peerAddr+":0")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	stateFile := filepath.Join(t.TempDir(), "state.json")
	a := newAgent(t, l, stateFile)

	before := netnstest.Dial(t, l.host, "tcp4", ln.Addr().String(), "")
	out, s := a.Apply(testkit.Sign(t, rec(1, "bbr", nil)))
	if out != agent.Applied || s.State != status.Applied || s.CCEffective != "bbr" || s.Reason != "" {
		t.Fatalf("apply bbr: %s %+v", out, s)
	}
	if s.BBRVersion == "" || s.Kernel == "" || len(s.CCAvailable) == 0 || s.Host != "edge-test-1" || s.Generation != 1 {
		t.Errorf("status fields: %+v", s)
	}
	after := netnstest.Dial(t, l.host, "tcp4", ln.Addr().String(), "")
	if got := socketCC(t, l.host, port(before)); got != "cubic" {
		t.Errorf("connection opened before the flip uses %s, want cubic", got)
	}
	if got := socketCC(t, l.host, port(after)); got != "bbr" {
		t.Errorf("connection opened after the flip uses %s, want bbr", got)
	}
	st, err := statefile.Read(stateFile)
	if err != nil || st.CC != "bbr" || st.Generation != 1 || st.RolloutID != "lab-canary" || st.Arm != "arm-bbr" || st.PreviousCC != "cubic" {
		t.Errorf("state file: %+v %v", st, err)
	}

	// bbr2 is not offered by this kernel: refused, the host keeps bbr.
	out, s = a.Apply(testkit.Sign(t, rec(2, "bbr2", nil)))
	if out != agent.Refused || !strings.Contains(s.Reason, "not available") || s.CCEffective != "bbr" || s.Generation != 2 {
		t.Errorf("bbr2: %s %+v", out, s)
	}
	if cur := nsCC(t, l.host); cur != "bbr" {
		t.Errorf("after bbr2 refusal the namespace runs %s, want bbr", cur)
	}
	// A BBR version the kernel does not have (this kernel's bbr is v1, or v3 on a v3 kernel).
	r := rec(2, "bbr", nil)
	r.BBRVersion = "9"
	if out, s = a.Apply(testkit.Sign(t, r)); out != agent.Refused || !strings.Contains(s.Reason, "bbr version 9 not available") {
		t.Errorf("bbr_version 9: %s %+v", out, s)
	}
	// Stale: equal and older generations are ignored; nothing changes.
	for _, gen := range []int64{1, 0} {
		if out, s = a.Apply(testkit.Sign(t, rec(gen, "cubic", nil))); out != agent.Stale {
			t.Errorf("generation %d: %s %+v, want stale", gen, out, s)
		}
	}
	if cur := nsCC(t, l.host); cur != "bbr" {
		t.Errorf("after stale records the namespace runs %s, want bbr", cur)
	}
	// Unknown algorithm.
	if out, s = a.Apply(testkit.Sign(t, rec(3, "fastest", nil))); out != agent.Refused || !strings.Contains(s.Reason, "unknown congestion control") {
		t.Errorf("fastest: %s %+v", out, s)
	}
	// Tampered vector (and a forged record for this host: signed with another key).
	if out, s = a.Apply(testkit.Read(t, "assignment_tampered.json")); out != agent.Refused || !strings.Contains(s.Reason, "forged or tampered") {
		t.Errorf("tampered: %s %+v", out, s)
	}
	forged := testkit.Sign(t, rec(4, "cubic", nil))
	forged = []byte(strings.Replace(string(forged), `"generation":4`, `"generation":40`, 1))
	if out, s = a.Apply(forged); out != agent.Refused || !strings.Contains(s.Reason, "forged or tampered") {
		t.Errorf("forged: %s %+v", out, s)
	}
	if cur := nsCC(t, l.host); cur != "bbr" || a.State().Generation != 1 {
		t.Errorf("after refusals: namespace %s, state generation %d; want bbr, 1", cur, a.State().Generation)
	}

	// qdisc fq: not offered on these machines (then: error, cc kept); applied where sch_fq exists.
	out, s = a.Apply(testkit.Sign(t, rec(4, "cubic", ptr("fq"))))
	switch out {
	case agent.Failed:
		t.Logf("qdisc fq not offered here: %s", s.Reason)
		if !strings.Contains(s.Reason, "qdisc fq") || s.CCEffective != "bbr" || nsCC(t, l.host) != "bbr" {
			t.Errorf("fq unavailable: %+v (namespace %s)", s, nsCC(t, l.host))
		}
	case agent.Applied:
		if s.QdiscEffective == nil || *s.QdiscEffective != "fq" || s.CCEffective != "cubic" {
			t.Errorf("fq: %+v", s)
		}
	default:
		t.Errorf("fq: %s %+v", out, s)
	}
	// pfifo works here: cc and qdisc applied and read back.
	out, s = a.Apply(testkit.Sign(t, rec(5, "cubic", ptr("pfifo"))))
	if out != agent.Applied || s.CCEffective != "cubic" || s.QdiscEffective == nil || *s.QdiscEffective != "pfifo" {
		t.Errorf("cubic+pfifo: %s %+v", out, s)
	}
	third := netnstest.Dial(t, l.host, "tcp4", ln.Addr().String(), "")
	if got := socketCC(t, l.host, port(third)); got != "cubic" {
		t.Errorf("connection after flipping back uses %s, want cubic", got)
	}
	if got := socketCC(t, l.host, port(after)); got != "bbr" {
		t.Errorf("bbr connection changed to %s", got)
	}
	hb := a.Heartbeat()
	if hb.State != status.Heartbeat || hb.Generation != 5 || hb.CCEffective != "cubic" || hb.Arm != "arm-cubic" {
		t.Errorf("heartbeat: %+v", hb)
	}
	var m map[string]any
	if err := json.Unmarshal(status.Encode(hb), &m); err != nil || m["schema"] != "agent_status/1" {
		t.Errorf("encoded heartbeat: %v %v", m, err)
	}
}

// Restart mid-apply: the kernel already runs generation 5 but the state file still says 4
// (crash between sysctl and state file): the new agent re-applies 5 (idempotent) and reports
// it. A restart after the state file was written re-sends the status without changing
// anything; a reboot (kernel reset) is undone from the state file.
func TestRealKernelRestart(t *testing.T) {
	l := newLab(t)
	stateFile := filepath.Join(t.TempDir(), "state.json")
	if err := statefile.Write(stateFile, statefile.State{RolloutID: "lab-canary", Arm: "arm-cubic", CC: "cubic", Generation: 4}); err != nil {
		t.Fatal(err)
	}
	setCC(t, l.host, "bbr") // generation 5 reached the kernel, not the state file
	rec5 := testkit.Sign(t, rec(5, "bbr", nil))
	a := newAgent(t, l, stateFile)
	if out, s := a.Apply(rec5); out != agent.Applied || s.CCEffective != "bbr" {
		t.Fatalf("re-apply after crash: %s %+v", out, s)
	}
	if st, _ := statefile.Read(stateFile); st.Generation != 5 || st.CC != "bbr" {
		t.Errorf("state file after re-apply: %+v", st)
	}
	// Restart after the state file: the same record is reconfirmed once (status re-sent).
	b := newAgent(t, l, stateFile)
	if out, s := b.Apply(rec5); out != agent.Reconfirmed || s.State != status.Applied || s.Generation != 5 {
		t.Errorf("restart, same generation: %s %+v", out, s)
	}
	if out, _ := b.Apply(rec5); out != agent.Stale {
		t.Errorf("second delivery of the same generation: %s, want stale", out)
	}
	// Reboot: the namespace is back to cubic; the agent re-asserts bbr from its state file.
	setCC(t, l.host, "cubic")
	c := newAgent(t, l, stateFile)
	s, changed, err := c.Reassert()
	if err != nil || !changed || s.State != status.Applied || s.CCEffective != "bbr" || nsCC(t, l.host) != "bbr" {
		t.Errorf("reassert: %+v changed=%v err=%v ns=%s", s, changed, err, nsCC(t, l.host))
	}
	if _, changed, _ := c.Reassert(); changed {
		t.Error("second reassert changed something")
	}
}

func port(c interface{ LocalAddr() net.Addr }) int {
	return c.LocalAddr().(*net.TCPAddr).Port
}

func newBPFAgent(t *testing.T, l lab, host, stateFile string, bpf *bpfcc.Loader) *agent.Agent {
	t.Helper()
	pub, err := assignment.PublicKeyFromBase64(string(testkit.Read(t, "test_ed25519_public.b64")))
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Host: host, Pop: "lab1", PublicKey: pub, StateFile: stateFile,
		NetnsPath: netns.Path(l.host), Kernel: kernelcc.Kernel{ProcFS: "/proc", SysFS: "/sys"}, Tc: qdisc.Tc{}, BPF: bpf},
		agent.NewMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func kernelLists(t *testing.T, sysctl, name string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/" + sysctl)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(strings.Fields(string(b)), name)
}

// On this kernel (no bbr2), an assignment of bbr2 makes the agent load ccab's BPF bbr2: applied
// in the namespace, listed in tcp_available and tcp_allowed_congestion_control, used by new
// connections, reported as cc_impl ccab-bpf (status and state file). Rolling back to cubic
// unloads it once no other host uses it; after a reboot (algorithm gone) the agent re-loads it
// from its state file; a kernel without BTF is refused with the reason.
func TestRealKernelBPFBBR2(t *testing.T) {
	if kernelLists(t, "tcp_available_congestion_control", "bbr2") {
		t.Skip("bbr2 is registered already (the kernel's own, or a bench run): this test needs it absent")
	}
	l := newLab(t)
	ln := netnstest.Listen(t, l.peer, "tcp4", l.peerAddr+":0")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	tag := netnstest.Tag()
	loader := &bpfcc.Loader{Dir: "/sys/fs/bpf/ccab-cc-agtest-" + tag, UsersDir: t.TempDir()}
	t.Cleanup(func() {
		if err := loader.Unload("bbr2"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		os.Remove(loader.Dir)
	})
	stateFile := filepath.Join(t.TempDir(), "state.json")
	a := newBPFAgent(t, l, "edge-test-1", stateFile, loader)

	out, s := a.Apply(testkit.Sign(t, rec(1, "bbr2", nil)))
	if out != agent.Applied || s.CCEffective != "bbr2" || s.CCImpl != bpfcc.ImplBPF || s.BBRVersion != "2" || s.Reason != "" {
		t.Fatalf("apply bbr2: %s %+v", out, s)
	}
	if !kernelLists(t, "tcp_available_congestion_control", "bbr2") || !kernelLists(t, "tcp_allowed_congestion_control", "bbr2") {
		t.Fatal("bbr2 applied but not in tcp_available/allowed_congestion_control")
	}
	if !slices.Contains(s.CCAvailable, "bbr2") {
		t.Errorf("status cc_available %v lacks bbr2", s.CCAvailable)
	}
	c := netnstest.Dial(t, l.host, "tcp4", ln.Addr().String(), "")
	if got := socketCC(t, l.host, port(c)); got != "bbr2" {
		t.Errorf("new connection uses %s, want bbr2", got)
	}
	if st, err := statefile.Read(stateFile); err != nil || st.CC != "bbr2" || st.CCImpl != bpfcc.ImplBPF {
		t.Errorf("state file: %+v %v", st, err)
	}
	if hb := a.Heartbeat(); hb.CCImpl != bpfcc.ImplBPF || hb.CCEffective != "bbr2" {
		t.Errorf("heartbeat: %+v", hb)
	}

	// Registered, but the loader's check fails (here: a procfs whose tcp_allowed_congestion_control
	// lacks it, as after someone wrote the host-wide sysctl) while the namespace's own check
	// passed: the reason is the loader's alone, with no "<nil>; " in front (docs/rollout/live-canary.md).
	fakeProc := t.TempDir()
	ipv4 := filepath.Join(fakeProc, "sys/net/ipv4")
	if err := os.MkdirAll(ipv4, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"tcp_available_congestion_control": "reno bbr cubic bbr2\n",
		"tcp_allowed_congestion_control": "reno bbr cubic\n"} {
		if err := os.WriteFile(filepath.Join(ipv4, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	notAllowed := &bpfcc.Loader{Dir: loader.Dir, UsersDir: loader.UsersDir, ProcFS: fakeProc}
	e := newBPFAgent(t, l, "edge-test-1", filepath.Join(t.TempDir(), "state.json"), notAllowed)
	if out, s := e.Apply(testkit.Sign(t, rec(1, "bbr2", nil))); out != agent.Refused ||
		!strings.HasPrefix(s.Reason, "ccab's BPF bbr2 could not be loaded: bbr2 registered but not in tcp_allowed_congestion_control") {
		t.Fatalf("loader check failed after the kernel's passed: %s reason %q", out, s.Reason)
	}

	// Another host uses it too: rolling this one back keeps it loaded; the other's release unloads.
	if _, err := loader.Use("bbr2", "edge-other"); err != nil {
		t.Fatal(err)
	}
	out, s = a.Apply(testkit.Sign(t, rec(2, "cubic", nil)))
	if out != agent.Applied || s.CCEffective != "cubic" || s.CCImpl != bpfcc.ImplKernel {
		t.Fatalf("rollback to cubic: %s %+v", out, s)
	}
	if nsCC(t, l.host) != "cubic" || !kernelLists(t, "tcp_available_congestion_control", "bbr2") {
		t.Fatalf("after rollback: namespace %s; bbr2 must stay loaded for edge-other", nsCC(t, l.host))
	}
	if unloaded, err := loader.Release("bbr2", "edge-other"); err != nil || !unloaded {
		t.Fatalf("last release: unloaded=%v err=%v", unloaded, err)
	}
	if kernelLists(t, "tcp_available_congestion_control", "bbr2") {
		t.Fatal("bbr2 still registered with no user")
	}

	// Only user: the rollback unloads it.
	if out, s = a.Apply(testkit.Sign(t, rec(3, "bbr2", nil))); out != agent.Applied || s.CCImpl != bpfcc.ImplBPF {
		t.Fatalf("bbr2 again: %s %+v", out, s)
	}
	if out, s = a.Apply(testkit.Sign(t, rec(4, "cubic", nil))); out != agent.Applied || kernelLists(t, "tcp_available_congestion_control", "bbr2") {
		t.Fatalf("rollback as the only user: %s %+v; bbr2 registered=%v", out, s, kernelLists(t, "tcp_available_congestion_control", "bbr2"))
	}

	// Reboot with bbr2 in the state file: the algorithm is gone; the agent loads it again.
	if out, s = a.Apply(testkit.Sign(t, rec(5, "bbr2", nil))); out != agent.Applied {
		t.Fatalf("bbr2 gen 5: %s %+v", out, s)
	}
	setCC(t, l.host, "cubic")
	if err := loader.Unload("bbr2"); err != nil {
		t.Fatal(err)
	}
	b := newBPFAgent(t, l, "edge-test-1", stateFile, loader)
	s, changed, err := b.Reassert()
	if err != nil || !changed || s.State != status.Applied || s.CCEffective != "bbr2" || s.CCImpl != bpfcc.ImplBPF {
		t.Fatalf("reassert after reboot: %+v changed=%v err=%v", s, changed, err)
	}
	if out, s = b.Apply(testkit.Sign(t, rec(6, "cubic", nil))); out != agent.Applied || kernelLists(t, "tcp_available_congestion_control", "bbr2") {
		t.Fatalf("final rollback: %s %+v", out, s)
	}

	// A kernel that cannot (no BTF): refused with the reason, nothing changes.
	noBTF := &bpfcc.Loader{Dir: loader.Dir, UsersDir: loader.UsersDir, BTFPath: filepath.Join(t.TempDir(), "no-vmlinux")}
	d := newBPFAgent(t, l, "edge-test-1", stateFile, noBTF)
	out, s = d.Apply(testkit.Sign(t, rec(7, "bbr2", nil)))
	if out != agent.Refused || !strings.Contains(s.Reason, "not available") || !strings.Contains(s.Reason, "no kernel BTF") || s.CCEffective != "cubic" {
		t.Fatalf("no BTF: %s %+v", out, s)
	}
	if kernelLists(t, "tcp_available_congestion_control", "bbr2") {
		t.Fatal("bbr2 registered although refused")
	}
}
