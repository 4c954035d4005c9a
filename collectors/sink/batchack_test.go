package sink

import (
	"context"
	"io"
	"math/rand"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ccab-dev/ccab/collectors/metrics"
)

// scatterKafka acknowledges records on several goroutines at once, in shuffled order, as
// franz-go does for records of different partitions and brokers; it fails the first
// attempt of every failEvery-th record with a retriable error (the record was not written).
type scatterKafka struct {
	mu        sync.Mutex
	failEvery int64
	tried     map[string]bool // topic/pos attempted once
	delivered map[string]int  // topic/pos -> times written
	pending   sync.WaitGroup
}

func (f *scatterKafka) TryProduce(_ context.Context, r *kgo.Record, p func(*kgo.Record, error)) {
	pos := posOf(r)
	k := r.Topic + "/" + strconv.FormatInt(pos, 10)
	f.mu.Lock()
	var err error
	if f.failEvery > 0 && pos%f.failEvery == 0 && !f.tried[k] {
		err = kgo.ErrRecordTimeout
	} else {
		f.delivered[k]++
	}
	f.tried[k] = true
	f.mu.Unlock()
	f.pending.Add(1)
	go func() { // one goroutine per record: promises race each other
		defer f.pending.Done()
		time.Sleep(time.Duration(rand.Intn(200)) * time.Microsecond)
		p(r, err)
	}()
}

func posOf(r *kgo.Record) int64 {
	for _, h := range r.Headers {
		if h.Key == HeaderPos {
			v, _ := strconv.ParseInt(string(h.Value), 10, 64)
			return v
		}
	}
	return -1
}

func (f *scatterKafka) Flush(context.Context) error                { f.pending.Wait(); return nil }
func (f *scatterKafka) AbortBufferedRecords(context.Context) error { return nil }
func (f *scatterKafka) UnsafeAbortBufferedRecords()                {}
func (f *scatterKafka) Close()                                     {}

