package tailer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ccab-dev/ccab/collectors/nginxlog"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/sink"
)

// follower reads one file (one inode).
type follower struct {
	t          *Tailer
	id         fileID
	path       string // last path it was seen under
	f          *os.File
	opened     time.Time
	seq        uint64    // order of discovery: rotated files are read oldest first
	seenAt     time.Time // when path last named this file (zero once rotated away)
	rotated    bool      // the path names another file now: drain, then close
	grew       bool      // grew in the last poll
	lastGrowth time.Time
	lastSize   int64 // size and mtime at the last poll: content is re-checked when they change
	lastMtime  time.Time

	// tail holds the bytes just before tailEnd (the start of the held partial line, at most
	// tailMax): if they are not in the file any more, it was truncated and written again.
	tail    []byte
	tailEnd int64
	closed  FileState // fingerprints taken when a rotated file was closed (f == nil)

	// siblings: the rotation siblings of path (and their mtimes) when this file was opened
	// as the live one. They are history, not files rotated away later.
	siblings map[fileID]time.Time

	readOff  int64  // next byte to read
	partial  []byte // bytes after the last newline (they end at readOff)
	skipping bool   // discarding the rest of an over-long line
	stream   string
	tr       *tracker // guarded by t.mu
}

// tracker turns out-of-order "durable" reports into a committed offset: the end of the
// longest prefix of submitted spans that are all done.
type tracker struct {
	gen       int64
	committed int64
	spans     []*span
}

type span struct {
	end  int64
	done bool
}

func (tr *tracker) advance() {
	for len(tr.spans) > 0 && tr.spans[0].done {
		tr.committed = tr.spans[0].end
		tr.spans[0] = nil
		tr.spans = tr.spans[1:]
	}
}

func (fo *follower) setGen(gen, off int64) {
	fo.t.mu.Lock()
	fo.tr = &tracker{gen: gen, committed: off}
	fo.t.mu.Unlock()
	fo.readOff = off
	fo.partial = fo.partial[:0]
	fo.skipping = false
	fo.stream = fmt.Sprintf("f:%d:%d:%d", fo.id.dev, fo.id.ino, gen)
	fo.tail, fo.tailEnd = fo.tail[:0], 0
	fo.refreshTail()
}

// refreshTail remembers the bytes just before the start of the partial line.
func (fo *follower) refreshTail() {
	end := fo.readOff - int64(len(fo.partial))
	if end == fo.tailEnd && len(fo.tail) == int(min(end, tailMax)) {
		return
	}
	n := min(end, tailMax)
	if cap(fo.tail) < tailMax {
		fo.tail = make([]byte, 0, tailMax)
	}
	fo.tail = fo.tail[:n]
	if got, _ := fo.f.ReadAt(fo.tail, end-n); int64(got) != n {
		fo.tail = fo.tail[:0] // unreadable: fall back to the newline check
	}
	fo.tailEnd = end
}

// contentOK reports whether the bytes before the partial line and the partial line itself
// are still in the file where they were read: false after a truncation and a rewrite, even
// one that grew the file past the old offset.
func (fo *follower) contentOK(lineStart int64) bool {
	if len(fo.tail) == 0 || fo.tailEnd != lineStart {
		return fo.boundaryOK(lineStart)
	}
	n := int64(len(fo.tail))
	buf := make([]byte, n+int64(len(fo.partial)))
	if got, _ := fo.f.ReadAt(buf, lineStart-n); got != len(buf) {
		return false
	}
	return bytes.Equal(buf[:n], fo.tail) && bytes.Equal(buf[n:], fo.partial)
}

func (fo *follower) drained() bool {
	fo.t.mu.Lock()
	defer fo.t.mu.Unlock()
	return len(fo.tr.spans) == 0
}

// boundaryOK reports whether the byte before off is a newline, as it is when off is where
// a line starts and the file was not rewritten.
func (fo *follower) boundaryOK(off int64) bool {
	var b [1]byte
	n, _ := fo.f.ReadAt(b[:], off-1)
	return n == 1 && b[0] == '\n'
}

// batch collects the records of consecutive lines; end is the offset after the last line.
// The records' JSON is appended to arena (their Values are slices of it): a few chunks per
// batch instead of one allocation per record. The sink owns the chunks once the batch is
// submitted.
type batch struct {
	msgs   []sink.Message
	arena  []byte
	chunks [][]byte // the arena chunks the records' values live in, recycled after Done
	end    int64
	lines  int // complete lines read into it, not yet counted (LogLinesRead, once per batch)
}

