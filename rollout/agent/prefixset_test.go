package agent_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ccab-dev/ccab/internal/cgrouptest"
	"github.com/ccab-dev/ccab/internal/netns"
	"github.com/ccab-dev/ccab/internal/netnstest"
	"github.com/ccab-dev/ccab/rollout/agent"
	"github.com/ccab-dev/ccab/rollout/assignment"
	"github.com/ccab-dev/ccab/rollout/internal/testkit"
	"github.com/ccab-dev/ccab/rollout/kernelcc"
	"github.com/ccab-dev/ccab/rollout/prefixset"
	"github.com/ccab-dev/ccab/rollout/qdisc"
	"github.com/ccab-dev/ccab/rollout/sockpolicy"
	"github.com/ccab-dev/ccab/rollout/statefile"
)

// memSets is a prefix-set source holding records by key (the compacted topic's content).
type memSets map[string][]byte

func (m memSets) Fetch(_ context.Context, name string, version int64) ([][]byte, error) {
	var out [][]byte
	for k, v := range m {
		if strings.HasPrefix(k, prefixset.KeyPrefix(name, version)) {
			out = append(out, v)
		}
	}
	return out, nil
}

func (m memSets) put(t *testing.T, name string, version int64, chunks [][]byte) {
	t.Helper()
	for i, c := range chunks {
		m[prefixset.Key(name, version, i)] = c
	}
}

// signSet signs an assignment/3 naming name/version/sha256.
func signSet(t *testing.T, gen int64, name string, version int64, sha string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"schema": assignment.SchemaPrefixSet, "rollout_id": "seg", "generation": gen,
		"pop": "lab1", "host": "edge-test-1", "arm": "bbr", "cc": "cubic", "qdisc": nil, "issued_at_ms": 1763769600000,
		"policy": map[string]any{"segment": "access:mobile", "cc": "reno",
			"prefix_set": map[string]any{"name": name, "version": version, "sha256": sha}}})
	if err != nil {
		t.Fatal(err)
	}
	signed, err := assignment.Sign(b, testkit.Key(t))
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

