package prefixset_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/rollout/assignment"
	"github.com/ccab-dev/ccab/rollout/internal/testkit"
	"github.com/ccab-dev/ccab/rollout/prefixset"
)

func pub(t *testing.T) []byte {
	t.Helper()
	k, err := assignment.PublicKeyFromBase64(string(testkit.Read(t, "test_ed25519_public.b64")))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func set(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)
	}
	return out
}

func ref(name string, version int64, prefixes []string) assignment.SetRef {
	return assignment.SetRef{Name: name, Version: version, SHA256: testkit.PrefixSetDigest(prefixes)}
}

func TestAssembleVerifiesEveryChunkAndTheDigest(t *testing.T) {
	k := pub(t)
	ps := set(1000)
	chunks := testkit.PrefixSetChunks(t, "access:mobile", 2, ps, 300) // 4 chunks
	r := ref("access:mobile", 2, ps)

	// chunks of another version and another set around it are skipped; order on the topic does not matter
	other := testkit.PrefixSetChunks(t, "access:mobile", 1, set(10), 300)
	mixed := append(append([][]byte{other[0], chunks[3]}, chunks[:3]...), testkit.PrefixSetChunks(t, "country:JP", 2, set(5), 300)...)
	got, err := prefixset.Assemble(r, mixed, k)
	if err != nil || len(got) != 1000 || got[0].String() != "10.0.0.0/24" || got[999].String() != "10.3.231.0/24" {
		t.Fatalf("assemble: %d %v", len(got), err)
	}

	cases := []struct {
		name    string
		records [][]byte
		ref     assignment.SetRef
		err     error
		text    string
	}{
		{"tampered chunk", [][]byte{chunks[0], []byte(strings.Replace(string(chunks[1]), "10.1.44.0/24", "0.0.0.0/0", 1)), chunks[2], chunks[3]},
			r, prefixset.ErrTampered, "chunk 1"},
		{"chunk missing", [][]byte{chunks[0], chunks[1], chunks[3]}, r, prefixset.ErrIncomplete, "3 of 4 chunks"},
		{"no chunk at all", other, r, prefixset.ErrIncomplete, "no chunk"},
		{"another content than the assignment names", chunks, ref("access:mobile", 2, set(999)), prefixset.ErrMismatch, "sha256"},
		{"a chunk of another build of the same version", [][]byte{chunks[0], testkit.PrefixSetChunks(t, "access:mobile", 2, set(1001), 300)[1], chunks[2], chunks[3]},
			r, prefixset.ErrMismatch, "chunk 1 says"},
		{"unsigned", [][]byte{[]byte(strings.Split(string(chunks[0]), `,"signature"`)[0] + "}")}, r, prefixset.ErrTampered, "not signed"},
		{"not a chunk", [][]byte{[]byte(`{"schema":"prefix_set/2"}`)}, r, prefixset.ErrMalformed, "missing field"},
	}
	for _, c := range cases {
		if _, err := prefixset.Assemble(c.ref, c.records, k); !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: %v, want %v containing %q", c.name, err, c.err, c.text)
		}
	}

	// content signed consistently but with a repeated prefix or an unmasked one: refused
	dup := append(set(3), "10.0.1.0/24")
	if _, err := prefixset.Assemble(ref("s", 1, dup), testkit.PrefixSetChunks(t, "s", 1, dup, 2), k); !errors.Is(err, prefixset.ErrMalformed) ||
		!strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate: %v", err)
	}
	bad := []string{"10.0.0.1/8"}
	if _, err := prefixset.Assemble(ref("s", 1, bad), testkit.PrefixSetChunks(t, "s", 1, bad, 2), k); !errors.Is(err, prefixset.ErrMalformed) ||
		!strings.Contains(err.Error(), "past its length") {
		t.Errorf("unmasked: %v", err)
	}
}

// Every chunk the controller writes must pass the agent's size limit; a larger record is
// refused before parsing.
func TestChunkBounds(t *testing.T) {
	if _, err := prefixset.ParseChunk(make([]byte, prefixset.MaxChunkBytes+1)); !errors.Is(err, prefixset.ErrMalformed) {
		t.Fatalf("oversize: %v", err)
	}
	if prefixset.Key("access:mobile", 3, 7) != "access:mobile/3/7" || !strings.HasPrefix(prefixset.Key("a", 3, 7), prefixset.KeyPrefix("a", 3)) {
		t.Fatal("key")
	}
}

// The controller's chunks (contracts/vectors/prefix_set_chunks.jsonl, written by
// pipelines/ccab/rollout/prefixset.py) assemble here to the set the vector's README names.
func TestControllerVector(t *testing.T) {
	var recs [][]byte
	for _, line := range strings.Split(strings.TrimSpace(string(testkit.Read(t, "prefix_set_chunks.jsonl"))), "\n") {
		recs = append(recs, []byte(line))
	}
	r := assignment.SetRef{Name: "access:mobile", Version: 3, SHA256: "46d0a557984b64e0f32606f7aa6e30c62b4fc4f10bc69e39e32f11971147975b"}
	got, err := prefixset.Assemble(r, recs, pub(t))
	if err != nil || len(recs) != 2 || len(got) != 1300 || got[0].String() != "10.0.0.0/24" || got[1199].String() != "10.4.175.0/24" ||
		got[1299].String() != "2001:db8:63::/48" {
		t.Fatalf("%d chunks, %d prefixes, %v", len(recs), len(got), err)
	}
	for _, b := range recs {
		if len(b) > prefixset.MaxChunkBytes {
			t.Errorf("a chunk of %d bytes", len(b))
		}
	}
}
