// Package agent is ccab-agent's loop: it takes assignment/1, /2 and /3 records for its host, verifies
// them, applies the congestion control (and qdisc) inside the host's network namespace,
// writes the state file and reports agent_status/1.
//
// Invariants: an assignment that is not applied leaves the host's algorithm as it was (a
// failed set is rolled back to the previous algorithm); the state file holds only applied
// assignments, and its generation only grows; Kafka being down never changes the kernel.
package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ccab-dev/ccab/internal/netns"
	"github.com/ccab-dev/ccab/rollout/assignment"
	"github.com/ccab-dev/ccab/rollout/bpfcc"
	"github.com/ccab-dev/ccab/rollout/kernelcc"
	"github.com/ccab-dev/ccab/rollout/prefixset"
	"github.com/ccab-dev/ccab/rollout/qdisc"
	"github.com/ccab-dev/ccab/rollout/sockpolicy"
	"github.com/ccab-dev/ccab/rollout/statefile"
	"github.com/ccab-dev/ccab/rollout/status"
)

// Config is what an Agent needs besides Kafka.
type Config struct {
	Host      string
	Pop       string
	PublicKey ed25519.PublicKey
	StateFile string
	// NetnsPath is the network namespace whose sysctl and qdiscs the agent manages ("" = its
	// own). Kafka traffic always stays in the agent's own namespace.
	NetnsPath string
	Kernel    kernelcc.Kernel
	Tc        qdisc.Tc
	// BPF loads ccab's BPF congestion controls (bbr2, bbr3, vivace) when the kernel lacks
	// the assigned one; nil: never (such assignments are refused as unavailable).
	BPF *bpfcc.Loader
	Now func() time.Time
	// Policy enforces assignment/2's per-connection policies (a sock_ops program attached
	// to the served cgroup, rollout/sockpolicy); nil: an assignment/2 with a policy is
	// refused ("no_policy_enforcer").
	Policy PolicyEnforcer
	// PrefixSets fetches the chunks of the prefix sets that assignment/3 policies name
	// (KafkaPrefixSets: the topic ccab.prefix_sets.v1); nil: such assignments are refused
	// ("prefix_set_unavailable").
	PrefixSets PrefixSetSource
}

// PrefixSetSource returns the raw prefix_set/1 records keyed name/version/* in topic order
// (rollout/prefixset.Assemble checks them).
type PrefixSetSource interface {
	Fetch(ctx context.Context, name string, version int64) ([][]byte, error)
}

// PolicyEnforcer is what the agent needs of rollout/sockpolicy's Enforcer.
type PolicyEnforcer interface {
	Apply(sockpolicy.Policy) error
	Clear() error
}

// Outcome is what became of one assignment.
type Outcome string

// Outcomes (Applied, Refused and Error are also status states).
const (
	Applied     Outcome = status.Applied
	Refused     Outcome = status.Refused
	Failed      Outcome = status.Error
	Stale       Outcome = "stale"       // generation not newer than the applied one: ignored, no status
	Reconfirmed Outcome = "reconfirmed" // same generation already applied and still in the kernel: status re-sent
)

// Agent applies assignments. Its methods are safe for concurrent use (applies are serialised).
type Agent struct {
	cfg Config
	m   *Metrics
	log *slog.Logger

	mu    sync.Mutex
	state statefile.State
	// reconfirm allows one record with generation == state.Generation to be re-reported
	// (set at start: a crash may have come between the state file and the status).
	reconfirm bool
}

// New loads the state file.
func New(cfg Config, m *Metrics, log *slog.Logger) (*Agent, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if m == nil {
		m = NewMetrics()
	}
	st, err := statefile.Read(cfg.StateFile)
	if err != nil {
		return nil, err
	}
	m.Generation.Set(float64(st.Generation))
	return &Agent{cfg: cfg, m: m, log: log, state: st, reconfirm: true}, nil
}

// State returns the last applied state.
func (a *Agent) State() statefile.State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

// Metrics returns the agent's metrics.
func (a *Agent) Metrics() *Metrics { return a.m }

// inNetns runs fn in the managed namespace.
func (a *Agent) inNetns(fn func() error) error {
	return netns.Do(a.cfg.NetnsPath, fn)
}

