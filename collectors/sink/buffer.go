package sink

import (
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ccab-dev/ccab/collectors/metrics"
)

// Mode says where the sink sends a new record. The Buffer owns the mode and its transitions;
// the sink's loop asks it (Mode, Accepting) and reports events (Enter, PushFailed, Recovered,
// Replay, Ack).
//
//	        Enter(backpressure|stall) / PushFailed
//	Live ───────────────────────────────────────────► Spool
//	 ▲                                                  │
//	 └──── Replay finds both spools empty and synced ◄──┘
//
//	Recover ── Recovered ──► Spool       (only at start, after an unclean stop)
//
// Independently of the mode, Accepting is false while the spool is full with FullBlock: the
// sink stops taking batches from its queue, and the sources wait.
type Mode int

const (
	// ModeLive: records go to Kafka directly; only the Kafka client's memory holds them
	// (up to MaxInflight). The buffer holds none.
	ModeLive Mode = iota
	// ModeSpool: Kafka cannot take records now; new ones go to the tail of the disk spool,
	// and replay drains the spool (the head first) in order.
	ModeSpool
	// ModeRecover: the last run stopped uncleanly and the sink has not yet read back what
	// reached Kafka: new records are spooled, nothing is replayed.
	ModeRecover
)

func (m Mode) String() string {
	switch m {
	case ModeLive:
		return "live"
	case ModeSpool:
		return "spool"
	case ModeRecover:
		return "recover"
	}
	return "unknown"
}

// BufferConfig configures a Buffer.
type BufferConfig struct {
	Spool         SpoolConfig
	Key           string        // Kafka key written with every spooled record
	FsyncInterval time.Duration // pushed records are fsynced (then done) at least this often; 0: at each Flush
}

type pushed[T any] struct {
	m *Message
	t T
}

// Buffer is the sink's disk buffer: two spools and the mode logic around them. T is the
// caller's handle of a pushed record; done(t) is called exactly once for each push, when the
// record is on disk (or was lost for good: then it is counted in records_dropped_total).
//
// Records pushed with Push go to the tail spool. Records the Kafka client failed (PushFailed)
// are older than everything in the tail (the client holds only records produced before the
// sink left live mode, and replay starts only when it holds none), so they go to a head
// spool in a subdirectory "head/", which Replay reads first.
//
// A Buffer is not safe for concurrent use: the sink's goroutine owns it.
type Buffer[T any] struct {
	cfg  BufferConfig
	m    *metrics.Metrics
	log  *slog.Logger
	done func(T)

	mode       Mode
	head, tail *Spool

	toHead, toTail []pushed[T] // pushed in this step, appended at Flush
	pendingSync    []T         // appended, done at the next fsync
	lastSync       time.Time
	scratch        []*Message
	spooled        map[string]prometheus.Counter
}

// OpenBuffer opens (creating them if needed) the spools in cfg.Spool.Dir. It starts in
// ModeSpool if they hold records, otherwise in ModeLive.
func OpenBuffer[T any](cfg BufferConfig, m *metrics.Metrics, log *slog.Logger, done func(T)) (*Buffer[T], error) {
	tail, err := OpenSpool(cfg.Spool, m)
	if err != nil {
		return nil, err
	}
	hcfg := cfg.Spool
	hcfg.Dir, hcfg.MaxBytes, hcfg.Full, hcfg.quiet = filepath.Join(cfg.Spool.Dir, "head"), 1<<50, FullBlock, true
	head, err := OpenSpool(hcfg, m)
	if err != nil {
		tail.Close()
		return nil, err
	}
	b := &Buffer[T]{cfg: cfg, m: m, log: log, done: done, head: head, tail: tail, spooled: map[string]prometheus.Counter{}}
	if !b.Empty() {
		b.setMode(ModeSpool)
	} else {
		b.setMode(ModeLive)
	}
	return b, nil
}

