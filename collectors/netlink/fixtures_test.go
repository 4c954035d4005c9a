package netlink

import (
	"context"
	"encoding/binary"
	"flag"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ccab-dev/ccab/collectors/internal/netnstest"
)

// Recorded fixtures: a sock_diag dump of loopback connections (cubic, bbr and reno, IPv4
// and IPv6, plus their listeners) taken on an idle moment, and `ss -tinHOe state
// established` run right after it on the same sockets.
//
//	go test ./collectors/netlink -run TestRecordFixtures -record   # as root, rewrites testdata/
var recordFixtures = flag.Bool("record", false, "record testdata/loopback.* from real sockets (root)")

const (
	fixtureDump = "testdata/loopback.nldump" // SOCK_DIAG_BY_FAMILY messages, as the kernel sent them
	fixtureSS   = "testdata/loopback.ss.txt" // ss -tinHOe state established, same sockets, same moment
)

func TestRecordFixtures(t *testing.T) {
	if !*recordFixtures {
		t.Skip("run with -record to rewrite the recorded fixtures")
	}
	netnstest.Require(t, "ss")
	ns := netnstest.Namespace(t, "ccab-nlrec-"+netnstest.Tag())
	type flow struct{ network, addr, cc string }
	flows := []flow{
		{"tcp4", "127.0.0.1:19001", "cubic"}, {"tcp4", "127.0.0.1:19002", "bbr"}, {"tcp4", "127.0.0.1:19003", "reno"},
		{"tcp6", "[::1]:19011", "cubic"}, {"tcp6", "[::1]:19012", "bbr"}, {"tcp6", "[::1]:19013", "reno"},
	}
	var conns []*net.TCPConn
	for _, f := range flows {
		ln := netnstest.Listen(t, ns, f.network, f.addr)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			c.Write([]byte("hello"))
			io.Copy(io.Discard, c)
		}()
		conns = append(conns, netnstest.Dial(t, ns, f.network, f.addr, f.cc))
	}
	chunk := make([]byte, 256<<10)
	deadline := time.Now().Add(700 * time.Millisecond)
	done := make(chan struct{})
	for _, c := range conns {
		go func() {
			defer func() { done <- struct{}{} }()
			for time.Now().Before(deadline) {
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		}()
	}
	for range conns {
		<-done
	}
	conn, err := Open("/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dump := func() []byte {
		var out []byte
		for _, fam := range []uint8{AFInet, AFInet6} {
			_, err := conn.Dump(context.Background(), Request{Family: fam, States: AllStates, Ext: ExtTCPSample}, func(msg []byte) error {
				out = append(out, msg...)
				for len(out)%4 != 0 {
					out = append(out, 0)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	// Wait until nothing is in flight, so that both reads see the same counters.
	for i := 0; ; i++ {
		idle := true
		for _, m := range splitDump(t, dump()) {
			s, err := Decode(m)
			if err != nil {
				t.Fatal(err)
			}
			if s.State == StateEstablished && (s.WQueue != 0 || s.Info == nil || s.Info.Unacked() != 0) {
				idle = false
			}
		}
		if idle {
			break
		}
		if i > 100 {
			t.Fatal("sockets did not go idle")
		}
		time.Sleep(20 * time.Millisecond)
	}
	raw := dump()
	ssOut, err := exec.Command("ip", "netns", "exec", ns, "ss", "-tinHOe", "state", "established").Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fixtureDump, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fixtureSS, ssOut, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %d bytes of dump (%d messages) and %d bytes of ss text", len(raw), len(splitDump(t, raw)), len(ssOut))
}

// splitDump cuts concatenated netlink messages apart.
func splitDump(t testing.TB, b []byte) [][]byte {
	t.Helper()
	var msgs [][]byte
	for len(b) > 0 {
		if len(b) < nlmsgHdrLen {
			t.Fatalf("dump: %d trailing bytes", len(b))
		}
		l := int(binary.LittleEndian.Uint32(b))
		if l < nlmsgHdrLen || l > len(b) {
			t.Fatalf("dump: message length %d with %d bytes left", l, len(b))
		}
		msgs = append(msgs, b[:l])
		adv := (l + 3) &^ 3
		if adv > len(b) {
			adv = len(b)
		}
		b = b[adv:]
	}
	return msgs
}

func readFixture(t testing.TB) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(fixtureDump))
	if err != nil {
		t.Fatalf("read %s (rewrite with -record as root): %v", fixtureDump, err)
	}
	return splitDump(t, b)
}
