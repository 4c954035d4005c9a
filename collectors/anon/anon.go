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

// SockKey holds what keys the connection hash: a fleet-wide secret salt, the host's boot
// id (so that a 4-tuple reused after a reboot gets a new id) and the connection's network
// namespace (the inode of its nsfs file, unique on one boot), so that equal 4-tuples of two
// namespaces (containers, labs) get two ids. With the namespace, the socket cookie keys the
// id too (SockIDOf), so that two connections on one 4-tuple (a client port reused while the
// server still holds the old connection in TIME-WAIT) get two ids. Netns 0 means "not
// known" (ss text read elsewhere): the id is then the first version's, of the 4-tuple alone.
type SockKey struct {
	Salt   string
	BootID string
	Netns  uint64
}

// SockIDer computes sock_id: a SockKey (one HMAC per call) or a *SockHasher (reused).
type SockIDer interface {
	SockID(local, peer netip.AddrPort) string
	SockIDOf(local, peer netip.AddrPort, cookie uint64) string
}

// SockID is SockIDOf with cookie 0 (not known).
func (k SockKey) SockID(local, peer netip.AddrPort) string {
	return k.Hasher().SockIDOf(local, peer, 0)
}

// SockIDOf returns an opaque, stable id for the connection local↔peer whose socket has the
// given cookie (the kernel's socket cookie: INET_DIAG's idiag_cookie, `ss -e`'s sk:): the hex
// of the first 8 bytes of
//
//	HMAC-SHA256(salt, "ccab-sock/1" | boot id | local | peer)                          Netns = 0
//	HMAC-SHA256(salt, "ccab-sock/2" | boot id | netns | cookie | local | peer)         Netns ≠ 0
//
// (netns and cookie in decimal, every part followed by a NUL byte). IPv4-mapped addresses
// are unmapped first, so ss text and netlink give the same id for the same socket. It sets
// up a new HMAC on every call; for many sockets use a SockHasher.
func (k SockKey) SockIDOf(local, peer netip.AddrPort, cookie uint64) string {
	return k.Hasher().SockIDOf(local, peer, cookie)
}

// Hasher returns a SockHasher for k.
func (k SockKey) Hasher() *SockHasher {
	return &SockHasher{mac: hmac.New(sha256.New, []byte(k.Salt)), key: k.Salt, bootID: k.BootID, netns: k.Netns}
}

// WithNetns returns the hasher's key for connections of the network namespace with inode
// ino: a new SockHasher sharing nothing with h.
func (h *SockHasher) WithNetns(ino uint64) *SockHasher {
	c := *h
	c.mac = hmac.New(sha256.New, []byte(h.salt()))
	c.netns = ino
	c.buf = nil
	return &c
}

// SockHasher computes SockKey.SockID with one keyed HMAC that it resets between calls, and
// scratch buffers it reuses: one allocation per id (the returned string). Not safe for
// concurrent use.
type SockHasher struct {
	mac    hash.Hash
	key    string
	bootID string
	netns  uint64
	buf    []byte
	sum    [sha256.Size]byte
}

func (h *SockHasher) salt() string { return h.key }

// SockID is SockKey.SockID.
func (h *SockHasher) SockID(local, peer netip.AddrPort) string { return h.SockIDOf(local, peer, 0) }

// SockIDOf is SockKey.SockIDOf.
func (h *SockHasher) SockIDOf(local, peer netip.AddrPort, cookie uint64) string {
	h.mac.Reset()
	var b []byte
	if h.netns == 0 {
		b = append(h.buf[:0], "ccab-sock/1"...)
		b = append(b, 0)
		b = append(b, h.bootID...)
		b = append(b, 0)
	} else {
		b = append(h.buf[:0], "ccab-sock/2"...)
		b = append(b, 0)
		b = append(b, h.bootID...)
		b = append(b, 0)
		b = strconv.AppendUint(b, h.netns, 10)
		b = append(b, 0)
		b = strconv.AppendUint(b, cookie, 10)
		b = append(b, 0)
	}
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
