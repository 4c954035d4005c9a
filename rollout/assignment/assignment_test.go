package assignment_test

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/rollout/assignment"
	"github.com/ccab-dev/ccab/rollout/internal/testkit"
)

func pub(t *testing.T) []byte {
	t.Helper()
	k, err := assignment.PublicKeyFromBase64(string(testkit.Read(t, "test_ed25519_public.b64")))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestVectorSignedVerifies(t *testing.T) {
	a, err := assignment.Parse(testkit.Read(t, "assignment_signed.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Verify(pub(t)); err != nil {
		t.Fatalf("signed vector: %v", err)
	}
	if a.Host != "edge-tyo1-03" || a.CC != "bbr2" || a.Generation != 7 || a.Qdisc == nil || *a.Qdisc != "fq" {
		t.Errorf("parsed %+v", a)
	}
}

func TestVectorTamperedRefused(t *testing.T) {
	a, err := assignment.Parse(testkit.Read(t, "assignment_tampered.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Verify(pub(t)); !errors.Is(err, assignment.ErrBadSignature) {
		t.Fatalf("tampered vector: err %v, want ErrBadSignature", err)
	}
}

func TestVectorCanonicalBytes(t *testing.T) {
	want := testkit.Read(t, "assignment_canonical.txt")
	want = bytes.TrimRight(want, "\n") // the file may end with a newline that was not signed
	a, err := assignment.Parse(testkit.Read(t, "assignment_signed.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Canonical(), want) {
		t.Errorf("canonical bytes differ\n got %s\nwant %s", a.Canonical(), want)
	}
	raw := testkit.Read(t, "assignment_canonical.txt")
	if !bytes.Equal(raw, want) {
		t.Logf("note: assignment_canonical.txt ends with %q after the signed bytes", raw[len(want):])
	}
}

func TestSignRoundTripAndKeyMismatch(t *testing.T) {
	signed := testkit.Sign(t, testkit.Record{RolloutID: "r", Generation: 3, Pop: "p", Host: "h", Arm: "a", CC: "bbr"})
	a, err := assignment.Parse(signed)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Verify(pub(t)); err != nil {
		t.Fatal(err)
	}
	other := make([]byte, 32)
	if err := a.Verify(other); !errors.Is(err, assignment.ErrBadSignature) {
		t.Errorf("other key: %v", err)
	}
	unsigned := bytes.Replace(signed, []byte(`"signature":`), []byte(`"x":`), 1)
	a2, err := assignment.Parse(unsigned)
	if err != nil {
		t.Fatal(err)
	}
	if err := a2.Verify(pub(t)); !errors.Is(err, assignment.ErrUnsigned) {
		t.Errorf("unsigned: %v", err)
	}
}

// Reference values from Python (pipelines/ccab/contracts.py canonical_json), produced with:
//
//	.venv/bin/python -c 'import json,sys; from ccab.contracts import canonical_json; \
//	  sys.stdout.buffer.write(canonical_json(json.loads(sys.stdin.read())))'
func TestCanonicalMatchesPython(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"b": 1, "a": "x", "signature": "s"}`, `{"a":"x","b":1}`},
		{`{"host": "東京-01", "q": null, "t": true}`, `{"host":"東京-01","q":null,"t":true}`},
		{`{"s": "a\"b\\c\n\u0001<>&\u2028"}`, "{\"s\":\"a\\\"b\\\\c\\n\\u0001<>&\u2028\"}"},
		{`{"f": 1.5, "g": 1e3, "h": 1e-7, "i": 1e16, "j": 0.0001, "k": [1, {"z": 2, "y": []}]}`,
			`{"f":1.5,"g":1000.0,"h":1e-07,"i":1e+16,"j":0.0001,"k":[1,{"y":[],"z":2}]}`},
		{`{"é": 1, "z": 2, "A": 3}`, `{"A":3,"z":2,"é":1}`},
	} {
		got, err := assignment.Canonical([]byte(tc.in))
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`not json`, "malformed"},
		{`[]`, "malformed"},
		{`{"schema":"assignment/1"}`, "missing field(s)"},
		{`{"schema":"assignment/9","rollout_id":"r","generation":1,"pop":"p","host":"h","arm":"a","cc":"bbr","qdisc":null,"issued_at_ms":1}`, "schema"},
		{`{"schema":"assignment/2","rollout_id":"r","generation":1,"pop":"p","host":"h","arm":"a","cc":"bbr","qdisc":null,"issued_at_ms":1}`, "missing field(s) policy"},
		{`{"schema":"assignment/1","rollout_id":"r","generation":"1","pop":"p","host":"h","arm":"a","cc":"bbr","qdisc":null,"issued_at_ms":1}`, "malformed"},
	} {
		_, err := assignment.Parse([]byte(tc.in))
		if err == nil || !errors.Is(err, assignment.ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want ErrMalformed containing %q", tc.in, err, tc.want)
		}
	}
}

func TestGenerationAndNames(t *testing.T) {
	if assignment.Newer(5, 5) || assignment.Newer(4, 5) || !assignment.Newer(6, 5) {
		t.Error("Newer must be strictly greater")
	}
	for name, want := range map[string]bool{"bbr": true, "cubic": true, "bbr2": true, "fastest": false, "": false, "BBR": false} {
		if assignment.KnownCC(name) != want {
			t.Errorf("KnownCC(%q) != %v", name, want)
		}
	}
}

func TestBBRVersionStringOrInt(t *testing.T) {
	base := `{"schema":"assignment/1","rollout_id":"r","generation":1,"pop":"p","host":"h","arm":"a","cc":"bbr","qdisc":null,"issued_at_ms":1,"bbr_version":%s}`
	for in, want := range map[string]string{`"3"`: "3", `3`: "3", `null`: ""} {
		a, err := assignment.Parse([]byte(fmt.Sprintf(base, in)))
		if err != nil || string(a.BBRVersion) != want {
			t.Errorf("bbr_version %s: %v %q", in, err, a.BBRVersion)
		}
	}
	if _, err := assignment.Parse([]byte(fmt.Sprintf(base, `3.5`))); err == nil {
		t.Error("bbr_version 3.5 accepted")
	}
}

func v2(policy string) string {
	return `{"schema":"assignment/2","rollout_id":"r","generation":1,"pop":"p","host":"h","arm":"bbr","cc":"cubic","qdisc":null,"issued_at_ms":1,"policy":` + policy + `}`
}

func TestParsePolicy(t *testing.T) {
	a, err := assignment.Parse([]byte(v2(`{"segment":"access:mobile","cc":"bbr","prefixes":["10.201.0.0/16","2001:db8::/32"]}`)))
	if err != nil {
		t.Fatal(err)
	}
	if a.Policy == nil || a.Policy.Segment != "access:mobile" || a.Policy.CC != "bbr" ||
		fmt.Sprint(a.Policy.Prefixes) != "[10.201.0.0/16 2001:db8::/32]" {
		t.Fatalf("policy %+v", a.Policy)
	}
	if a, err := assignment.Parse([]byte(v2(`null`))); err != nil || a.Policy != nil {
		t.Fatalf("null policy: %+v %v", a, err)
	}
	for _, tc := range []struct{ policy, want string }{
		{`{"segment":"s","cc":"bbr","prefixes":["10.201.0.1/16"]}`, "bits set past its length"},
		{`{"segment":"s","cc":"bbr","prefixes":["10.201.0.0/16","10.201.0.0/16"]}`, "appears twice"},
		{`{"segment":"s","cc":"bbr","prefixes":["::ffff:10.0.0.0/104"]}`, "write IPv4 prefixes as IPv4"},
		{`{"segment":"s","cc":"bbr","prefixes":["mobile"]}`, "is not a prefix"},
		{`{"segment":"s","cc":"bbr","prefixes":"10.0.0.0/8"}`, "want an array of strings"},
		{`{"segment":"s","cc":"bbr","prefix_set":{"id":"x"},"prefixes":[]}`, "unknown member"},
		{`{"segment":"s","prefixes":[]}`, "cc"},
		{`[]`, "not a JSON object"},
	} {
		_, err := assignment.Parse([]byte(v2(tc.policy)))
		if err == nil || !errors.Is(err, assignment.ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want ErrMalformed containing %q", tc.policy, err, tc.want)
		}
	}
}

// A signed assignment/2 verifies; changing one prefix after signing does not.
func TestPolicyIsSigned(t *testing.T) {
	priv := testkit.Key(t)
	signed, err := assignment.Sign([]byte(v2(`{"segment":"access:mobile","cc":"bbr","prefixes":["10.201.0.0/16"]}`)), priv)
	if err != nil {
		t.Fatal(err)
	}
	pub := priv.Public().(ed25519.PublicKey)
	a, err := assignment.Parse(signed)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Verify(pub); err != nil {
		t.Fatalf("signed: %v", err)
	}
	tampered := []byte(strings.Replace(string(signed), "10.201.0.0/16", "0.0.0.0/0", 1))
	a, err = assignment.Parse(tampered)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Verify(pub); !errors.Is(err, assignment.ErrBadSignature) {
		t.Fatalf("tampered: verify %v", err)
	}
}
