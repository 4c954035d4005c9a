package sink

import (
	"context"
	"errors"
	"sync"
)

// Message is one encoded record on its way to Kafka.
//
// Stream and Pos say where the record came from: every source numbers its records with a
// position that only grows within a stream (the tailer: "f:<dev>:<ino>:<gen>" and the byte
// offset after the line; the sampler: one stream per process and a counter). The pair is
// sent as Kafka headers and is what lets a restarted collector skip records that already
// reached Kafka or the spool.
type Message struct {
	Topic  string
	Value  []byte
	Stream string
	Pos    int64
}

// Batch is what a source hands to the sink. Done, if not nil, is called exactly once, from
// the sink's goroutine, when every message of the batch is durable: acknowledged by Kafka,
// written to the spool and fsynced, or dropped for good (and counted). A source checkpoints
// its position only after Done. After Done the source may reuse Msgs and the memory of the
// Values (the tailer does): nothing in the sink may keep them.
type Batch struct {
	Msgs []Message
	Done func()
}

// ErrQueueFull is returned by Offer when the queue has no room for the batch.
var ErrQueueFull = errors.New("sink: queue full")

// ErrClosed is returned for batches submitted after Close.
var ErrClosed = errors.New("sink: closed")

// queue is the bounded buffer between the sources and the sink, bounded in records.
// The sink drains it on every step, so it only fills when the sink cannot keep up with
// the disk or, with --spool-full=block, when the spool is full.
type queue struct {
	mu      sync.Mutex
	items   []Batch
	records int
	max     int
	closed  bool
	ready   chan struct{} // cap 1: something was pushed
	space   chan struct{} // closed and replaced when room was made
}

func newQueue(max int) *queue {
	return &queue{max: max, ready: make(chan struct{}, 1), space: make(chan struct{})}
}

// push adds b, waiting for room when block is true; with block false it returns
// ErrQueueFull. A batch larger than the whole queue is accepted into an empty queue.
func (q *queue) push(ctx context.Context, b Batch, block bool) error {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return ErrClosed
		}
		if q.records == 0 || q.records+len(b.Msgs) <= q.max {
			q.items = append(q.items, b)
			q.records += len(b.Msgs)
			q.mu.Unlock()
			select {
			case q.ready <- struct{}{}:
			default:
			}
			return nil
		}
		space := q.space
		q.mu.Unlock()
		if !block {
			return ErrQueueFull
		}
		select {
		case <-space:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// take removes and returns every queued batch.
func (q *queue) take() []Batch {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	if q.records > 0 {
		q.records = 0
		close(q.space)
		q.space = make(chan struct{})
	}
	return items
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.records
}

// close refuses further pushes and wakes blocked pushers.
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.space)
		q.space = make(chan struct{})
	}
}
