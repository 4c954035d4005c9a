package sink

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ccab-dev/ccab/collectors/metrics"
	"github.com/ccab-dev/ccab/internal/atomicfile"
)

// FullPolicy says what the spool does when it holds MaxBytes.
type FullPolicy string

// Full policies.
const (
	// FullShed deletes the oldest segment (its unreplayed records are counted in
	// ccab_collector_records_dropped_total{reason="spool_full"}) to make room.
	FullShed FullPolicy = "shed"
	// FullBlock stops taking records from the queue until replay makes room; the queue
	// then fills and the sources wait (the tailer stops reading; its lines stay in the log).
	FullBlock FullPolicy = "block"
)

// SpoolConfig configures the disk spool.
type SpoolConfig struct {
	Dir          string
	SegmentBytes int64 // a segment is closed (and fsynced) when it reaches this size
	MaxBytes     int64 // bound on the bytes of all segments; must be ≥ 2 × SegmentBytes
	Full         FullPolicy

	quiet bool // the head spool: does not set the size gauges
}

// Validate reports the first problem of c.
func (c SpoolConfig) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("spool: dir is empty")
	case c.SegmentBytes < 4096:
		return fmt.Errorf("spool: segment size %d is below 4096 bytes", c.SegmentBytes)
	case c.MaxBytes < 2*c.SegmentBytes:
		return fmt.Errorf("spool: max size %d is below two segments (2 × %d)", c.MaxBytes, c.SegmentBytes)
	case c.Full != FullShed && c.Full != FullBlock:
		return fmt.Errorf("spool: full policy %q is neither %q nor %q", c.Full, FullShed, FullBlock)
	}
	return nil
}

// Position is a place in the spool: a segment and a byte offset in it.
type Position struct {
	Seq uint64
	Off int64
}

func (p Position) before(q Position) bool {
	return p.Seq < q.Seq || p.Seq == q.Seq && p.Off < q.Off
}

// Entry is one record read from the spool; End is the position just after it.
type Entry struct {
	Msg Message
	Key string
	End Position
}

// SpoolState is the spool's state file: how far replay got, and whether the process that
// wrote it stopped cleanly (if not, records after the read position may already be in
// Kafka, and the sink reads back what reached Kafka before replaying).
type SpoolState struct {
	Version   int    `json:"version"`
	ReadSeq   uint64 `json:"read_seq"`
	ReadOff   int64  `json:"read_off"`
	Clean     bool   `json:"clean"`
	SafeMs    int64  `json:"safe_ms"`
	WrittenMs int64  `json:"written_ms"`
}

const (
	stateFile     = "state.json"
	segPrefix     = "seg-"
	segSuffix     = ".jsonl"
	spoolStateVer = 1
)

type segment struct {
	seq  uint64
	size int64
}

// Spool is an append-only queue of records on disk: numbered segment files of JSON lines
//
//	{"t":"ccab.http.v1","k":"edge-7","s":"f:2049:131:0","p":4711,"c":3735928559,"v":{…record…}}
//
// (topic, key, stream, position, CRC-32 of v, the record). Replay reads from the committed
// position forward and only up to what has been fsynced. A process never appends to a
// segment an earlier process wrote, so a torn last line can only end a closed segment; the
// reader skips it and counts it (as it does a line whose JSON or checksum is bad).
//
// A Spool is not safe for concurrent use: the sink's goroutine owns it.
type Spool struct {
	cfg SpoolConfig
	m   *metrics.Metrics

	segs      []*segment // by seq; the last one may be the active one
	active    *segment
	f         *os.File
	w         *bufio.Writer
	synced    int64 // bytes of the active segment known to be on disk
	nextSeq   uint64
	total     int64
	committed Position // everything before it reached Kafka
	cursor    Position // everything before it was read (≥ committed)

	rf    *os.File // read handle of the cursor's segment
	rfSeq uint64

	loaded SpoolState
}

