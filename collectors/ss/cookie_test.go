package ss

import (
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/record"
)

// TestSocketCookie: `ss -e`'s sk: is the socket cookie in hex; with a namespace it keys
// sock_id like the netlink sampler's, without one the id stays the 4-tuple's.
func TestSocketCookie(t *testing.T) {
	line := "ESTAB 0 0 10.0.0.1:443 10.0.0.2:50000 uid:33 ino:91234 sk:3f <-> ts sack cubic wscale:7,7 rto:204 rtt:1/0.5 mss:1448 cwnd:10 bytes_acked:1 segs_out:1 segs_in:1\n"
	sc := NewScanner(strings.NewReader(line))
	if !sc.Scan() {
		t.Fatal("no entry")
	}
	s, err := ParseEntry(sc.Entry(), Options{DefaultState: "ESTAB"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Cookie != 0x3f {
		t.Fatalf("cookie %#x, want 0x3f", s.Cookie)
	}
	withNS := anon.SockKey{Salt: "s", BootID: "b", Netns: 4026531840}
	if got, want := s.Record(withNS, record.Meta{}).SockID, withNS.SockIDOf(s.Local, s.Peer, 0x3f); got != want {
		t.Errorf("sock_id %s, want %s", got, want)
	}
	noNS := anon.SockKey{Salt: "s", BootID: "b"}
	if got, want := s.Record(noNS, record.Meta{}).SockID, noNS.SockID(s.Local, s.Peer); got != want {
		t.Errorf("namespace-less sock_id %s, want the 4-tuple's %s", got, want)
	}
	if withNS.SockIDOf(s.Local, s.Peer, 0x3f) == withNS.SockIDOf(s.Local, s.Peer, 0x40) {
		t.Error("two cookies, one sock_id")
	}
}
