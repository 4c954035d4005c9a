// Package status encodes agent_status/1 records (contracts/CONTRACTS.md): what a host really
// runs, after every apply attempt and as a heartbeat.
package status

import (
	"encoding/json"
	"unicode/utf8"
)

// Schema is the value of the "schema" field.
const Schema = "agent_status/1"

// States.
const (
	Applied   = "applied"   // the assignment runs: cc (and qdisc) set and read back
	Refused   = "refused"   // invalid, unsigned/forged, unknown or unavailable algorithm; nothing changed
	Error     = "error"     // apply failed; the host kept its previous algorithm
	Heartbeat = "heartbeat" // periodic report of the current state
)

// Status is one agent_status/1 record. BBRVersion is an extra field (extra fields are allowed
// by the contract): the BBR version the agent could tell for cc_effective bbr/bbr2.
type Status struct {
	Schema         string   `json:"schema"`
	TsMs           int64    `json:"ts_ms"`
	Pop            string   `json:"pop"`
	Host           string   `json:"host"`
	Kernel         string   `json:"kernel"`
	RolloutID      string   `json:"rollout_id"`
	Arm            string   `json:"arm"`
	Generation     int64    `json:"generation"`
	State          string   `json:"state"`
	CCEffective    string   `json:"cc_effective"`
	CCAvailable    []string `json:"cc_available"`
	QdiscEffective *string  `json:"qdisc_effective"`
	Reason         string   `json:"reason"`
	BBRVersion     string   `json:"bbr_version,omitempty"`
	// CCImpl (extra field): which implementation runs cc_effective, "kernel" or "ccab-bpf".
	CCImpl string `json:"cc_impl,omitempty"`
}

// Bounds of what a status echoes (a reason may carry tc's output; rollout_id and arm come
// from records, already bounded by assignment.Parse): a status never grows with its input.
const (
	MaxReasonBytes = 1024
	MaxFieldBytes  = 256
	MaxAvailable   = 64
	// MaxBytes bounds an encoded status (every field at its bound, escaped).
	MaxBytes = 48 << 10
)

// cut shortens s to at most max bytes on a UTF-8 boundary, ending with "…" when cut.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max - len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Encode returns the JSON of s with schema set, cc_available never null, and every string
// and the list cut to their bounds.
func Encode(s Status) []byte {
	s.Schema = Schema
	if s.CCAvailable == nil {
		s.CCAvailable = []string{}
	}
	if len(s.CCAvailable) > MaxAvailable {
		s.CCAvailable = s.CCAvailable[:MaxAvailable]
	}
	avail := make([]string, len(s.CCAvailable))
	for i, c := range s.CCAvailable {
		avail[i] = cut(c, 32)
	}
	s.CCAvailable = avail
	for _, p := range []*string{&s.Pop, &s.Host, &s.Kernel, &s.RolloutID, &s.Arm, &s.State, &s.CCEffective, &s.BBRVersion, &s.CCImpl} {
		*p = cut(*p, MaxFieldBytes)
	}
	if s.QdiscEffective != nil {
		q := cut(*s.QdiscEffective, MaxFieldBytes)
		s.QdiscEffective = &q
	}
	s.Reason = cut(s.Reason, MaxReasonBytes)
	b, _ := json.Marshal(s) // a struct of strings and ints always marshals
	return b
}
