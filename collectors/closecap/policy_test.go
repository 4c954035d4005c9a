package closecap

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/netlink"
	"github.com/ccab-dev/ccab/collectors/sampler"
	"github.com/ccab-dev/ccab/internal/testvectors"
)

// The vector's real destroy events with a socket policy lookup: the connection the policy set
// carries its generation (looked up by the event's cookie); one it matched but could not set
// carries none and is counted; one it did not match carries none.
func TestPolicyGeneration(t *testing.T) {
	dir := testvectors.Dir(t)
	raw, err := os.ReadFile(filepath.Join(dir, vectorName+".hex"))
	if err != nil {
		t.Fatal(err)
	}
	var p vectorParams
	pb, _ := os.ReadFile(filepath.Join(dir, vectorName+".params.json"))
	if err := json.Unmarshal(pb, &p); err != nil {
		t.Fatal(err)
	}
	var msgs [][]byte
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			m, err := hex.DecodeString(line)
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, m)
		}
	}
	if len(msgs) < 2 {
		t.Fatalf("vector has %d events", len(msgs))
	}
	cookies := make([]uint64, len(msgs))
	for i, m := range msgs {
		h, err := netlink.DecodeHeader(m)
		if err != nil {
			t.Fatal(err)
		}
		cookies[i] = h.Cookie
	}
	for _, tc := range []struct {
		name       string
		set, found bool
		wantGen    bool
	}{{"set", true, true, true}, {"failed", false, true, false}, {"not matched", false, false, false}} {
		var asked []uint64
		c := &Capture{cfg: Config{SampleRate: p.SampleRate, Policy: func(cookie uint64) (uint64, bool, bool) {
			asked = append(asked, cookie)
			if cookie != cookies[0] {
				return 0, false, false
			}
			return 41, tc.set, tc.found
		}}, sel: sampler.NewSelection(p.Salt, p.SampleRate)}
		sp := &space{inode: p.NetnsInode, key: anon.SockKey{Salt: p.Salt, BootID: p.BootID, Netns: p.NetnsInode}.Hasher()}
		sp.ccDef.Store(p.NetnsCC)
		for i, m := range msgs {
			r, ok := c.event(sp, m, p.ReceivedMs[i])
			if !ok {
				t.Fatalf("%s: event %d gave no record", tc.name, i)
			}
			got := r.PolicyGeneration != nil
			if i == 0 && (got != tc.wantGen || (got && *r.PolicyGeneration != 41)) {
				t.Errorf("%s: first connection policy_generation %v", tc.name, r.PolicyGeneration)
			}
			if i > 0 && got {
				t.Errorf("%s: connection %d (no policy) has policy_generation %d", tc.name, i, *r.PolicyGeneration)
			}
		}
		if len(asked) != len(msgs) || asked[0] != cookies[0] {
			t.Errorf("%s: looked up %v, want the events' cookies %v", tc.name, asked, cookies)
		}
		wantSet, wantFailed := map[bool]uint64{true: 1}[tc.set && tc.found], map[bool]uint64{true: 1}[!tc.set && tc.found]
		if c.Stats.PolicySet.Load() != wantSet || c.Stats.PolicyFailed.Load() != wantFailed {
			t.Errorf("%s: counted set %d failed %d", tc.name, c.Stats.PolicySet.Load(), c.Stats.PolicyFailed.Load())
		}
	}
}