// OpenSpool opens (creating it if needed) the spool in cfg.Dir and its state.
func OpenSpool(cfg SpoolConfig, m *metrics.Metrics) (*Spool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("spool: create %s: %w", cfg.Dir, err)
	}
	s := &Spool{cfg: cfg, m: m, nextSeq: 1}
	des, err := os.ReadDir(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("spool: list %s: %w", cfg.Dir, err)
	}
	for _, de := range des {
		name := de.Name()
		if !strings.HasPrefix(name, segPrefix) || !strings.HasSuffix(name, segSuffix) {
			continue
		}
		seq, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, segPrefix), segSuffix), 10, 64)
		if err != nil {
			continue
		}
		info, err := de.Info()
		if err != nil {
			return nil, fmt.Errorf("spool: stat %s: %w", name, err)
		}
		s.segs = append(s.segs, &segment{seq: seq, size: info.Size()})
		s.total += info.Size()
	}
	sort.Slice(s.segs, func(i, j int) bool { return s.segs[i].seq < s.segs[j].seq })
	if n := len(s.segs); n > 0 {
		s.nextSeq = s.segs[n-1].seq + 1
	}
	st, err := readSpoolState(filepath.Join(cfg.Dir, stateFile))
	if err != nil {
		return nil, err
	}
	s.loaded = st
	s.committed = Position{Seq: st.ReadSeq, Off: st.ReadOff}
	// The state may point into a segment that was removed after it was fully replayed.
	if seg := s.find(s.committed.Seq); seg == nil {
		s.committed = Position{Seq: s.firstSeqFrom(s.committed.Seq), Off: 0}
	} else if s.committed.Off > seg.size {
		s.committed.Off = seg.size
	}
	s.cursor = s.committed
	s.removeConsumed()
	s.gauge()
	return s, nil
}

// Loaded is the state file as it was when the spool was opened (the zero value, which
// counts as clean, when there was none).
func (s *Spool) Loaded() SpoolState { return s.loaded }

func readSpoolState(path string) (SpoolState, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return SpoolState{Version: spoolStateVer, Clean: true}, nil
	}
	if err != nil {
		return SpoolState{}, fmt.Errorf("spool: read state %s: %w", path, err)
	}
	var st SpoolState
	if err := json.Unmarshal(b, &st); err != nil {
		return SpoolState{}, fmt.Errorf("spool: state %s: %w", path, err)
	}
	if st.Version != spoolStateVer {
		return SpoolState{}, fmt.Errorf("spool: state %s has version %d, want %d", path, st.Version, spoolStateVer)
	}
	return st, nil
}

// SaveState writes the committed position atomically, with the clean flag and safe time.
func (s *Spool) SaveState(clean bool, safeMs int64) error {
	st := SpoolState{Version: spoolStateVer, ReadSeq: s.committed.Seq, ReadOff: s.committed.Off,
		Clean: clean, SafeMs: safeMs, WrittenMs: time.Now().UnixMilli()}
	b, _ := json.Marshal(st)
	if err := atomicfile.WriteFile(filepath.Join(s.cfg.Dir, stateFile), b, 0o640); err != nil {
		s.m.SpoolErrors.WithLabelValues("state").Inc()
		return fmt.Errorf("spool: %w", err)
	}
	return nil
}

func (s *Spool) find(seq uint64) *segment {
	for _, seg := range s.segs {
		if seg.seq == seq {
			return seg
		}
	}
	return nil
}

// firstSeqFrom is the first existing segment at or after seq (or the next one to be made).
func (s *Spool) firstSeqFrom(seq uint64) uint64 {
	for _, seg := range s.segs {
		if seg.seq >= seq {
			return seg.seq
		}
	}
	return s.nextSeq
}

func (s *Spool) segPath(seq uint64) string {
	return filepath.Join(s.cfg.Dir, fmt.Sprintf("%s%020d%s", segPrefix, seq, segSuffix))
}

func (s *Spool) gauge() {
	if s.cfg.quiet {
		return
	}
	s.m.SpoolBytes.Set(float64(s.total))
	s.m.SpoolSegments.Set(float64(len(s.segs)))
}

// Bytes is the size of all segments.
func (s *Spool) Bytes() int64 { return s.total }

// Full reports whether appending n more bytes would exceed the bound.
func (s *Spool) Full(n int64) bool { return s.total+n > s.cfg.MaxBytes }

// Pending is the number of bytes not yet committed (written but not replayed).
func (s *Spool) Pending() int64 {
	var n int64
	for _, seg := range s.segs {
		switch {
		case seg.seq > s.committed.Seq:
			n += seg.size
		case seg.seq == s.committed.Seq:
			n += seg.size - s.committed.Off
		}
	}
	return n
}

