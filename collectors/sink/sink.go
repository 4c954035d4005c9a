// Package sink delivers the collector's records to Kafka, with a disk spool for when Kafka
// cannot take them.
//
// Sources (the nginx tailer, the netlink sampler) hand Batches to a bounded in-memory
// queue. One goroutine owns everything after it:
//
//	queue ──► live: TryProduce to the idempotent franz-go client ──ack──► Done
//	      └─► spool (segments on disk) ──fsync──► Done ... replay ──ack──► commit
//
// The sink never waits on Kafka. It is "live" while Kafka keeps up; it switches to the spool
// when the client holds MaxInflight records, when no acknowledgement arrived for
// StallTimeout, or when a produce fails. From then on every new record goes to the tail of
// the spool, so order is kept: the records the client still holds are delivered first (it
// retries them without limit, and the idempotent producer drops the broker-side duplicates
// of those retries), then the spool is replayed from its head, and only when it is empty do
// records go to Kafka directly again. The spools and these modes (live, spool, recover) are
// the Buffer (buffer.go), tested alone; this loop reports events to it and asks it where a
// record goes.
//
// A record is in exactly one place at a time: in the client, or in the spool. franz-go fails
// a record of an idempotent producer only when it knows the record was not written, so a
// failed record can be spooled without making a duplicate.
//
// After an unclean stop (SIGKILL, or a shutdown that had to abandon records in flight) the
// sink first learns what already reached Kafka: every record carries its source position as
// headers (ccab-stream, ccab-pos), and the sink reads this host's records back from the time
// the last checkpoint says is safe. Records found there, or already in the spool, are not
// sent again. See README "Delivery guarantee".
package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ccab-dev/ccab/collectors/metrics"
)

// Kafka record headers carrying a record's source position.
const (
	HeaderStream = "ccab-stream"
	HeaderPos    = "ccab-pos"
)

// Producer is the part of *kgo.Client the sink uses (tests substitute a fake broker).
type Producer interface {
	TryProduce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	Flush(ctx context.Context) error
	AbortBufferedRecords(ctx context.Context) error
	UnsafeAbortBufferedRecords()
	Close()
}

// Readback returns the (stream, pos) of every record of this host that reached Kafka at or
// after sinceMs (record timestamps).
type Readback func(ctx context.Context, sinceMs int64) (*PosSet, error)

// Config configures a Sink.
type Config struct {
	Key             string        // Kafka key of every record: the host name
	QueueMaxRecords int           // bound of the queue between sources and sink
	MaxInflight     int           // records the Kafka client may hold before new ones are spooled
	StallTimeout    time.Duration // no acknowledgement for this long: spool new records
	RetryBackoff    time.Duration // wait after a failed produce or read-back before trying again
	ShutdownTimeout time.Duration // how long Close waits for Kafka before spooling what is left
	FsyncInterval   time.Duration // spooled records are fsynced (then Done) at least this often; 0: at once
	StateInterval   time.Duration // spool read position saved at most this often (and at Close)
	ReplayChunk     int           // records replayed per round
	Spool           SpoolConfig

	// Set when a source's own checkpoint says the last run stopped uncleanly (so records
	// after that checkpoint may be in Kafka) and from when.
	SourceUnclean bool
	SourceSafeMs  int64
	// Read back from this much before the safe time (clock skew, batching).
	RecoveryLookback time.Duration
	RecoveryTimeout  time.Duration
}

// Validate reports the first problem of c.
func (c Config) Validate() error {
	switch {
	case c.QueueMaxRecords <= 0:
		return fmt.Errorf("sink: queue size %d is not positive", c.QueueMaxRecords)
	case c.MaxInflight <= 0:
		return fmt.Errorf("sink: max in-flight records %d is not positive", c.MaxInflight)
	case c.StallTimeout <= 0 || c.RetryBackoff <= 0 || c.ShutdownTimeout <= 0:
		return errors.New("sink: stall timeout, retry backoff and shutdown timeout must be positive")
	case c.FsyncInterval < 0:
		return errors.New("sink: fsync interval is negative")
	case c.ReplayChunk <= 0:
		return fmt.Errorf("sink: replay chunk %d is not positive", c.ReplayChunk)
	}
	return c.Spool.Validate()
}

