// Package prefixset reads prefix_set/1 (contracts/CONTRACTS.md): a signed, versioned list of
// CIDRs too large for one assignment record, published by the controller as chunks on the
// compacted topic ccab.prefix_sets.v1 (key name/version/chunk, each chunk a signed record of
// at most 16 KiB) and named by an assignment/3 policy as {name, version, sha256}. It is pure:
// no I/O; the agent fetches the chunks (rollout/agent) and Assemble verifies them.
package prefixset

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/ccab-dev/ccab/rollout/assignment"
	"github.com/ccab-dev/ccab/rollout/internal/strictjson"
)

// Schema is the value of "schema" in every chunk.
const Schema = "prefix_set/1"

// Bounds (contracts/CONTRACTS.md, prefix_set/1).
const (
	// MaxPrefixes is the most prefixes one set holds: the policy trie's max_entries
	// (rollout/sockpolicy MaxPrefixes, POLICY_MAX_PREFIXES in sockpolicy.bpf.c).
	MaxPrefixes = 1 << 20
	// MaxChunks is the most chunks one set has.
	MaxChunks = 4096
	// MaxChunkBytes bounds one chunk record (the Kafka value), like an assignment.
	MaxChunkBytes = assignment.MaxRecordBytes
	// MaxContentBytes bounds the canonical content of a set (every prefix and its "\n").
	MaxContentBytes = 48 << 20
)

// Errors to branch on (wrapped with details).
var (
	ErrMalformed  = errors.New("malformed prefix_set chunk")
	ErrIncomplete = errors.New("prefix set incomplete")
	ErrMismatch   = errors.New("prefix set does not match its reference")
	ErrTampered   = errors.New("prefix set chunk forged or tampered")
	ErrTooLarge   = errors.New("prefix set too large")
)

// Chunk is one prefix_set/1 record.
type Chunk struct {
	Name      string
	Version   int64
	SHA256    string // of the whole set's canonical content
	Total     int    // prefixes in the whole set
	Index     int    // this chunk, 0 … Count-1
	Count     int    // chunks in the set
	Prefixes  []string
	Signature string

	canonical []byte
}

// Key is the Kafka key of a chunk: name/version/chunk.
func Key(name string, version int64, chunk int) string {
	return name + "/" + strconv.FormatInt(version, 10) + "/" + strconv.Itoa(chunk)
}

// KeyPrefix is what the keys of every chunk of one version start with.
func KeyPrefix(name string, version int64) string {
	return name + "/" + strconv.FormatInt(version, 10) + "/"
}

var required = []string{"schema", "name", "version", "sha256", "prefixes_total", "chunk", "chunks", "prefixes", "issued_at_ms"}