// Empty reports whether every record written has been committed.
func (s *Spool) Empty() bool { return s.Pending() == 0 }

// Unsynced reports whether records were appended since the last Sync.
func (s *Spool) Unsynced() bool { return s.active != nil && s.synced < s.active.size }

// encodeLine appends the spool line of m (with key) to b.
func encodeLine(b []byte, m *Message, key string) ([]byte, error) {
	v := bytes.TrimRight(m.Value, "\n")
	if len(v) == 0 || bytes.IndexByte(v, '\n') >= 0 || !json.Valid(v) {
		return b, errors.New("spool: record value is not one line of JSON")
	}
	b = append(b, `{"t":`...)
	b = appendJSONString(b, m.Topic)
	b = append(b, `,"k":`...)
	b = appendJSONString(b, key)
	b = append(b, `,"s":`...)
	b = appendJSONString(b, m.Stream)
	b = append(b, `,"p":`...)
	b = strconv.AppendInt(b, m.Pos, 10)
	b = append(b, `,"c":`...)
	b = strconv.AppendUint(b, uint64(crc32.ChecksumIEEE(v)), 10)
	b = append(b, `,"v":`...)
	b = append(b, v...)
	b = append(b, "}\n"...)
	return b, nil
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

type spoolLine struct {
	T string          `json:"t"`
	K string          `json:"k"`
	S string          `json:"s"`
	P int64           `json:"p"`
	C uint32          `json:"c"`
	V json.RawMessage `json:"v"`
}

// decodeLine parses one spool line (without its newline); reason is set when it is damaged.
func decodeLine(line []byte) (Entry, string) {
	var sl spoolLine
	if err := json.Unmarshal(line, &sl); err != nil || sl.T == "" || len(sl.V) == 0 {
		return Entry{}, "bad_json"
	}
	if crc32.ChecksumIEEE(sl.V) != sl.C {
		return Entry{}, "checksum"
	}
	return Entry{Msg: Message{Topic: sl.T, Value: []byte(sl.V), Stream: sl.S, Pos: sl.P}, Key: sl.K}, ""
}

// Append writes msgs (all with key) to the active segment, opening and rotating segments
// as needed. With FullShed it first sheds the oldest segments to stay within MaxBytes; with
// FullBlock the caller checks Full before appending, and records that must be spooled
// anyway (produce failures) may exceed the bound. It returns how many records were shed.
// The records are in the kernel's hands when it returns (they survive a kill of the
// process) and durable (they survive a power loss) only after the next Sync.
func (s *Spool) Append(msgs []*Message, key string) (shed int, err error) {
	var line []byte
	for _, m := range msgs {
		line, err = encodeLine(line[:0], m, key)
		if err != nil {
			return shed, err
		}
		if s.cfg.Full == FullShed {
			n, err := s.shedFor(int64(len(line)))
			shed += n
			if err != nil {
				return shed, err
			}
		}
		if s.active == nil {
			if err := s.openActive(); err != nil {
				return shed, err
			}
		}
		if _, err := s.w.Write(line); err != nil {
			s.m.SpoolErrors.WithLabelValues("write").Inc()
			return shed, fmt.Errorf("spool: write %s: %w", s.segPath(s.active.seq), err)
		}
		s.active.size += int64(len(line))
		s.total += int64(len(line))
		if s.active.size >= s.cfg.SegmentBytes {
			if err := s.rotate(); err != nil {
				return shed, err
			}
		}
	}
	s.gauge()
	// Hand the lines to the kernel now (one write per Append: the buffer only batches one
	// call's lines): a SIGKILL before the next fsync then loses nothing spooled, only a power
	// loss does. Left in the buffer they would die with the process, in no gauge.
	if s.active != nil {
		if err := s.w.Flush(); err != nil {
			s.m.SpoolErrors.WithLabelValues("write").Inc()
			return shed, fmt.Errorf("spool: write %s: %w", s.segPath(s.active.seq), err)
		}
	}
	return shed, nil
}

func (s *Spool) openActive() error {
	seq := s.nextSeq
	path := s.segPath(seq)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o640)
	if err != nil {
		s.m.SpoolErrors.WithLabelValues("write").Inc()
		return fmt.Errorf("spool: create %s: %w", path, err)
	}
	if err := atomicfile.SyncDir(s.cfg.Dir); err != nil {
		s.m.SpoolErrors.WithLabelValues("sync").Inc()
		f.Close()
		return fmt.Errorf("spool: %w", err)
	}
	s.nextSeq++
	s.active = &segment{seq: seq}
	s.segs = append(s.segs, s.active)
	s.f = f
	s.w = bufio.NewWriterSize(f, 256<<10)
	s.synced = 0
	return nil
}