// Sink is the Kafka sink with its spool.
type Sink struct {
	cfg  Config
	p    Producer
	rb   Readback
	m    *metrics.Metrics
	log  *slog.Logger
	q    *queue
	buf  *Buffer[*pmsg] // the disk spools and the mode (live, spool, recover): buffer.go
	stop chan struct{}
	done chan struct{}

	// results from franz-go's promise goroutine: acknowledgements of live records of
	// single-topic batches are counted in their pbatch (acked) and the batch is listed in
	// ackedBatches when its count leaves 0; everything else (errors, replayed records, batches
	// of several topics) is one result each
	resMu        sync.Mutex
	results      []result
	ackedBatches []*pbatch
	resReady     chan struct{}
	spareResults []result  // the loop's emptied lists, handed back for reuse
	spareAcked   []*pbatch //

	// owned by the loop goroutine
	inflight     int // records handed to the client, not yet resolved
	lastProgress time.Time
	backoffUntil time.Time
	open         []*pbatch // batches with a record in Kafka's hands, in produce order
	chunk        *replayChunk
	stateDirty   bool
	lastState    time.Time
	unclean      bool // records may be both in Kafka and not accounted as such

	recovering bool
	recoverRes chan recoverResult
	recCancel  context.CancelFunc
	recSince   int64 // read back from here (recSafe minus the lookback)
	recSafe    int64
	inKafka    *PosSet
	inSpool    *PosSet

	safeMs atomic.Int64
	run    RunMark // this process's run mark (runmark.go), rewritten "stopped" at the end of shutdown

	// hot-path caches, owned by the loop goroutine
	keyBytes   []byte                 // cfg.Key: shared, read-only, by every record
	streamText string                 // the last stream header, and its bytes
	streamB    []byte                 //
	byTopic    map[string]*topicCount // the per-topic counters
	promiseFn  func(*kgo.Record, error)
	freeSlabs  [][]pmsg // slabs of completed batches, zeroed, for accept
}

// pmsgSlab is how many pmsgs accept allocates at once (below 32 KiB: a small-object size
// class rather than a large allocation).
const pmsgSlab = 64

// topicCount holds the counters of one topic, so that the loop does not look the label up
// for every record.
type topicCount struct {
	received, produced, replayed prometheus.Counter
}

func (s *Sink) topic(t string) *topicCount {
	if c, ok := s.byTopic[t]; ok {
		return c
	}
	c := &topicCount{received: s.m.RecordsReceived.WithLabelValues(t), produced: s.m.RecordsProduced.WithLabelValues(t),
		replayed: s.m.RecordsReplayed.WithLabelValues(t)}
	if s.byTopic == nil {
		s.byTopic = map[string]*topicCount{}
	}
	s.byTopic[t] = c
	return c
}

type pbatch struct {
	done      func()
	remaining int
	kafkaMs   int64       // produce time of its first record given to Kafka; 0 if none yet
	slabs     [][]pmsg    // its pmsgs, recycled (s.freeSlabs) once all of them are complete
	tc        *topicCount // the topic of every record of the batch; nil if it has several

	// Acknowledgements (no error) of its records counted by the promise and not yet seen by
	// the loop: written by the promise goroutine, swapped to 0 by the loop. Only for
	// batches with one topic (tc != nil).
	acked atomic.Int64
}

type pmsg struct {
	// The Kafka record of this message, in the same allocation (a pmsg is produced at
	// most once: a failed live record goes to the spool, and replay makes new pmsgs).
	// It is the FIRST field: the one promise function of the sink finds the pmsg from the
	// *kgo.Record it is called with (pmsgOf), so no closure is allocated per record.
	rec kgo.Record
	hdr [2]kgo.RecordHeader
	pos [20]byte

	msg    Message
	pb     *pbatch // live records
	chunk  *replayChunk
	idx    int
	kafkaT int64
}

// pmsgOf is the pmsg whose rec field r is. Only for records the sink produced from a pmsg
// (every record it hands to the Producer).
func pmsgOf(r *kgo.Record) *pmsg { return (*pmsg)(unsafe.Pointer(r)) }

// maxFreeSlabs bounds the recycled pmsg slabs kept for reuse (64 records each).
const maxFreeSlabs = 256

