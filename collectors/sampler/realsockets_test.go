package sampler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/internal/netnstest"
	"github.com/ccab-dev/ccab/collectors/internal/recordcmp"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/ss"
)

// TestNetlinkAgreesWithSS runs real cubic, bbr and reno transfers through a 20 Mbit/s tbf
// bottleneck between two network namespaces, stops the senders, waits until every socket
// is idle (nothing unacked, nothing unread, counters unchanged over 100 ms), then reads the
// sender namespace three times back to back: the sampler over netlink, `ss -tinHOe state
// established` through the repository's ss parser, and the sampler again. For every socket
// (matched by sock_id) the ss record must equal the first netlink record field by field,
// except what recordcmp.Diff allows: cc_version (ss cannot tell BBR v1), the %g rounding of
// RTTs and BBR gains, and lastsnd/lastrcv/lastack, which must lie between the two netlink
// reads. The two netlink reads must agree on every counter.
func TestNetlinkAgreesWithSS(t *testing.T) {
	netnstest.Require(t, "tc", "ss", "sysctl")
	tag := netnstest.Tag()
	snd := netnstest.Namespace(t, "ccab-snd-"+tag)
	rcv := netnstest.Namespace(t, "ccab-rcv-"+tag)
	netnstest.Sysctl(t, "net.ipv4.tcp_allowed_congestion_control", "reno bbr cubic")
	subnet := fmt.Sprintf("10.199.%d", 1+rand.IntN(254))
	ifSnd, ifRcv := "cs"+tag, "cr"+tag
	netnstest.Veth(t, snd, ifSnd, subnet+".1/24", rcv, ifRcv, subnet+".2/24")
	netnstest.Cmd(t, "tc", "-n", snd, "qdisc", "add", "dev", ifSnd, "root", "tbf", "rate", "20mbit", "burst", "16k", "limit", "30000")

	// Receivers: read everything until the sender closes.
	ccs := []string{"cubic", "bbr", "reno"}
	var received sync.WaitGroup
	var conns []*net.TCPConn
	var rcvMu sync.Mutex
	rcvCookie := map[netip.AddrPort]uint64{} // receiver's socket cookie by the sender's address
	for i, cc := range ccs {
		addr := fmt.Sprintf("%s.2:%d", subnet, 5001+i)
		ln := netnstest.Listen(t, rcv, "tcp4", addr)
		received.Add(1)
		go func() {
			defer received.Done()
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			rcvMu.Lock()
			rcvCookie[c.RemoteAddr().(*net.TCPAddr).AddrPort()] = netnstest.Cookie(t, c.(*net.TCPConn))
			rcvMu.Unlock()
			io.Copy(io.Discard, c)
		}()
		conns = append(conns, netnstest.Dial(t, snd, "tcp4", addr, cc))
	}
	// Senders: bulk for 3 s, then stop writing (the sockets stay open).
	var stop atomic.Bool
	var sent sync.WaitGroup
	chunk := make([]byte, 64<<10)
	for _, c := range conns {
		sent.Add(1)
		go func() {
			defer sent.Done()
			for !stop.Load() {
				c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
				if _, err := c.Write(chunk); err != nil && !isTimeout(err) {
					t.Errorf("send: %v", err)
					return
				}
			}
		}()
	}
	ctx := context.Background()
	cfg := Config{Salt: "agree-" + tag, BootID: "boot", Namespaces: []string{snd, rcv}, KeepClosed: -1}
	smp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer smp.Close()
	// sock_id is keyed by the namespace (the sender's, where ss runs): ss text gets the
	// same id when told which namespace it came from.
	key := anon.SockKey{Salt: cfg.Salt, BootID: cfg.BootID, Netns: smp.NetnsInodes()[0]}
	meta := record.Meta{Pop: "lab", Host: "snd", Kernel: "test"}
	// 3 s of bulk transfer, up to 3 s more until some socket has retransmitted. (Drops in
	// the sender's own tbf are local congestion for TCP — the segment never left, cwnd is
	// cut, nothing is retransmitted — so cubic and reno rarely retransmit here; BBR, which
	// ignores local drops and sends GSO bursts that tbf splits and partly drops, does.)
	time.Sleep(3 * time.Second)
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		recs, _, err := smp.Tick(ctx, meta, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(recs, func(r record.TCPSample) bool { return *r.TotalRetrans > 0 }) {
			break
		}
	}
	stop.Store(true)
	sent.Wait()

	senders := map[string]bool{}
	receiverOf := map[string]string{} // sender sock_id → receiver sock_id
	for _, c := range conns {
		l, p := c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
		id := key.SockIDOf(l, p, netnstest.Cookie(t, c))
		senders[id] = true
		rkey := anon.SockKey{Salt: cfg.Salt, BootID: cfg.BootID, Netns: smp.NetnsInodes()[1]}
		rcvMu.Lock()
		receiverOf[id] = rkey.SockIDOf(p, l, rcvCookie[l])
		rcvMu.Unlock()
	}
	tick := func(now time.Time) map[string]record.TCPSample {
		recs, st, err := smp.Tick(ctx, meta, now)
		if err != nil || st.Truncated || st.DecodeErrors != 0 {
			t.Fatalf("tick: %v, stats %+v", err, st)
		}
		m := map[string]record.TCPSample{}
		for _, r := range recs {
			m[r.SockID] = r
		}
		return m
	}
	idle := func(m map[string]record.TCPSample) bool {
		for id, r := range m {
			if senders[id] && (r.SendQBytes != 0 || *r.Unacked != 0 || *r.NotsentBytes != 0) {
				return false
			}
			if !senders[id] && r.RecvQBytes != 0 {
				return false
			}
		}
		return len(m) == 2*len(conns)
	}
	// Wait for idle sockets whose counters no longer move.
	deadline := time.Now().Add(10 * time.Second)
	var prev map[string]record.TCPSample
	for {
		cur := tick(time.Now())
		if idle(cur) && prev != nil && sameCounters(t, prev, cur) {
			break
		}
		prev = cur
		if time.Now().After(deadline) {
			t.Fatal("sockets did not become idle within 10 s of stopping the senders")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// netlink, ss, netlink, back to back; again (at most 3 times) if a late ACK moved a
	// counter between the two netlink reads.
	var now time.Time
	var before, after map[string]record.TCPSample
	var out []byte
	for attempt := 1; ; attempt++ {
		now = time.Now()
		before = tick(now)
		if out, err = exec.Command("ip", "netns", "exec", snd, "ss", "-tinHOe", "state", "established").Output(); err != nil {
			t.Fatalf("ss: %v", err)
		}
		after = tick(now)
		if sameCounters(t, before, after) {
			break
		}
		if attempt == 3 {
			t.Fatal("counters moved between the two netlink reads around ss three times: the sockets are not idle")
		}
		time.Sleep(200 * time.Millisecond)
	}

	meta.TsMs, meta.SampleRate = now.UnixMilli(), 1
	sc := ss.NewScanner(bytes.NewReader(out))
	seenCC := map[string]bool{}
	retransmitted := false
	n := 0
	for sc.Scan() {
		sock, err := ss.ParseEntry(sc.Entry(), ss.Options{DefaultState: "ESTAB"})
		if err != nil {
			t.Fatalf("ss parser: %v\n%s", err, out)
		}
		want := sock.Record(key, meta)
		got, ok := before[want.SockID]
		if !ok {
			t.Errorf("ss socket %s → %s (sock_id %s) not in the netlink sample", sock.Local, sock.Peer, want.SockID)
			continue
		}
		n++
		a := after[want.SockID]
		for _, d := range recordcmp.Diff(got, want, recordcmp.Tolerance{Bracket: &a}) {
			t.Errorf("%s %s: %s", got.CC, sock.Local, d)
		}
		seenCC[got.CC] = true
		if *got.TotalRetrans > 0 && *got.BytesRetrans > 0 {
			retransmitted = true
		}
		if got.CC == "bbr" && (got.BBRBwBps == nil || got.CCVersion == nil || *got.CCVersion != 1) {
			t.Errorf("bbr sender: bw %v, cc_version %v; want a v1 bbr:(…) block", got.BBRBwBps, got.CCVersion)
		}
		// The receiver, in the other namespace, got every byte the sender saw acked. The
		// connecting side's bytes_acked also counts its SYN (snd_una moves past the ISN when
		// the SYN-ACK arrives); the receiver's bytes_received counts data only.
		if r, ok := before[receiverOf[want.SockID]]; !ok {
			t.Errorf("%s: receiver socket not sampled in namespace %s", got.CC, rcv)
		} else if *r.BytesReceived != *got.BytesAcked-1 {
			t.Errorf("%s: receiver bytes_received %d != sender bytes_acked %d - 1 (SYN)", got.CC, *r.BytesReceived, *got.BytesAcked)
		}
		t.Logf("%-5s cwnd %3d rtt %6dµs bytes_sent %9d retrans %3d (%d bytes) lost %d delivery %d bps",
			got.CC, *got.Cwnd, *got.RTTUs, *got.BytesSent, *got.TotalRetrans, *got.BytesRetrans, *got.Lost, *got.DeliveryRateBps)
	}
	if n != len(conns) {
		t.Errorf("compared %d sockets, want %d\n%s", n, len(conns), out)
	}
	for _, cc := range ccs {
		if !seenCC[cc] {
			t.Errorf("no %s socket compared", cc)
		}
	}
	if !retransmitted {
		t.Error("no socket retransmitted: the bottleneck did not bite")
	}
	for _, c := range conns {
		c.Close()
	}
	received.Wait()
}

// sameCounters reports whether two reads of the same sockets agree on every field that
// does not move with the wall clock.
func sameCounters(t *testing.T, a, b map[string]record.TCPSample) bool {
	t.Helper()
	if len(a) != len(b) {
		return false
	}
	for id, ra := range a {
		rb, ok := b[id]
		if !ok {
			return false
		}
		if d := recordcmp.Diff(ra, rb, recordcmp.Tolerance{Ignore: []string{"lastsnd_ms", "lastrcv_ms", "lastack_ms", "ts_ms"}}); len(d) > 0 {
			t.Logf("not settled yet: %s", strings.Join(d, "; "))
			return false
		}
	}
	return true
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
