// Package assignment parses and verifies assignment/1 and assignment/2 records (contracts/CONTRACTS.md): the
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
	"net/netip"
	"regexp"
	"strings"

	"github.com/ccab-dev/ccab/rollout/internal/strictjson"
)

// Schema is the value of the "schema" field of a host-wide assignment.
const Schema = "assignment/1"

// SchemaSegment is assignment/2: assignment/1's fields plus "policy", a per-connection
// policy for a segment of clients (contracts/CONTRACTS.md). A new version, not an optional
// field: an agent that knows only assignment/1 must refuse it, not set the treatment's
// algorithm for every client.
const SchemaSegment = "assignment/2"

// SchemaPrefixSet is assignment/3: assignment/2 whose policy names its prefixes by a
// reference to a signed prefix_set/1 artifact ({name, version, sha256}) instead of listing
// them: for segments whose prefixes do not fit the 16 KiB record (contracts/CONTRACTS.md).
// A new version: an assignment/2 agent must refuse it, not read it as "no prefixes".
const SchemaPrefixSet = "assignment/3"

// MaxPolicyPrefixes bounds the inline prefixes of one assignment/2 policy (the 16 KiB record
// holds far fewer); a set named by assignment/3 is bounded by prefixset.MaxPrefixes.
const MaxPolicyPrefixes = 4096

// SetName is the shape of a prefix set's name (it is part of the Kafka key name/version/chunk).
var SetName = regexp.MustCompile(`^[A-Za-z0-9:._,+-]{1,200}$`)

// SetDigest is the shape of a prefix set's sha256: 64 lowercase hex digits.
var SetDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Bounds (contracts/CONTRACTS.md, assignment/1). The controller's records are a few hundred
// bytes with generations that grow by one per record and host, far inside them.
const (
	// MaxRecordBytes bounds a whole record (the Kafka value or the --once file): larger ones
	// are refused before they are parsed.
	MaxRecordBytes = 16 << 10
	// MaxStringBytes bounds each string field (rollout_id, pop, host, arm).
	MaxStringBytes = 256
	// MaxGeneration is the largest generation (and issued_at_ms): 2^53-1, an integer every
	// JSON reader holds exactly, and far enough below 2^63-1 that the controller's
	// "last generation + 1" never overflows.
	MaxGeneration = 1<<53 - 1
	// MaxGenerationJump bounds how far ahead of the applied generation a record may be. The
	// controller gives each new record for a host its last generation + 1, so a host is this
	// far behind only after that many consecutive records it did not apply; without the bound
	// one record with a huge generation would make every later record (a rollback included)
	// "stale" and freeze the host.
	MaxGenerationJump = 1_000_000
)

// Errors to branch on (wrapped with details).
var (
	ErrMalformed      = errors.New("malformed assignment")
	ErrTooLarge       = errors.New("assignment record too large")
	ErrUnsigned       = errors.New("assignment is not signed")
	ErrBadSignature   = errors.New("signature does not verify: record forged or tampered")
	ErrStale          = errors.New("generation not newer than the applied one")
	ErrGenerationJump = errors.New("generation too far ahead of the applied one")
)

// Assignment is one assignment/1 record.
type Assignment struct {
	Schema     string
	RolloutID  string
	Generation int64
	Pop        string
	Host       string
	Arm        string
	CC         string
	Qdisc      *string // nil: leave the qdisc alone
	IssuedAtMs int64
	// BBRVersion is optional (not in the contract's required fields): when set ("1", "2", "3")
	// the agent refuses unless the kernel's BBR is that version.
	BBRVersion Version
	// Policy is assignment/2's per-connection policy: nil for assignment/1 and for an
	// assignment/2 whose policy is null (no segment policy: the host runs CC for all).
	Policy    *Policy
	Signature string

	canonical []byte
}

// Policy is the per-connection part of assignment/2: connections whose peer is in one of
// Prefixes run CC; every other connection runs the assignment's CC (the host default).
type Policy struct {
	Segment  string // e.g. "access:mobile": what the prefixes are, for statuses and logs
	CC       string
	Prefixes []netip.Prefix
	// Set is assignment/3's reference to the prefix set holding the prefixes (Prefixes is then
	// empty until the agent has fetched and verified the set); nil for assignment/2.
	Set *SetRef
}

// SetRef names one version of a signed prefix_set/1 artifact and the sha256 of its content.
type SetRef struct {
	Name    string
	Version int64
	SHA256  string
}

// Canonical returns the bytes the signature covers.
func (a *Assignment) Canonical() []byte { return a.canonical }

var (
	qdiscName  = QdiscName
	versionStr = regexp.MustCompile(`^[0-9]{1,3}$`)
)

// required are the members every record has (qdisc may be null, no other).
var required = []string{"schema", "rollout_id", "generation", "pop", "host", "arm", "cc", "qdisc", "issued_at_ms"}

