// Package status encodes agent_status/1 records (contracts/CONTRACTS.md): what a host really
// runs, after every apply attempt and as a heartbeat.
package status

import "encoding/json"

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
}

// Encode returns the JSON of s with schema set and cc_available never null.
func Encode(s Status) []byte {
	s.Schema = Schema
	if s.CCAvailable == nil {
		s.CCAvailable = []string{}
	}
	b, _ := json.Marshal(s) // a struct of strings and ints always marshals
	return b
}