// rotate closes the active segment after fsyncing it.
func (s *Spool) rotate() error {
	if s.active == nil {
		return nil
	}
	err := s.Sync()
	if cerr := s.f.Close(); err == nil && cerr != nil {
		s.m.SpoolErrors.WithLabelValues("write").Inc()
		err = fmt.Errorf("spool: close %s: %w", s.segPath(s.active.seq), cerr)
	}
	s.active, s.f, s.w = nil, nil, nil
	return err
}

// Sync makes every appended record durable: flush the buffer and fsync the active segment.
func (s *Spool) Sync() error {
	if s.active == nil || s.synced == s.active.size {
		return nil
	}
	if err := s.w.Flush(); err != nil {
		s.m.SpoolErrors.WithLabelValues("write").Inc()
		return fmt.Errorf("spool: write %s: %w", s.segPath(s.active.seq), err)
	}
	if err := s.f.Sync(); err != nil {
		s.m.SpoolErrors.WithLabelValues("sync").Inc()
		return fmt.Errorf("spool: fsync %s: %w", s.segPath(s.active.seq), err)
	}
	s.synced = s.active.size
	return nil
}

// shedFor removes oldest segments until n more bytes fit, and counts the records lost.
func (s *Spool) shedFor(n int64) (int, error) {
	shed := 0
	for s.total+n > s.cfg.MaxBytes && len(s.segs) > 0 {
		oldest := s.segs[0]
		if oldest == s.active {
			if err := s.rotate(); err != nil {
				return shed, err
			}
		}
		// Records before the cursor are being replayed (or were): not lost.
		var from int64
		switch {
		case s.cursor.Seq > oldest.seq:
			from = oldest.size
		case s.cursor.Seq == oldest.seq:
			from = s.cursor.Off
		}
		lost, err := s.countLines(oldest, from)
		if err != nil {
			s.m.SpoolErrors.WithLabelValues("read").Inc()
		}
		if err := s.removeSeg(oldest); err != nil {
			return shed, err
		}
		next := s.firstSeqFrom(oldest.seq + 1)
		if s.cursor.Seq <= oldest.seq {
			s.cursor = Position{Seq: next}
		}
		if s.committed.Seq <= oldest.seq {
			s.committed = Position{Seq: next}
		}
		shed += lost
		s.m.RecordsDropped.WithLabelValues(metrics.DropSpoolFull).Add(float64(lost))
	}
	return shed, nil
}

