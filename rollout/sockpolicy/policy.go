// Package sockpolicy is the per-connection congestion-control policy of a host
// (README.md): a policy (prefixes → congestion control, one generation) validated here, and
// the BPF sock_ops program (rollout/bpf/sockpolicy/sockpolicy.bpf.c) that enforces it on a
// cgroup's connections, loaded, attached and updated by Enforcer.
package sockpolicy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
)

// Bounds, as in sockpolicy.bpf.c.
const (
	// MaxPrefixes is the most prefixes one policy holds (the trie's max_entries).
	MaxPrefixes = 1 << 20
	// CCNameMax is the kernel's TCP_CA_NAME_MAX (the name and its NUL).
	CCNameMax = 16
	keySize   = 4 + 16
	valueSize = 8 + CCNameMax
)

var ccName = regexp.MustCompile(`^[a-z0-9_]{1,15}$`)

// ErrInvalid is wrapped by every Validate error.
var ErrInvalid = errors.New("invalid socket policy")

// Rule sends the connections whose peer is in Prefix to CC.
type Rule struct {
	Prefix netip.Prefix
	CC     string
}

// Policy is what one assignment asks of the host's new connections: the longest prefix
// containing the peer decides; a peer in no prefix keeps the host's default algorithm.
// An empty policy is "no policy". Generation is recorded for each connection it decides.
type Policy struct {
	Generation uint64
	Rules      []Rule
}

// Validate checks the rules: valid, masked prefixes (10.0.0.1/8 is refused: the bits past
// the length would be ignored silently), each at most once (IPv4 and its IPv4-mapped IPv6
// form are the same prefix), congestion-control names of the kernel's shape, at most
// MaxPrefixes.
func (p Policy) Validate() error {
	if len(p.Rules) > MaxPrefixes {
		return fmt.Errorf("%w: %d prefixes, at most %d", ErrInvalid, len(p.Rules), MaxPrefixes)
	}
	seen := make(map[netip.Prefix]bool, len(p.Rules))
	for i, r := range p.Rules {
		if !r.Prefix.IsValid() {
			return fmt.Errorf("%w: rule %d: invalid prefix", ErrInvalid, i)
		}
		if r.Prefix.Masked() != r.Prefix {
			return fmt.Errorf("%w: rule %d: prefix %s has bits set past its length (want %s)", ErrInvalid, i, r.Prefix, r.Prefix.Masked())
		}
		if !ccName.MatchString(r.CC) {
			return fmt.Errorf("%w: rule %d: congestion control %.40q is not a kernel name ([a-z0-9_], 1 to 15)", ErrInvalid, i, r.CC)
		}
		m := mapped(r.Prefix)
		if seen[m] {
			return fmt.Errorf("%w: rule %d: prefix %s appears twice", ErrInvalid, i, r.Prefix)
		}
		seen[m] = true
	}
	return nil
}

// Match is the policy's decision for addr, computed in Go (longest matching prefix): what
// the BPF program's trie lookup must agree with.
func (p Policy) Match(addr netip.Addr) (Rule, bool) {
	a := mappedAddr(addr)
	best, found := Rule{}, false
	for _, r := range p.Rules {
		m := mapped(r.Prefix)
		if m.Contains(a) && (!found || m.Bits() > mapped(best.Prefix).Bits()) {
			best, found = r, true
		}
	}
	return best, found
}

// Sorted returns the rules ordered by prefix (for comparing policies).
func (p Policy) Sorted() []Rule {
	out := slices.Clone(p.Rules)
	slices.SortFunc(out, func(a, b Rule) int {
		if c := mapped(a.Prefix).Addr().Compare(mapped(b.Prefix).Addr()); c != 0 {
			return c
		}
		return a.Prefix.Bits() - b.Prefix.Bits()
	})
	return out
}

// mapped is prefix in the trie's address space: IPv4 a.b.c.d/n as ::ffff:a.b.c.d/96+n.
func mapped(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4() {
		return netip.PrefixFrom(netip.AddrFrom16(p.Addr().As16()), p.Bits()+96)
	}
	return p
}

func mappedAddr(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.AddrFrom16(a.As16())
	}
	return a
}

// unmapped is the inverse of mapped for prefixes read back from the trie.
func unmapped(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

func encodeKey(p netip.Prefix) []byte {
	m := mapped(p)
	k := make([]byte, keySize)
	binary.NativeEndian.PutUint32(k[0:4], uint32(m.Bits()))
	a := m.Addr().As16()
	copy(k[4:], a[:])
	return k
}

func decodeKey(k []byte) netip.Prefix {
	var a [16]byte
	copy(a[:], k[4:])
	return unmapped(netip.PrefixFrom(netip.AddrFrom16(a), int(binary.NativeEndian.Uint32(k[0:4]))))
}

func encodeValue(gen uint64, cc string) []byte {
	v := make([]byte, valueSize)
	binary.NativeEndian.PutUint64(v[0:8], gen)
	copy(v[8:8+CCNameMax-1], cc)
	return v
}

func decodeValue(v []byte) (uint64, string) {
	name := v[8:]
	for i, c := range name {
		if c == 0 {
			name = name[:i]
			break
		}
	}
	return binary.NativeEndian.Uint64(v[0:8]), string(name)
}