type replayChunk struct {
	rd        *ReplayRead
	entries   []Entry
	state     []byte // 0 pending, 1 done
	remaining int
	inflight  int
	retry     []int
	kafkaMs   int64
}

type result struct {
	pm  *pmsg
	err error
}

type recoverResult struct {
	set *PosSet
	err error
}

// New opens the spool and returns a sink; call Start, then Close.
func New(cfg Config, p Producer, rb Readback, m *metrics.Metrics, log *slog.Logger) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, p: p, rb: rb, m: m, log: log, q: newQueue(cfg.QueueMaxRecords),
		stop: make(chan struct{}), done: make(chan struct{}), resReady: make(chan struct{}, 1),
		recoverRes: make(chan recoverResult, 1)}
	buf, err := OpenBuffer(BufferConfig{Spool: cfg.Spool, Key: cfg.Key, FsyncInterval: cfg.FsyncInterval}, m, log, s.complete)
	if err != nil {
		return nil, err
	}
	s.buf = buf
	now := time.Now()
	s.safeMs.Store(now.UnixMilli())
	st := buf.Loaded()
	need := cfg.SourceUnclean || !st.Clean
	if need {
		since := now.UnixMilli()
		if cfg.SourceUnclean {
			since = min(since, cfg.SourceSafeMs)
		}
		if !st.Clean {
			since = min(since, st.SafeMs)
		}
		s.recSafe = since
		s.recSince = since - cfg.RecoveryLookback.Milliseconds()
		s.inSpool = NewPosSet()
		if err := buf.Scan(s.inSpool.Add); err != nil {
			log.Warn("spool scan after unclean stop failed; records in the unreadable part may be sent twice", "err", err)
		}
		buf.AwaitRecovery()
		log.Info("last run stopped uncleanly: reading back what reached Kafka before sending",
			"since_ms", s.recSince, "spooled_records", s.inSpool.Len())
	} else {
		m.RecoveryDone.Set(1)
	}
	// From here on this process may put records in Kafka that no state file accounts for.
	if err := buf.SaveState(false, now.UnixMilli()); err != nil {
		buf.Close()
		return nil, err
	}
	prev, unclean, run, err := startRun(cfg.Spool.Dir, os.Getpid(), now.UnixMilli())
	if err != nil {
		buf.Close()
		return nil, err
	}
	s.run = run
	m.UncleanStops.Add(float64(run.UncleanStops))
	if unclean {
		log.Warn("the previous collector process died without shutting down (SIGKILL, crash, OOM kill or power loss): "+
			"the tcp_info sampler's and the close capture's records it held only in memory are lost, uncounted "+
			"(tailed log lines are read again); also lost: connections that closed while no collector ran",
			"previous_pid", prev.Pid, "previous_started_ms", prev.StartedMs,
			"lost_records_at_most", cfg.QueueMaxRecords+cfg.MaxInflight,
			"bound", "queue.max_records + kafka.max_inflight_records, plus close-capture events not yet read (one close_capture.coalesce)",
			"unclean_stops_total", run.UncleanStops)
	}
	m.KafkaUp.Set(1)
	return s, nil
}

// Start runs the sink's goroutine.
func (s *Sink) Start() { go s.loop() }

// Submit queues b, waiting while the queue is full (for sources that can wait: the tailer).
func (s *Sink) Submit(ctx context.Context, b Batch) error {
	return s.q.push(ctx, b, true)
}

// Offer queues b if there is room; otherwise the batch is dropped, counted
// (reason queue_full), and ErrQueueFull returned. For sources that must not wait.
func (s *Sink) Offer(b Batch) error {
	err := s.q.push(context.Background(), b, false)
	if errors.Is(err, ErrQueueFull) {
		s.m.RecordsDropped.WithLabelValues(metrics.DropQueueFull).Add(float64(len(b.Msgs)))
	}
	return err
}

// BlockWhenFull reports whether the spool is configured to block rather than shed.
func (s *Sink) BlockWhenFull() bool { return s.cfg.Spool.Full == FullBlock }

// SafeMs is a time such that every record not yet durably acknowledged (nor spooled) was,
// or will be, produced to Kafka at or after it. A source stores it with its checkpoint;
// read it before snapshotting the positions that checkpoint records.
func (s *Sink) SafeMs() int64 { return s.safeMs.Load() }

