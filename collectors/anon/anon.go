// Package anon turns client addresses into what may leave the edge host: a network prefix
// (/24 for IPv4, /48 for IPv6) and an opaque, salted connection id. Raw client IPs never
// appear in a record.
package anon

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
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
	bits := IPv6PrefixBits
	if a.Is4() {
		bits = IPv4PrefixBits
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return ""
	}
	return p.String()
}

// SockKey holds what keys the connection hash: a fleet-wide secret salt and the host's boot
// id (so that a 4-tuple reused after a reboot gets a new id).
type SockKey struct {
	Salt   string
	BootID string
}

// SockID returns an opaque, stable id for the connection local↔peer: the hex of the first 8
// bytes of HMAC-SHA256(salt, "ccab-sock/1" | boot id | local | peer). IPv4-mapped addresses are
// unmapped first, so ss text and netlink give the same id for the same socket.
func (k SockKey) SockID(local, peer netip.AddrPort) string {
	mac := hmac.New(sha256.New, []byte(k.Salt))
	for _, part := range []string{"ccab-sock/1", k.BootID, canon(local), canon(peer)} {
		mac.Write([]byte(part))
		mac.Write([]byte{0})
	}
	return hex.EncodeToString(mac.Sum(nil)[:8])
}

func canon(ap netip.AddrPort) string {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
}