// Parse decodes one record and checks its shape: at most MaxRecordBytes, one JSON object,
// schema, and every required field present, not null, of its type and within its bounds
// (the error names each field that is not). It does not verify the signature: call Verify.
func Parse(b []byte) (*Assignment, error) {
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: more than %d bytes (%d read)", ErrTooLarge, MaxRecordBytes, len(b))
	}
	// A repeated member (a second "cc") would be read as the last value here and as the first
	// by other readers, under one valid signature: refused, at any depth.
	if err := strictjson.NoDuplicates(b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the record", ErrMalformed)
	}
	canon, err := Canonical(b)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, k := range required {
		if _, ok := raw[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: missing field(s) %s", ErrMalformed, strings.Join(missing, ", "))
	}
	a := &Assignment{canonical: canon}
	f := strictjson.Fields{Raw: raw}
	a.Schema = f.Str("schema", 1, 64)
	a.RolloutID = f.Str("rollout_id", 1, MaxStringBytes)
	a.Generation = f.Int("generation", 0, MaxGeneration)
	a.Pop = f.Str("pop", 0, MaxStringBytes)
	a.Host = f.Str("host", 1, MaxStringBytes)
	a.Arm = f.Str("arm", 1, MaxStringBytes)
	a.CC = f.Str("cc", 1, 64)
	if q, present := f.OptStr("qdisc", true); present && q != nil {
		if !qdiscName.MatchString(*q) {
			f.Bad("qdisc", fmt.Sprintf("%.40q is not a qdisc name ([a-z0-9_], at most 31)", *q))
		}
		a.Qdisc = q
	}
	a.IssuedAtMs = f.Int("issued_at_ms", 0, MaxGeneration)
	if v, ok := raw["bbr_version"]; ok {
		if err := a.BBRVersion.UnmarshalJSON(v); err != nil {
			f.Bad("bbr_version", "want a string or an integer (1, 2 or 3)")
		} else if a.BBRVersion != "" && !versionStr.MatchString(string(a.BBRVersion)) {
			f.Bad("bbr_version", "want 1 to 3 digits")
		}
	}
	if s, _ := f.OptStr("signature", false); s != nil {
		if len(*s) > 128 {
			f.Bad("signature", fmt.Sprintf("%d bytes, an Ed25519 signature in base64 is 88", len(*s)))
		} else {
			a.Signature = *s
		}
	}
	if err := f.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if a.Schema != Schema && a.Schema != SchemaSegment && a.Schema != SchemaPrefixSet {
		return nil, fmt.Errorf("%w: schema %.70q, want %q, %q or %q", ErrMalformed, a.Schema, Schema, SchemaSegment, SchemaPrefixSet)
	}
	if a.Schema == SchemaSegment || a.Schema == SchemaPrefixSet {
		v, ok := raw["policy"]
		if !ok {
			return nil, fmt.Errorf("%w: missing field(s) policy (%s)", ErrMalformed, a.Schema)
		}
		p, err := parsePolicy(v, a.Schema == SchemaPrefixSet)
		if err != nil {
			return nil, fmt.Errorf("%w: policy: %v", ErrMalformed, err)
		}
		a.Policy = p
	}
	return a, nil
}

// parsePolicy reads assignment/2's "policy": null, or exactly {"segment","cc","prefixes"};
// with set (assignment/3), null or exactly {"segment","cc","prefix_set"}. An unknown member
// is refused, not ignored: another way of naming prefixes must not be read as "no prefixes".
func parsePolicy(v json.RawMessage, set bool) (*Policy, error) {
	if strictjson.Kind(v) == "null" {
		return nil, nil
	}
	raw, err := strictjson.Object(v, MaxRecordBytes)
	if err != nil {
		return nil, err
	}
	third := "prefixes"
	if set {
		third = "prefix_set"
	}
	for k := range raw {
		if k != "segment" && k != "cc" && k != third {
			return nil, fmt.Errorf("unknown member %.40q", k)
		}
	}
	if _, ok := raw[third]; !ok {
		return nil, fmt.Errorf("missing member %s", third)
	}
	f := strictjson.Fields{Raw: raw}
	p := &Policy{Segment: f.Str("segment", 1, MaxStringBytes), CC: f.Str("cc", 1, 64)}
	if err := f.Err(); err != nil {
		return nil, err
	}
	if set {
		ref, err := parseSetRef(raw["prefix_set"])
		if err != nil {
			return nil, fmt.Errorf("prefix_set: %v", err)
		}
		p.Set = ref
		return p, nil
	}
	var texts []string
	if err := json.Unmarshal(raw["prefixes"], &texts); err != nil || strictjson.Kind(raw["prefixes"]) != "an array" {
		return nil, fmt.Errorf("prefixes: want an array of strings")
	}
	if len(texts) > MaxPolicyPrefixes {
		return nil, fmt.Errorf("prefixes: %d, at most %d", len(texts), MaxPolicyPrefixes)
	}
	seen := make(map[netip.Prefix]bool, len(texts))
	for i, t := range texts {
		pr, err := ParsePrefix(t)
		if err != nil {
			return nil, fmt.Errorf("prefixes[%d]: %v", i, err)
		}
		if seen[pr] {
			return nil, fmt.Errorf("prefixes[%d]: %s appears twice", i, pr)
		}
		seen[pr] = true
		p.Prefixes = append(p.Prefixes, pr)
	}
	return p, nil
}

