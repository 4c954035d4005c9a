package sockpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Pinned object names under Options.PinDir.
const (
	pinLink  = "link"
	pinOuter = "policy_outer"
	pinConns = "conn_policy"
	pinStats = "stats"
)

// Options configure Attach.
type Options struct {
	// PinDir, on a bpffs, keeps the program attached and its maps after the process exits,
	// and lets a restarted agent (and the collector, OpenConns) find them. "" = not pinned:
	// Close detaches.
	PinDir string
}

// Enforcer is the sock_ops program attached to one cgroup and its maps.
type Enforcer struct {
	spec  *ebpf.MapSpec // the inner trie's spec: each policy is a new map of it
	outer *ebpf.Map
	conns *ebpf.Map
	stats *ebpf.Map
	link  link.Link
	prog  *ebpf.Program
	pin   string
}

// Attach loads the program and attaches it to the cgroup v2 directory cgroupPath (every
// connection of a process in it or below). With Options.PinDir and objects already pinned
// there, it reuses them (the policy in force stays) instead of attaching a second copy.
func Attach(cgroupPath string, opt Options) (*Enforcer, error) {
	return attachSized(cgroupPath, opt, 0)
}

// attachSized is Attach with the trie's max_entries set to innerMax (0: the object's): tests
// use it to stand for a program an older agent pinned.
func attachSized(cgroupPath string, opt Options, innerMax uint32) (*Enforcer, error) {
	spec, err := loadSockpolicy()
	if err != nil {
		return nil, err
	}
	if innerMax > 0 {
		spec.Maps[sockpolicyMapPolicyInner].MaxEntries = innerMax
		spec.Maps["policy_outer"].InnerMap.MaxEntries = innerMax
	}
	e := &Enforcer{spec: spec.Maps[sockpolicyMapPolicyInner].Copy(), pin: opt.PinDir}
	if opt.PinDir != "" {
		if _, err := os.Stat(filepath.Join(opt.PinDir, pinLink)); err == nil {
			return e, e.openPinned()
		}
	}
	var objs sockpolicyObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, fmt.Errorf("load sock_ops program: %w", err)
	}
	objs.PolicyInner.Close() // only its spec is used: each policy is a new map
	e.outer, e.conns, e.stats, e.prog = objs.PolicyOuter, objs.ConnPolicy, objs.Stats, objs.CcabSockpolicy
	e.link, err = link.AttachCgroup(link.CgroupOptions{Path: cgroupPath, Attach: ebpf.AttachCGroupSockOps, Program: e.prog})
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("attach sock_ops to cgroup %s: %w", cgroupPath, err)
	}
	if opt.PinDir != "" {
		if err := e.pinAll(); err != nil {
			e.Detach()
			return nil, err
		}
	}
	return e, nil
}

func (e *Enforcer) pinAll() error {
	if err := os.MkdirAll(e.pin, 0o700); err != nil {
		return fmt.Errorf("pin dir: %w", err)
	}
	for name, m := range map[string]*ebpf.Map{pinOuter: e.outer, pinConns: e.conns, pinStats: e.stats} {
		if err := m.Pin(filepath.Join(e.pin, name)); err != nil {
			return fmt.Errorf("pin %s (is %s on a bpffs?): %w", name, e.pin, err)
		}
	}
	// The link last: its presence means "all pinned".
	if err := e.link.Pin(filepath.Join(e.pin, pinLink)); err != nil {
		return fmt.Errorf("pin link: %w", err)
	}
	return nil
}

func (e *Enforcer) openPinned() error {
	var err error
	if e.link, err = link.LoadPinnedLink(filepath.Join(e.pin, pinLink), nil); err != nil {
		return fmt.Errorf("open pinned link: %w", err)
	}
	for name, dst := range map[string]**ebpf.Map{pinOuter: &e.outer, pinConns: &e.conns, pinStats: &e.stats} {
		if *dst, err = ebpf.LoadPinnedMap(filepath.Join(e.pin, name), nil); err != nil {
			e.Close()
			return fmt.Errorf("open pinned %s: %w", name, err)
		}
	}
	return nil
}

// Apply makes p the policy for every connection established from now on: a new trie is
// filled and then swapped into the program's only slot in one map update. Connections that
// exist keep their algorithm.
//
// The kernel takes only tries of the size the attached program was loaded with: when that
// program was pinned by an older agent (a smaller trie) and the slot holds one of its tries,
// the new trie gets that size, and a policy larger than it is refused, naming the fix.
func (e *Enforcer) Apply(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	spec := e.spec
	if cur, err := e.current(); err == nil && cur != nil {
		if info, err := cur.Info(); err == nil && info.MaxEntries != spec.MaxEntries {
			spec = spec.Copy()
			spec.MaxEntries = info.MaxEntries
		}
		cur.Close()
	}
	const detach = "the sock_ops program attached was pinned by an older agent: stop the agent, remove its pin dir " +
		"(--sockpolicy-pin-dir) and start it again"
	if uint32(len(p.Rules)) > spec.MaxEntries {
		return fmt.Errorf("%w: %d prefixes, the attached program's policy map holds %d (%s)", ErrInvalid, len(p.Rules), spec.MaxEntries, detach)
	}
	inner, err := ebpf.NewMap(spec)
	if err != nil {
		return fmt.Errorf("new policy map: %w", err)
	}
	defer inner.Close() // the slot holds its own reference
	for _, r := range p.Rules {
		if err := inner.Put(encodeKey(r.Prefix), encodeValue(p.Generation, r.CC)); err != nil {
			return fmt.Errorf("policy map: %s: %w", r.Prefix, err)
		}
	}
	if err := e.outer.Put(uint32(0), inner); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("swap policy map in: %w (%s?)", err, detach)
		}
		return fmt.Errorf("swap policy map in: %w", err)
	}
	return nil
}