func (s *Spool) countLines(seg *segment, from int64) (int, error) {
	if from >= seg.size {
		return 0, nil
	}
	f, err := os.Open(s.segPath(seg.seq))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	r := io.NewSectionReader(f, from, seg.size-from)
	n := 0
	for {
		k, err := r.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func (s *Spool) removeSeg(seg *segment) error {
	if s.rf != nil && s.rfSeq == seg.seq {
		s.rf.Close()
		s.rf = nil
	}
	if err := os.Remove(s.segPath(seg.seq)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.m.SpoolErrors.WithLabelValues("remove").Inc()
		return fmt.Errorf("spool: remove %s: %w", s.segPath(seg.seq), err)
	}
	for i, x := range s.segs {
		if x == seg {
			s.segs = append(s.segs[:i], s.segs[i+1:]...)
			break
		}
	}
	s.total -= seg.size
	s.gauge()
	return nil
}

// Read returns up to max records from the cursor on, never past what has been fsynced,
// and moves the cursor after them. Damaged lines are skipped and counted.
func (s *Spool) Read(max int) ([]Entry, error) {
	var out []Entry
	for len(out) < max {
		seg := s.find(s.cursor.Seq)
		if seg == nil {
			next := s.firstSeqFrom(s.cursor.Seq)
			if next == s.cursor.Seq || s.find(next) == nil {
				return out, nil // nothing more
			}
			s.cursor = Position{Seq: next}
			continue
		}
		limit := seg.size
		if seg == s.active {
			limit = s.synced
		}
		if s.cursor.Off >= limit {
			if seg == s.active {
				return out, nil
			}
			next := s.firstSeqFrom(seg.seq + 1)
			if s.find(next) == nil {
				return out, nil
			}
			s.cursor = Position{Seq: next}
			continue
		}
		got, err := s.readSeg(seg, limit, max-len(out), &out)
		if err != nil {
			return out, err
		}
		if got == 0 && seg == s.active {
			return out, nil
		}
	}
	return out, nil
}

func (s *Spool) readSeg(seg *segment, limit int64, max int, out *[]Entry) (int, error) {
	if s.rf == nil || s.rfSeq != seg.seq {
		if s.rf != nil {
			s.rf.Close()
		}
		f, err := os.Open(s.segPath(seg.seq))
		if err != nil {
			s.m.SpoolErrors.WithLabelValues("read").Inc()
			return 0, fmt.Errorf("spool: open %s: %w", s.segPath(seg.seq), err)
		}
		s.rf, s.rfSeq = f, seg.seq
	}
	br := bufio.NewReaderSize(io.NewSectionReader(s.rf, s.cursor.Off, limit-s.cursor.Off), 256<<10)
	n := 0
	for n < max {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// a line longer than the buffer: collect it whole
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if len(line) > 0 && line[len(line)-1] == '\n' {
			s.cursor.Off += int64(len(line))
			e, reason := decodeLine(line[:len(line)-1])
			if reason != "" {
				s.m.SpoolCorrupt.WithLabelValues(reason).Inc()
				continue
			}
			e.End = s.cursor
			*out = append(*out, e)
			n++
			continue
		}
		if len(line) > 0 { // no newline before the limit: a torn last record
			s.cursor.Off += int64(len(line))
			s.m.SpoolCorrupt.WithLabelValues("torn").Inc()
		}
		if err != nil && !errors.Is(err, io.EOF) {
			s.m.SpoolErrors.WithLabelValues("read").Inc()
			return n, fmt.Errorf("spool: read %s: %w", s.segPath(seg.seq), err)
		}
		return n, nil
	}
	return n, nil
}

// Commit records that everything before p reached Kafka and removes segments wholly before it.
func (s *Spool) Commit(p Position) {
	if s.committed.before(p) {
		s.committed = p
	}
	s.removeConsumed()
}

// CommitRead commits everything read so far. Only when every entry Read returned has been
// committed: what lies between is damaged lines Read skipped (and counted).
func (s *Spool) CommitRead() { s.Commit(s.cursor) }

func (s *Spool) removeConsumed() {
	for len(s.segs) > 0 {
		seg := s.segs[0]
		if seg == s.active || s.cursor.Seq < seg.seq ||
			!(seg.seq < s.committed.Seq || seg.seq == s.committed.Seq && s.committed.Off >= seg.size) {
			return
		}
		if err := s.removeSeg(seg); err != nil {
			return
		}
		if s.committed.Seq == seg.seq {
			s.committed = Position{Seq: s.firstSeqFrom(seg.seq + 1)}
		}
		if s.cursor.Seq == seg.seq {
			s.cursor = s.committed
		}
	}
}

// Scan calls fn for every record from the committed position on (used after an unclean
// stop to learn which records the spool already holds). It does not move the cursor.
func (s *Spool) Scan(fn func(stream string, pos int64)) error {
	saved := s.cursor
	defer func() { s.cursor = saved }()
	for {
		es, err := s.readAll(4096)
		for _, e := range es {
			fn(e.Msg.Stream, e.Msg.Pos)
		}
		if err != nil {
			return err
		}
		if len(es) == 0 {
			return nil
		}
	}
}

// readAll is Read that also reads unsynced bytes (only used before anything is appended).
func (s *Spool) readAll(max int) ([]Entry, error) {
	if s.active != nil {
		if err := s.Sync(); err != nil {
			return nil, err
		}
	}
	return s.Read(max)
}

// Close syncs and closes the active segment.
func (s *Spool) Close() error {
	err := s.rotate()
	if s.rf != nil {
		s.rf.Close()
		s.rf = nil
	}
	return err
}