func (b *Buffer[T]) setMode(md Mode) {
	b.mode = md
	if md == ModeLive {
		b.m.SpoolMode.Set(0)
	} else {
		b.m.SpoolMode.Set(1)
	}
}

// Mode is where new records go.
func (b *Buffer[T]) Mode() Mode { return b.mode }

// Accepting reports whether the sink may take more records from its queue: false while the
// tail spool is full and its policy is FullBlock.
func (b *Buffer[T]) Accepting() bool {
	return !(b.cfg.Spool.Full == FullBlock && b.tail.Full(0))
}

// Loaded is the spools' state as the last run left it: unclean if either was, with the
// earlier safe time.
func (b *Buffer[T]) Loaded() SpoolState {
	st := b.tail.Loaded()
	if hs := b.head.Loaded(); !hs.Clean {
		st.Clean, st.SafeMs = false, min(st.SafeMs, hs.SafeMs)
	}
	return st
}

// Scan calls fn for every record not yet replayed, head first.
func (b *Buffer[T]) Scan(fn func(stream string, pos int64)) error {
	err := b.head.Scan(fn)
	if err2 := b.tail.Scan(fn); err == nil {
		err = err2
	}
	return err
}

// AwaitRecovery enters ModeRecover (at start, after an unclean stop).
func (b *Buffer[T]) AwaitRecovery() { b.setMode(ModeRecover) }

// Recovered leaves ModeRecover for ModeSpool; replay may start. The next Replay that finds
// nothing to replay returns to ModeLive.
func (b *Buffer[T]) Recovered() {
	if b.mode == ModeRecover {
		b.setMode(ModeSpool)
	}
}

// Enter switches from ModeLive to ModeSpool (counted by reason: backpressure, stall,
// produce_error) and reports whether it did.
func (b *Buffer[T]) Enter(reason string) bool {
	if b.mode != ModeLive {
		return false
	}
	b.setMode(ModeSpool)
	b.m.SpoolEntries.WithLabelValues(reason).Inc()
	b.log.Warn("kafka cannot take records now: spooling to disk", "reason", reason, "spool_bytes", b.tail.Bytes())
	return true
}

// Push queues a new record for the tail spool (written at the next Flush).
func (b *Buffer[T]) Push(m *Message, t T) { b.toTail = append(b.toTail, pushed[T]{m, t}) }

// PushFailed queues a record the Kafka client failed (not written) for the head spool, and
// enters ModeSpool.
func (b *Buffer[T]) PushFailed(m *Message, t T) {
	b.Enter("produce_error")
	b.toHead = append(b.toHead, pushed[T]{m, t})
}

// Flush writes the pushed records to their spools, then fsyncs if FsyncInterval has passed
// since the last fsync (or force), and calls done for every record now on disk.
func (b *Buffer[T]) Flush(now time.Time, force bool) {
	b.appendTo(b.head, &b.toHead)
	b.appendTo(b.tail, &b.toTail)
	if len(b.pendingSync) == 0 && !b.tail.Unsynced() && !b.head.Unsynced() {
		return
	}
	if !force && b.cfg.FsyncInterval > 0 && now.Sub(b.lastSync) < b.cfg.FsyncInterval {
		return
	}
	b.lastSync = now
	err := b.head.Sync()
	if err2 := b.tail.Sync(); err == nil {
		err = err2
	}
	if err != nil {
		b.log.Error("spool fsync failed; records may not survive a crash", "err", err)
		b.m.RecordsDropped.WithLabelValues(metrics.DropSpoolWrite).Add(float64(len(b.pendingSync)))
	}
	for _, t := range b.pendingSync {
		b.done(t)
	}
	clear(b.pendingSync)
	b.pendingSync = b.pendingSync[:0]
}

