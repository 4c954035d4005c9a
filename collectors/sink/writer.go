package sink

import (
	"bufio"
	"context"
	"io"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// WriterProducer is a Producer that writes each record's value as one line to w and
// acknowledges it at once: `--output stdout` (debugging) and `--output discard`
// (benchmarks of the tailer and parser without Kafka).
type WriterProducer struct {
	mu sync.Mutex
	w  *bufio.Writer
}

// NewWriterProducer returns a WriterProducer writing to w (io.Discard to drop everything).
func NewWriterProducer(w io.Writer) *WriterProducer {
	return &WriterProducer{w: bufio.NewWriterSize(w, 256<<10)}
}

// TryProduce writes r's value and calls promise with the write error.
func (p *WriterProducer) TryProduce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.mu.Lock()
	_, err := p.w.Write(r.Value)
	if err == nil && (len(r.Value) == 0 || r.Value[len(r.Value)-1] != '\n') {
		err = p.w.WriteByte('\n')
	}
	p.mu.Unlock()
	promise(r, err)
}

// Flush flushes the writer.
func (p *WriterProducer) Flush(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.w.Flush()
}

// AbortBufferedRecords has nothing to abort.
func (p *WriterProducer) AbortBufferedRecords(context.Context) error { return nil }

// UnsafeAbortBufferedRecords has nothing to abort.
func (p *WriterProducer) UnsafeAbortBufferedRecords() {}

// Close flushes the writer.
func (p *WriterProducer) Close() { _ = p.Flush(context.Background()) }