// readFollower reads fo from its offset to the end of the file.
func (t *Tailer) readFollower(ctx context.Context, fo *follower, meta record.Meta, now time.Time) error {
	fi, err := fo.f.Stat()
	if err != nil {
		t.m.TailErrors.WithLabelValues("stat").Inc()
		return nil
	}
	size, mtime := fi.Size(), fi.ModTime()
	changed := size != fo.lastSize || !mtime.Equal(fo.lastMtime)
	fo.lastSize, fo.lastMtime = size, mtime
	fo.grew = false
	lineStart := fo.readOff - int64(len(fo.partial))
	switch {
	case size < fo.readOff:
		if err := fo.truncated(ctx, meta, "truncate"); err != nil {
			return err
		}
	case changed && lineStart > 0 && !fo.contentOK(lineStart):
		// Truncated and written again (to this size or past it) between two polls: the size
		// alone cannot tell, the content before the offset can.
		if err := fo.truncated(ctx, meta, "rewrite"); err != nil {
			return err
		}
	}
	var b batch
	b.end = fo.readOff - int64(len(fo.partial))
	for ctx.Err() == nil {
		n, err := fo.f.ReadAt(t.readBuf, fo.readOff)
		if n > 0 {
			fo.grew = true
			fo.lastGrowth = now
			t.m.LogBytesRead.Add(float64(n))
			if err := fo.consume(ctx, meta, t.readBuf[:n], &b); err != nil {
				return err
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.m.TailErrors.WithLabelValues("read").Inc()
				t.log.Warn("read failed", "path", fo.path, "err", err)
			}
			break
		}
	}
	if err := fo.submit(ctx, &b); err != nil {
		return err
	}
	fo.refreshTail()
	return nil
}

// consume splits data (the bytes at readOff) into lines.
func (fo *follower) consume(ctx context.Context, meta record.Meta, data []byte, b *batch) error {
	t := fo.t
	base := fo.readOff
	fo.readOff += int64(len(data))
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			switch {
			case fo.skipping:
			case len(fo.partial)+len(data) > t.cfg.MaxLineBytes:
				fo.skipping = true
				fo.partial = fo.partial[:0]
				t.m.LogLinesRead.Inc()
				t.m.ParseErrors.WithLabelValues("line_too_long").Inc()
			default:
				fo.partial = append(fo.partial, data...)
			}
			return nil
		}
		end := base + int64(i) + 1
		var line []byte
		switch {
		case fo.skipping:
			fo.skipping = false
		case len(fo.partial) > 0:
			line = append(fo.partial, data[:i]...)
			fo.partial = fo.partial[:0]
			if len(line) > t.cfg.MaxLineBytes {
				t.m.LogLinesRead.Inc()
				t.m.ParseErrors.WithLabelValues("line_too_long").Inc()
			} else {
				fo.line(meta, line, end, b)
			}
		default:
			line = data[:i]
			if len(line) > t.cfg.MaxLineBytes {
				t.m.LogLinesRead.Inc()
				t.m.ParseErrors.WithLabelValues("line_too_long").Inc()
			} else {
				fo.line(meta, line, end, b)
			}
		}
		b.end = end
		if len(b.msgs) >= t.cfg.BatchLines {
			if err := fo.submit(ctx, b); err != nil {
				return err
			}
		}
		data = data[i+1:]
		base = end
	}
	return nil
}

// line parses one complete line, which ends at offset end, into a record in b.
func (fo *follower) line(meta record.Meta, line []byte, end int64, b *batch) {
	t := fo.t
	b.lines++
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	r := &t.rec
	if err := t.parser.ParseInto(line, r, &t.scratch); err != nil {
		reason := "error"
		var pe *nginxlog.ParseError
		if errors.As(err, &pe) {
			reason = string(pe.Reason)
		}
		t.m.ParseErrors.WithLabelValues(reason).Inc()
		return
	}
	meta.StampHTTP(r)
	if cap(b.arena)-len(b.arena) < arenaHeadroom {
		b.arena = t.chunk()
		b.chunks = append(b.chunks, b.arena)
	}
	if b.msgs == nil {
		b.msgs = t.msgSlice()
	}
	start := len(b.arena)
	arena, err := t.enc.AppendTexts(b.arena, r, t.scratch.IntTexts())
	if err != nil {
		t.m.ParseErrors.WithLabelValues("encode").Inc()
		return
	}
	b.arena = arena
	// A full slice expression: the sink owns the value, and nothing appends into it.
	v := arena[start:len(arena):len(arena)]
	b.msgs = append(b.msgs, sink.Message{Topic: t.cfg.Topic, Value: v, Stream: fo.stream, Pos: end})
}