// Batches of many records, one of them with two topics, acknowledged concurrently and out
// of order, some records failing once: every batch's Done runs exactly once, after all its
// records are written or spooled; every record is written exactly once; the per-topic
// counters add up.
func TestSinkManyRecordBatchesAckedConcurrently(t *testing.T) {
	k := &scatterKafka{failEvery: 397, tried: map[string]bool{}, delivered: map[string]int{}}
	m := metrics.New()
	cfg := testConfig(t.TempDir())
	cfg.MaxInflight, cfg.QueueMaxRecords, cfg.StallTimeout = 5000, 20000, 5*time.Second
	cfg.ReplayChunk, cfg.Spool.SegmentBytes, cfg.Spool.MaxBytes = 1000, 1<<20, 64<<20
	s, err := New(cfg, k, nil, m, quiet())
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	const batches, per = 40, 100
	var mu sync.Mutex
	dones := make([]int, batches)
	want := map[string]int{}
	for b := 0; b < batches; b++ {
		msgs := make([]Message, per)
		for i := range msgs {
			m := *msg(b*per + i)
			if b == 7 && i%2 == 1 {
				m.Topic = "ccab.tcp.v1" // a batch of two topics: counted record by record
			}
			want[m.Topic]++
			msgs[i] = m
		}
		b := b
		if err := s.Submit(context.Background(), Batch{Msgs: msgs, Done: func() {
			mu.Lock()
			dones[b]++
			mu.Unlock()
		}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every batch done", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range dones {
			if d == 0 {
				return false
			}
		}
		return true
	})
	waitFor(t, "back to live after replaying the failed records", func() bool { return testutil.ToFloat64(m.SpoolMode) == 0 })
	s.Close()
	for b, d := range dones {
		if d != 1 {
			t.Errorf("batch %d: Done called %d times", b, d)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for kk, n := range k.delivered {
		if n != 1 {
			t.Errorf("record %s written %d times", kk, n)
		}
	}
	if len(k.delivered) != batches*per {
		t.Errorf("%d distinct records written, want %d", len(k.delivered), batches*per)
	}
	for topic, n := range want {
		got := testutil.ToFloat64(m.RecordsProduced.WithLabelValues(topic)) + testutil.ToFloat64(m.RecordsReplayed.WithLabelValues(topic))
		if int(got) != n {
			t.Errorf("topic %s: produced + replayed %v, want %d", topic, got, n)
		}
		if r := testutil.ToFloat64(m.RecordsReceived.WithLabelValues(topic)); int(r) != n {
			t.Errorf("topic %s: received %v, want %d", topic, r, n)
		}
	}
	if e := testutil.ToFloat64(m.ProduceErrors.WithLabelValues("timeout")); e == 0 {
		t.Error("no produce error seen: the failing records were not exercised")
	}
}

// benchSink pushes b.N records through a live sink in batches of 1024 (the tailer's
// default) and reports the sink's cost per record.
func benchSink(b *testing.B, p Producer) {
	cfg := testConfig(b.TempDir())
	cfg.MaxInflight, cfg.QueueMaxRecords, cfg.StallTimeout = 20000, 100000, time.Minute
	s, err := New(cfg, p, nil, metrics.New(), quiet())
	if err != nil {
		b.Fatal(err)
	}
	s.Start()
	const per = 1024
	msgs := make([][]Message, 8) // 8 batches in turn, each reused once its Done ran
	free := make(chan int, len(msgs))
	for i := range msgs {
		msgs[i] = make([]Message, per)
		for j := range msgs[i] {
			msgs[i][j] = *msg(i*per + j)
		}
		free <- i
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += per {
		i := <-free
		batch := msgs[i]
		if left := b.N - n; left < per {
			batch = batch[:left]
		}
		if err := s.Submit(context.Background(), Batch{Msgs: batch, Done: func() { free <- i }}); err != nil {
			b.Fatal(err)
		}
	}
	for range msgs {
		<-free
	}
	b.StopTimer()
	s.Close()
}

// BenchmarkSinkDiscard: `--output discard` (the nginx bench's run path): the producer
// writes to io.Discard and calls the promise at once.
func BenchmarkSinkDiscard(b *testing.B) { benchSink(b, NewWriterProducer(io.Discard)) }

// asyncAcks acknowledges on its own goroutine, in produce order, as franz-go's promise
// goroutine does.
type asyncAcks struct {
	mu   sync.Mutex
	recs []*kgo.Record
	fns  []func(*kgo.Record, error)
	wake chan struct{}
	stop chan struct{}
	idle sync.WaitGroup
}

func newAsyncAcks() *asyncAcks {
	a := &asyncAcks{wake: make(chan struct{}, 1), stop: make(chan struct{})}
	go a.run()
	return a
}

func (a *asyncAcks) run() {
	var recs []*kgo.Record
	var fns []func(*kgo.Record, error)
	for {
		select {
		case <-a.stop:
			return
		case <-a.wake:
		}
		a.mu.Lock()
		recs, a.recs = a.recs, recs[:0]
		fns, a.fns = a.fns, fns[:0]
		a.mu.Unlock()
		for i, r := range recs {
			fns[i](r, nil)
			a.idle.Done()
		}
	}
}

func (a *asyncAcks) TryProduce(_ context.Context, r *kgo.Record, p func(*kgo.Record, error)) {
	a.idle.Add(1)
	a.mu.Lock()
	a.recs = append(a.recs, r)
	a.fns = append(a.fns, p)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *asyncAcks) Flush(context.Context) error                { a.idle.Wait(); return nil }
func (a *asyncAcks) AbortBufferedRecords(context.Context) error { return nil }
func (a *asyncAcks) UnsafeAbortBufferedRecords()                {}
func (a *asyncAcks) Close()                                     { close(a.stop) }

// BenchmarkSinkAsyncAcks: acknowledgements from another goroutine (the Kafka client's
// shape, without its work).
func BenchmarkSinkAsyncAcks(b *testing.B) { benchSink(b, newAsyncAcks()) }
