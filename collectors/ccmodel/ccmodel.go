// Package ccmodel adds to a tcp_sample/1 record what the kernel's socket dump cannot say about
// ccab's own machinery on the host:
//   - cc_impl: "ccab-bpf" when the socket's congestion control is one of ccab's BPF algorithms
//     (rollout/bpfcc pinned it), "kernel" otherwise (closecap.ImplCache, shared with tcp_conn/1);
//   - for ccab's BPF bbr2/bbr3 (which cannot answer INET_DIAG_BBRINFO: get_info is not open to
//     BPF algorithms) the model they export by socket cookie (rollout/bpf/cc/cc_export.h) into
//     the fields BBRINFO fills for the kernel's BBR: bbr_bw_bps, bbr_min_rtt_us, and cc_version
//     2 or 3. bbr_pacing_gain and bbr_cwnd_gain stay null: the model exports rates, not gains;
//   - policy_generation: the generation of the assignment/2 socket policy that set the
//     connection's congestion control (rollout/sockpolicy), as in tcp_conn/1.
//
// The poller calls Sample for every record (sampler.Config.Observe), with the socket cookie.
package ccmodel

import (
	"math"
	"sync"
	"time"

	"github.com/ccab-dev/ccab/collectors/closecap"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/rollout/bpfcc"
)

// reopenEvery is how long an opened state map is used before it is opened again (the agent may
// have unloaded and reloaded the algorithm: the old map would stay readable but frozen), and how
// long a failed open is not retried.
const reopenEvery = 5 * time.Second

// Enricher fills the fields. The zero value does nothing; set what the host has.
type Enricher struct {
	Impl   *closecap.ImplCache // nil: cc_impl stays absent, no model is read
	Loader bpfcc.Loader        // where the BPF algorithms are pinned (Dir: the ImplCache's too)
	// Policy looks a connection up by socket cookie in the socket policy's records: the
	// generation, whether setting the cc succeeded, whether there is a record. nil: none.
	Policy func(cookie uint64) (generation uint64, set, found bool)

	mu     sync.Mutex
	states map[string]*stateMap
}

type stateMap struct {
	r      *bpfcc.StateReader // nil: could not open
	opened time.Time
}

// Sample fills r's cc_impl, the BPF model's fields and policy_generation for the socket with
// this cookie, at now.
func (e *Enricher) Sample(cookie uint64, r *record.TCPSample, now time.Time) {
	if e.Impl != nil {
		r.CCImpl = e.Impl.Of(r.CC, now.UnixMilli())
		if r.CCImpl == record.CCImplBPF && r.BBRBwBps == nil && cookie != 0 {
			if st, ok := e.lookup(r.CC, cookie, now); ok && (st.Impl == 2 || st.Impl == 3) {
				r.CCVersion = record.Int(int64(st.Impl))
				r.BBRBwBps = record.Int(int64(min(st.BwBps, math.MaxInt64/8) * 8))
				if st.MinRTTUs != bpfcc.Unbounded {
					r.BBRMinRTTUs = record.Int(int64(st.MinRTTUs))
				}
			}
		}
	}
	if e.Policy != nil && cookie != 0 {
		if gen, set, found := e.Policy(cookie); found && set && gen <= math.MaxInt64 {
			r.PolicyGeneration = record.Int(int64(gen))
		}
	}
}

// lookup reads cc's exported state for the cookie (ok=false: none, or the map is not there).
func (e *Enricher) lookup(cc string, cookie uint64, now time.Time) (bpfcc.State, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.states == nil {
		e.states = map[string]*stateMap{}
	}
	m := e.states[cc]
	if m == nil || now.Sub(m.opened) >= reopenEvery || now.Before(m.opened) {
		if m != nil && m.r != nil {
			m.r.Close()
		}
		r, err := e.Loader.OpenState(cc)
		if err != nil {
			r = nil
		}
		m = &stateMap{r: r, opened: now}
		e.states[cc] = m
	}
	if m.r == nil {
		return bpfcc.State{}, false
	}
	st, ok, err := m.r.Lookup(cookie)
	return st, ok && err == nil
}

// Close closes the opened state maps.
func (e *Enricher) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range e.states {
		if m.r != nil {
			m.r.Close()
		}
	}
	e.states = nil
}
