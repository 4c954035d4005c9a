package closecap

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/internal/netns"
	"github.com/ccab-dev/ccab/collectors/internal/netnstest"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/sampler"
)

// lab is a server namespace (where the captures listen) and a client namespace joined by
// a veth pair. Names start with cc14 so that parallel test runs of other work do not meet.
type lab struct {
	srv, cli string
	srvIP    string
	srvIf    string
	cliIf    string

	mu      sync.Mutex
	cookies map[[2]netip.AddrPort]uint64 // server socket cookie by (server, client) address
}

// cookie returns the socket cookie of the server's end of the connection server↔client
// (the latest one on that 4-tuple: read it when the connection is done).
func (l *lab) cookie(server, client netip.AddrPort) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cookies[[2]netip.AddrPort{server, client}]
}

func newLab(t *testing.T) *lab {
	t.Helper()
	netnstest.Require(t, "sysctl", "tc")
	tag := netnstest.Tag()
	l := &lab{srv: "cc14s-" + tag, cli: "cc14c-" + tag, srvIf: "cc14s" + tag, cliIf: "cc14c" + tag,
		cookies: map[[2]netip.AddrPort]uint64{}}
	netnstest.Namespace(t, l.srv)
	netnstest.Namespace(t, l.cli)
	netnstest.Sysctl(t, "net.ipv4.tcp_allowed_congestion_control", "reno bbr cubic")
	subnet := fmt.Sprintf("10.214.%d", 1+rand.IntN(254))
	netnstest.Veth(t, l.srv, l.srvIf, subnet+".1/24", l.cli, l.cliIf, subnet+".2/24")
	l.srvIP = subnet + ".1"
	// The namespace default is cubic: sockets the poller never saw get it (cc_source
	// netns_default), which is right for sockets that did not choose their own.
	netnstest.Cmd(t, "ip", "netns", "exec", l.srv, "sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=cubic")
	return l
}

// server accepts on port with the listener's congestion control cc ("" = the namespace
// default, inherited by accepted sockets), reads an 8-byte size, writes that many bytes
// and closes (the server closes first, as nginx does after a response). With hold, it
// waits for hold to be closed before closing.
func (l *lab) server(t *testing.T, port int, cc string, hold <-chan struct{}) {
	t.Helper()
	lc := net.ListenConfig{}
	if cc != "" {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			c.Control(func(fd uintptr) { serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc) })
			return serr
		}
	}
	var ln net.Listener
	if err := netns.Do(netns.Path(l.srv), func() error {
		var err error
		ln, err = lc.Listen(context.Background(), "tcp4", fmt.Sprintf("%s:%d", l.srvIP, port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ck := netnstest.Cookie(t, c.(*net.TCPConn))
			l.mu.Lock()
			l.cookies[[2]netip.AddrPort{c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()}] = ck
			l.mu.Unlock()
			go func() {
				defer c.Close()
				var hdr [8]byte
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					return
				}
				n := binary.BigEndian.Uint64(hdr[:])
				buf := make([]byte, 64<<10)
				for n > 0 {
					k := min(n, uint64(len(buf)))
					if _, err := c.Write(buf[:k]); err != nil {
						return
					}
					n -= k
				}
				if hold != nil {
					<-hold
				}
			}()
		}
	}()
}

// conn is one finished client connection.
type conn struct {
	server, client netip.AddrPort // server's local and peer address
	read           int64
	cookie         uint64 // the server socket's
}

// fetch opens a connection from the client namespace, asks for size bytes and reads to
// EOF. With before != nil it is called once the response is complete, before close.
func (l *lab) fetch(t *testing.T, port int, size int) conn {
	t.Helper()
	c := netnstest.Dial(t, l.cli, "tcp4", fmt.Sprintf("%s:%d", l.srvIP, port), "")
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(size))
	if _, err := c.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, c)
	if err != nil {
		t.Fatal(err)
	}
	out := conn{server: c.RemoteAddr().(*net.TCPAddr).AddrPort(), client: c.LocalAddr().(*net.TCPAddr).AddrPort(), read: n}
	out.cookie = l.cookie(out.server, out.client)
	c.Close()
	return out
}

// collector runs a capture and keeps its records by sock_id.
type collector struct {
	mu   sync.Mutex
	recs map[string][]record.TCPConn
	n    int
	cond *sync.Cond
}

