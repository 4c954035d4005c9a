package sampler

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/netlink"
	"github.com/ccab-dev/ccab/collectors/record"
)

// fakeDumper replays messages, applying the kernel's family, state and port filters.
type fakeDumper struct {
	msgs  [][]byte
	err   error
	delay time.Duration // per message
}

func (f *fakeDumper) Dump(ctx context.Context, req netlink.Request, fn func([]byte) error) (netlink.DumpStats, error) {
	var st netlink.DumpStats
	if f.err != nil {
		return st, f.err
	}
	for _, m := range f.msgs {
		if h, err := netlink.DecodeHeader(m); err == nil {
			if h.Family != req.Family || !req.States.Has(h.State) {
				continue
			}
			if len(req.LocalPorts) > 0 && !contains(req.LocalPorts, h.Local.Port()) {
				continue
			}
		} else if req.Family != netlink.AFInet {
			continue // garbage goes with the IPv4 dump
		}
		if f.delay > 0 {
			time.Sleep(f.delay)
		}
		st.Messages++
		st.Bytes += int64(len(m))
		if err := fn(m); err != nil {
			if errors.Is(err, netlink.ErrStop) {
				st.Stopped = true
				return st, nil
			}
			return st, err
		}
	}
	return st, nil
}

func (f *fakeDumper) Close() error { return nil }

func contains(ports []uint16, p uint16) bool {
	for _, q := range ports {
		if q == p {
			return true
		}
	}
	return false
}

// fixture returns the recorded loopback dump of package netlink, one message each.
func fixture(t testing.TB) [][]byte {
	t.Helper()
	b, err := os.ReadFile("../netlink/testdata/loopback.nldump")
	if err != nil {
		t.Fatal(err)
	}
	var msgs [][]byte
	for len(b) >= 16 {
		l := int(binary.LittleEndian.Uint32(b))
		msgs = append(msgs, b[:l])
		b = b[min((l+3)&^3, len(b)):]
	}
	return msgs
}

// clone rewrites a message's 4-tuple and cookie: a new socket with the same tcp_info.
func clone(m []byte, lport uint16, peer [4]byte, pport uint16, cookie uint64) []byte {
	c := append([]byte(nil), m...)
	id := c[16+4:]
	binary.BigEndian.PutUint16(id[0:], lport)
	binary.BigEndian.PutUint16(id[2:], pport)
	copy(id[20:24], peer[:])
	binary.LittleEndian.PutUint32(id[40:], uint32(cookie))
	binary.LittleEndian.PutUint32(id[44:], uint32(cookie>>32))
	return c
}

// population makes n IPv4 established sockets on local port 443 from one recorded sender.
func population(t testing.TB, n int) [][]byte {
	t.Helper()
	var tmpl []byte
	for _, m := range fixture(t) {
		s, _ := netlink.Decode(m)
		if s.Family == netlink.AFInet && s.State == netlink.StateEstablished && s.CC == "cubic" {
			tmpl = m
		}
	}
	out := make([][]byte, n)
	for i := range out {
		out[i] = clone(tmpl, 443, [4]byte{198, 51, byte(i >> 8), byte(i)}, uint16(10000+i%50000), uint64(i+1))
	}
	return out
}