// observe reads what the host runs now, for a status.
func (a *Agent) observe(s *status.Status) {
	s.TsMs = a.cfg.Now().UnixMilli()
	s.Host = a.cfg.Host
	if a.cfg.Pop != "" || s.Pop == "" {
		s.Pop = a.cfg.Pop
	}
	s.Kernel = a.cfg.Kernel.Release()
	err := a.inNetns(func() error {
		var err error
		if s.CCAvailable, err = a.cfg.Kernel.Available(); err != nil {
			return err
		}
		if s.CCEffective, err = a.cfg.Kernel.Current(); err != nil {
			return err
		}
		if q, err := a.cfg.Tc.Effective(); err == nil && q != "" {
			s.QdiscEffective = &q
		}
		return nil
	})
	if err != nil {
		a.m.Errors.WithLabelValues("read").Inc()
		a.log.Warn("read kernel state", "err", err)
	}
	s.BBRVersion = a.cfg.Kernel.BBRVersion(s.CCEffective, s.CCAvailable)
	s.CCImpl = a.impl(s.CCEffective)
	v, _ := strconv.Atoi(s.BBRVersion)
	a.m.BBRVersion.Set(float64(v))
}

// impl tells which implementation runs cc: ccab's BPF one when it is registered by bpfcc.
func (a *Agent) impl(cc string) string {
	if cc == "" {
		return ""
	}
	if a.cfg.BPF != nil && bpfcc.Offers(cc) && a.cfg.BPF.Loaded(cc) {
		return bpfcc.ImplBPF
	}
	return bpfcc.ImplKernel
}

// useBPF registers this host as a user of ccab's BPF cc (loading it if needed) when the kernel
// does not offer cc itself (notAvail) or ours is already loaded. ok=false: not a BPF case.
func (a *Agent) useBPF(cc string, notAvail bool) (ok bool, err error) {
	if a.cfg.BPF == nil || !bpfcc.Offers(cc) || (!notAvail && !a.cfg.BPF.Loaded(cc)) {
		return false, nil
	}
	loaded, err := a.cfg.BPF.Use(cc, a.cfg.Host)
	if err != nil {
		a.m.Errors.WithLabelValues("bpf").Inc()
		return true, err
	}
	if loaded {
		a.log.Info("loaded ccab's BPF congestion control", "cc", cc)
	}
	return true, nil
}

// releaseBPF drops this host's use of ccab's BPF cc, unloading it when no one else uses it.
func (a *Agent) releaseBPF(cc string) {
	if a.cfg.BPF == nil || cc == "" || !bpfcc.Offers(cc) {
		return
	}
	unloaded, err := a.cfg.BPF.Release(cc, a.cfg.Host)
	if err != nil {
		a.m.Errors.WithLabelValues("bpf").Inc()
		a.log.Warn("release ccab's BPF congestion control", "cc", cc, "err", err)
		return
	}
	if unloaded {
		a.log.Info("unloaded ccab's BPF congestion control (no user left)", "cc", cc)
	}
}

// Heartbeat returns a heartbeat status for the current state.
func (a *Agent) Heartbeat() status.Status {
	st := a.State()
	s := status.Status{State: status.Heartbeat, RolloutID: st.RolloutID, Arm: st.Arm, Generation: st.Generation, Pop: st.Pop}
	a.observe(&s)
	a.m.Heartbeats.Inc()
	return s
}

// Reassert re-applies the state file's algorithm when the kernel runs another (after a
// reboot, or someone else's sysctl). It returns an applied status when it changed something
// and ok=false when there was nothing to do.
func (a *Agent) Reassert() (status.Status, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.state
	if st.CC == "" {
		return status.Status{}, false, nil
	}
	var cur string
	err := a.inNetns(func() error {
		var err error
		cur, err = a.cfg.Kernel.Current()
		return err
	})
	if err != nil {
		a.m.Errors.WithLabelValues("sysctl").Inc()
		return status.Status{}, false, err
	}
	if cur == st.CC {
		return status.Status{}, false, nil
	}
	a.log.Warn("kernel runs another algorithm than the state file: re-applying", "kernel", cur, "state", st.CC,
		"generation", st.Generation)
	a.m.Reasserts.Inc()
	s := status.Status{RolloutID: st.RolloutID, Arm: st.Arm, Generation: st.Generation}
	if _, err := a.useBPF(st.CC, st.CCImpl == bpfcc.ImplBPF); err != nil {
		s.State, s.Reason = status.Error, "re-applying state file: "+err.Error()
	} else if err := a.set(st.CC, st.Qdisc, cur); err != nil {
		a.m.Errors.WithLabelValues("sysctl").Inc()
		s.State, s.Reason = status.Error, "re-applying state file: "+err.Error()
	} else {
		s.State = status.Applied
	}
	a.observe(&s)
	return s, true, nil
}