// ParseChunk decodes one chunk and checks its shape (not its signature: Assemble verifies).
func ParseChunk(b []byte) (*Chunk, error) {
	if len(b) > MaxChunkBytes {
		return nil, fmt.Errorf("%w: more than %d bytes (%d read)", ErrMalformed, MaxChunkBytes, len(b))
	}
	if err := strictjson.NoDuplicates(b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	raw, err := strictjson.Object(b, MaxChunkBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	canon, err := assignment.Canonical(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	for _, k := range required {
		if _, ok := raw[k]; !ok {
			return nil, fmt.Errorf("%w: missing field %s", ErrMalformed, k)
		}
	}
	f := strictjson.Fields{Raw: raw}
	c := &Chunk{canonical: canon}
	schema := f.Str("schema", 1, 64)
	c.Name = f.Str("name", 1, 200)
	c.Version = f.Int("version", 1, assignment.MaxGeneration)
	c.SHA256 = f.Str("sha256", 64, 64)
	c.Total = int(f.Int("prefixes_total", 1, MaxPrefixes))
	c.Count = int(f.Int("chunks", 1, MaxChunks))
	c.Index = int(f.Int("chunk", 0, MaxChunks-1))
	f.Int("issued_at_ms", 0, assignment.MaxGeneration)
	if s, _ := f.OptStr("signature", false); s != nil {
		if len(*s) > 128 {
			f.Bad("signature", fmt.Sprintf("%d bytes, an Ed25519 signature in base64 is 88", len(*s)))
		} else {
			c.Signature = *s
		}
	}
	if err := f.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if schema != Schema {
		return nil, fmt.Errorf("%w: schema %.70q, want %q", ErrMalformed, schema, Schema)
	}
	if !assignment.SetName.MatchString(c.Name) {
		return nil, fmt.Errorf("%w: name %.60q is not a set name", ErrMalformed, c.Name)
	}
	if !assignment.SetDigest.MatchString(c.SHA256) {
		return nil, fmt.Errorf("%w: sha256: want 64 lowercase hex digits", ErrMalformed)
	}
	if c.Index >= c.Count {
		return nil, fmt.Errorf("%w: chunk %d of %d", ErrMalformed, c.Index, c.Count)
	}
	if strictjson.Kind(raw["prefixes"]) != "an array" || json.Unmarshal(raw["prefixes"], &c.Prefixes) != nil {
		return nil, fmt.Errorf("%w: prefixes: want an array of strings", ErrMalformed)
	}
	return c, nil
}

// Verify checks the chunk's Ed25519 signature (the rollout key that signs assignments).
func (c *Chunk) Verify(pub ed25519.PublicKey) error {
	if err := assignment.VerifySignature(pub, c.canonical, c.Signature); err != nil {
		return fmt.Errorf("%w: chunk %d: %v", ErrTampered, c.Index, err)
	}
	return nil
}

// Content is the canonical content of a list of prefixes, whose sha256 names a set: each
// prefix as written, followed by "\n", in the set's order.
func Content(prefixes []string) []byte {
	var b bytes.Buffer
	for _, p := range prefixes {
		b.WriteString(p)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Assemble builds the set ref names from raw chunk records (of any set: the others are
// skipped; of one key twice, the later wins, as compaction keeps it), in the order the topic
// gave them. It refuses the set — nothing partial is returned — when a chunk of ref's
// version does not parse or verify, when one is missing, when the chunks disagree on the
// sha256, count or total, when the assembled content's sha256 is not ref's, when a prefix is
// invalid or repeated, and beyond the bounds.
func Assemble(ref assignment.SetRef, records [][]byte, pub ed25519.PublicKey) ([]netip.Prefix, error) {
	byIndex := map[int]*Chunk{}
	var first *Chunk
	for _, b := range records {
		c, err := ParseChunk(b)
		if err != nil {
			return nil, err
		}
		if c.Name != ref.Name || c.Version != ref.Version {
			continue
		}
		if err := c.Verify(pub); err != nil {
			return nil, err
		}
		if first == nil {
			first = c
		}
		if c.SHA256 != first.SHA256 || c.Count != first.Count || c.Total != first.Total {
			return nil, fmt.Errorf("%w: chunk %d says sha256 %.12s… of %d chunks and %d prefixes, chunk %d says %.12s… of %d and %d",
				ErrMismatch, c.Index, c.SHA256, c.Count, c.Total, first.Index, first.SHA256, first.Count, first.Total)
		}
		byIndex[c.Index] = c
	}
	if first == nil {
		return nil, fmt.Errorf("%w: no chunk of %s version %d", ErrIncomplete, ref.Name, ref.Version)
	}
	if first.SHA256 != ref.SHA256 {
		return nil, fmt.Errorf("%w: %s version %d has sha256 %.12s…, the assignment names %.12s…",
			ErrMismatch, ref.Name, ref.Version, first.SHA256, ref.SHA256)
	}
	if len(byIndex) != first.Count {
		missing := []int{}
		for i := 0; i < first.Count && len(missing) < 5; i++ {
			if byIndex[i] == nil {
				missing = append(missing, i)
			}
		}
		return nil, fmt.Errorf("%w: %s version %d: %d of %d chunks present (missing e.g. %v)",
			ErrIncomplete, ref.Name, ref.Version, len(byIndex), first.Count, missing)
	}
	h := sha256.New()
	out := make([]netip.Prefix, 0, first.Total)
	seen := make(map[netip.Prefix]bool, first.Total)
	size := 0
	for i := 0; i < first.Count; i++ {
		for _, t := range byIndex[i].Prefixes {
			size += len(t) + 1
			if len(out) >= MaxPrefixes || size > MaxContentBytes {
				return nil, fmt.Errorf("%w: more than %d prefixes or %d bytes", ErrTooLarge, MaxPrefixes, MaxContentBytes)
			}
			pr, err := assignment.ParsePrefix(t)
			if err != nil {
				return nil, fmt.Errorf("%w: chunk %d: %v", ErrMalformed, i, err)
			}
			if seen[pr] {
				return nil, fmt.Errorf("%w: chunk %d: %s appears twice", ErrMalformed, i, pr)
			}
			seen[pr] = true
			h.Write([]byte(t))
			h.Write([]byte{'\n'})
			out = append(out, pr)
		}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != ref.SHA256 {
		return nil, fmt.Errorf("%w: the assembled content's sha256 is %.12s…, the assignment names %.12s…",
			ErrMismatch, got, ref.SHA256)
	}
	if len(out) != first.Total {
		return nil, fmt.Errorf("%w: %d prefixes assembled, the chunks say %d", ErrMismatch, len(out), first.Total)
	}
	return out, nil
}
