package sampler

import (
	"math"
	"net/netip"
)

// The sampling hash: FNV-1a over the salt, then over the 4-tuple (addresses unmapped, so
// an IPv4 connection seen on a dual-stack socket hashes like plain IPv4, as sock_id does),
// finished with the splitmix64 mixer so that every output bit depends on every input bit.
// It stays on the host (only the sampling decision leaves it); it is not sock_id, whose
// HMAC costs ~1 µs and is computed only for sampled sockets.

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func seedHash(salt string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(salt); i++ {
		h ^= uint64(salt[i])
		h *= fnvPrime
	}
	return h
}

func (s *Sampler) hash(local, peer netip.AddrPort) uint64 {
	return tupleHash(s.hashSeed, local, peer)
}

func tupleHash(seed uint64, local, peer netip.AddrPort) uint64 {
	h := seed
	mix := func(b byte) {
		h ^= uint64(b)
		h *= fnvPrime
	}
	for _, ap := range [2]netip.AddrPort{local, peer} {
		a := ap.Addr().Unmap().As16()
		for _, b := range a {
			mix(b)
		}
		p := ap.Port()
		mix(byte(p >> 8))
		mix(byte(p))
	}
	// splitmix64 finalizer
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// rateThreshold is rate as a fraction of 2^64: a hash below it is in the sample.
func rateThreshold(rate float64) uint64 {
	if rate >= 1 {
		return math.MaxUint64
	}
	return uint64(rate * (1 << 64))
}

// Selection is the sampler's deterministic choice of connections, for other sources of
// tcp_sample/1 records (the ss snapshot replay): with the same salt and rate it keeps the
// same 4-tuples as a Sampler.
type Selection struct {
	seed      uint64
	threshold uint64
}

// NewSelection returns the selection of a fraction rate (in (0, 1]) of connections, keyed
// by salt.
func NewSelection(salt string, rate float64) Selection {
	return Selection{seed: seedHash(salt), threshold: rateThreshold(rate)}
}

// Seed is the hash's state after the salt (for the close capture's in-kernel filter).
func (s Selection) Seed() uint64 { return s.seed }

// Threshold is the rate as a fraction of 2^64: a hash below it is kept (all when it is
// math.MaxUint64).
func (s Selection) Threshold() uint64 { return s.threshold }

// Keep reports whether the connection local↔peer is in the selection.
func (s Selection) Keep(local, peer netip.AddrPort) bool {
	return s.threshold == math.MaxUint64 || tupleHash(s.seed, local, peer) < s.threshold
}
