package statefile_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/rollout/statefile"
)

func TestWriteReadAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "state.json")
	if st, err := statefile.Read(path); err != nil || st.Generation != 0 {
		t.Fatalf("missing file: %+v %v", st, err)
	}
	q := "fq"
	want := statefile.State{RolloutID: "r", Arm: "bbr", CC: "bbr", Generation: 7, Qdisc: &q, Host: "h"}
	for i := 0; i < 3; i++ {
		if err := statefile.Write(path, want); err != nil {
			t.Fatal(err)
		}
	}
	got, err := statefile.Read(path)
	if err != nil || got.Generation != 7 || got.CC != "bbr" || got.Qdisc == nil || *got.Qdisc != "fq" {
		t.Errorf("read back %+v %v", got, err)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries (temp files left behind?)", len(ents))
	}
	// The collector's reader (collectors/config/host.go RolloutState) sees its four fields.
	var coll struct {
		RolloutID  string `json:"rollout_id"`
		Arm        string `json:"arm"`
		CC         string `json:"cc"`
		Generation int64  `json:"generation"`
	}
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &coll); err != nil || coll.RolloutID != "r" || coll.Generation != 7 {
		t.Errorf("collector view: %+v %v", coll, err)
	}
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := statefile.Read(path); err == nil {
		t.Error("corrupt state file read without error")
	}
}

// The state file is read back with the same rules as a record: every field the agent and the
// collector use present with its type (null refused, naming the field), bounded, and a
// generation the generation rule can still follow. A bad file is an error (the agent does not
// start) rather than a silent generation 0 or a host frozen at 2^63-1.
func TestReadRefusesNullHugeAndWrongTypes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, tc := range []struct{ body, field string }{
		{`{"rollout_id":"r","arm":"a","cc":"bbr","generation":null,"qdisc":null}`, "generation"},
		{`{"rollout_id":"r","arm":"a","cc":"bbr","qdisc":null}`, "generation"},
		{`{"rollout_id":null,"arm":"a","cc":"bbr","generation":3,"qdisc":null}`, "rollout_id"},
		{`{"rollout_id":"r","arm":null,"cc":"bbr","generation":3,"qdisc":null}`, "arm"},
		{`{"rollout_id":"r","arm":"a","cc":null,"generation":3,"qdisc":null}`, "cc"},
		{`{"rollout_id":"r","arm":"a","cc":"bbr","generation":9223372036854775807,"qdisc":null}`, "generation"},
		{`{"rollout_id":"r","arm":"a","cc":"bbr","generation":-4,"qdisc":null}`, "generation"},
		{`{"rollout_id":"r","arm":"a","cc":"bbr","generation":"3","qdisc":null}`, "generation"},
		{`{"rollout_id":"r","arm":"a","cc":"bbr\n; reboot","generation":3,"qdisc":null}`, "cc"},
		{`{"rollout_id":"r","arm":"a","cc":"bbr","generation":3,"qdisc":"fq limit 1"}`, "qdisc"},
		{`{"rollout_id":"` + strings.Repeat("r", 300) + `","arm":"a","cc":"bbr","generation":3,"qdisc":null}`, "rollout_id"},
		{`{"rollout_id":"r","arm":"a","cc":"bbr","generation":3,"qdisc":null,"pad":"` + strings.Repeat("x", 1<<20) + `"}`, "bytes"},
		{`null`, "object"},
		{`[]`, "object"},
	} {
		if err := os.WriteFile(path, []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := statefile.Read(path)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%.80s: err %v, want one naming %q", tc.body, err, tc.field)
		}
	}
	// What an agent writes (and an empty state: nothing applied yet) reads back.
	if err := os.WriteFile(path, []byte(`{"rollout_id":"","arm":"","cc":"","generation":0,"qdisc":null}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := statefile.Read(path); err != nil {
		t.Errorf("empty state: %v", err)
	}
}