// Close stops taking records, delivers what it can within ShutdownTimeout, spools the
// rest, fsyncs, saves the spool state, and closes the client. Every Batch's Done has been
// called when it returns (except for records whose spool write failed: those are counted
// as dropped and Done is still called). Sources must have stopped submitting.
func (s *Sink) Close() error {
	s.q.close()
	close(s.stop)
	<-s.done
	return nil
}

// promise is the Producer's callback for every record the sink produced (one function, not
// a closure per record: the record is the first field of its pmsg). An acknowledged live
// record of a single-topic batch costs one atomic add: the loop learns of the batch once per
// round (ackedBatches, one lock and one wake-up per batch), not of each record.
func (s *Sink) promise(r *kgo.Record, err error) {
	pm := pmsgOf(r)
	if pb := pm.pb; err == nil && pb != nil && pb.tc != nil {
		if pb.acked.Add(1) != 1 {
			return // the batch is already listed and the loop not yet woken for it
		}
		s.resMu.Lock()
		s.ackedBatches = append(s.ackedBatches, pb)
		s.resMu.Unlock()
	} else {
		s.resMu.Lock()
		s.results = append(s.results, result{pm, err})
		s.resMu.Unlock()
	}
	select {
	case s.resReady <- struct{}{}:
	default:
	}
}

func (s *Sink) loop() {
	defer close(s.done)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			s.shutdown()
			return
		case <-s.q.ready:
		case <-s.resReady:
		case r := <-s.recoverRes:
			s.onRecovered(r)
		case <-tick.C:
		}
		s.step(time.Now())
	}
}

func (s *Sink) step(now time.Time) {
	s.processResults(now)
	s.maybeRecover(now)
	if s.buf.Accepting() {
		for _, b := range s.q.take() {
			s.accept(b, now)
		}
	}
	s.checkStall(now)
	s.buf.Flush(now, false)
	s.maybeReplay(now)
	s.maybeSaveState(now, false)
	s.publish(now)
}

// accept routes one batch from the queue.
func (s *Sink) accept(b Batch, now time.Time) {
	if len(b.Msgs) == 0 {
		if b.Done != nil {
			b.Done()
		}
		return
	}
	pb := &pbatch{done: b.Done, remaining: len(b.Msgs)}
	// Counted per topic run, not per record (a source's batch has one topic).
	topic, run := b.Msgs[0].Topic, 0
	pb.tc = s.topic(topic)
	for i := range b.Msgs {
		if t := b.Msgs[i].Topic; t != topic {
			s.topic(topic).received.Add(float64(run))
			topic, run, pb.tc = t, 0, nil
		}
		run++
	}
	s.topic(topic).received.Add(float64(run))
	var pms []pmsg // allocated in slabs: a batch's records complete together
	for i := range b.Msgs {
		if len(pms) == 0 {
			pms = s.slab()
			pb.slabs = append(pb.slabs, pms)
		}
		pm := &pms[0]
		pms = pms[1:]
		pm.msg, pm.pb = b.Msgs[i], pb
		if s.inSpool.Has(pm.msg.Stream, pm.msg.Pos) {
			s.m.RecordsDuplicate.WithLabelValues("spool").Inc()
			s.complete(pm)
			continue
		}
		if s.buf.Mode() == ModeLive && s.inflight >= s.cfg.MaxInflight {
			// Acknowledgements that already arrived make room: only a client that really
			// holds MaxInflight records sends new ones to the spool.
			s.processResults(now)
			if s.inflight >= s.cfg.MaxInflight {
				s.buf.Enter("backpressure")
			}
		}
		if s.buf.Mode() == ModeLive {
			if s.inKafka.Has(pm.msg.Stream, pm.msg.Pos) {
				s.m.RecordsDuplicate.WithLabelValues("kafka").Inc()
				s.complete(pm)
				continue
			}
			s.produce(pm, now)
			continue
		}
		s.buf.Push(&pm.msg, pm)
	}
}

