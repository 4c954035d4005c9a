package status_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ccab-dev/ccab/rollout/status"
)

// A status never grows with what it echoes (a tc error, a kernel list): every string and the
// list are bounded, cut on a UTF-8 boundary, and the record stays valid JSON.
func TestEncodeBoundsEveryField(t *testing.T) {
	huge := strings.Repeat("é", 1<<20)
	var avail []string
	for i := 0; i < 10000; i++ {
		avail = append(avail, "cc")
	}
	b := status.Encode(status.Status{Pop: huge, Host: huge, Kernel: huge, RolloutID: huge, Arm: huge, State: status.Error,
		CCEffective: huge, CCAvailable: avail, QdiscEffective: &huge, Reason: huge, BBRVersion: huge})
	if len(b) > status.MaxBytes {
		t.Fatalf("status of %d bytes, the bound is %d", len(b), status.MaxBytes)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range m {
		if s, ok := v.(string); ok && !utf8.ValidString(s) {
			t.Errorf("%s is not valid UTF-8 after the cut", k)
		}
	}
	if !strings.HasSuffix(m["reason"].(string), "…") {
		t.Errorf("a cut reason does not say so: %.40q", m["reason"])
	}
}