// Clear empties the policy (rollback): new connections keep the host's default algorithm;
// connections that exist keep the algorithm the policy gave them.
func (e *Enforcer) Clear() error { return e.Apply(Policy{}) }

// current opens the trie in the slot (nil: no policy ever applied).
func (e *Enforcer) current() (*ebpf.Map, error) {
	var id uint32
	if err := e.outer.Lookup(uint32(0), &id); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("policy slot: %w", err)
	}
	m, err := ebpf.NewMapFromID(ebpf.MapID(id))
	if err != nil {
		return nil, fmt.Errorf("open policy map %d: %w", id, err)
	}
	return m, nil
}

// Lookup asks the kernel's trie (the program's own lookup) which rule decides addr.
func (e *Enforcer) Lookup(addr netip.Addr) (cc string, generation uint64, found bool, err error) {
	m, err := e.current()
	if m == nil || err != nil {
		return "", 0, false, err
	}
	defer m.Close()
	v := make([]byte, valueSize)
	if err := m.Lookup(encodeKey(netip.PrefixFrom(addr, addr.BitLen())), &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return "", 0, false, nil
		}
		return "", 0, false, err
	}
	generation, cc = decodeValue(v)
	return cc, generation, true, nil
}

// Current reads the policy in force back from the kernel (rules sorted; generation 0 and
// no rules when the policy is empty).
func (e *Enforcer) Current() (Policy, error) {
	m, err := e.current()
	if m == nil || err != nil {
		return Policy{}, err
	}
	defer m.Close()
	var p Policy
	k, v := make([]byte, keySize), make([]byte, valueSize)
	it := m.Iterate()
	for it.Next(&k, &v) {
		gen, cc := decodeValue(v)
		p.Generation = gen
		p.Rules = append(p.Rules, Rule{Prefix: decodeKey(k), CC: cc})
	}
	if err := it.Err(); err != nil {
		return Policy{}, fmt.Errorf("read policy map: %w", err)
	}
	p.Rules = p.Sorted()
	return p, nil
}

// Stats are the program's counters, summed over CPUs.
type Stats struct {
	Seen, NoPolicy, Matched, SetOK, SetFailed, RecordFailed uint64
}

// Stats reads the counters.
func (e *Enforcer) Stats() (Stats, error) {
	var out [6]uint64
	for i := range out {
		var per []uint64
		if err := e.stats.Lookup(uint32(i), &per); err != nil {
			return Stats{}, fmt.Errorf("stats: %w", err)
		}
		for _, n := range per {
			out[i] += n
		}
	}
	return Stats{out[0], out[1], out[2], out[3], out[4], out[5]}, nil
}

// Conn looks a connection up by its socket cookie (inet_diag's idiag_cookie).
func (e *Enforcer) Conn(cookie uint64) (ConnPolicy, bool, error) { return lookupConn(e.conns, cookie) }

// Close releases this process's handles. A pinned program stays attached; an unpinned one
// is detached.
func (e *Enforcer) Close() error {
	var errs []error
	if e.link != nil {
		errs = append(errs, e.link.Close())
	}
	if e.prog != nil {
		errs = append(errs, e.prog.Close())
	}
	for _, m := range []*ebpf.Map{e.outer, e.conns, e.stats} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}

// Detach removes the program from the cgroup and the pins, and closes.
func (e *Enforcer) Detach() error {
	var errs []error
	if e.pin != "" {
		for _, name := range []string{pinLink, pinOuter, pinConns, pinStats} {
			if err := os.Remove(filepath.Join(e.pin, name)); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
	}
	if e.link != nil {
		errs = append(errs, e.link.Unpin(), e.link.Close())
		e.link = nil
	}
	errs = append(errs, e.Close())
	return errors.Join(errs...)
}

// ConnPolicy is what the program recorded for one connection it matched.
type ConnPolicy struct {
	// Generation of the policy whose prefix matched.
	Generation uint64
	// Result is bpf_setsockopt's return: 0 when the policy's algorithm was set, else -errno.
	Result int32
}

// Conns reads the per-connection records (for the collector).
type Conns struct{ m *ebpf.Map }

// OpenConns opens the connection map pinned in pinDir.
func OpenConns(pinDir string) (*Conns, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, pinConns), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", filepath.Join(pinDir, pinConns), err)
	}
	return &Conns{m: m}, nil
}

// Lookup returns the record of the connection with this socket cookie.
func (c *Conns) Lookup(cookie uint64) (ConnPolicy, bool, error) { return lookupConn(c.m, cookie) }

// Close releases the map.
func (c *Conns) Close() error { return c.m.Close() }

func lookupConn(m *ebpf.Map, cookie uint64) (ConnPolicy, bool, error) {
	var v sockpolicyConnValue
	if err := m.Lookup(cookie, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return ConnPolicy{}, false, nil
		}
		return ConnPolicy{}, false, err
	}
	return ConnPolicy{Generation: v.Generation, Result: v.Result}, true, nil
}
