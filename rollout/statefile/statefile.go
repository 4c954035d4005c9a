// Package statefile reads and writes the agent's state file, which the collector reads to
// label its records (collectors/config/host.go): JSON {"rollout_id","arm","cc","generation"}
// plus fields the collector ignores. It is written atomically: temp file in the same
// directory, fsync, rename, fsync of the directory — a crash leaves the old or the new
// state, never a mix.
package statefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ccab-dev/ccab/internal/atomicfile"
	"github.com/ccab-dev/ccab/rollout/assignment"
	"github.com/ccab-dev/ccab/rollout/internal/strictjson"
)

// State is the last applied assignment.
type State struct {
	RolloutID  string `json:"rollout_id"`
	Arm        string `json:"arm"`
	CC         string `json:"cc"`
	Generation int64  `json:"generation"`

	Qdisc       *string `json:"qdisc"`
	Pop         string  `json:"pop,omitempty"`
	Host        string  `json:"host,omitempty"`
	AppliedAtMs int64   `json:"applied_at_ms,omitempty"`
	BBRVersion  string  `json:"bbr_version,omitempty"`
	PreviousCC  string  `json:"previous_cc,omitempty"`
	// CCImpl is which implementation runs cc: "kernel", or "ccab-bpf" for ccab's BPF one
	// (rollout/bpfcc); absent in files written before it existed (then: kernel).
	CCImpl string `json:"cc_impl,omitempty"`
	// The socket policy of an assignment/2 (rollout/sockpolicy): connections from
	// PolicyPrefixes prefixes of PolicySegment run PolicyCC. Empty: none.
	PolicySegment  string `json:"policy_segment,omitempty"`
	PolicyCC       string `json:"policy_cc,omitempty"`
	PolicyPrefixes int    `json:"policy_prefixes,omitempty"`
	// The prefix set of an assignment/3 policy (rollout/prefixset): name, version, sha256.
	PolicySet        string `json:"policy_set,omitempty"`
	PolicySetVersion int64  `json:"policy_set_version,omitempty"`
	PolicySetSHA256  string `json:"policy_set_sha256,omitempty"`
	// PrefixSetVersions is the highest version of each prefix set ever applied (kept across
	// rollbacks; at most MaxRememberedSets names): an older version is refused as stale.
	PrefixSetVersions map[string]int64 `json:"prefix_set_versions,omitempty"`
}

// MaxRememberedSets bounds State.PrefixSetVersions.
const MaxRememberedSets = 64

// RememberSet returns a copy of m with name at version (if higher), at most
// MaxRememberedSets names (others dropped, lowest version first).
func RememberSet(m map[string]int64, name string, version int64) map[string]int64 {
	out := make(map[string]int64, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	if out[name] < version {
		out[name] = version
	}
	for len(out) > MaxRememberedSets {
		low, lowV := "", int64(-1)
		for k, v := range out {
			if k != name && (lowV < 0 || v < lowV || (v == lowV && k < low)) {
				low, lowV = k, v
			}
		}
		delete(out, low)
	}
	return out
}

// MaxBytes bounds the state file (an agent writes a few hundred bytes).
const MaxBytes = 64 << 10

// Read returns the state in path; a missing file is the zero State (generation 0) and no error.
// The file is checked like a record: at most MaxBytes, one JSON object, rollout_id, arm and cc
// strings (cc empty or a congestion-control name: the agent writes it back to the kernel),
// generation an integer in [0, assignment.MaxGeneration], qdisc absent, null or a qdisc name;
// null or another type is an error naming the field. A file that fails is an error (the agent
// does not start) rather than a silent generation 0, or a host frozen at a huge generation:
// fix or remove it (removing it makes the next assignment apply).
func Read(path string) (State, error) {
	var st State
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read state file %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return st, fmt.Errorf("read state file %s: %w", path, err)
	}
	raw, err := strictjson.Object(b, MaxBytes)
	if err != nil {
		return State{}, fmt.Errorf("state file %s: %v", path, err)
	}
	fs := strictjson.Fields{Raw: raw}
	st.RolloutID = fs.Str("rollout_id", 0, assignment.MaxStringBytes)
	st.Arm = fs.Str("arm", 0, assignment.MaxStringBytes)
	st.CC = fs.Str("cc", 0, 64)
	if st.CC != "" && !assignment.CCName.MatchString(st.CC) {
		fs.Bad("cc", fmt.Sprintf("%.40q is not a congestion-control name", st.CC))
	}
	st.Generation = fs.Int("generation", 0, assignment.MaxGeneration)
	if q, _ := fs.OptStr("qdisc", false); q != nil {
		if !assignment.QdiscName.MatchString(*q) {
			fs.Bad("qdisc", fmt.Sprintf("%.40q is not a qdisc name", *q))
		}
		st.Qdisc = q
	}
	optStr := func(name string, max int) string {
		if v, ok := raw[name]; !ok || strictjson.Kind(v) == "null" {
			return ""
		}
		return fs.Str(name, 0, max)
	}
	st.Pop = optStr("pop", assignment.MaxStringBytes)
	st.Host = optStr("host", assignment.MaxStringBytes)
	st.BBRVersion = optStr("bbr_version", 8)
	st.PreviousCC = optStr("previous_cc", 64)
	st.CCImpl = optStr("cc_impl", 32)
	st.PolicySegment = optStr("policy_segment", assignment.MaxStringBytes)
	st.PolicyCC = optStr("policy_cc", 64)
	if v, ok := raw["policy_prefixes"]; ok && strictjson.Kind(v) != "null" {
		st.PolicyPrefixes = int(fs.Int("policy_prefixes", 0, 1<<20))
	}
	st.PolicySet = optStr("policy_set", 200)
	if v, ok := raw["policy_set_version"]; ok && strictjson.Kind(v) != "null" {
		st.PolicySetVersion = fs.Int("policy_set_version", 0, assignment.MaxGeneration)
	}
	st.PolicySetSHA256 = optStr("policy_set_sha256", 64)
	if v, ok := raw["prefix_set_versions"]; ok && strictjson.Kind(v) != "null" {
		var m map[string]int64
		if err := json.Unmarshal(v, &m); err != nil || len(m) > MaxRememberedSets {
			fs.Bad("prefix_set_versions", fmt.Sprintf("want an object of at most %d set names to integer versions", MaxRememberedSets))
		} else {
			for k, ver := range m {
				if !assignment.SetName.MatchString(k) || ver < 1 || ver > assignment.MaxGeneration {
					fs.Bad("prefix_set_versions", fmt.Sprintf("%.40q: %d is not a set name and version", k, ver))
					break
				}
			}
			st.PrefixSetVersions = m
		}
	}
	if v, ok := raw["applied_at_ms"]; ok && strictjson.Kind(v) != "null" {
		st.AppliedAtMs = fs.Int("applied_at_ms", 0, assignment.MaxGeneration)
	}
	if err := fs.Err(); err != nil {
		return State{}, fmt.Errorf("state file %s: %v", path, err)
	}
	return st, nil
}

// Write replaces path with st atomically, creating its directory if needed.
func Write(path string, st State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("state dir %s: %w", dir, err)
	}
	return atomicfile.WriteFile(path, b, 0o644)
}
