// Package assignment parses and verifies assignment/1 records (contracts/CONTRACTS.md): the
// controller's signed instruction for one host. It is pure: no I/O, no clock, no kernel.
//
// The signature covers the canonical JSON of the record without "signature": keys sorted,
// no spaces, UTF-8, exactly as pipelines/ccab/contracts.py canonical_json (Python's
// json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)) writes it. The
// canonical bytes are rebuilt from the record as received, so a field the agent does not know
// is still covered by the signature.
package assignment

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Schema is the value of the "schema" field.
const Schema = "assignment/1"

// Errors to branch on (wrapped with details).
var (
	ErrMalformed    = errors.New("malformed assignment")
	ErrUnsigned     = errors.New("assignment is not signed")
	ErrBadSignature = errors.New("signature does not verify: record forged or tampered")
)

// Assignment is one assignment/1 record.
type Assignment struct {
	Schema     string  `json:"schema"`
	RolloutID  string  `json:"rollout_id"`
	Generation int64   `json:"generation"`
	Pop        string  `json:"pop"`
	Host       string  `json:"host"`
	Arm        string  `json:"arm"`
	CC         string  `json:"cc"`
	Qdisc      *string `json:"qdisc"`
	IssuedAtMs int64   `json:"issued_at_ms"`
	// BBRVersion is optional (not in the contract's required fields): when set ("1", "2", "3")
	// the agent refuses unless the kernel's BBR is that version.
	BBRVersion Version `json:"bbr_version,omitempty"`
	Signature  string  `json:"signature"`

	canonical []byte
}

// Canonical returns the bytes the signature covers.
func (a *Assignment) Canonical() []byte { return a.canonical }

// Parse decodes one record and checks its shape (schema, required fields, types). It does
// not verify the signature: call Verify.
func Parse(b []byte) (*Assignment, error) {
	var a Assignment
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&a); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the record", ErrMalformed)
	}
	canon, err := Canonical(b)
	if err != nil {
		return nil, err
	}
	a.canonical = canon
	var missing []string
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(b, &raw) // already decoded above
	for _, k := range []string{"schema", "rollout_id", "generation", "pop", "host", "arm", "cc", "qdisc", "issued_at_ms"} {
		if _, ok := raw[k]; !ok {
			missing = append(missing, k)
		}
	}
	switch {
	case len(missing) > 0:
		return nil, fmt.Errorf("%w: missing field(s) %s", ErrMalformed, strings.Join(missing, ", "))
	case a.Schema != Schema:
		return nil, fmt.Errorf("%w: schema %q, want %q", ErrMalformed, a.Schema, Schema)
	case a.Host == "":
		return nil, fmt.Errorf("%w: empty host", ErrMalformed)
	case a.CC == "":
		return nil, fmt.Errorf("%w: empty cc", ErrMalformed)
	case a.Generation < 0:
		return nil, fmt.Errorf("%w: negative generation %d", ErrMalformed, a.Generation)
	}
	return &a, nil
}

// Verify checks the Ed25519 signature over the canonical bytes with pub.
func (a *Assignment) Verify(pub ed25519.PublicKey) error {
	if a.Signature == "" {
		return ErrUnsigned
	}
	sig, err := base64.StdEncoding.DecodeString(a.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w (signature is not %d bytes of base64)", ErrBadSignature, ed25519.SignatureSize)
	}
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("public key is %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	if !ed25519.Verify(pub, a.canonical, sig) {
		return ErrBadSignature
	}
	return nil
}

// Newer reports whether generation gen may be applied after lastApplied: strictly greater.
func Newer(gen, lastApplied int64) bool { return gen > lastApplied }

// knownCC are the congestion-control names of mainline Linux (net/ipv4/tcp_*.c) plus bbr2
// (Google's v2alpha module). Anything else is refused as unknown before the kernel is asked.
var knownCC = map[string]bool{
	"reno": true, "cubic": true, "bbr": true, "bbr2": true, "bic": true, "cdg": true, "dctcp": true,
	"highspeed": true, "htcp": true, "hybla": true, "illinois": true, "lp": true, "nv": true,
	"scalable": true, "vegas": true, "veno": true, "westwood": true, "yeah": true,
}

var ccName = regexp.MustCompile(`^[a-z0-9_]{1,15}$`)

// KnownCC reports whether name is a congestion-control algorithm this agent knows.
func KnownCC(name string) bool { return knownCC[name] && ccName.MatchString(name) }

// PublicKeyFromBase64 decodes a raw 32-byte Ed25519 public key in base64 (surrounding
// whitespace ignored), the format of contracts/vectors/test_ed25519_public.b64.
func PublicKeyFromBase64(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public key is %d bytes, want %d", len(b), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// Sign returns record (a JSON object) with "signature" set by priv. Tests and tools use it;
// the agent never signs.
func Sign(record []byte, priv ed25519.PrivateKey) ([]byte, error) {
	canon, err := Canonical(record)
	if err != nil {
		return nil, err
	}
	sig := base64.StdEncoding.EncodeToString(ed25519.Sign(priv, canon))
	sigJSON, _ := json.Marshal(sig)
	// canon is an object without "signature": insert it before the closing brace.
	out := append([]byte(nil), canon[:len(canon)-1]...)
	if len(canon) > 2 {
		out = append(out, ',')
	}
	out = append(out, `"signature":`...)
	out = append(out, sigJSON...)
	return append(out, '}'), nil
}

// Version is a version written as a JSON string ("3") or integer (3); null is "".
type Version string

// UnmarshalJSON accepts a string, an integer or null.
func (v *Version) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*v = Version(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("bbr_version: want a string or an integer, got %s", b)
	}
	if _, err := n.Int64(); err != nil {
		return fmt.Errorf("bbr_version: want an integer, got %s", b)
	}
	*v = Version(n.String())
	return nil
}
