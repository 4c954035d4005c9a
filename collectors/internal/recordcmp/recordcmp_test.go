package recordcmp

import (
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/collectors/record"
)

func TestDiff(t *testing.T) {
	base := record.TCPSample{CC: "bbr", CCVersion: record.Int(1), Cwnd: record.Int(10), RTTUs: record.Int(1234567),
		LastsndMs: record.Int(100), BBRPacingGain: record.F(739.0 / 256)}
	ss := base
	ss.CCVersion = nil                   // stock ss cannot tell the BBR version
	ss.RTTUs = record.Int(1234570)       // %g: 1234.57 ms
	ss.LastsndMs = record.Int(120)       // 20 ms later
	ss.BBRPacingGain = record.F(2.88672) // %g
	if d := Diff(base, ss, Tolerance{LastMs: 50}); len(d) != 0 {
		t.Errorf("allowed differences reported: %v", d)
	}
	ss.Cwnd = record.Int(11)
	ss.RTTUs = record.Int(1234000)
	d := Diff(base, ss, Tolerance{LastMs: 5})
	got := strings.Join(d, "; ")
	for _, f := range []string{"cwnd: netlink 10, ss 11", "rtt_us", "lastsnd_ms"} {
		if !strings.Contains(got, f) {
			t.Errorf("missing %q in %q", f, got)
		}
	}
	after := base
	after.LastsndMs = record.Int(130)
	if d := Diff(base, ss, Tolerance{Bracket: &after, Ignore: []string{"cwnd", "rtt_us"}}); len(d) != 0 {
		t.Errorf("bracketed: %v", d)
	}
	ss.CCVersion = record.Int(3)
	if d := Diff(base, ss, Tolerance{Bracket: &after, Ignore: []string{"cwnd", "rtt_us"}}); len(d) != 1 {
		t.Errorf("cc_version 1 vs 3 must differ: %v", d)
	}
}