// set ensures the qdisc (if any), then sets cc; if setting cc fails it restores prev.
func (a *Agent) set(cc string, q *string, prev string) error {
	return a.inNetns(func() error {
		if q != nil {
			if _, err := a.cfg.Tc.Ensure(*q); err != nil {
				a.m.Errors.WithLabelValues("qdisc").Inc()
				return err
			}
		}
		if _, err := a.cfg.Kernel.Set(cc); err != nil {
			a.m.Errors.WithLabelValues("sysctl").Inc()
			if prev != "" {
				if _, rerr := a.cfg.Kernel.Set(prev); rerr != nil {
					return fmt.Errorf("%w; restoring %s failed too: %v", err, prev, rerr)
				}
			}
			return err
		}
		return nil
	})
}

// setPolicy makes as's socket policy the one in force (none: empty).
func (a *Agent) setPolicy(as *assignment.Assignment) error {
	if a.cfg.Policy == nil {
		return nil
	}
	if as.Policy == nil {
		return a.cfg.Policy.Clear()
	}
	p := sockpolicy.Policy{Generation: uint64(as.Generation)}
	for _, pr := range as.Policy.Prefixes {
		p.Rules = append(p.Rules, sockpolicy.Rule{Prefix: pr, CC: as.Policy.CC})
	}
	return a.cfg.Policy.Apply(p)
}

// Apply handles one record meant for this host. It returns the outcome and, except for
// Stale, the status to report.
func (a *Agent) Apply(raw []byte) (Outcome, status.Status) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out, s := a.apply(raw)
	a.m.Assignments.WithLabelValues(string(out)).Inc()
	if out != Stale {
		a.observe(&s)
	}
	lvl := slog.LevelInfo
	if out == Refused || out == Failed {
		lvl = slog.LevelWarn
	}
	a.log.Log(context.Background(), lvl, "assignment", "outcome", out, "generation", s.Generation, "rollout_id", s.RolloutID,
		"arm", s.Arm, "reason", s.Reason)
	return out, s
}

