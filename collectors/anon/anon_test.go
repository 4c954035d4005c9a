package anon

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
)

func TestPeerPrefix(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"203.0.113.77", "203.0.113.0/24"},
		{"10.77.0.2", "10.77.0.0/24"},
		{"::ffff:140.82.23.101", "140.82.23.0/24"},
		{"2001:db8:85a3::8a2e:370:7334", "2001:db8:85a3::/48"},
		{"2001:db8::1", "2001:db8::/48"},
		{"fe80::1%eth0", "fe80::/48"},
		{"::1", "::/48"},
	} {
		if got := PeerPrefix(netip.MustParseAddr(tc.in)); got != tc.want {
			t.Errorf("PeerPrefix(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := PeerPrefix(netip.Addr{}); got != "" {
		t.Errorf("PeerPrefix(invalid) = %q", got)
	}
}

func TestSockID(t *testing.T) {
	l := netip.MustParseAddrPort("10.77.0.1:9002")
	p := netip.MustParseAddrPort("10.77.0.2:53098")
	k := SockKey{Salt: "s", BootID: "b"}
	id := k.SockID(l, p)
	if len(id) != 16 || strings.Contains(id, "10.77") {
		t.Fatalf("SockID = %q", id)
	}
	if k.SockID(l, p) != id {
		t.Error("SockID not stable")
	}
	mapped := netip.MustParseAddrPort("[::ffff:10.77.0.2]:53098")
	if k.SockID(netip.MustParseAddrPort("[::ffff:10.77.0.1]:9002"), mapped) != id {
		t.Error("IPv4-mapped form gives another id")
	}
	for name, other := range map[string]string{
		"salt":    SockKey{Salt: "t", BootID: "b"}.SockID(l, p),
		"boot id": SockKey{Salt: "s", BootID: "c"}.SockID(l, p),
		"swap":    k.SockID(p, l),
		"port":    k.SockID(l, netip.MustParseAddrPort("10.77.0.2:53099")),
	} {
		if other == id {
			t.Errorf("changing the %s does not change the id", name)
		}
	}
}

// The reusable hasher gives SockKey.SockID's ids: the HMAC of the parts written one by one
// with a zero byte after each, as the first version computed it.
func TestSockHasherMatchesHMAC(t *testing.T) {
	ref := func(k SockKey, local, peer netip.AddrPort) string {
		mac := hmac.New(sha256.New, []byte(k.Salt))
		for _, part := range []string{"ccab-sock/1", k.BootID,
			netip.AddrPortFrom(local.Addr().Unmap(), local.Port()).String(),
			netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port()).String()} {
			mac.Write([]byte(part))
			mac.Write([]byte{0})
		}
		return hex.EncodeToString(mac.Sum(nil)[:8])
	}
	k := SockKey{Salt: "fleet-secret", BootID: "00000000-0000-4000-8000-000000000000"}
	h := k.Hasher()
	for _, tc := range [][2]string{
		{"10.77.0.1:9002", "10.77.0.2:53098"},
		{"[::ffff:10.77.0.1]:443", "[::ffff:203.0.113.9]:1"},
		{"[2001:db8::1]:443", "[2001:db8:85a3::8a2e:370:7334]:65535"},
		{"[fe80::1%eth0]:22", "[fe80::2%eth0]:40000"},
		{"0.0.0.0:0", "255.255.255.255:65535"},
	} {
		l, p := netip.MustParseAddrPort(tc[0]), netip.MustParseAddrPort(tc[1])
		want := ref(k, l, p)
		for i := 0; i < 3; i++ { // the hasher is reused
			if got := h.SockID(l, p); got != want {
				t.Errorf("SockHasher.SockID(%s, %s) = %s, want %s", l, p, got, want)
			}
		}
		if got := k.SockID(l, p); got != want {
			t.Errorf("SockKey.SockID(%s, %s) = %s, want %s", l, p, got, want)
		}
	}
}

func TestPeerPrefix4MatchesNetip(t *testing.T) {
	for _, s := range []string{"0.0.0.0", "1.2.3.4", "255.255.255.255", "10.0.100.9", "::ffff:1.2.3.4"} {
		a := netip.MustParseAddr(s)
		p, _ := a.Unmap().Prefix(24)
		if got := PeerPrefix(a); got != p.String() {
			t.Errorf("PeerPrefix(%s) = %s, want %s", s, got, p.String())
		}
	}
}

func BenchmarkSockID(b *testing.B) {
	k := SockKey{Salt: "s", BootID: "00000000-0000-4000-8000-000000000000"}
	l := netip.MustParseAddrPort("10.77.0.1:443")
	p := netip.MustParseAddrPort("198.51.100.7:53098")
	b.Run("key", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			k.SockID(l, p)
		}
	})
	b.Run("hasher", func(b *testing.B) {
		h := k.Hasher()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			h.SockID(l, p)
		}
	})
}
