package agent_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/internal/cgrouptest"
	"github.com/ccab-dev/ccab/internal/netns"
	"github.com/ccab-dev/ccab/rollout/agent"
	"github.com/ccab-dev/ccab/rollout/assignment"
	"github.com/ccab-dev/ccab/rollout/internal/testkit"
	"github.com/ccab-dev/ccab/rollout/kernelcc"
	"github.com/ccab-dev/ccab/rollout/qdisc"
	"github.com/ccab-dev/ccab/rollout/sockpolicy"
	"github.com/ccab-dev/ccab/rollout/statefile"
)

// signSegment signs an assignment/2 record; policy nil is "policy": null.
func signSegment(t *testing.T, gen int64, cc string, policy map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"schema": assignment.SchemaSegment, "rollout_id": "seg", "generation": gen,
		"pop": "lab1", "host": "edge-test-1", "arm": "bbr", "cc": cc, "qdisc": nil, "issued_at_ms": 1763769600000,
		"policy": policy})
	if err != nil {
		t.Fatal(err)
	}
	signed, err := assignment.Sign(b, testkit.Key(t))
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

func policyAgent(t *testing.T, l lab, stateFile string, enf agent.PolicyEnforcer) *agent.Agent {
	t.Helper()
	pub, err := assignment.PublicKeyFromBase64(string(testkit.Read(t, "test_ed25519_public.b64")))
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.Config{Host: "edge-test-1", Pop: "lab1", PublicKey: pub, StateFile: stateFile,
		NetnsPath: netns.Path(l.host), Kernel: kernelcc.Kernel{ProcFS: "/proc", SysFS: "/sys"}, Tc: qdisc.Tc{}}
	if enf != nil {
		cfg.Policy = enf
	}
	a, err := agent.New(cfg, agent.NewMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The kernel's policy map holds exactly what a signed assignment/2 says; a record tampered
// after signing is refused and leaves it; an assignment/1 (rollback) empties it. The
// enforcer is the real sock_ops program, attached to a cgroup of this test's own.
func TestSegmentPolicyFromSignedRecords(t *testing.T) {
	l := newLab(t)
	enf, err := sockpolicy.Attach(cgrouptest.Dir(t, "segments-agent"), sockpolicy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { enf.Detach() })
	stateFile := filepath.Join(t.TempDir(), "state.json")
	a := policyAgent(t, l, stateFile, enf)

	mobile := map[string]any{"segment": "access:mobile", "cc": "reno", "prefixes": []string{"10.201.0.0/16", "2001:db8:201::/48"}}
	out, s := a.Apply(signSegment(t, 1, "cubic", mobile))
	if out != agent.Applied || s.CCEffective != "cubic" {
		t.Fatalf("apply: %s %+v", out, s)
	}
	cur, err := enf.Current()
	if err != nil || cur.Generation != 1 || fmt.Sprint(cur.Rules) != "[{10.201.0.0/16 reno} {2001:db8:201::/48 reno}]" {
		t.Fatalf("policy map after apply: %+v %v", cur, err)
	}
	if st, err := statefile.Read(stateFile); err != nil || st.PolicySegment != "access:mobile" || st.PolicyCC != "reno" || st.PolicyPrefixes != 2 {
		t.Errorf("state file: %+v %v", st, err)
	}

	// Tampered: one prefix widened to everything after signing.
	signed := signSegment(t, 2, "cubic", mobile)
	tampered := []byte(strings.Replace(string(signed), "10.201.0.0/16", "0.0.0.0/0", 1))
	if out, s := a.Apply(tampered); out != agent.Refused || !strings.Contains(s.Reason, "tampered") {
		t.Fatalf("tampered: %s %+v", out, s)
	}
	if cur, _ := enf.Current(); cur.Generation != 1 || len(cur.Rules) != 2 {
		t.Fatalf("a refused record changed the policy map: %+v", cur)
	}

	// A new policy replaces the old; generation moves with it.
	fixed := map[string]any{"segment": "access:fixed", "cc": "reno", "prefixes": []string{"10.202.0.0/16"}}
	if out, s := a.Apply(signSegment(t, 3, "cubic", fixed)); out != agent.Applied {
		t.Fatalf("second policy: %s %+v", out, s)
	}
	if cur, _ := enf.Current(); cur.Generation != 3 || fmt.Sprint(cur.Rules) != "[{10.202.0.0/16 reno}]" {
		t.Fatalf("after the second policy: %+v", cur)
	}

	// Rollback: an assignment/1 for the host (no policy) empties it.
	if out, s := a.Apply(testkit.Sign(t, testkit.Record{RolloutID: "seg", Generation: 4, Pop: "lab1", Host: "edge-test-1",
		Arm: "control", CC: "cubic"})); out != agent.Applied {
		t.Fatalf("rollback: %s %+v", out, s)
	}
	if cur, err := enf.Current(); err != nil || len(cur.Rules) != 0 {
		t.Fatalf("rollback left the policy %+v (%v)", cur, err)
	}
	if st, _ := statefile.Read(stateFile); st.PolicySegment != "" {
		t.Errorf("state file after rollback still names a policy: %+v", st)
	}
}

// An agent without an enforcer refuses a policy it cannot enforce (rather than giving every
// client the host's algorithm), and the host keeps its algorithm.
func TestSegmentPolicyWithoutEnforcerRefused(t *testing.T) {
	l := newLab(t)
	a := policyAgent(t, l, filepath.Join(t.TempDir(), "state.json"), nil)
	out, s := a.Apply(signSegment(t, 1, "reno", map[string]any{"segment": "access:mobile", "cc": "bbr", "prefixes": []string{"10.201.0.0/16"}}))
	if out != agent.Refused || !strings.Contains(s.Reason, "enforces none") || s.CCEffective != "cubic" {
		t.Fatalf("%s %+v", out, s)
	}
	// assignment/2 with "policy": null is a host-wide assignment: applies without an enforcer.
	if out, s := a.Apply(signSegment(t, 2, "reno", nil)); out != agent.Applied || s.CCEffective != "reno" {
		t.Fatalf("null policy: %s %+v", out, s)
	}
}
