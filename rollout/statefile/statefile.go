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
	"os"
	"path/filepath"

	"github.com/ccab-dev/ccab/internal/atomicfile"
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
}

// Read returns the state in path; a missing file is the zero State (generation 0) and no error.
func Read(path string) (State, error) {
	var st State
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read state file %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, fmt.Errorf("state file %s: %w", path, err)
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