// bigSegment is n distinct prefixes, like a networks dictionary's access:mobile: IPv4 /12 to
// /24 and IPv6 /32 to /64, some nested in others, in the controller's order (sorted).
func bigSegment(r *rand.Rand, n int) []netip.Prefix {
	seen := map[netip.Prefix]bool{}
	for len(seen) < n {
		var p netip.Prefix
		if r.IntN(10) < 8 {
			a := netip.AddrFrom4([4]byte{byte(1 + r.IntN(223)), byte(r.IntN(256)), byte(r.IntN(256)), 0})
			p, _ = a.Prefix(12 + r.IntN(13))
		} else {
			var b [16]byte
			b[0], b[1], b[2], b[3], b[4], b[5] = 0x20, 0x01, 0x0d, 0xb8, byte(r.IntN(256)), byte(r.IntN(256))
			b[6], b[7] = byte(r.IntN(256)), byte(r.IntN(256))
			p, _ = netip.AddrFrom16(b).Prefix(32 + r.IntN(33))
		}
		seen[p] = true
	}
	out := make([]netip.Prefix, 0, n)
	for p := range seen {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if a.Addr().Is4() != b.Addr().Is4() {
			if a.Addr().Is4() {
				return -1
			}
			return 1
		}
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return out
}

func texts(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// A 50,000-prefix segment (about 70 times what one assignment record holds) from a signed,
// chunked prefix set lands in the kernel's policy map whole; the kernel's LPM lookups agree
// with an independent matcher; a tampered chunk, a missing chunk, a digest the assignment
// does not name and an older version are refused and leave the map as it was; rollback
// empties it, and the stale version stays refused after it.
func TestPrefixSetPolicyFromSignedChunks(t *testing.T) {
	l := newLab(t)
	enf, err := sockpolicy.Attach(cgrouptest.Dir(t, "segset-agent"), sockpolicy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { enf.Detach() })
	stateFile := filepath.Join(t.TempDir(), "state.json")
	sets := memSets{}
	a := policyAgentWith(t, l, stateFile, enf, sets)

	r := rand.New(rand.NewPCG(50, 0))
	seg := bigSegment(r, 50_000)
	v2 := texts(seg)
	sets.put(t, "access:mobile", 2, testkit.PrefixSetChunks(t, "access:mobile", 2, v2, 500))
	out, s := a.Apply(signSet(t, 1, "access:mobile", 2, testkit.PrefixSetDigest(v2)))
	if out != agent.Applied {
		t.Fatalf("apply: %s %+v", out, s)
	}
	cur, err := enf.Current()
	if err != nil || cur.Generation != 1 || len(cur.Rules) != len(seg) {
		t.Fatalf("policy map: %d rules, generation %d, %v", len(cur.Rules), cur.Generation, err)
	}
	inMap := map[netip.Prefix]bool{}
	for _, rule := range cur.Rules {
		if rule.CC != "reno" {
			t.Fatalf("rule %v", rule)
		}
		inMap[rule.Prefix] = true
	}
	for _, p := range seg {
		if !inMap[p] {
			t.Fatalf("%s of the set is not in the map", p)
		}
	}
	if st, _ := statefile.Read(stateFile); st.PolicySet != "access:mobile" || st.PolicySetVersion != 2 ||
		st.PolicyPrefixes != 50_000 || st.PolicySetSHA256 != testkit.PrefixSetDigest(v2) {
		t.Errorf("state file: %+v", st)
	}

	// The kernel's longest-prefix match against an independent one: the set's prefixes by
	// length, the longest containing the address wins.
	byLen := map[int]map[netip.Prefix]bool{}
	for _, p := range seg {
		if byLen[p.Bits()] == nil {
			byLen[p.Bits()] = map[netip.Prefix]bool{}
		}
		byLen[p.Bits()][p] = true
	}
	matched := 0
	for i := range 5000 {
		var addr netip.Addr
		p := seg[r.IntN(len(seg))]
		b := p.Addr().AsSlice()
		if i%3 == 0 { // anywhere
			r.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
			b[0] = byte(1 + r.IntN(223))
			if len(b) == 16 {
				b[0], b[1] = 0x20, 0x01
			}
		}
		for bit := p.Bits(); bit < len(b)*8; bit++ { // random host bits
			if r.IntN(2) == 1 {
				b[bit/8] |= 0x80 >> (bit % 8)
			}
		}
		addr, _ = netip.AddrFromSlice(b)
		want := -1
		for bits := addr.BitLen(); bits >= 0; bits-- {
			if q, _ := addr.Prefix(bits); byLen[bits][q] {
				want = bits
				break
			}
		}
		cc, gen, found, err := enf.Lookup(addr)
		if err != nil {
			t.Fatal(err)
		}
		if found != (want >= 0) || (found && (cc != "reno" || gen != 1)) {
			t.Fatalf("%s: kernel found=%v %q gen %d; the independent matcher: longest /%d", addr, found, cc, gen, want)
		}
		if found {
			matched++
		}
	}
	if matched < 1000 || matched > 4900 {
		t.Fatalf("%d of 5000 addresses matched: the test does not exercise both outcomes", matched)
	}

	refusedWith := func(what string, gen int64, raw []byte, reason, text string) {
		t.Helper()
		before := testutil.ToFloat64(a.Metrics().Refusals.WithLabelValues(reason))
		if out, s := a.Apply(raw); out != agent.Refused || !strings.Contains(s.Reason, text) || s.CCEffective != "cubic" {
			t.Fatalf("%s: %s %+v", what, out, s)
		}
		if testutil.ToFloat64(a.Metrics().Refusals.WithLabelValues(reason)) != before+1 {
			t.Errorf("%s: refusals_total{reason=%q} not counted", what, reason)
		}
		if cur, _ := enf.Current(); cur.Generation != 1 || len(cur.Rules) != len(seg) {
			t.Fatalf("%s changed the policy map: generation %d, %d rules", what, cur.Generation, len(cur.Rules))
		}
	}
	// version 3: one chunk tampered after signing (a prefix widened to everything)
	v3 := texts(seg[:49_000])
	c3 := testkit.PrefixSetChunks(t, "access:mobile", 3, v3, 500)
	sets.put(t, "access:mobile", 3, c3)
	sets[prefixset.Key("access:mobile", 3, 5)] = []byte(strings.Replace(string(c3[5]), v3[5*500+1], "0.0.0.0/0", 1))
	refusedWith("tampered chunk", 2, signSet(t, 2, "access:mobile", 3, testkit.PrefixSetDigest(v3)), "prefix_set_invalid", "forged or tampered")
	// a chunk missing
	delete(sets, prefixset.Key("access:mobile", 3, 5))
	refusedWith("missing chunk", 3, signSet(t, 3, "access:mobile", 3, testkit.PrefixSetDigest(v3)), "prefix_set_incomplete", "97 of 98 chunks")
	// complete, but not the content the assignment names
	sets[prefixset.Key("access:mobile", 3, 5)] = c3[5]
	refusedWith("digest mismatch", 4, signSet(t, 4, "access:mobile", 3, testkit.PrefixSetDigest(v2)), "prefix_set_invalid", "sha256")
	// an older version than applied
	v1 := texts(seg[:100])
	sets.put(t, "access:mobile", 1, testkit.PrefixSetChunks(t, "access:mobile", 1, v1, 500))
	refusedWith("stale version", 5, signSet(t, 5, "access:mobile", 1, testkit.PrefixSetDigest(v1)), "prefix_set_stale", "older than the applied version 2")

	// version 3, intact, replaces the policy whole
	if out, s := a.Apply(signSet(t, 6, "access:mobile", 3, testkit.PrefixSetDigest(v3))); out != agent.Applied {
		t.Fatalf("version 3: %s %+v", out, s)
	}
	if cur, _ := enf.Current(); cur.Generation != 6 || len(cur.Rules) != 49_000 {
		t.Fatalf("after version 3: generation %d, %d rules", cur.Generation, len(cur.Rules))
	}
	// rollback empties the policy; an older version of the set stays refused after it
	if out, s := a.Apply(testkit.Sign(t, testkit.Record{RolloutID: "seg", Generation: 7, Pop: "lab1", Host: "edge-test-1",
		Arm: "control", CC: "cubic"})); out != agent.Applied {
		t.Fatalf("rollback: %s %+v", out, s)
	}
	if cur, err := enf.Current(); err != nil || len(cur.Rules) != 0 {
		t.Fatalf("rollback left %d rules (%v)", len(cur.Rules), err)
	}
	if st, _ := statefile.Read(stateFile); st.PolicySet != "" || st.PrefixSetVersions["access:mobile"] != 3 {
		t.Errorf("state file after rollback: %+v", st)
	}
	refusedAfter := func() {
		if out, s := a.Apply(signSet(t, 8, "access:mobile", 2, testkit.PrefixSetDigest(v2))); out != agent.Refused ||
			!strings.Contains(s.Reason, "older than the applied version 3") {
			t.Fatalf("stale after rollback: %s %+v", out, s)
		}
	}
	refusedAfter()

	// An agent that reads no prefix sets refuses assignment/3 rather than treating nobody.
	b := policyAgentWith(t, l, filepath.Join(t.TempDir(), "state.json"), enf, nil)
	if out, s := b.Apply(signSet(t, 1, "access:mobile", 2, testkit.PrefixSetDigest(v2))); out != agent.Refused ||
		!strings.Contains(s.Reason, "reads no prefix sets") {
		t.Fatalf("no source: %s %+v", out, s)
	}
}

func policyAgentWith(t *testing.T, l lab, stateFile string, enf agent.PolicyEnforcer, sets agent.PrefixSetSource) *agent.Agent {
	t.Helper()
	pub, err := assignment.PublicKeyFromBase64(string(testkit.Read(t, "test_ed25519_public.b64")))
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.Config{Host: "edge-test-1", Pop: "lab1", PublicKey: pub, StateFile: stateFile,
		NetnsPath: netns.Path(l.host), Kernel: kernelcc.Kernel{ProcFS: "/proc", SysFS: "/sys"}, Tc: qdisc.Tc{},
		Policy: enf}
	if sets != nil {
		cfg.PrefixSets = sets
	}
	a, err := agent.New(cfg, agent.NewMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// KafkaPrefixSets reads the chunks of one name and version from a real compacted topic (other
// versions and sets on it are left, a key written twice counts once: the later record), and they
// assemble to the set.
func TestKafkaPrefixSetsFetch(t *testing.T) {
	bs := brokers(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(bs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	topic := "test.ccab.prefix_sets." + netnstest.Tag()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	compact, maxBytes := "compact", "65536"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &compact, "max.message.bytes": &maxBytes}, topic); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) })

	seg := texts(bigSegment(rand.New(rand.NewPCG(7, 7)), 20_000))
	put := func(name string, version int64, ps []string) {
		for i, c := range testkit.PrefixSetChunks(t, name, version, ps, 500) {
			produce(t, bs, topic, prefixset.Key(name, version, i), c)
		}
	}
	put("access:mobile", 1, seg[:10])
	// a key written twice before the cleaner ran: the later record is the chunk
	produce(t, bs, topic, prefixset.Key("access:mobile", 2, 3), []byte(`{"schema":"prefix_set/1","stale":true}`))
	put("access:mobile", 2, seg)
	put("access:mobile", 20, seg[:30]) // "access:mobile/2" is a prefix of its key, not of its key prefix
	put("country:JP", 2, seg[:20])
	src := agent.KafkaPrefixSets{Brokers: bs, Topic: topic}
	recs, err := src.Fetch(ctx, "access:mobile", 2)
	if err != nil || len(recs) != 40 {
		t.Fatalf("fetch: %d records, %v", len(recs), err)
	}
	pub, _ := assignment.PublicKeyFromBase64(string(testkit.Read(t, "test_ed25519_public.b64")))
	got, err := prefixset.Assemble(assignment.SetRef{Name: "access:mobile", Version: 2, SHA256: testkit.PrefixSetDigest(seg)}, recs, pub)
	if err != nil || len(got) != len(seg) || got[len(got)-1].String() != seg[len(seg)-1] {
		t.Fatalf("assemble: %d %v", len(got), err)
	}
	if recs, err := src.Fetch(ctx, "access:mobile", 3); err != nil || len(recs) != 0 {
		t.Fatalf("absent version: %d %v", len(recs), err)
	}
}
