package nginxlog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/internal/testvectors"
)

// hostKeys are the http_request/1 fields the vectors leave to the collecting host.
var hostKeys = map[string]bool{"pop": true, "host": true, "kernel": true, "arm": true, "rollout_id": true,
	"cc": true, "sample_rate": true}

// The ccab JSON vector must come out the same whether read as JSON lines or through the
// compiled `ccab` log_format.
func TestSharedVector(t *testing.T) {
	dir := testvectors.Dir(t)
	in, err := os.ReadFile(filepath.Join(dir, "nginx_ccab_json.log"))
	if err != nil {
		t.Fatal(err)
	}
	want := testvectors.ReadJSONL(t, filepath.Join(dir, "nginx_ccab_json.expected.jsonl"))
	for _, spec := range []string{FormatJSON, "ccab"} {
		t.Run(spec, func(t *testing.T) {
			p, err := NewParser(spec, "")
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			enc := record.NewEncoder(&buf)
			for i, line := range strings.Split(strings.TrimSpace(string(in)), "\n") {
				r, err := p.Parse(line)
				if err != nil {
					t.Fatalf("line %d: %v", i+1, err)
				}
				record.Meta{Pop: "p", SampleRate: 1}.StampHTTP(&r)
				if err := enc.Encode(&r); err != nil {
					t.Fatal(err)
				}
			}
			got := testvectors.DecodeJSONL(t, buf.Bytes())
			if len(got) != len(want) {
				t.Fatalf("got %d records, want %d", len(got), len(want))
			}
			for i := range want {
				for k, w := range want[i] {
					if g, ok := got[i][k]; !ok || !testvectors.SameValue(g, w) {
						t.Errorf("record %d: %s = %v, want %v", i+1, k, g, w)
					}
				}
				for k := range got[i] {
					if _, ok := want[i][k]; !ok && !hostKeys[k] {
						t.Errorf("record %d: unexpected key %s", i+1, k)
					}
				}
			}
		})
	}
}
