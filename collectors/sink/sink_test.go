package sink

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ccab-dev/ccab/collectors/metrics"
)

// fakeKafka is a broker and client in one: while up it acknowledges records at once (on
// another goroutine, as franz-go does); while down it holds them, like an idempotent client
// retrying, and delivers them in order when it comes back.
type fakeKafka struct {
	mu        sync.Mutex
	up        bool
	held      []heldRec
	delivered []*kgo.Record
	closed    bool
}

type heldRec struct {
	r *kgo.Record
	p func(*kgo.Record, error)
}

func (f *fakeKafka) TryProduce(_ context.Context, r *kgo.Record, p func(*kgo.Record, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = append(f.held, heldRec{r, p})
	if f.up {
		f.deliverLocked()
	}
}

func (f *fakeKafka) deliverLocked() {
	held := f.held
	f.held = nil
	for _, h := range held {
		// a copy, as a broker keeps one: the sink reuses a record's memory once its promise ran
		c := *h.r
		c.Value = append([]byte(nil), h.r.Value...)
		c.Headers = nil
		for _, hd := range h.r.Headers {
			c.Headers = append(c.Headers, kgo.RecordHeader{Key: hd.Key, Value: append([]byte(nil), hd.Value...)})
		}
		f.delivered = append(f.delivered, &c)
	}
	go func() {
		for _, h := range held {
			h.p(h.r, nil)
		}
	}()
}

func (f *fakeKafka) setUp(up bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.up = up
	if up {
		f.deliverLocked()
	}
}

func (f *fakeKafka) Flush(ctx context.Context) error {
	for {
		f.mu.Lock()
		n := len(f.held)
		f.mu.Unlock()
		if n == 0 {
			time.Sleep(20 * time.Millisecond) // let the promises run
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (f *fakeKafka) AbortBufferedRecords(context.Context) error {
	f.mu.Lock()
	held := f.held
	f.held = nil
	f.mu.Unlock()
	for _, h := range held {
		h.p(h.r, kgo.ErrAborting)
	}
	return nil
}

func (f *fakeKafka) UnsafeAbortBufferedRecords() { _ = f.AbortBufferedRecords(context.Background()) }
func (f *fakeKafka) Close()                      { f.mu.Lock(); f.closed = true; f.mu.Unlock() }

func (f *fakeKafka) positions() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int64
	for _, r := range f.delivered {
		for _, h := range r.Headers {
			if h.Key == HeaderPos {
				p, _ := strconv.ParseInt(string(h.Value), 10, 64)
				out = append(out, p)
			}
		}
	}
	return out
}

func testConfig(dir string) Config {
	return Config{Key: "edge-1", QueueMaxRecords: 1000, MaxInflight: 50, StallTimeout: 200 * time.Millisecond,
		RetryBackoff: 50 * time.Millisecond, ShutdownTimeout: 300 * time.Millisecond, FsyncInterval: 20 * time.Millisecond,
		StateInterval: 20 * time.Millisecond, ReplayChunk: 25,
		Spool:            SpoolConfig{Dir: dir, SegmentBytes: 4096, MaxBytes: 1 << 20, Full: FullShed},
		RecoveryLookback: time.Second, RecoveryTimeout: time.Second}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type doneCount struct {
	mu sync.Mutex
	n  int
}

func (d *doneCount) fn() func() { return func() { d.mu.Lock(); d.n++; d.mu.Unlock() } }
func (d *doneCount) get() int   { d.mu.Lock(); defer d.mu.Unlock(); return d.n }

func submitRange(t *testing.T, s *Sink, from, to int, dc *doneCount) {
	t.Helper()
	for i := from; i < to; i++ {
		m := *msg(i)
		if err := s.Submit(context.Background(), Batch{Msgs: []Message{m}, Done: dc.fn()}); err != nil {
			t.Fatal(err)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func checkExactlyOnceInOrder(t *testing.T, got []int64, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("delivered %d records, want %d", len(got), n)
	}
	for i, p := range got {
		if p != int64(i) {
			t.Fatalf("record %d has position %d: not in order (or duplicated)", i, p)
		}
	}
}

func TestSinkSpoolsDuringOutageAndReplaysInOrderExactlyOnce(t *testing.T) {
	k := &fakeKafka{up: true}
	m := metrics.New()
	s, err := New(testConfig(t.TempDir()), k, nil, m, quiet())
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	var dc doneCount
	submitRange(t, s, 0, 100, &dc)
	waitFor(t, "live records acknowledged", func() bool { return dc.get() == 100 })
	k.setUp(false)
	submitRange(t, s, 100, 400, &dc) // up to MaxInflight held by the client, the rest spooled
	spooled := func() float64 { return testutil.ToFloat64(m.RecordsSpooled.WithLabelValues("ccab.http.v1")) }
	waitFor(t, "records spooled during the outage", func() bool { return spooled() >= 250 })
	if v := testutil.ToFloat64(m.SpoolMode); v != 1 {
		t.Fatalf("spool mode %v during the outage", v)
	}
	if n := len(k.positions()); n > 100 {
		t.Fatalf("%d records delivered by a broker that is down", n)
	}
	k.setUp(true)
	submitRange(t, s, 400, 450, &dc) // arrives while replaying: must go after the spool
	waitFor(t, "everything delivered", func() bool { return len(k.positions()) == 450 && dc.get() == 450 })
	waitFor(t, "back to live", func() bool { return testutil.ToFloat64(m.SpoolMode) == 0 })
	s.Close()
	checkExactlyOnceInOrder(t, k.positions(), 450)
	replayed := testutil.ToFloat64(m.RecordsReplayed.WithLabelValues("ccab.http.v1"))
	produced := testutil.ToFloat64(m.RecordsProduced.WithLabelValues("ccab.http.v1"))
	if spooled() == 0 || spooled() != replayed || produced+replayed != 450 {
		t.Fatalf("spooled %v, replayed %v, produced %v", spooled(), replayed, produced)
	}
}

func TestSinkStallSwitchesToSpoolBelowMaxInflight(t *testing.T) {
	k := &fakeKafka{up: false}
	m := metrics.New()
	s, err := New(testConfig(t.TempDir()), k, nil, m, quiet())
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	var dc doneCount
	submitRange(t, s, 0, 5, &dc) // below MaxInflight: handed to the client, which stalls
	time.Sleep(400 * time.Millisecond)
	submitRange(t, s, 5, 10, &dc)
	waitFor(t, "records after the stall spooled", func() bool { return dc.get() == 5 })
	if v := testutil.ToFloat64(m.SpoolEntries.WithLabelValues("stall")); v != 1 {
		t.Fatalf("stall entries %v", v)
	}
	k.setUp(true)
	waitFor(t, "delivered", func() bool { return len(k.positions()) == 10 })
	s.Close()
	checkExactlyOnceInOrder(t, k.positions(), 10)
}

func TestSinkShutdownDuringOutageSpoolsWhatTheClientHeld(t *testing.T) {
	dir := t.TempDir()
	k := &fakeKafka{up: false}
	s, err := New(testConfig(dir), k, nil, metrics.New(), quiet())
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	var dc doneCount
	submitRange(t, s, 0, 120, &dc)
	time.Sleep(100 * time.Millisecond)
	s.Close()
	if dc.get() != 120 {
		t.Fatalf("Done called for %d of 120 batches at shutdown", dc.get())
	}
	if len(k.positions()) != 0 {
		t.Fatal("records delivered by a broker that was down")
	}
	// next run: Kafka is back; the spool replays everything once, in order
	k2 := &fakeKafka{up: true}
	s2, err := New(testConfig(dir), k2, nil, metrics.New(), quiet())
	if err != nil {
		t.Fatal(err)
	}
	s2.Start()
	waitFor(t, "replayed", func() bool { return len(k2.positions()) == 120 })
	s2.Close()
	checkExactlyOnceInOrder(t, k2.positions(), 120)
}

func TestSinkAfterUncleanStopSkipsWhatKafkaOrTheSpoolHas(t *testing.T) {
	dir := t.TempDir()
	// A previous run spooled 0..29 and then was killed (state says unclean).
	sp, err := OpenSpool(testConfig(dir).Spool, metrics.New())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		sp.Append([]*Message{msg(i)}, "edge-1")
	}
	sp.Sync()
	sp.SaveState(false, 1000)
	sp.Close()
	// Kafka already has 0..9 (replayed before the kill, position not saved) and 30..39
	// (produced live; the source's checkpoint did not record them).
	have := NewPosSet()
	for _, i := range append(seq(0, 10), seq(30, 40)...) {
		have.Add("f:1:2:0", i)
	}
	var since int64
	rb := func(_ context.Context, s int64) (*PosSet, error) { since = s; return have, nil }
	k := &fakeKafka{up: true}
	m := metrics.New()
	cfg := testConfig(dir)
	cfg.SourceUnclean, cfg.SourceSafeMs = true, 5000
	s, err := New(cfg, k, rb, m, quiet())
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	var dc doneCount
	submitRange(t, s, 0, 60, &dc) // the source re-reads everything from its checkpoint
	waitFor(t, "all done", func() bool { return dc.get() == 60 })
	waitFor(t, "back to live", func() bool { return testutil.ToFloat64(m.SpoolMode) == 0 })
	s.Close()
	if since != 1000-1000 {
		t.Fatalf("read back since %d, want min(safe times) - lookback = 0", since)
	}
	got := k.positions()
	want := append(seq(10, 30), seq(40, 60)...)
	if !equal(got, want) {
		t.Fatalf("delivered %v\nwant %v", got, want)
	}
	if d := testutil.ToFloat64(m.RecordsDuplicate.WithLabelValues("kafka")) + testutil.ToFloat64(m.RecordsDuplicate.WithLabelValues("spool")); d == 0 {
		t.Fatal("duplicates not counted")
	}
}

func TestSinkOfferShedsWhenQueueIsFull(t *testing.T) {
	k := &fakeKafka{up: true}
	m := metrics.New()
	cfg := testConfig(t.TempDir())
	cfg.QueueMaxRecords = 3
	s, err := New(cfg, k, nil, m, quiet())
	if err != nil {
		t.Fatal(err)
	}
	// not started: nothing drains the queue
	b := Batch{Msgs: []Message{*msg(1), *msg(2)}}
	if err := s.Offer(b); err != nil {
		t.Fatal(err)
	}
	if err := s.Offer(b); err != ErrQueueFull {
		t.Fatalf("Offer on a full queue: %v", err)
	}
	if v := testutil.ToFloat64(m.RecordsDropped.WithLabelValues(metrics.DropQueueFull)); v != 2 {
		t.Fatalf("queue_full drops %v", v)
	}
	s.Start()
	s.Close()
}

func TestSinkBlockModeHoldsTheQueueWhenSpoolIsFull(t *testing.T) {
	k := &fakeKafka{up: false}
	m := metrics.New()
	cfg := testConfig(t.TempDir())
	cfg.Spool.MaxBytes = 2 * 4096
	cfg.Spool.Full = FullBlock
	cfg.QueueMaxRecords = 10
	cfg.MaxInflight = 5
	s, err := New(cfg, k, nil, m, quiet())
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	var dc doneCount
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n := 0
	for ; n < 500; n++ {
		if err := s.Submit(ctx, Batch{Msgs: []Message{*msg(n)}, Done: dc.fn()}); err != nil {
			break // blocked until the deadline: the spool is full and nothing was shed
		}
	}
	if n == 500 {
		t.Fatal("Submit never blocked with a full spool in block mode")
	}
	if v := testutil.ToFloat64(m.RecordsDropped.WithLabelValues(metrics.DropSpoolFull)); v != 0 {
		t.Fatalf("block mode shed %v records", v)
	}
	k.setUp(true)
	waitFor(t, "all delivered after Kafka came back", func() bool { return len(k.positions()) == n })
	s.Close()
	checkExactlyOnceInOrder(t, k.positions(), n)
}

func TestPosSet(t *testing.T) {
	s := NewPosSet()
	for _, p := range []int64{5, 1, 9} {
		s.Add("a", p)
	}
	for _, c := range []struct {
		stream string
		pos    int64
		want   bool
	}{{"a", 1, true}, {"a", 9, true}, {"a", 2, false}, {"b", 1, false}} {
		if got := s.Has(c.stream, c.pos); got != c.want {
			t.Errorf("Has(%s,%d) = %v", c.stream, c.pos, got)
		}
	}
	var nilSet *PosSet
	if nilSet.Has("a", 1) {
		t.Error("nil set has something")
	}
	_ = fmt.Sprint(s.Len())
}

// A process that dies without Close (SIGKILL) is seen by the next start: unclean_stops_total
// counts it, kept across restarts in run.json, and a warning names the bound of what was lost.
// A clean stop is not counted; a shutdown that had to abandon records in flight (spool state
// unclean, records spooled) is not a died process either.
func TestSinkCountsProcessesThatDiedWithoutShuttingDown(t *testing.T) {
	dir := t.TempDir()
	// New writes the mark and the warning; a sink "killed" here is never started (its
	// loop would write to logs while the test reads them)
	open := func() (*Sink, *metrics.Metrics, *strings.Builder) {
		t.Helper()
		m := metrics.New()
		var logs strings.Builder
		s, err := New(testConfig(dir), &fakeKafka{up: true}, nil, m, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return s, m, &logs
	}
	const warning = "the previous collector process died without shutting down"

	s, m, logs := open() // first start: no mark
	if v := testutil.ToFloat64(m.UncleanStops); v != 0 || strings.Contains(logs.String(), warning) {
		t.Fatalf("first start: unclean_stops_total %v, log %q", v, logs)
	}
	s.Start()
	s.Close()

	s, m, logs = open() // after a clean stop
	if v := testutil.ToFloat64(m.UncleanStops); v != 0 || strings.Contains(logs.String(), warning) {
		t.Fatalf("after a clean stop: unclean_stops_total %v, log %q", v, logs)
	}
	// killed: no Close (the mark says running)
	s2, m, logs := open()
	if v := testutil.ToFloat64(m.UncleanStops); v != 1 {
		t.Fatalf("after a kill: unclean_stops_total %v, want 1", v)
	}
	if l := logs.String(); !strings.Contains(l, warning) || !strings.Contains(l, "lost_records_at_most=1050") ||
		!strings.Contains(l, "unclean_stops_total=1") {
		t.Fatalf("after a kill the warning names the bound (queue 1000 + in flight 50): %q", l)
	}
	_ = s
	// killed again: the count goes on across processes (a counter that only grows)
	_, m, _ = open()
	if v := testutil.ToFloat64(m.UncleanStops); v != 2 {
		t.Fatalf("after a second kill: unclean_stops_total %v, want 2", v)
	}
	_ = s2
	mk, err := os.ReadFile(filepath.Join(dir, runMarkFile))
	if err != nil || !strings.Contains(string(mk), `"running":true`) || !strings.Contains(string(mk), `"unclean_stops":2`) {
		t.Fatalf("run mark %s (%v)", mk, err)
	}
}

// A torn run mark (a crash while writing it) counts as an unclean stop rather than failing
// the start.
func TestRunMarkTornCountsAsUnclean(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, runMarkFile), []byte(`{"running":fal`), 0o640); err != nil {
		t.Fatal(err)
	}
	_, unclean, cur, err := startRun(dir, 7, 1000)
	if err != nil || !unclean || cur.UncleanStops != 1 || !cur.Running || cur.Pid != 7 {
		t.Fatalf("torn mark: unclean %v, %+v, %v", unclean, cur, err)
	}
	if err := stopRun(dir, cur, 2000); err != nil {
		t.Fatal(err)
	}
	prev, unclean, cur, err := startRun(dir, 8, 3000)
	if err != nil || unclean || prev.StoppedMs != 2000 || cur.UncleanStops != 1 {
		t.Fatalf("after a stop: unclean %v, prev %+v, cur %+v, %v", unclean, prev, cur, err)
	}
}