func startCapture(t *testing.T, c *Capture) *collector {
	t.Helper()
	col := &collector{recs: map[string][]record.TCPConn{}}
	col.cond = sync.NewCond(&col.mu)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, func() record.Meta { return record.Meta{Pop: "lab", Host: "srv", Kernel: "test"} }, func(rs []record.TCPConn) {
			col.mu.Lock()
			for _, r := range rs {
				col.recs[r.SockID] = append(col.recs[r.SockID], r)
				col.n++
			}
			col.cond.Broadcast()
			col.mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && err != context.Canceled {
			t.Errorf("capture: %v", err)
		}
	})
	return col
}

// waitFor waits until the collector holds at least n records, or fails after a generous
// bound (a guard against hanging, not a timing assertion).
func (col *collector) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	go func() {
		for time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			col.cond.Broadcast()
		}
		col.cond.Broadcast()
	}()
	col.mu.Lock()
	defer col.mu.Unlock()
	for col.n < n {
		if time.Now().After(deadline) {
			t.Fatalf("got %d records, want %d", col.n, n)
		}
		col.cond.Wait()
	}
}

func (col *collector) snapshot() map[string][]record.TCPConn {
	col.mu.Lock()
	defer col.mu.Unlock()
	out := make(map[string][]record.TCPConn, len(col.recs))
	for k, v := range col.recs {
		out[k] = append([]record.TCPConn(nil), v...)
	}
	return out
}

