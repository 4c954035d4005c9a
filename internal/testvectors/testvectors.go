// Package testvectors finds the contract test vectors for the collector and rollout tests:
// contracts/vectors in the repository (the directory holding go.mod). The repository owns them;
// a changed meaning is a new record version there.
package testvectors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the vectors directory, or fails the test.
func Dir(t testing.TB) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatalf("testvectors: %v", err)
	}
	dir := filepath.Join(root, "contracts", "vectors")
	if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil {
		t.Fatalf("testvectors: contract vectors not found in the repository: %v", err)
	}
	return dir
}

// RepoRoot walks up from the working directory to the directory holding go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repo root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("find repo root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// ReadJSONL reads a file of JSON objects, one a line, keeping numbers as json.Number.
func ReadJSONL(t testing.TB, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return DecodeJSONL(t, b)
}

// DecodeJSONL decodes JSON lines, keeping numbers as json.Number.
func DecodeJSONL(t testing.TB, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for i, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		out = append(out, m)
	}
	return out
}

// SameValue compares two decoded JSON values exactly: numbers must agree in value and in
// kind (an integer is not a float: 912 is not 912.0).
func SameValue(a, b any) bool {
	na, aok := a.(json.Number)
	nb, bok := b.(json.Number)
	if aok != bok {
		return false
	}
	if aok {
		if isFloatText(na.String()) != isFloatText(nb.String()) {
			return false
		}
		if !isFloatText(na.String()) {
			x, err1 := na.Int64()
			y, err2 := nb.Int64()
			return err1 == nil && err2 == nil && x == y
		}
		x, err1 := na.Float64()
		y, err2 := nb.Float64()
		return err1 == nil && err2 == nil && x == y
	}
	return fmt.Sprintf("%#v", a) == fmt.Sprintf("%#v", b)
}

func isFloatText(s string) bool {
	return bytes.ContainsAny([]byte(s), ".eE")
}
