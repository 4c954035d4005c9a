// Package testkit helps rollout tests: it finds the contract vectors
// (contracts/vectors in the repository) and
// signs assignment/1 records with the test-only Ed25519 key of those vectors.
package testkit

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/internal/testvectors"
	"github.com/ccab-dev/ccab/rollout/assignment"
)

// VectorsDir returns the contract vectors directory, or fails the test.
func VectorsDir(t testing.TB) string {
	t.Helper()
	return testvectors.Dir(t)
}

// Read returns a vector file.
func Read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(VectorsDir(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Key returns the test-only key pair of the vectors (seed test_ed25519_seed.hex).
func Key(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	seed, err := hex.DecodeString(strings.TrimSpace(string(Read(t, "test_ed25519_seed.hex"))))
	if err != nil || len(seed) != ed25519.SeedSize {
		t.Fatalf("test seed: %v (%d bytes)", err, len(seed))
	}
	return ed25519.NewKeyFromSeed(seed)
}

// PublicKeyFile returns the path of test_ed25519_public.b64.
func PublicKeyFile(t testing.TB) string {
	return filepath.Join(VectorsDir(t), "test_ed25519_public.b64")
}

// Record is an assignment/1 record to sign.
type Record struct {
	RolloutID  string
	Generation int64
	Pop, Host  string
	Arm, CC    string
	Qdisc      *string
	BBRVersion string
}

// Sign returns the signed JSON of r.
func Sign(t testing.TB, r Record) []byte {
	t.Helper()
	m := map[string]any{"schema": assignment.Schema, "rollout_id": r.RolloutID, "generation": r.Generation,
		"pop": r.Pop, "host": r.Host, "arm": r.Arm, "cc": r.CC, "qdisc": r.Qdisc, "issued_at_ms": 1763769600000}
	if r.BBRVersion != "" {
		m["bbr_version"] = r.BBRVersion
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := assignment.Sign(b, Key(t))
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

// AllowCC adds names to the init namespace's net.ipv4.tcp_allowed_congestion_control (a
// non-init namespace may only pick names listed there). It does not remove them at cleanup:
// test packages run in parallel, and a cleanup that removes "cubic" while another package's
// namespace test runs would make its sysctl fail with EPERM. Adding a name is harmless.
func AllowCC(t testing.TB, names ...string) {
	t.Helper()
	const path = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cur := strings.Fields(string(b))
	want := append([]string(nil), cur...)
	for _, n := range names {
		if !slices.Contains(want, n) {
			want = append(want, n)
		}
	}
	if len(want) == len(cur) {
		return
	}
	if out, err := exec.Command("sysctl", "-q", "-w", "net.ipv4.tcp_allowed_congestion_control="+strings.Join(want, " ")).CombinedOutput(); err != nil {
		t.Fatalf("allow %v: %v: %s", names, err, out)
	}
	t.Logf("net.ipv4.tcp_allowed_congestion_control is now %q (left so for other tests)", strings.Join(want, " "))
}

// Valid returns the fields of a valid assignment/1 record for host (generation gen), to be
// changed by a test and signed with SignMap.
func Valid(host string, gen int64) map[string]any {
	return map[string]any{"schema": assignment.Schema, "rollout_id": "r1", "generation": gen, "pop": "lab1",
		"host": host, "arm": "control", "cc": "cubic", "qdisc": nil, "issued_at_ms": 1763769600000}
}

// SignMap returns m as JSON signed with the test key: hostile records are signed too, so a
// refusal cannot be the signature's doing.
func SignMap(t testing.TB, m map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return SignRaw(t, b)
}

// SignRaw signs the JSON object b (which may hold anything, e.g. numbers Go cannot hold).
func SignRaw(t testing.TB, b []byte) []byte {
	t.Helper()
	signed, err := assignment.Sign(b, Key(t))
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

// PrefixSetChunks returns the signed prefix_set/1 records of prefixes (in order) as name at
// version, perChunk prefixes each, as the controller writes them (pipelines/ccab/rollout/prefixset.py).
func PrefixSetChunks(t testing.TB, name string, version int64, prefixes []string, perChunk int) [][]byte {
	t.Helper()
	var content strings.Builder
	for _, p := range prefixes {
		content.WriteString(p + "\n")
	}
	sum := sha256.Sum256([]byte(content.String()))
	n := (len(prefixes) + perChunk - 1) / perChunk
	var out [][]byte
	for i := range n {
		part := prefixes[i*perChunk : min(len(prefixes), (i+1)*perChunk)]
		b, err := json.Marshal(map[string]any{"schema": "prefix_set/1", "name": name, "version": version,
			"sha256": hex.EncodeToString(sum[:]), "prefixes_total": len(prefixes), "chunk": i, "chunks": n,
			"prefixes": part, "issued_at_ms": 1763769600000})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, SignRaw(t, b))
	}
	return out
}

// PrefixSetDigest is the sha256 (hex) of prefixes' canonical content.
func PrefixSetDigest(prefixes []string) string {
	h := sha256.New()
	for _, p := range prefixes {
		h.Write([]byte(p + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}
