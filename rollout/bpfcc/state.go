package bpfcc

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// Unbounded is what an unset inflight bound or an unknown min_rtt reads as.
const Unbounded = ^uint32(0)

// State is one socket's exported model (struct cc_state in rollout/bpf/cc/cc_export.h; the
// layout must match it byte for byte).
type State struct {
	UpdatedUs      uint64 // tcp_mstamp clock
	BwBps          uint64 // model bandwidth, bytes/s
	PacingBps      uint64
	ProbeRTTLastUs uint64
	MinRTTUs       uint32
	InflightHi     uint32
	InflightLo     uint32
	Cwnd           uint32
	RoundCount     uint32
	ProbeRTTCount  uint32
	Mode           uint8
	Phase          uint8
	Impl           uint8
	_              [5]uint8
}

var bbrModes = [...]string{"startup", "drain", "probe_bw", "probe_rtt"}
var bbrPhases = [...]string{"down", "cruise", "refill", "up"}

// ModeName is the mode (and PROBE_BW phase) as text, e.g. "probe_bw/cruise".
func (s State) ModeName() string {
	if s.Impl >= 10 {
		return [...]string{"starting", "probing", "moving", "?"}[min(int(s.Mode), 3)]
	}
	if int(s.Mode) >= len(bbrModes) {
		return fmt.Sprintf("mode%d", s.Mode)
	}
	m := bbrModes[s.Mode]
	if s.Mode == 2 && int(s.Phase) < len(bbrPhases) {
		m += "/" + bbrPhases[s.Phase]
	}
	return m
}

// StateReader reads the exported model of the sockets running one of our algorithms.
type StateReader struct {
	m *ebpf.Map
}

// OpenState opens name's pinned state map (ErrNotExist when name is not loaded).
func (l Loader) OpenState(name string) (*StateReader, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(l.dir(), l.kname(name), statePin), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	return &StateReader{m: m}, nil
}

// Lookup returns the state exported for the socket with this cookie (ok=false: none yet; the
// cookie is assigned at the socket's first inet_diag dump, the entry is written at the next round).
func (r *StateReader) Lookup(cookie uint64) (State, bool, error) {
	var s State
	err := r.m.Lookup(cookie, &s)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return State{}, false, nil
	}
	return s, err == nil, err
}

// All returns every socket's state, by cookie.
func (r *StateReader) All() (map[uint64]State, error) {
	out := map[uint64]State{}
	var k uint64
	var v State
	it := r.m.Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	return out, it.Err()
}

// Close closes the map.
func (r *StateReader) Close() error { return r.m.Close() }