// ParsePrefix reads one policy prefix: a CIDR, masked (no bits past the length), IPv4
// written as IPv4, no zone.
func ParsePrefix(t string) (netip.Prefix, error) {
	pr, err := netip.ParsePrefix(t)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%.60q is not a prefix", t)
	}
	if pr.Masked() != pr {
		return netip.Prefix{}, fmt.Errorf("%s has bits set past its length", pr)
	}
	if pr.Addr().Is4In6() || pr.Addr().Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%s: write IPv4 prefixes as IPv4, without a zone", pr)
	}
	return pr, nil
}

// parseSetRef reads assignment/3's policy.prefix_set: exactly {"name","version","sha256"}.
func parseSetRef(v json.RawMessage) (*SetRef, error) {
	raw, err := strictjson.Object(v, MaxRecordBytes)
	if err != nil {
		return nil, err
	}
	for k := range raw {
		if k != "name" && k != "version" && k != "sha256" {
			return nil, fmt.Errorf("unknown member %.40q", k)
		}
	}
	f := strictjson.Fields{Raw: raw}
	r := &SetRef{Name: f.Str("name", 1, 200), Version: f.Int("version", 1, MaxGeneration), SHA256: f.Str("sha256", 64, 64)}
	if r.Name != "" && !SetName.MatchString(r.Name) {
		f.Bad("name", fmt.Sprintf("%.60q is not a set name ([A-Za-z0-9:._,+-], 1 to 200)", r.Name))
	}
	if r.SHA256 != "" && !SetDigest.MatchString(r.SHA256) {
		f.Bad("sha256", "want 64 lowercase hex digits")
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	return r, nil
}

// VerifySignature checks an Ed25519 signature (base64) over canonical with pub.
func VerifySignature(pub ed25519.PublicKey, canonical []byte, signature string) error {
	if signature == "" {
		return ErrUnsigned
	}
	sig, err := base64.StdEncoding.DecodeString(signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w (signature is not %d bytes of base64)", ErrBadSignature, ed25519.SignatureSize)
	}
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("public key is %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	if !ed25519.Verify(pub, canonical, sig) {
		return ErrBadSignature
	}
	return nil
}

// Verify checks the Ed25519 signature over the canonical bytes with pub.
func (a *Assignment) Verify(pub ed25519.PublicKey) error {
	return VerifySignature(pub, a.canonical, a.Signature)
}

// Newer reports whether generation gen is strictly greater than lastApplied.
func Newer(gen, lastApplied int64) bool { return gen > lastApplied }

// CheckGeneration is the generation rule: a record may be applied after applied only if its
// generation is strictly greater (else ErrStale: ignored) and at most MaxGenerationJump
// greater (else ErrGenerationJump: refused). Parse already bounds gen to [0, MaxGeneration].
func CheckGeneration(gen, applied int64) error {
	switch {
	case gen <= applied:
		return fmt.Errorf("%w: generation %d, applied %d", ErrStale, gen, applied)
	case gen-applied > MaxGenerationJump:
		return fmt.Errorf("%w: generation %d is %d ahead of the applied %d, the limit is %d",
			ErrGenerationJump, gen, gen-applied, applied, MaxGenerationJump)
	}
	return nil
}

// knownCC are the congestion-control names of mainline Linux (net/ipv4/tcp_*.c) plus bbr2
// (Google's v2alpha module). Anything else is refused as unknown before the kernel is asked.
var knownCC = map[string]bool{
	"reno": true, "cubic": true, "bbr": true, "bbr2": true, "bbr3": true, "vivace": true, "bic": true, "cdg": true, "dctcp": true,
	"highspeed": true, "htcp": true, "hybla": true, "illinois": true, "lp": true, "nv": true,
	"scalable": true, "vegas": true, "veno": true, "westwood": true, "yeah": true,
}

var ccName = regexp.MustCompile(`^[a-z0-9_]{1,15}$`)

// QdiscName is the shape of a qdisc kind the agent passes to tc.
var QdiscName = regexp.MustCompile(`^[a-z0-9_]{1,31}$`)

// CCName is the shape of a kernel congestion-control name (TCP_CA_NAME_MAX is 16 with the NUL).
var CCName = ccName

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