func (s *Sink) produce(pm *pmsg, now time.Time) {
	ms := now.UnixMilli()
	if s.keyBytes == nil {
		s.keyBytes = []byte(s.cfg.Key)
	}
	if pm.msg.Stream != s.streamText || s.streamB == nil {
		s.streamText, s.streamB = pm.msg.Stream, []byte(pm.msg.Stream)
	}
	// Field by field into the zero pmsg (a pmsg is produced at most once): composite
	// literals are built on the stack and copied with loads that stall on the stores that
	// built them.
	pm.hdr[0].Key, pm.hdr[0].Value = HeaderStream, s.streamB
	pm.hdr[1].Key, pm.hdr[1].Value = HeaderPos, strconv.AppendInt(pm.pos[:0], pm.msg.Pos, 10)
	pm.rec.Topic, pm.rec.Key, pm.rec.Value = pm.msg.Topic, s.keyBytes, pm.msg.Value
	pm.rec.Timestamp, pm.rec.Headers = now, pm.hdr[:]
	rec := &pm.rec
	if s.inflight == 0 {
		s.lastProgress = now
	}
	s.inflight++
	pm.kafkaT = ms
	if pm.pb != nil && pm.pb.kafkaMs == 0 {
		pm.pb.kafkaMs = ms
		s.open = append(s.open, pm.pb)
	}
	if pm.chunk != nil {
		pm.chunk.inflight++
		if pm.chunk.kafkaMs == 0 {
			pm.chunk.kafkaMs = ms
		}
	}
	if s.promiseFn == nil {
		s.promiseFn = s.promise
	}
	s.p.TryProduce(context.Background(), rec, s.promiseFn)
}

// complete marks one live record as durable (or dropped for good).
func (s *Sink) complete(pm *pmsg) { s.completeN(pm.pb, 1) }

// completeN marks n live records of pb as durable (or dropped for good).
func (s *Sink) completeN(pb *pbatch, n int) {
	pb.remaining -= n
	if pb.remaining == 0 {
		if pb.done != nil {
			pb.done()
			pb.done = nil
		}
		// Every pmsg of the batch is resolved: nothing (results, spool lists, the Producer,
		// which is done with a record once its promise ran) points into its slabs any more.
		for _, sl := range pb.slabs {
			if len(s.freeSlabs) < maxFreeSlabs {
				clear(sl)
				s.freeSlabs = append(s.freeSlabs, sl)
			}
		}
		pb.slabs = nil
	}
}

// slab returns pmsgSlab zeroed pmsgs, recycled when possible.
func (s *Sink) slab() []pmsg {
	if n := len(s.freeSlabs); n > 0 {
		sl := s.freeSlabs[n-1]
		s.freeSlabs = s.freeSlabs[:n-1]
		return sl
	}
	return make([]pmsg, pmsgSlab)
}

// classify names a produce error and says whether the record can never be delivered.
func classify(err error) (reason string, permanent bool) {
	switch {
	case errors.Is(err, kgo.ErrMaxBuffered):
		return "max_buffered", false
	case errors.Is(err, kgo.ErrRecordTimeout):
		return "timeout", false
	case errors.Is(err, kgo.ErrRecordRetries):
		return "retries", false
	case errors.Is(err, kgo.ErrAborting):
		return "aborted", false
	case errors.Is(err, kgo.ErrClientClosed):
		return "client_closed", false
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge),
		errors.Is(err, kerr.InvalidRecord), errors.Is(err, kerr.CorruptMessage):
		return "rejected", true
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return "unknown_topic", false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "canceled", false
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return strings.ToLower(ke.Message), false
	}
	return "other", false
}

