package statefile_test

import (
	"encoding/json"
	"os"
	"path/filepath"
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
