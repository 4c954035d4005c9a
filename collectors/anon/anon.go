// Package anon turns client addresses into what may leave the edge host: a network prefix
// (/24 for IPv4, /48 for IPv6) and an opaque, salted connection id. Raw client IPs never
// appear in a record.
package anon

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"net/netip"
	"strconv"
)

// Prefix lengths kept for client addresses (CONTRACTS.md: peer_prefix).
const (
	IPv4PrefixBits = 24
	IPv6PrefixBits = 48
)

// PeerPrefix returns the client's /24 or /48 as text ("203.0.113.0/24", "2001:db8:85a3::/48").
// IPv4-mapped IPv6 addresses (::ffff:1.2.3.4) count as IPv4; zones are dropped. An invalid
// address gives "".
func PeerPrefix(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		// The same text as netip.Prefix.String, built in one allocation.
		var buf [len("255.255.255.0/24")]byte
		return string(AppendPeerPrefix4(buf[:0], a.As4()))
	}
	p, err := a.Prefix(IPv6PrefixBits)
	if err != nil {
		return ""
	}
	return p.String()
}

// AppendPeerPrefix4 appends the /24 of the IPv4 address a ("203.0.113.0/24") to b.
func AppendPeerPrefix4(b []byte, a [4]byte) []byte {
	b = strconv.AppendUint(b, uint64(a[0]), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(a[1]), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(a[2]), 10)
	return append(b, ".0/24"...)
}

// SockKey holds what keys the connection hash: a fleet-wide secret salt and the host's boot
// id (so that a 4-tuple reused after a reboot gets a new id).
type SockKey struct {
	Salt   string
	BootID string
}

// SockIDer computes sock_id: a SockKey (one HMAC per call) or a *SockHasher (reused).
type SockIDer interface {
	SockID(local, peer netip.AddrPort) string
}

// SockID returns an opaque, stable id for the connection local↔peer: the hex of the first 8
// bytes of HMAC-SHA256(salt, "ccab-sock/1" | boot id | local | peer). IPv4-mapped addresses are
// unmapped first, so ss text and netlink give the same id for the same socket. It sets up a
// new HMAC on every call; for many sockets use a SockHasher.
func (k SockKey) SockID(local, peer netip.AddrPort) string {
	return k.Hasher().SockID(local, peer)
}

// Hasher returns a SockHasher for k.
func (k SockKey) Hasher() *SockHasher {
	return &SockHasher{mac: hmac.New(sha256.New, []byte(k.Salt)), bootID: k.BootID}
}

// SockHasher computes SockKey.SockID with one keyed HMAC that it resets between calls, and
// scratch buffers it reuses: one allocation per id (the returned string). Not safe for
// concurrent use.
type SockHasher struct {
	mac    hash.Hash
	bootID string
	buf    []byte
	sum    [sha256.Size]byte
}

// SockID is SockKey.SockID.
func (h *SockHasher) SockID(local, peer netip.AddrPort) string {
	h.mac.Reset()
	b := append(h.buf[:0], "ccab-sock/1"...)
	b = append(b, 0)
	b = append(b, h.bootID...)
	b = append(b, 0)
	b = appendCanon(b, local)
	b = append(b, 0)
	b = appendCanon(b, peer)
	b = append(b, 0)
	h.buf = b
	h.mac.Write(b)
	sum := h.mac.Sum(h.sum[:0])
	var out [16]byte
	hex.Encode(out[:], sum[:8])
	return string(out[:])
}

// appendCanon appends local or peer as the HMAC reads it: "addr:port", "[v6]:port", an
// IPv4-mapped address unmapped.
func appendCanon(b []byte, ap netip.AddrPort) []byte {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).AppendTo(b)
}