// settle waits until no socket of the server namespace is left on the ports except
// TIME-WAIT ones (their full sockets, and so their destroy events, are gone), then gives
// the kernel's broadcast work queue a moment.
func (l *lab) settle(t *testing.T) {
	t.Helper()
	for i := 0; i < 100; i++ {
		out, err := exec.Command("ip", "netns", "exec", l.srv, "ss", "-tanH", "exclude", "time-wait", "exclude", "listening").Output()
		if err != nil {
			t.Fatal(err)
		}
		if len(out) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
}

var sizes = []int{1 << 10, 4 << 10, 16 << 10, 100 << 10, 300 << 10, 1 << 20}

// TestEveryConnectionOnce: N short connections of mixed sizes (1 KiB … 1 MiB) to a server
// namespace; at sample rate 1 every one gives exactly one tcp_conn/1 record whose final
// bytes_acked is what the client read + 1 (the server's FIN; bytes_acked counts it, and
// the server's socket is only destroyed after its FIN was acked), with the poller's
// sock_id; a second capture at rate 0.1 on another port records exactly the connections
// the poller's hash selects; cc is the listener's own for sockets the poller saw
// (cc_source socket) and the namespace default otherwise.
func TestEveryConnectionOnce(t *testing.T) {
	l := newLab(t)
	const portAll, portTenth, portCubic, portBBR = 8081, 8082, 8083, 8084
	salt := "cc14-" + netnstest.Tag()
	bootID := "boot-test"
	book := NewBook(0)
	capAll, err := New(Config{Salt: salt, BootID: bootID, Namespaces: []string{l.srv}, SampleRate: 1,
		LocalPorts: []uint16{portAll, portCubic, portBBR}, Book: book})
	if err != nil {
		t.Fatal(err)
	}
	capTenth, err := New(Config{Salt: salt, BootID: bootID, Namespaces: []string{l.srv}, SampleRate: 0.1,
		LocalPorts: []uint16{portTenth}})
	if err != nil {
		t.Fatal(err)
	}
	if rb, forced := capAll.RcvBuf(); !forced || rb < 2*16<<20 {
		t.Errorf("rcvbuf %d forced %v, want ≥ 32 MiB forced", rb, forced)
	}
	inode := capAll.NetnsInodes()[0]
	key := anon.SockKey{Salt: salt, BootID: bootID, Netns: inode}
	colAll, colTenth := startCapture(t, capAll), startCapture(t, capTenth)

	hold := make(chan struct{})
	l.server(t, portAll, "", nil)
	l.server(t, portTenth, "", nil)
	l.server(t, portCubic, "cubic", hold)
	l.server(t, portBBR, "bbr", hold)

	// Held connections with their own cc: the poller sees them before they close.
	smp, err := sampler.New(sampler.Config{Salt: salt, BootID: bootID, Namespaces: []string{l.srv}, Observe: book.Observe,
		LocalPorts: []uint16{portCubic, portBBR}})
	if err != nil {
		t.Fatal(err)
	}
	defer smp.Close()
	var held []conn
	var heldWG sync.WaitGroup
	var heldMu sync.Mutex
	for i := 0; i < 6; i++ {
		port := portCubic
		if i%2 == 1 {
			port = portBBR
		}
		c := netnstest.Dial(t, l.cli, "tcp4", fmt.Sprintf("%s:%d", l.srvIP, port), "")
		var hdr [8]byte
		binary.BigEndian.PutUint64(hdr[:], 64<<10)
		c.Write(hdr[:])
		heldWG.Add(1)
		go func() {
			defer heldWG.Done()
			n, _ := io.Copy(io.Discard, c)
			heldMu.Lock()
			hc := conn{server: c.RemoteAddr().(*net.TCPAddr).AddrPort(), client: c.LocalAddr().(*net.TCPAddr).AddrPort(), read: n}
			hc.cookie = l.cookie(hc.server, hc.client)
			held = append(held, hc)
			heldMu.Unlock()
			c.Close()
		}()
	}
	polled := map[string]bool{} // the poller's sock_ids of the held connections
	for {
		recs, _, err := smp.Tick(context.Background(), record.Meta{}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 6 {
			for _, r := range recs {
				polled[r.SockID] = true
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(hold)

	// Short connections, sequential (the 2-core machine is shared).
	var all, tenth []conn
	for i := 0; i < 60; i++ {
		all = append(all, l.fetch(t, portAll, sizes[i%len(sizes)]))
	}
	sel := sampler.NewSelection(salt, 0.1)
	wantTenth := map[string]bool{}
	for i := 0; i < 150; i++ {
		c := l.fetch(t, portTenth, 1<<10)
		tenth = append(tenth, c)
		if sel.Keep(c.server, c.client) {
			wantTenth[key.SockIDOf(c.server, c.client, c.cookie)] = true
		}
	}
	heldWG.Wait()

	colAll.waitFor(t, len(all)+len(held))
	colTenth.waitFor(t, len(wantTenth))
	l.settle(t)

	got := colAll.snapshot()
	if n := countRecs(got); n != len(all)+len(held) {
		t.Errorf("rate 1: %d records for %d connections", n, len(all)+len(held))
	}
	for _, c := range all {
		id := key.SockIDOf(c.server, c.client, c.cookie)
		rs := got[id]
		if len(rs) != 1 {
			t.Errorf("connection %v→%v: %d records, want 1", c.client, c.server, len(rs))
			continue
		}
		r := rs[0]
		if r.BytesAcked == nil || *r.BytesAcked != c.read+1 {
			t.Errorf("%v: bytes_acked %v, client read %d (+1 for the FIN)", c.client, show(r.BytesAcked), c.read)
		}
		if r.BytesSent == nil || *r.BytesSent < c.read || r.BytesRetrans == nil || *r.BytesSent-*r.BytesRetrans != c.read {
			t.Errorf("%v: bytes_sent %v bytes_retrans %v, client read %d", c.client, show(r.BytesSent), show(r.BytesRetrans), c.read)
		}
		if r.CC != "cubic" || r.CCSource != record.CCSourceNetnsDefault || r.SeenDurationMs != nil || r.DurationMs != nil {
			t.Errorf("%v: cc %q source %q seen %v duration %v; want the namespace default cubic, not seen", c.client, r.CC, r.CCSource, show(r.SeenDurationMs), show(r.DurationMs))
		}
		if r.PeerPrefix != netip.PrefixFrom(c.client.Addr(), 24).Masked().String() || r.LocalPort != int64(c.server.Port()) ||
			r.Schema != record.SchemaTCPConn || r.Host != "srv" || float64(r.SampleRate) != 1 {
			t.Errorf("%v: record %+v", c.client, r)
		}
		if r.TotalRTO == nil || r.TotalRTORecoveries == nil || r.TotalRTOTimeMs == nil || r.RTTUs == nil || r.MinRTTUs == nil {
			t.Errorf("%v: total_rto %v rtt %v min_rtt %v: want them on this kernel", c.client, show(r.TotalRTO), show(r.RTTUs), show(r.MinRTTUs))
		}
	}
	for _, c := range held {
		id := key.SockIDOf(c.server, c.client, c.cookie)
		if !polled[id] {
			t.Errorf("held connection %v: the poller's sock_ids %v lack the close record's %s", c.client, polled, id)
		}
		rs := got[id]
		if len(rs) != 1 {
			t.Errorf("held connection %v: %d records", c.client, len(rs))
			continue
		}
		r := rs[0]
		want := "cubic"
		if c.server.Port() == portBBR {
			want = "bbr"
		}
		if r.CC != want || r.CCSource != record.CCSourceSocket || r.SeenDurationMs == nil {
			t.Errorf("held %v on %d: cc %q source %q seen %v; want %s from the socket", c.client, c.server.Port(), r.CC, r.CCSource, show(r.SeenDurationMs), want)
		}
		if want == "bbr" && (r.CCVersion == nil || *r.CCVersion != 1) {
			t.Errorf("held bbr: cc_version %v, want 1", show(r.CCVersion))
		}
		if *r.BytesAcked != c.read+1 {
			t.Errorf("held %v: bytes_acked %d, read %d", c.client, *r.BytesAcked, c.read)
		}
	}
	if book.Len() != 0 {
		t.Errorf("book holds %d entries after every seen connection closed", book.Len())
	}

	gotTenth := colTenth.snapshot()
	if len(gotTenth) != len(wantTenth) || countRecs(gotTenth) != len(wantTenth) {
		t.Errorf("rate 0.1: %d records (%d ids), want %d of %d connections", countRecs(gotTenth), len(gotTenth), len(wantTenth), len(tenth))
	}
	for id := range wantTenth {
		if len(gotTenth[id]) != 1 {
			t.Errorf("rate 0.1: sampled connection %s has %d records", id, len(gotTenth[id]))
		}
	}
	for id, rs := range gotTenth {
		if !wantTenth[id] {
			t.Errorf("rate 0.1: %s captured but not selected by the hash", id)
		}
		if float64(rs[0].SampleRate) != 0.1 {
			t.Errorf("sample_rate %v", rs[0].SampleRate)
		}
	}
	if s := &capAll.Stats; s.Dropped.Load() != 0 || s.Overruns.Load() != 0 || s.DecodeErrors.Load() != 0 {
		t.Errorf("capture: dropped %d overruns %d decode errors %d", s.Dropped.Load(), s.Overruns.Load(), s.DecodeErrors.Load())
	}
	// The in-kernel filter let only the 0.1 capture's own port through to it, and with the
	// eBPF filter only the connections the hash selects: the kernel's hash is the poller's.
	hashed, herr := capTenth.HashInKernel()
	wantEvents := len(tenth)
	if hashed {
		wantEvents = len(wantTenth)
	} else {
		t.Logf("sampling hash not in the kernel: %v", herr)
	}
	if ev := capTenth.Stats.Events.Load(); ev != uint64(wantEvents) || capTenth.Stats.Filtered.Load() != 0 {
		t.Errorf("0.1 capture (hash in kernel: %v) received %d events (%d filtered in user space), want exactly %d", hashed, ev, capTenth.Stats.Filtered.Load(), wantEvents)
	}
	t.Logf("rate 1: %d records; rate 0.1: %d of %d connections; events seen by the 0.1 capture %d, filtered in user space %d",
		countRecs(got), len(gotTenth), len(tenth), capTenth.Stats.Events.Load(), capTenth.Stats.Filtered.Load())
}

// TestOverrunCounted: a listener whose receive buffer is shrunk to the minimum and not read
// while 200 connections close drops events; ENOBUFS is reported and the kernel's drop
// count plus the records emitted account for every connection.
func TestOverrunCounted(t *testing.T) {
	l := newLab(t)
	const port = 8090
	c, err := New(Config{Salt: "x", Namespaces: []string{l.srv}, LocalPorts: []uint16{port}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetRcvBuf(1); err != nil { // the kernel rounds up to its minimum
		t.Fatal(err)
	}
	l.server(t, port, "", nil)
	const n = 200
	for i := 0; i < n; i++ {
		l.fetch(t, port, 1<<10)
	}
	l.settle(t)
	col := startCapture(t, c)
	deadline := time.Now().Add(30 * time.Second)
	for c.Stats.Dropped.Load()+c.Stats.Emitted.Load() < n && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	emitted, dropped := c.Stats.Emitted.Load(), c.Stats.Dropped.Load()
	if c.Stats.Overruns.Load() == 0 || dropped == 0 {
		t.Errorf("overruns %d dropped %d: want both > 0", c.Stats.Overruns.Load(), dropped)
	}
	if emitted+dropped != n {
		t.Errorf("emitted %d + dropped %d != %d connections", emitted, dropped, n)
	}
	t.Logf("200 closes into an unread minimum buffer: %d records, %d dropped (ENOBUFS reported %d times)", countRecs(col.snapshot()), dropped, c.Stats.Overruns.Load())
}

// TestTotalRTO: a transfer whose path goes down for a while retransmits on timeouts and
// recovers; the final record carries total_rto ≥ 1, total_rto_recoveries ≥ 1 and
// total_rto_time_ms > 0 (tcp_info offsets 240/242/244 of this kernel).
func TestTotalRTO(t *testing.T) {
	l := newLab(t)
	const port = 8095
	c, err := New(Config{Salt: "x", Namespaces: []string{l.srv}, LocalPorts: []uint16{port}})
	if err != nil {
		t.Fatal(err)
	}
	col := startCapture(t, c)
	l.server(t, port, "", nil)
	cl := netnstest.Dial(t, l.cli, "tcp4", fmt.Sprintf("%s:%d", l.srvIP, port), "")
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], 4<<20)
	cl.Write(hdr[:])
	buf := make([]byte, 64<<10)
	io.ReadFull(cl, buf) // the transfer is under way
	netnstest.Cmd(t, "ip", "-n", l.cli, "link", "set", l.cliIf, "down")
	time.Sleep(1500 * time.Millisecond) // RTOs of 200, 400, 800 ms
	netnstest.Cmd(t, "ip", "-n", l.cli, "link", "set", l.cliIf, "up")
	n, err := io.Copy(io.Discard, cl)
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
	col.waitFor(t, 1)
	for _, rs := range col.snapshot() {
		r := rs[0]
		t.Logf("read %d; total_rto %v recoveries %v time %v ms; bytes_acked %v retrans %v", n+int64(len(buf)),
			show(r.TotalRTO), show(r.TotalRTORecoveries), show(r.TotalRTOTimeMs), show(r.BytesAcked), show(r.TotalRetrans))
		if *r.TotalRTO < 1 || *r.TotalRTORecoveries < 1 || *r.TotalRTOTimeMs <= 0 || *r.TotalRTORecoveries > *r.TotalRTO {
			t.Errorf("total_rto %d recoveries %d time %d ms", *r.TotalRTO, *r.TotalRTORecoveries, *r.TotalRTOTimeMs)
		}
		if *r.BytesAcked != n+int64(len(buf))+1 {
			t.Errorf("bytes_acked %d, read %d", *r.BytesAcked, n+int64(len(buf)))
		}
	}
}

func countRecs(m map[string][]record.TCPConn) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}

func show(p *int64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// TestIPv6: the IPv6 group (SKNLGRP_INET6_TCP_DESTROY) and the filters' IPv6 offsets: 40
// connections over ::1 inside the server namespace (the clients' own sockets, on ephemeral
// ports, are dropped by the local-port filter) at rate 0.5: the records (and, with the eBPF
// filter, the events) are exactly the connections the poller's hash selects, with the /48.
func TestIPv6(t *testing.T) {
	l := newLab(t)
	const port = 8096
	const salt = "v6"
	c, err := New(Config{Salt: salt, Namespaces: []string{l.srv}, LocalPorts: []uint16{port}, SampleRate: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	col := startCapture(t, c)
	ln := netnstest.Listen(t, l.srv, "tcp6", fmt.Sprintf("[::1]:%d", port))
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			s.Write(make([]byte, 3000))
			s.Close()
		}
	}()
	sel := sampler.NewSelection(salt, 0.5)
	want := 0
	for i := 0; i < 40; i++ {
		cl := netnstest.Dial(t, l.srv, "tcp6", fmt.Sprintf("[::1]:%d", port), "")
		if n, _ := io.Copy(io.Discard, cl); n != 3000 {
			t.Fatalf("read %d", n)
		}
		if sel.Keep(cl.RemoteAddr().(*net.TCPAddr).AddrPort(), cl.LocalAddr().(*net.TCPAddr).AddrPort()) {
			want++
		}
		cl.Close()
	}
	col.waitFor(t, want)
	l.settle(t)
	got := col.snapshot()
	hashed, herr := c.HashInKernel()
	wantEvents := uint64(40)
	if hashed {
		wantEvents = uint64(want)
	} else {
		t.Logf("sampling hash not in the kernel: %v", herr)
	}
	if countRecs(got) != want || c.Stats.Filtered.Load() != 0 || c.Stats.Events.Load() != wantEvents {
		t.Fatalf("%d records, %d events (%d filtered in user space); want %d records, %d events", countRecs(got),
			c.Stats.Events.Load(), c.Stats.Filtered.Load(), want, wantEvents)
	}
	for _, rs := range got {
		r := rs[0]
		if r.PeerPrefix != "::/48" || r.LocalPort != port || *r.BytesAcked != 3001 {
			t.Errorf("record: prefix %s port %d bytes_acked %d", r.PeerPrefix, r.LocalPort, *r.BytesAcked)
		}
	}
	t.Logf("%d of 40 IPv6 connections sampled; hash in the kernel: %v", want, hashed)
}
