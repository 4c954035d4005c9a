package anon

import (
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