func (s *Sink) processResults(now time.Time) {
	s.resMu.Lock()
	rs, acked := s.results, s.ackedBatches
	s.results, s.ackedBatches = s.spareResults[:0], s.spareAcked[:0]
	s.resMu.Unlock()
	for i, pb := range acked {
		acked[i] = nil
		// Every acknowledgement counted before this swap is in n; one counted after it lists
		// the batch again.
		n := int(pb.acked.Swap(0))
		if n == 0 {
			continue
		}
		s.inflight -= n
		s.lastProgress = now
		s.m.KafkaUp.Set(1)
		pb.tc.produced.Add(float64(n))
		s.completeN(pb, n)
	}
	for i, r := range rs {
		rs[i] = result{}
		s.inflight--
		pm := r.pm
		if r.err == nil {
			s.lastProgress = now
			s.m.KafkaUp.Set(1)
		}
		if c := pm.chunk; c != nil {
			c.inflight--
			if r.err == nil {
				s.topic(pm.msg.Topic).replayed.Inc()
				c.state[pm.idx] = 1
				c.remaining--
				continue
			}
			switch reason, permanent := classify(r.err); {
			case permanent:
				s.m.ProduceErrors.WithLabelValues(reason).Inc()
				s.m.RecordsDropped.WithLabelValues(metrics.DropRejected).Inc()
				c.state[pm.idx] = 1
				c.remaining--
			default:
				s.m.ProduceErrors.WithLabelValues(reason).Inc()
				s.m.KafkaUp.Set(0)
				c.retry = append(c.retry, pm.idx)
				s.backoffUntil = now.Add(s.cfg.RetryBackoff)
			}
			continue
		}
		if r.err == nil {
			s.topic(pm.msg.Topic).produced.Inc()
			s.complete(pm)
			continue
		}
		switch reason, permanent := classify(r.err); {
		case permanent:
			s.m.ProduceErrors.WithLabelValues(reason).Inc()
			s.m.RecordsDropped.WithLabelValues(metrics.DropRejected).Inc()
			s.log.Warn("kafka rejected a record for good; dropped", "topic", pm.msg.Topic,
				"bytes", len(pm.msg.Value), "err", r.err)
			s.complete(pm)
		default:
			// Not written (franz-go fails idempotent records only when it knows): spool it.
			s.m.ProduceErrors.WithLabelValues(reason).Inc()
			s.m.KafkaUp.Set(0)
			s.buf.PushFailed(&pm.msg, pm)
			s.backoffUntil = now.Add(s.cfg.RetryBackoff)
		}
	}
	s.spareResults, s.spareAcked = rs[:0], acked[:0]
	if c := s.chunk; c != nil && c.remaining == 0 {
		s.commitChunk()
	}
}

// commitChunk advances the spool past the acknowledged prefix of the replay chunk.
func (s *Sink) commitChunk() {
	c := s.chunk
	n := 0
	for n < len(c.entries) && c.state[n] == 1 {
		n++
	}
	if n > 0 {
		s.buf.Ack(c.rd, n)
		s.stateDirty = true
	}
	if n == len(c.entries) {
		s.chunk = nil
	}
}

func (s *Sink) checkStall(now time.Time) {
	if s.inflight > 0 && now.Sub(s.lastProgress) > s.cfg.StallTimeout {
		s.m.KafkaUp.Set(0)
		s.buf.Enter("stall")
	}
}

func (s *Sink) maybeReplay(now time.Time) {
	if s.buf.Mode() != ModeSpool || now.Before(s.backoffUntil) {
		return
	}
	if c := s.chunk; c != nil {
		if len(c.retry) > 0 && c.inflight == 0 {
			retry := c.retry
			c.retry = nil
			for _, i := range retry {
				s.produce(&pmsg{msg: c.entries[i].Msg, chunk: c, idx: i}, now)
			}
		}
		return
	}
	if s.inflight > 0 {
		return // records the client still holds go first
	}
	rd, err := s.buf.Replay(now, s.cfg.ReplayChunk)
	if err != nil {
		s.log.Error("spool read failed", "err", err)
		s.backoffUntil = now.Add(s.cfg.RetryBackoff)
	}
	if rd == nil {
		if s.buf.Mode() == ModeLive {
			s.stateDirty = true // drained
		}
		return
	}
	entries := rd.Entries
	c := &replayChunk{rd: rd, entries: entries, state: make([]byte, len(entries)), remaining: len(entries)}
	s.chunk = c
	for i := range entries {
		e := &entries[i]
		if s.inKafka.Has(e.Msg.Stream, e.Msg.Pos) {
			s.m.RecordsDuplicate.WithLabelValues("kafka").Inc()
			c.state[i] = 1
			c.remaining--
			continue
		}
		s.produce(&pmsg{msg: e.Msg, chunk: c, idx: i}, now)
	}
	if c.remaining == 0 {
		s.commitChunk()
	}
}