// Admissible reports whether raw would pass the checks that need no kernel (size, shape,
// signature, host, generation rule) against the applied state: the catch-up after a start
// uses it to skip records that would be refused.
func (a *Agent) Admissible(raw []byte) bool {
	as, err := assignment.Parse(raw)
	if err != nil || as.Verify(a.cfg.PublicKey) != nil || as.Host != a.cfg.Host {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return assignment.CheckGeneration(as.Generation, a.state.Generation) == nil ||
		(as.Generation == a.state.Generation && a.reconfirm && a.state.CC == as.CC)
}

func (a *Agent) refuse(s status.Status, reason, why string) (Outcome, status.Status) {
	a.m.Refusals.WithLabelValues(reason).Inc()
	s.State, s.Reason = status.Refused, why
	return Refused, s
}

// resolveSet fetches and verifies the prefix set p names and fills p.Prefixes with it.
// ok=false: the assignment is refused (or failed: Kafka could not be read), s says why.
func (a *Agent) resolveSet(p *assignment.Policy, s *status.Status) (Outcome, bool) {
	r := p.Set
	if a.cfg.Policy == nil || a.cfg.PrefixSets == nil {
		out, st := a.refuse(*s, "prefix_set_unavailable", fmt.Sprintf("assignment names prefix set %s version %d and "+
			"this agent reads no prefix sets (--prefix-sets-topic not set)", r.Name, r.Version))
		*s = st
		return out, false
	}
	if applied, ok := a.state.PrefixSetVersions[r.Name]; ok && r.Version < applied {
		out, st := a.refuse(*s, "prefix_set_stale", fmt.Sprintf("prefix set %s version %d is older than the applied version %d",
			r.Name, r.Version, applied))
		*s = st
		return out, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	records, err := a.cfg.PrefixSets.Fetch(ctx, r.Name, r.Version)
	if err != nil {
		a.m.Errors.WithLabelValues("prefix_set_fetch").Inc()
		s.State, s.Reason = status.Error, fmt.Sprintf("prefix set %s version %d: %v", r.Name, r.Version, err)
		return Failed, false
	}
	prefixes, err := prefixset.Assemble(*r, records, a.cfg.PublicKey)
	if err != nil {
		reason := "prefix_set_invalid"
		if errors.Is(err, prefixset.ErrIncomplete) {
			reason = "prefix_set_incomplete"
		}
		out, st := a.refuse(*s, reason, fmt.Sprintf("prefix set %s version %d refused: %v", r.Name, r.Version, err))
		*s = st
		return out, false
	}
	p.Prefixes = prefixes
	a.m.PrefixSetPrefixes.Set(float64(len(prefixes)))
	return "", true
}

func (a *Agent) apply(raw []byte) (Outcome, status.Status) {
	var s status.Status
	as, err := assignment.Parse(raw)
	if errors.Is(err, assignment.ErrTooLarge) {
		return a.refuse(s, "too_large", err.Error())
	}
	if err != nil {
		return a.refuse(s, "malformed", err.Error())
	}
	s.RolloutID, s.Arm, s.Generation, s.Pop = as.RolloutID, as.Arm, as.Generation, as.Pop
	if err := as.Verify(a.cfg.PublicKey); err != nil {
		return a.refuse(s, "signature", err.Error())
	}
	if as.Host != a.cfg.Host {
		return a.refuse(s, "wrong_host", fmt.Sprintf("assignment is for host %q, this agent is %q", as.Host, a.cfg.Host))
	}
	switch err := assignment.CheckGeneration(as.Generation, a.state.Generation); {
	case errors.Is(err, assignment.ErrStale):
		if as.Generation == a.state.Generation && a.reconfirm && a.state.CC == as.CC {
			// After a restart: the state file may have been written and the status lost.
			a.reconfirm = false
			s.State = status.Applied
			return Reconfirmed, s
		}
		s.Reason = fmt.Sprintf("generation %d is not newer than applied generation %d", as.Generation, a.state.Generation)
		return Stale, s
	case err != nil:
		// Refused, not applied: the applied generation stays, so the controller's next
		// record (its last generation + 1) is still accepted.
		return a.refuse(s, "generation_jump", err.Error())
	}
	a.reconfirm = false
	if !assignment.KnownCC(as.CC) {
		return a.refuse(s, "unknown_cc", fmt.Sprintf("unknown congestion control %q", as.CC))
	}
	if p := as.Policy; p != nil {
		if a.cfg.Policy == nil {
			return a.refuse(s, "no_policy_enforcer", fmt.Sprintf("assignment has a socket policy for %s and this agent "+
				"enforces none (--sockpolicy-cgroup not set)", p.Segment))
		}
		if !assignment.KnownCC(p.CC) {
			return a.refuse(s, "unknown_cc", fmt.Sprintf("unknown congestion control %q in the policy for %s", p.CC, p.Segment))
		}
		if p.Set != nil {
			if out, ok := a.resolveSet(p, &s); !ok {
				return out, s
			}
		}
	}
	var avail []string
	var prev string
	ensure := func(checkAllowed bool) error {
		return a.inNetns(func() error {
			var err error
			if avail, err = a.cfg.Kernel.Ensure(as.CC); err != nil {
				return err
			}
			if as.Policy != nil {
				if _, err = a.cfg.Kernel.Ensure(as.Policy.CC); err != nil {
					return err
				}
			}
			if checkAllowed && a.cfg.NetnsPath != "" {
				// a non-init namespace may only set names the init namespace allows (ours
				// carry TCP_CONG_NON_RESTRICTED, so they are listed once registered)
				if allowed, err := a.cfg.Kernel.Allowed(); err == nil && !slices.Contains(allowed, as.CC) {
					return fmt.Errorf("congestion control %q %w in this namespace: not in net.ipv4.tcp_allowed_congestion_control (%s)",
						as.CC, kernelcc.ErrNotAvailable, strings.Join(allowed, " "))
				}
			}
			prev, err = a.cfg.Kernel.Current()
			return err
		})
	}
	err = ensure(false)
	usedBPF, berr := a.useBPF(as.CC, errors.Is(err, kernelcc.ErrNotAvailable))
	if berr != nil {
		reason := fmt.Sprintf("ccab's BPF %s could not be loaded: %v", as.CC, berr)
		if err != nil {
			reason = fmt.Sprintf("%v; %s", err, reason)
		}
		return a.refuse(s, "not_available", reason)
	}
	if usedBPF {
		err = ensure(true)
	}
	// this host no longer uses ccab's BPF as.CC if the assignment does not end applied
	applied := false
	if usedBPF && a.state.CC != as.CC {
		defer func() {
			if !applied {
				a.releaseBPF(as.CC)
			}
		}()
	}
	if errors.Is(err, kernelcc.ErrNotAvailable) {
		return a.refuse(s, "not_available", err.Error())
	}
	if err != nil {
		a.m.Errors.WithLabelValues("netns").Inc()
		s.State, s.Reason = status.Error, err.Error()
		return Failed, s
	}
	bbrv := a.cfg.Kernel.BBRVersion(as.CC, avail)
	if want := string(as.BBRVersion); want != "" && want != bbrv {
		return a.refuse(s, "bbr_version", fmt.Sprintf("bbr version %s not available: the kernel's %s is version %q",
			as.BBRVersion, as.CC, bbrv))
	}
	if err := a.set(as.CC, as.Qdisc, prev); err != nil {
		s.State, s.Reason = status.Error, err.Error()
		return Failed, s
	}
	// The socket policy after the host default: during the change a segment connection
	// gets the control's algorithm (the old default or the new), never the treatment for
	// all. Every assignment without a policy empties it (a rollback included).
	if err := a.setPolicy(as); err != nil {
		a.m.Errors.WithLabelValues("sockpolicy").Inc()
		if rerr := a.inNetns(func() error { _, err := a.cfg.Kernel.Set(prev); return err }); rerr != nil {
			err = fmt.Errorf("%w; restoring %s failed too: %v", err, prev, rerr)
		}
		s.State, s.Reason = status.Error, err.Error()
		return Failed, s
	}
	next := statefile.State{RolloutID: as.RolloutID, Arm: as.Arm, CC: as.CC, Generation: as.Generation,
		Qdisc: as.Qdisc, Pop: as.Pop, Host: as.Host, AppliedAtMs: a.cfg.Now().UnixMilli(), BBRVersion: bbrv,
		PreviousCC: prev, CCImpl: a.impl(as.CC)}
	next.PrefixSetVersions = a.state.PrefixSetVersions
	if as.Policy != nil {
		next.PolicySegment, next.PolicyCC, next.PolicyPrefixes = as.Policy.Segment, as.Policy.CC, len(as.Policy.Prefixes)
		if r := as.Policy.Set; r != nil {
			next.PolicySet, next.PolicySetVersion, next.PolicySetSHA256 = r.Name, r.Version, r.SHA256
			next.PrefixSetVersions = statefile.RememberSet(a.state.PrefixSetVersions, r.Name, r.Version)
		}
	}
	if err := statefile.Write(a.cfg.StateFile, next); err != nil {
		a.m.Errors.WithLabelValues("state_file").Inc()
		// The collector would label records with the old arm: undo the kernel change.
		if rerr := a.inNetns(func() error { _, err := a.cfg.Kernel.Set(prev); return err }); rerr != nil {
			err = fmt.Errorf("%w; restoring %s failed too: %v", err, prev, rerr)
		}
		s.State, s.Reason = status.Error, err.Error()
		return Failed, s
	}
	old := a.state.CC
	a.state = next
	a.m.Generation.Set(float64(next.Generation))
	applied = true
	if old != as.CC {
		// e.g. a rollback from ccab's bbr2 to cubic: unload it when no other host uses it
		a.releaseBPF(old)
	}
	s.State = status.Applied
	return Applied, s
}