func newFake(t testing.TB, cfg Config, dumpers ...*fakeDumper) *Sampler {
	t.Helper()
	i := 0
	if len(cfg.Namespaces) == 0 && len(dumpers) > 1 {
		for range dumpers {
			cfg.Namespaces = append(cfg.Namespaces, "ns"+string(rune('a'+len(cfg.Namespaces))))
		}
	}
	s, err := newSampler(cfg, func(string) (dumper, error) { d := dumpers[i]; i++; return d, nil })
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var meta = record.Meta{Pop: "nrt1", Host: "edge-1", Kernel: "6.18.44", Arm: "bbr", RolloutID: "r-1", TsMs: 1, SampleRate: 0.5}

func ids(recs []record.TCPSample) map[string]bool {
	m := map[string]bool{}
	for _, r := range recs {
		m[r.SockID] = true
	}
	return m
}

func TestTickFixture(t *testing.T) {
	msgs := fixture(t)
	s := newFake(t, Config{Salt: "s", BootID: "b"}, &fakeDumper{msgs: msgs})
	now := time.UnixMilli(1763769600123)
	recs, st, err := s.Tick(context.Background(), meta, now)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sockets != 12 || st.Sampled != 12 || len(recs) != 12 || st.SkippedRate+st.SkippedCap+st.SkippedFilter+st.DecodeErrors != 0 {
		t.Fatalf("stats %+v", st)
	}
	key := anon.SockKey{Salt: "s", BootID: "b"}
	want := map[string]bool{}
	for _, m := range msgs {
		sock, _ := netlink.Decode(m)
		if sock.State == netlink.StateEstablished {
			want[key.SockID(sock.Local, sock.Peer)] = true
		}
	}
	for _, r := range recs {
		if !want[r.SockID] {
			t.Errorf("unexpected sock_id %s", r.SockID)
		}
		if r.Schema != record.SchemaTCPSample || r.TsMs != now.UnixMilli() || r.SampleRate != 1 || r.Pop != "nrt1" || r.Arm != "bbr" || r.State != "ESTAB" {
			t.Errorf("host fields: %+v", r)
		}
	}
	// All states: the listeners are seen too, and have no peer: still records.
	s = newFake(t, Config{Salt: "s", States: []string{"all"}}, &fakeDumper{msgs: msgs})
	if recs, _, _ := s.Tick(context.Background(), meta, now); len(recs) != 18 {
		t.Errorf("all states: %d records, want 18", len(recs))
	}
}

func TestFilters(t *testing.T) {
	msgs := fixture(t)
	ctx := context.Background()
	// Local ports: the receivers listen on 19001-19003 (IPv4) and 19011-19013 (IPv6).
	s := newFake(t, Config{LocalPorts: []uint16{19002, 19012}}, &fakeDumper{msgs: msgs})
	recs, _, _ := s.Tick(ctx, meta, time.Now())
	if len(recs) != 2 {
		t.Errorf("ports: %d records", len(recs))
	}
	for _, r := range recs {
		if r.LocalPort != 19002 && r.LocalPort != 19012 {
			t.Errorf("port %d passed", r.LocalPort)
		}
	}
	// Bulk: only the senders acked more than 1 MB; the receivers acked 5 bytes.
	s = newFake(t, Config{MinBytesAcked: 1 << 20}, &fakeDumper{msgs: msgs})
	recs, st, _ := s.Tick(ctx, meta, time.Now())
	if len(recs) != 6 || st.SkippedFilter != 6 {
		t.Errorf("bulk: %d records, stats %+v", len(recs), st)
	}
	for _, r := range recs {
		if *r.BytesAcked < 1<<20 {
			t.Errorf("bytes_acked %d passed", *r.BytesAcked)
		}
	}
	if _, err := New(Config{States: []string{"ESTABLISHED-ISH"}}); err == nil {
		t.Error("an unknown state must be refused")
	}
	if _, err := New(Config{SampleRate: 1.5}); err == nil {
		t.Error("a rate above 1 must be refused")
	}
}

func TestSampleRateIsStableAndUniform(t *testing.T) {
	pop := population(t, 20000)
	ctx := context.Background()
	s := newFake(t, Config{Salt: "salt-1", SampleRate: 0.1, MaxPerTick: -1}, &fakeDumper{msgs: pop})
	first, st, _ := s.Tick(ctx, meta, time.Now())
	// Binomial(20000, 0.1): sd ≈ 42; allow 5 sd.
	if n := len(first); math.Abs(float64(n)-2000) > 210 {
		t.Errorf("sampled %d of 20000 at rate 0.1", n)
	}
	if st.SkippedRate+st.Sampled != 20000 || st.EffectiveRate != 0.1 {
		t.Errorf("stats %+v", st)
	}
	for _, r := range first {
		if r.SampleRate != 0.1 {
			t.Fatalf("sample_rate %v", r.SampleRate)
		}
	}
	second, _, _ := s.Tick(ctx, meta, time.Now())
	a, b := ids(first), ids(second)
	if len(a) != len(b) {
		t.Errorf("tick 2 sampled %d, tick 1 %d", len(b), len(a))
	}
	for id := range a {
		if !b[id] {
			t.Fatalf("%s sampled on tick 1 but not on tick 2", id)
		}
	}
	// Another salt chooses another subset.
	other := newFake(t, Config{Salt: "salt-2", SampleRate: 0.1, MaxPerTick: -1}, &fakeDumper{msgs: pop})
	recs, _, _ := other.Tick(ctx, meta, time.Now())
	common := 0
	for _, r := range recs {
		if a[r.SockID] {
			common++
		}
	}
	if common > 400 { // independent: ≈ 2000·0.1 = 200
		t.Errorf("salts 1 and 2 share %d of ~2000 sampled sockets", common)
	}
}

func TestCapIsBottomK(t *testing.T) {
	pop := population(t, 5000)
	ctx := context.Background()
	for _, bulk := range []uint64{0, 1} { // without and with the decode-first path
		s := newFake(t, Config{Salt: "x", MaxPerTick: 100, MinBytesAcked: bulk}, &fakeDumper{msgs: pop})
		recs, st, _ := s.Tick(ctx, meta, time.Now())
		if len(recs) != 100 || st.SkippedCap != 4900 {
			t.Fatalf("bulk=%d: %d records, stats %+v", bulk, len(recs), st)
		}
		// The records are the 100 smallest hashes, and sample_rate is the 101st.
		var hs []uint64
		for _, m := range pop {
			h, _ := netlink.DecodeHeader(m)
			hs = append(hs, tupleHash(seedHash("x"), h.Local, h.Peer))
		}
		sort.Slice(hs, func(i, j int) bool { return hs[i] < hs[j] })
		wantRate := float64(hs[100]) / (1 << 64)
		if st.EffectiveRate != wantRate || float64(recs[0].SampleRate) != wantRate {
			t.Errorf("rate %v (record %v), want %v", st.EffectiveRate, recs[0].SampleRate, wantRate)
		}
		if r := st.EffectiveRate * 5000; r < 60 || r > 150 {
			t.Errorf("effective rate %v × 5000 = %v, want ≈ 100", st.EffectiveRate, r)
		}
		again, _, _ := s.Tick(ctx, meta, time.Now())
		a, b := ids(recs), ids(again)
		for id := range a {
			if !b[id] {
				t.Fatalf("capped sample changed between ticks")
			}
		}
	}
}

func TestClosedConnections(t *testing.T) {
	pop := population(t, 3)
	d := &fakeDumper{msgs: pop}
	s := newFake(t, Config{Salt: "x"}, d)
	ctx := context.Background()
	recs, _, _ := s.Tick(ctx, meta, time.UnixMilli(1000))
	if len(recs) != 3 {
		t.Fatalf("%d records", len(recs))
	}
	d.msgs = pop[:2] // the third connection closes
	recs, st, _ := s.Tick(ctx, meta, time.UnixMilli(2000))
	if len(recs) != 2 || st.Closed != 1 || st.Tracked != 2 {
		t.Fatalf("%d records, stats %+v", len(recs), st)
	}
	closed, dropped := s.Closed()
	if len(closed) != 1 || dropped != 0 || closed[0].TsMs != 1000 {
		t.Fatalf("closed %+v dropped %d", closed, dropped)
	}
	gone := closed[0].SockID
	for _, r := range recs {
		if r.SockID == gone {
			t.Error("closed connection emitted")
		}
	}
	if c, _ := s.Closed(); len(c) != 0 {
		t.Error("Closed must forget what it returned")
	}
	// The same 4-tuple comes back as a new socket (new cookie): a new connection, and the
	// old one is not reported twice.
	h, _ := netlink.DecodeHeader(pop[2])
	d.msgs = append(pop[:2:2], clone(pop[2], h.Local.Port(), h.Peer.Addr().As4(), h.Peer.Port(), 999))
	recs, st, _ = s.Tick(ctx, meta, time.UnixMilli(3000))
	if len(recs) != 3 || st.Closed != 0 || st.Tracked != 3 {
		t.Fatalf("reused tuple: %d records, stats %+v", len(recs), st)
	}
	// A failed dump proves nothing: nothing is closed.
	d.err = errors.New("boom")
	if _, st, err := s.Tick(ctx, meta, time.UnixMilli(4000)); err == nil || st.Closed != 0 || st.NamespaceErrors != 1 {
		t.Errorf("failed dump: err %v, stats %+v", err, st)
	}
}

func TestTruncatedDumpKeepsConnections(t *testing.T) {
	pop := population(t, 2000)
	d := &fakeDumper{msgs: pop}
	s := newFake(t, Config{Salt: "x", MaxTickTime: 20 * time.Millisecond}, d)
	ctx := context.Background()
	if _, st, _ := s.Tick(ctx, meta, time.Now()); st.Truncated || st.Sampled != 2000 {
		t.Fatalf("first tick: %+v", st)
	}
	d.delay = 50 * time.Microsecond // 2000 messages: ≥ 100 ms > 20 ms
	recs, st, err := s.Tick(ctx, meta, time.Now())
	if err != nil || !st.Truncated || st.Closed != 0 || st.Tracked != 2000 || len(recs) >= 2000 {
		t.Fatalf("truncated tick: %d records, err %v, stats %+v", len(recs), err, st)
	}
}

func TestDecodeErrorsAreCounted(t *testing.T) {
	msgs := fixture(t)
	bad := append([]byte(nil), msgs[0]...)
	bad[16] = 99 // unknown family
	short := []byte{20, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}
	d := &fakeDumper{msgs: append([][]byte{bad, short}, msgs...)}
	s := newFake(t, Config{}, d)
	recs, st, err := s.Tick(context.Background(), meta, time.Now())
	if err != nil || st.DecodeErrors != 2 || len(recs) != 12 {
		t.Errorf("%d records, err %v, stats %+v", len(recs), err, st)
	}
}

func TestNamespaces(t *testing.T) {
	pop := population(t, 10)
	ok := &fakeDumper{msgs: pop}
	broken := &fakeDumper{err: errors.New("netlink dump of IPv4: no such namespace")}
	s := newFake(t, Config{Namespaces: []string{"a", "b"}}, ok, broken)
	recs, st, err := s.Tick(context.Background(), meta, time.Now())
	if err == nil || len(recs) != 10 || st.NamespaceErrors != 1 {
		t.Errorf("%d records, err %v, stats %+v", len(recs), err, st)
	}
	// The same sockets seen in two namespaces are two connections.
	s = newFake(t, Config{Namespaces: []string{"a", "b"}}, &fakeDumper{msgs: pop}, &fakeDumper{msgs: pop})
	if _, st, _ := s.Tick(context.Background(), meta, time.Now()); st.Tracked != 20 {
		t.Errorf("tracked %d, want 20", st.Tracked)
	}
}

func TestRun(t *testing.T) {
	s := newFake(t, Config{Interval: time.Millisecond}, &fakeDumper{msgs: population(t, 5)})
	arms := []string{"control", "bbr"}
	calls, ticks := 0, 0
	s.cfg.OnTick = func(TickStats, error) { ticks++ }
	var got []string
	err := s.Run(context.Background(), 2, func() record.Meta {
		m := meta
		m.Arm = arms[calls]
		calls++
		return m
	}, func(recs []record.TCPSample) {
		got = append(got, recs[0].Arm)
	})
	if err != nil || len(got) != 2 || got[0] != "control" || got[1] != "bbr" || ticks != 2 {
		t.Errorf("err %v, arms per tick %v, %d OnTick calls", err, got, ticks)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx, 0, nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Run: %v", err)
	}
}

func TestTupleHashUnmaps(t *testing.T) {
	l4 := netip.MustParseAddrPort("192.0.2.1:443")
	p4 := netip.MustParseAddrPort("198.51.100.7:50000")
	l6 := netip.AddrPortFrom(netip.AddrFrom16(l4.Addr().As16()), 443)
	p6 := netip.AddrPortFrom(netip.AddrFrom16(p4.Addr().As16()), 50000)
	if tupleHash(1, l4, p4) != tupleHash(1, l6, p6) {
		t.Error("an IPv4-mapped socket must hash like IPv4 (as sock_id does)")
	}
	if tupleHash(1, l4, p4) == tupleHash(2, l4, p4) {
		t.Error("the salt must change the hash")
	}
}

// BenchmarkTick: one tick over 10,000 recorded sockets replayed from memory (decode,
// sampling hash, records; no kernel). Steady state: sock_id is remembered from the first
// tick; BenchmarkTickUntracked computes it every time.
func BenchmarkTick(b *testing.B) { benchTick(b, 0) }

func BenchmarkTickUntracked(b *testing.B) { benchTick(b, -1) }

func benchTick(b *testing.B, keepClosed int) {
	pop := population(b, 10000)
	s := newFake(b, Config{Salt: "x", MaxPerTick: -1, KeepClosed: keepClosed}, &fakeDumper{msgs: pop})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if recs, _, _ := s.Tick(ctx, meta, time.Now()); len(recs) != 10000 {
			b.Fatal(len(recs))
		}
	}
}