func (s *Sink) maybeRecover(now time.Time) {
	if s.buf.Mode() != ModeRecover || s.recovering || now.Before(s.backoffUntil) || s.rb == nil {
		return
	}
	s.recovering = true
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RecoveryTimeout)
	s.recCancel = cancel
	since := s.recSince
	go func() {
		set, err := s.rb(ctx, since)
		s.recoverRes <- recoverResult{set, err}
	}()
}

func (s *Sink) onRecovered(r recoverResult) {
	s.recovering = false
	s.recCancel()
	if r.err != nil {
		s.m.RecoveryErrors.Inc()
		s.log.Warn("reading back what reached kafka failed; retrying (records are spooled meanwhile)", "err", r.err)
		s.backoffUntil = time.Now().Add(s.cfg.RetryBackoff)
		return
	}
	s.inKafka = r.set
	s.buf.Recovered()
	s.m.RecoveryDone.Set(1)
	s.log.Info("read back what reached kafka", "records", r.set.Len())
}

// safe computes SafeMs now.
func (s *Sink) safe(now time.Time) int64 {
	for len(s.open) > 0 && s.open[0].remaining == 0 {
		s.open = s.open[1:]
	}
	safe := now.UnixMilli()
	if len(s.open) > 0 {
		safe = min(safe, s.open[0].kafkaMs)
	}
	if c := s.chunk; c != nil && c.kafkaMs > 0 {
		safe = min(safe, c.kafkaMs)
	}
	return safe
}

func (s *Sink) publish(now time.Time) {
	safe := s.safe(now)
	s.safeMs.Store(safe)
	s.m.DeliverySafeMs.Set(float64(safe))
	s.m.QueueRecords.Set(float64(s.q.len()))
	s.m.InflightRecords.Set(float64(s.inflight))
}

func (s *Sink) maybeSaveState(now time.Time, force bool) {
	if !force && (!s.stateDirty || now.Sub(s.lastState) < s.cfg.StateInterval) {
		return
	}
	s.lastState = now
	s.stateDirty = false
	if err := s.buf.SaveState(false, s.safe(now)); err != nil {
		s.log.Error("saving spool state failed", "err", err)
	}
}

func (s *Sink) shutdown() {
	now := time.Now()
	if s.recovering {
		s.recCancel()
		r := <-s.recoverRes
		s.onRecovered(r)
	}
	s.processResults(now)
	for _, b := range s.q.take() {
		s.accept(b, now)
	}
	// Replay no further; give Kafka until the deadline for what the client holds.
	clean := true
	var safeAtAbort int64
	if s.inflight > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		err := s.p.Flush(ctx)
		cancel()
		if err != nil {
			safeAtAbort = s.safe(time.Now())
			s.log.Warn("kafka did not acknowledge everything before the shutdown timeout; spooling the rest",
				"inflight", s.inflight, "err", err)
			actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := s.p.AbortBufferedRecords(actx); err != nil {
				// Requests in flight without an answer: their records may be in Kafka.
				// They are spooled anyway; the next start reads Kafka back first.
				s.p.UnsafeAbortBufferedRecords()
				clean = false
			}
			acancel()
		}
	}
	now = time.Now()
	s.processResults(now)
	s.buf.Flush(now, true)
	if s.chunk != nil {
		s.commitChunk()
		if s.chunk != nil {
			for _, st := range s.chunk.state {
				if st == 1 { // acknowledged after a gap: would be replayed again
					clean = false
				}
			}
		}
	}
	safe := s.safe(now)
	if safeAtAbort > 0 {
		safe = min(safe, safeAtAbort)
	}
	if s.buf.Mode() == ModeRecover {
		// Never learnt what the previous run left in Kafka: the next start must still look.
		clean = false
		safe = min(safe, s.recSafe)
	}
	if err := s.buf.SaveState(clean, safe); err != nil {
		s.log.Error("saving spool state failed", "err", err)
	}
	if err := s.buf.Close(); err != nil {
		s.log.Error("closing spool failed", "err", err)
	}
	// Nothing of the sink is only in memory any more: the next start need not warn.
	if err := stopRun(s.cfg.Spool.Dir, s.run, time.Now().UnixMilli()); err != nil {
		s.log.Error("saving the run mark failed: the next start will report this stop as unclean", "err", err)
	}
	s.p.Close()
	s.publish(now)
}