// Records are encoded into chunks of arenaChunk bytes (the largest size class of Go's
// small-object allocator), a new chunk when fewer than arenaHeadroom bytes are left. A
// longer record grows its chunk (append copies it), which is only slower.
const (
	arenaChunk    = 32 << 10
	arenaHeadroom = 1 << 10
)

// Recycled buffers: a batch's arena chunks and message slice come back when the sink calls
// its Done, so a busy tailer reuses the same memory instead of allocating ~1 KB per line
// (chunks, slabs, slice growth) for the garbage collector. Bounded: a backlog in the sink
// allocates new ones, and the surplus is left to the collector.
const (
	maxFreeChunks = 512 // 16 MiB of 32 KiB chunks
	maxFreeMsgs   = 64
)

func (t *Tailer) chunk() []byte {
	t.poolMu.Lock()
	defer t.poolMu.Unlock()
	if n := len(t.freeChunks); n > 0 {
		c := t.freeChunks[n-1]
		t.freeChunks = t.freeChunks[:n-1]
		return c
	}
	return make([]byte, 0, arenaChunk)
}

func (t *Tailer) msgSlice() []sink.Message {
	t.poolMu.Lock()
	defer t.poolMu.Unlock()
	if n := len(t.freeMsgs); n > 0 {
		m := t.freeMsgs[n-1]
		t.freeMsgs = t.freeMsgs[:n-1]
		return m
	}
	return make([]sink.Message, 0, t.cfg.BatchLines)
}

func (t *Tailer) recycle(msgs []sink.Message, chunks [][]byte) {
	clear(msgs) // no stale references from the slice's backing array
	t.poolMu.Lock()
	defer t.poolMu.Unlock()
	if len(t.freeMsgs) < maxFreeMsgs && cap(msgs) >= t.cfg.BatchLines {
		t.freeMsgs = append(t.freeMsgs, msgs[:0])
	}
	for _, c := range chunks {
		if len(t.freeChunks) < maxFreeChunks {
			t.freeChunks = append(t.freeChunks, c[:0])
		}
	}
}

// submit hands b to the sink; its span is committed once the sink reports it durable.
func (fo *follower) submit(ctx context.Context, b *batch) error {
	t := fo.t
	if b.lines > 0 {
		t.m.LogLinesRead.Add(float64(b.lines))
		b.lines = 0
	}
	t.mu.Lock()
	tr := fo.tr
	start := tr.committed
	if n := len(tr.spans); n > 0 {
		start = tr.spans[n-1].end
	}
	if b.end <= start {
		t.mu.Unlock()
		return nil
	}
	sp := &span{end: b.end}
	tr.spans = append(tr.spans, sp)
	if len(b.msgs) == 0 {
		sp.done = true
		tr.advance()
		t.mu.Unlock()
		return nil
	}
	t.mu.Unlock()
	msgs, chunks := b.msgs, b.chunks
	b.msgs, b.arena, b.chunks = nil, nil, nil
	err := t.out.Submit(ctx, sink.Batch{Msgs: msgs, Done: func() {
		t.mu.Lock()
		sp.done = true
		tr.advance()
		t.mu.Unlock()
		// Done: every record is durable or dropped, and the sink no longer reads the
		// values; their chunks and the message slice are reused by the next batches.
		t.recycle(msgs, chunks)
	}})
	if err != nil {
		// Never submitted: forget the span; these lines are read again after a restart.
		t.mu.Lock()
		if n := len(tr.spans); n > 0 && tr.spans[n-1] == sp {
			tr.spans = tr.spans[:n-1]
		}
		t.mu.Unlock()
		return err
	}
	return nil
}

// truncated handles a file that shrank or was rewritten: flush the partial line of the old
// content, and start again at 0 with a new generation.
func (fo *follower) truncated(ctx context.Context, meta record.Meta, kind string) error {
	t := fo.t
	if len(fo.partial) > 0 {
		t.m.PartialLines.WithLabelValues("flushed").Inc()
		if err := fo.flushPartial(ctx, meta); err != nil {
			return err
		}
	}
	t.m.Rotations.WithLabelValues(kind).Inc()
	t.log.Warn("log truncated: reading it again from the start", "path", fo.path, "kind", kind,
		"old_offset", fo.readOff, "gen", fo.tr.gen+1)
	fo.setGen(fo.tr.gen+1, 0)
	t.ckptDirty = true
	return nil
}

// flushPartial hands an incomplete last line to the parser as it is.
func (fo *follower) flushPartial(ctx context.Context, meta record.Meta) error {
	b := batch{end: fo.readOff - int64(len(fo.partial))}
	line := append([]byte(nil), fo.partial...)
	fo.partial = fo.partial[:0]
	fo.line(meta, line, fo.readOff, &b)
	b.end = fo.readOff
	return fo.submit(ctx, &b)
}
