package agent_test

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/rollout/agent"
	"github.com/ccab-dev/ccab/rollout/assignment"
	"github.com/ccab-dev/ccab/rollout/internal/testkit"
	"github.com/ccab-dev/ccab/rollout/kernelcc"
	"github.com/ccab-dev/ccab/rollout/qdisc"
	"github.com/ccab-dev/ccab/rollout/statefile"
	"github.com/ccab-dev/ccab/rollout/status"
)

// fakeKernel is a procfs tree with the sysctls the agent reads and writes (regular files).
func fakeKernel(t *testing.T, cur string) kernelcc.Kernel {
	t.Helper()
	root := t.TempDir()
	for name, v := range map[string]string{
		"proc/sys/net/ipv4/tcp_available_congestion_control": "reno cubic bbr",
		"proc/sys/net/ipv4/tcp_allowed_congestion_control":   "reno cubic bbr",
		"proc/sys/net/ipv4/tcp_congestion_control":           cur,
		"proc/sys/kernel/osrelease":                          "6.18.0-test",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return kernelcc.Kernel{ProcFS: filepath.Join(root, "proc"), SysFS: filepath.Join(root, "sys")}
}

func fakeAgent(t *testing.T, k kernelcc.Kernel, stateFile string) *agent.Agent {
	t.Helper()
	pub, err := assignment.PublicKeyFromBase64(string(testkit.Read(t, "test_ed25519_public.b64")))
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Host: "edge-h1", Pop: "lab1", PublicKey: pub, StateFile: stateFile,
		Kernel: k, Tc: qdisc.Tc{Path: "/nonexistent/tc"}}, agent.NewMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Every hostile signed record is refused (with the field named), changes neither the kernel
// nor the state file, and does not keep the next legitimate record (a rollback) out.
func TestHostileSignedRecordsChangeNothingAndNeverLockTheHostOut(t *testing.T) {
	with := func(k string, v any) []byte {
		m := testkit.Valid("edge-h1", 2)
		m["cc"] = "bbr"
		m[k] = v
		return testkit.SignMap(t, m)
	}
	raw := func(fields string) []byte {
		return testkit.SignRaw(t, []byte(`{"schema":"assignment/1","rollout_id":"r1","pop":"lab1","host":"edge-h1",`+
			`"arm":"bbr","cc":"bbr","qdisc":null,`+fields+`}`))
	}
	big := testkit.Valid("edge-h1", 2)
	big["cc"] = "bbr"
	big["padding"] = strings.Repeat("x", 20<<20)
	cases := []struct {
		name, rec, reason string
	}{
		{"null generation", string(with("generation", nil)), "generation"},
		{"null issued_at_ms", string(with("issued_at_ms", nil)), "issued_at_ms"},
		{"null rollout_id", string(with("rollout_id", nil)), "rollout_id"},
		{"null arm", string(with("arm", nil)), "arm"},
		{"20 MB record", string(testkit.SignMap(t, big)), "bytes"},
		{"generation 2^63-1", string(raw(`"generation":9223372036854775807,"issued_at_ms":1`)), "generation"},
		{"generation jump of 2^40", string(raw(`"generation":1099511627776,"issued_at_ms":1`)), "generation"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := fakeKernel(t, "cubic")
			stateFile := filepath.Join(t.TempDir(), "state.json")
			a := fakeAgent(t, k, stateFile)
			if out, s := a.Apply(testkit.Sign(t, testkit.Record{RolloutID: "r1", Generation: 1, Pop: "lab1",
				Host: "edge-h1", Arm: "control", CC: "cubic"})); out != agent.Applied {
				t.Fatalf("generation 1: %s %+v", out, s)
			}
			before, _ := os.ReadFile(stateFile)
			out, s := a.Apply([]byte(tc.rec))
			if out != agent.Refused || s.State != status.Refused || !strings.Contains(s.Reason, tc.reason) {
				t.Errorf("hostile record: %s, reason %.200q; want refused naming %q", out, s.Reason, tc.reason)
			}
			if len(status.Encode(s)) > 4096 {
				t.Errorf("status of %d bytes", len(status.Encode(s)))
			}
			if cur, _ := k.Current(); cur != "cubic" {
				t.Errorf("kernel runs %s after a refused record", cur)
			}
			if after, _ := os.ReadFile(stateFile); string(after) != string(before) {
				t.Errorf("state file changed:\n%s", after)
			}
			// The controller's next record for the host: its last generation + 1.
			out, s = a.Apply(testkit.Sign(t, testkit.Record{RolloutID: "r1", Generation: 2, Pop: "lab1",
				Host: "edge-h1", Arm: "bbr", CC: "bbr"}))
			if out != agent.Applied {
				t.Fatalf("the next legitimate record after the hostile one: %s %+v", out, s)
			}
			if st, _ := statefile.Read(stateFile); st.Generation != 2 || st.CC != "bbr" {
				t.Errorf("state %+v", st)
			}
		})
	}
}

// After a restart the agent reads the compacted topic to its end and applies only the newest
// record for its host. A hostile record after the controller's last good one must not hide
// it: the good one is applied, the hostile one refused (and reported).
func TestCatchUpAppliesTheNewestGoodRecordBeforeAHostileOne(t *testing.T) {
	k := fakeKernel(t, "cubic")
	stateFile := filepath.Join(t.TempDir(), "state.json")
	a := fakeAgent(t, k, stateFile)
	good := func(gen int64, cc string) []byte {
		return testkit.Sign(t, testkit.Record{RolloutID: "r1", Generation: gen, Pop: "lab1", Host: "edge-h1", Arm: cc, CC: cc})
	}
	hostile := testkit.SignRaw(t, []byte(`{"schema":"assignment/1","rollout_id":"r1","pop":"lab1","host":"edge-h1",`+
		`"arm":"bbr","cc":"bbr","qdisc":null,"generation":9223372036854775807,"issued_at_ms":1}`))
	var cu agent.CatchUp
	for _, r := range [][]byte{good(1, "bbr"), good(2, "reno"), hostile} {
		cu.Add(a, r)
	}
	var outs []agent.Outcome
	cu.Finish(func(raw []byte) {
		out, _ := a.Apply(raw)
		outs = append(outs, out)
	})
	if len(outs) != 2 || outs[0] != agent.Applied || outs[1] != agent.Refused {
		t.Fatalf("outcomes %v, want [applied refused]", outs)
	}
	if st, _ := statefile.Read(stateFile); st.Generation != 2 || st.CC != "reno" {
		t.Errorf("state %+v, want generation 2 (reno)", st)
	}
	if cur, _ := k.Current(); cur != "reno" {
		t.Errorf("kernel runs %s", cur)
	}
}
