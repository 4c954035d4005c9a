package assignment_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/rollout/assignment"
	"github.com/ccab-dev/ccab/rollout/internal/testkit"
)

// Signed records that must still be refused: the signature says who wrote a record, not
// that it is sane.
func TestHostileSignedRecordsAreMalformed(t *testing.T) {
	with := func(k string, v any) []byte {
		m := testkit.Valid("h", 3)
		m[k] = v
		return testkit.SignMap(t, m)
	}
	without := func(k string) []byte {
		m := testkit.Valid("h", 3)
		delete(m, k)
		return testkit.SignMap(t, m)
	}
	raw := func(gen string) []byte {
		return testkit.SignRaw(t, []byte(`{"schema":"assignment/1","rollout_id":"r1","generation":`+gen+
			`,"pop":"lab1","host":"h","arm":"control","cc":"cubic","qdisc":null,"issued_at_ms":1763769600000}`))
	}
	cases := []struct {
		name  string
		rec   []byte
		field string // the error names it
	}{
		{"null generation", with("generation", nil), "generation"},
		{"null issued_at_ms", with("issued_at_ms", nil), "issued_at_ms"},
		{"null rollout_id", with("rollout_id", nil), "rollout_id"},
		{"null arm", with("arm", nil), "arm"},
		{"null pop", with("pop", nil), "pop"},
		{"null host", with("host", nil), "host"},
		{"null cc", with("cc", nil), "cc"},
		{"null schema", with("schema", nil), "schema"},
		{"missing qdisc", without("qdisc"), "qdisc"},
		{"generation as string", with("generation", "3"), "generation"},
		{"generation as float", raw("3.0"), "generation"},
		{"generation as exponent", raw("3e0"), "generation"},
		{"generation 2^63-1", raw("9223372036854775807"), "generation"},
		{"generation 2^53", raw("9007199254740992"), "generation"},
		{"generation beyond int64", raw("99999999999999999999999"), "generation"},
		{"negative generation", raw("-1"), "generation"},
		{"issued_at_ms as string", with("issued_at_ms", "now"), "issued_at_ms"},
		{"issued_at_ms negative", with("issued_at_ms", -1), "issued_at_ms"},
		{"arm as number", with("arm", 7), "arm"},
		{"empty arm", with("arm", ""), "arm"},
		{"empty rollout_id", with("rollout_id", ""), "rollout_id"},
		{"rollout_id of 1 MB", with("rollout_id", strings.Repeat("r", 1<<20)), ""},
		{"arm of 300 bytes", with("arm", strings.Repeat("a", 300)), "arm"},
		{"pop of 300 bytes", with("pop", strings.Repeat("p", 300)), "pop"},
		{"cc of 300 bytes", with("cc", strings.Repeat("c", 300)), "cc"},
		{"qdisc as number", with("qdisc", 1), "qdisc"},
		{"qdisc with spaces", with("qdisc", "fq limit 1"), "qdisc"},
		{"bbr_version as object", with("bbr_version", map[string]any{}), "bbr_version"},
		{"bbr_version of 300 bytes", with("bbr_version", strings.Repeat("3", 300)), "bbr_version"},
		{"signature as number", []byte(`{"schema":"assignment/1","rollout_id":"r1","generation":1,"pop":"p","host":"h","arm":"a","cc":"cubic","qdisc":null,"issued_at_ms":1,"signature":5}`), "signature"},
	}
	for _, tc := range cases {
		_, err := assignment.Parse(tc.rec)
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if !errors.Is(err, assignment.ErrMalformed) && !errors.Is(err, assignment.ErrTooLarge) {
			t.Errorf("%s: %v, want ErrMalformed", tc.name, err)
		}
		if !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %q does not name the field %q", tc.name, err, tc.field)
		}
		if len(err.Error()) > 1024 {
			t.Errorf("%s: error of %d bytes", tc.name, len(err.Error()))
		}
	}
}

// A signed record with a repeated member: its signature is valid over the last value (what a
// Go map keeps), while a first-value reader (ClickHouse) sees the other. Before: applied.
func TestSignedRecordWithDuplicateMemberIsMalformed(t *testing.T) {
	m := testkit.Valid("h", 3)
	m["cc"] = "bbr"
	signed := testkit.SignMap(t, m)
	nestedOK := testkit.Valid("h", 3)
	nestedOK["meta"] = map[string]any{"a": map[string]any{"cc": 1}, "b": []any{map[string]any{"cc": 2}}}
	if _, err := assignment.Parse(testkit.SignMap(t, nestedOK)); err != nil {
		t.Fatalf("the same name in different objects is not a duplicate: %v", err)
	}
	for name, rec := range map[string][]byte{
		"cc twice, first cubic": append([]byte(`{"cc":"cubic",`), signed[1:]...),
		"cc twice, same value":  append([]byte(`{"cc":"bbr",`), signed[1:]...),
		"schema twice":          append([]byte(`{"schema":"assignment/1",`), signed[1:]...),
		"nested duplicate":      append([]byte(`{"meta":{"a":1,"a":2},`), signed[1:]...),
		"deep nesting":          append([]byte(`{"meta":`+strings.Repeat("[", 5000)+strings.Repeat("]", 5000)+`,`), signed[1:]...),
	} {
		_, err := assignment.Parse(rec)
		if !errors.Is(err, assignment.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
			continue
		}
		if !strings.Contains(err.Error(), "duplicate") && !strings.Contains(err.Error(), "nested deeper") {
			t.Errorf("%s: %q does not say why", name, err)
		}
	}
}

func TestRecordOf20MBIsRefusedBeforeParsing(t *testing.T) {
	m := testkit.Valid("h", 3)
	m["padding"] = strings.Repeat("x", 20<<20)
	_, err := assignment.Parse(testkit.SignMap(t, m))
	if !errors.Is(err, assignment.ErrTooLarge) {
		t.Fatalf("20 MB record: %v, want ErrTooLarge", err)
	}
}

// A valid record at the bounds is accepted (the controller's records are far inside them).
func TestRecordAtTheBoundsIsAccepted(t *testing.T) {
	m := testkit.Valid(strings.Repeat("h", assignment.MaxStringBytes), assignment.MaxGeneration)
	m["rollout_id"] = strings.Repeat("r", assignment.MaxStringBytes)
	m["qdisc"] = "fq_codel"
	m["bbr_version"] = "3"
	a, err := assignment.Parse(testkit.SignMap(t, m))
	if err != nil {
		t.Fatal(err)
	}
	if a.Generation != assignment.MaxGeneration || *a.Qdisc != "fq_codel" {
		t.Errorf("%+v", a)
	}
}

// The generation rule: strictly newer, and at most MaxGenerationJump ahead of the applied one,
// so that no single record can raise a host's generation beyond what the controller's next
// record (its own last generation + 1) can follow.
func TestGenerationRule(t *testing.T) {
	const applied = 41
	for _, tc := range []struct {
		gen  int64
		want error
	}{
		{40, assignment.ErrStale},
		{41, assignment.ErrStale},
		{42, nil},
		{applied + assignment.MaxGenerationJump, nil},
		{applied + assignment.MaxGenerationJump + 1, assignment.ErrGenerationJump},
		{assignment.MaxGeneration, assignment.ErrGenerationJump},
	} {
		if err := assignment.CheckGeneration(tc.gen, applied); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("generation %d after %d: %v, want %v", tc.gen, applied, err, tc.want)
		}
	}
	if err := assignment.CheckGeneration(assignment.MaxGenerationJump, 0); err != nil {
		t.Errorf("first record of a new host: %v", err)
	}
}