func (b *Buffer[T]) appendTo(sp *Spool, ps *[]pushed[T]) {
	if len(*ps) == 0 {
		return
	}
	msgs := b.scratch[:0]
	for _, p := range *ps {
		msgs = append(msgs, p.m)
	}
	if _, err := sp.Append(msgs, b.cfg.Key); err != nil {
		// Lost: count, and let the sources move on rather than stall forever.
		b.log.Error("spool write failed; records dropped", "records", len(msgs), "err", err)
		b.m.RecordsDropped.WithLabelValues(metrics.DropSpoolWrite).Add(float64(len(msgs)))
		for _, p := range *ps {
			b.done(p.t)
		}
	} else {
		for _, p := range *ps {
			b.spooledCounter(p.m.Topic).Inc()
			b.pendingSync = append(b.pendingSync, p.t)
		}
	}
	clear(msgs)
	b.scratch = msgs[:0]
	clear(*ps)
	*ps = (*ps)[:0]
}

func (b *Buffer[T]) spooledCounter(topic string) prometheus.Counter {
	c, ok := b.spooled[topic]
	if !ok {
		c = b.m.RecordsSpooled.WithLabelValues(topic)
		b.spooled[topic] = c
	}
	return c
}

// Empty reports whether both spools are replayed and committed to their end.
func (b *Buffer[T]) Empty() bool { return b.head.Empty() && b.tail.Empty() }

// Bytes is the size of the tail spool's segments (the bound MaxBytes applies to).
func (b *Buffer[T]) Bytes() int64 { return b.tail.Bytes() }

// ReplayRead is records read for replay from one spool; Ack commits a prefix of them.
type ReplayRead struct {
	Entries []Entry
	from    *Spool
}

// Replay reads up to max records to replay, from the head spool while it has any, then
// from the tail. It returns nil when there is nothing to replay now: in ModeLive and
// ModeRecover always; in ModeSpool when what is spooled is not yet fsynced (it fsyncs it:
// readable at the next call), or when both spools are empty, which returns to ModeLive.
// The caller replays only when the Kafka client holds none of its live records (they are
// older) and no earlier ReplayRead is unacknowledged. On a read error it returns what it
// read with the error.
func (b *Buffer[T]) Replay(now time.Time, max int) (*ReplayRead, error) {
	if b.mode != ModeSpool {
		return nil, nil
	}
	from := b.head
	entries, err := from.Read(max)
	if err == nil && len(entries) == 0 && from.Empty() {
		from = b.tail
		entries, err = from.Read(max)
	}
	if len(entries) > 0 {
		return &ReplayRead{Entries: entries, from: from}, err
	}
	// Everything read before was acknowledged (the caller's contract): only damaged lines,
	// skipped and counted, lie between the committed position and the read one.
	b.head.CommitRead()
	b.tail.CommitRead()
	if len(b.pendingSync) > 0 || len(b.toTail) > 0 || len(b.toHead) > 0 || b.tail.Unsynced() || b.head.Unsynced() {
		b.Flush(now, true)
		return nil, err
	}
	if err == nil && b.Empty() {
		b.setMode(ModeLive)
		b.log.Info("spool drained: records go to kafka directly again")
	}
	return nil, err
}

// Ack records that the first n entries of r reached Kafka: the spool's committed position
// moves past them, and segments wholly before it are removed.
func (b *Buffer[T]) Ack(r *ReplayRead, n int) {
	if n > 0 {
		r.from.Commit(r.Entries[n-1].End)
	}
}

// SaveState writes both spools' state files: the committed positions, whether this process
// stopped cleanly, and the safe time (SpoolState).
func (b *Buffer[T]) SaveState(clean bool, safeMs int64) error {
	err := b.head.SaveState(clean, safeMs)
	if err2 := b.tail.SaveState(clean, safeMs); err == nil {
		err = err2
	}
	return err
}

// Close writes and fsyncs what was pushed (calling done), closes both spools and clears the
// mode gauge.
func (b *Buffer[T]) Close() error {
	b.Flush(time.Now(), true)
	err := b.head.Close()
	if err2 := b.tail.Close(); err == nil {
		err = err2
	}
	b.m.SpoolMode.Set(0)
	return err
}
