// Package tailer follows nginx access logs and turns each complete line into an
// http_request/1 record for the sink.
//
// It polls (every PollInterval, 250 ms by default) rather than using inotify: polling
// works the same on every filesystem (including overlay and NFS), sees truncation, and
// costs one fstat per file per poll. Files are known by device and inode:
//
//   - rename rotation (logrotate's default, then USR1 so nginx reopens): when the path
//     names a new inode, the old file is read to its end before the new one in every poll,
//     and kept open until it has not grown for RotateGrace (nginx workers reopen one by one,
//     and a buffered log flushes late), then closed. A file deleted while open is read to
//     its end the same way.
//   - several rotations between two polls (or while stopped): when a path names another
//     file, the path's rotation siblings (path.1, path-20261124, ...) that the tailer does
//     not know and that were modified since it last saw the path's file are files that
//     lived and were rotated away unseen: they are read whole, oldest first, before the new
//     file. Known files (followed, or closed: the last maxRetired stay in the checkpoint)
//     are resumed at their offset, never read again.
//   - copytruncate: the file shrank below the read offset, or the bytes just before the
//     offset are not the ones read there (truncated and rewritten between two polls, even
//     past the old size): start again at 0 with a new generation. Lines written after the
//     last poll and before the truncation are in the copy only and are lost; that window is
//     inherent to copytruncate.
//   - a path that does not exist yet is picked up when it appears (patterns are globs,
//     evaluated every poll for literal paths and every GlobInterval for patterns).
//   - a partial last line (no newline yet) is held until its newline arrives. If its file
//     is rotated away or truncated while the line is incomplete, the partial line is
//     handed to the parser as it is (usually counted as a parse error) and counted in
//     ccab_collector_log_partial_lines_total.
//
// Patterns should name the live log only (access.log, not access.log*): the tailer follows
// rotated files by inode itself.
//
// Checkpoints (per file: device, inode, generation, offset, fingerprints of its first bytes
// and of the bytes before the offset) are written atomically at most every
// CheckpointInterval and at Close. An offset is checkpointed only after the sink reported
// every record up to it durable (Kafka acknowledged, or spooled and fsynced), so a restart
// neither loses nor skips a line; the sink drops the lines it re-reads that already reached
// Kafka or the spool.
package tailer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ccab-dev/ccab/collectors/metrics"
	"github.com/ccab-dev/ccab/collectors/nginxlog"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/sink"
)

// StartAt values: where to start a file found at the first poll that has no checkpoint.
const (
	StartBeginning = "beginning"
	StartEnd       = "end"
)

// Config configures a Tailer.
type Config struct {
	Paths              []string // glob patterns of the access logs
	Topic              string   // Kafka topic of the records
	PollInterval       time.Duration
	GlobInterval       time.Duration
	RotateGrace        time.Duration
	CheckpointPath     string
	CheckpointInterval time.Duration
	StartAt            string
	MaxLineBytes       int
	BatchLines         int
	ReadBytes          int // read buffer per file
}

// Validate reports the first problem of c.
func (c Config) Validate() error {
	switch {
	case len(c.Paths) == 0:
		return errors.New("tailer: no paths")
	case c.Topic == "":
		return errors.New("tailer: no topic")
	case c.PollInterval <= 0 || c.GlobInterval <= 0 || c.CheckpointInterval <= 0 || c.RotateGrace < 0:
		return errors.New("tailer: poll, glob and checkpoint intervals must be positive")
	case c.CheckpointPath == "":
		return errors.New("tailer: no checkpoint path")
	case c.StartAt != StartBeginning && c.StartAt != StartEnd:
		return fmt.Errorf("tailer: start_at %q is neither %q nor %q", c.StartAt, StartBeginning, StartEnd)
	case c.MaxLineBytes < 256:
		return fmt.Errorf("tailer: max line size %d is below 256", c.MaxLineBytes)
	case c.BatchLines <= 0 || c.ReadBytes < 4096:
		return errors.New("tailer: batch lines must be positive and the read buffer at least 4096 bytes")
	}
	for _, p := range c.Paths {
		if _, err := filepath.Match(p, ""); err != nil {
			return fmt.Errorf("tailer: pattern %q: %w", p, err)
		}
	}
	return nil
}

// Output is where records go: the sink.
type Output interface {
	Submit(ctx context.Context, b sink.Batch) error
	SafeMs() int64
}

// Tailer follows the configured files.
type Tailer struct {
	cfg    Config
	parser *nginxlog.Parser
	meta   func() record.Meta
	out    Output
	m      *metrics.Metrics
	log    *slog.Logger

	mu        sync.Mutex // guards trackers (Done callbacks come from the sink's goroutine)
	followers map[fileID]*follower
	byPath    map[string]*follower
	restored  map[fileID]FileState // checkpoint entries not yet matched to an open file
	retired   map[fileID]FileState // closed rotated files (bounded): resumed, never re-read
	seq       uint64

	loaded    Checkpoint
	hadCkpt   bool
	firstPoll bool
	lastGlob  time.Time
	lastCkpt  time.Time
	ckptDirty bool
	readBuf   []byte
	rec       record.HTTPRequest // parsed into, one line at a time (Poll runs on one goroutine)
	scratch   nginxlog.Scratch
	enc       record.HTTPEncoder // the host fields' text, encoded once

	poolMu     sync.Mutex // guards the recycled buffers (Done callbacks return them)
	freeChunks [][]byte
	freeMsgs   [][]sink.Message
}

type fileID struct{ dev, ino uint64 }

// New loads the checkpoint and marks it unclean (from now on records may reach Kafka that
// it does not account for).
func New(cfg Config, parser *nginxlog.Parser, meta func() record.Meta, out Output, m *metrics.Metrics, log *slog.Logger) (*Tailer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.CheckpointPath), 0o750); err != nil {
		return nil, fmt.Errorf("tailer: create checkpoint dir: %w", err)
	}
	c, had, err := loadCheckpoint(cfg.CheckpointPath)
	if err != nil {
		return nil, err
	}
	t := &Tailer{cfg: cfg, parser: parser, meta: meta, out: out, m: m, log: log,
		followers: map[fileID]*follower{}, byPath: map[string]*follower{}, restored: map[fileID]FileState{},
		retired: map[fileID]FileState{}, loaded: c, hadCkpt: had, firstPoll: true, readBuf: make([]byte, cfg.ReadBytes)}
	for _, fs := range c.Files {
		t.restored[fileID{fs.Dev, fs.Ino}] = fs
	}
	mark := c
	mark.Clean = false
	if c.Clean {
		mark.SafeMs = time.Now().UnixMilli()
	}
	if err := saveCheckpoint(cfg.CheckpointPath, mark); err != nil {
		return nil, err
	}
	return t, nil
}

// Unclean reports whether the previous run stopped without a final checkpoint (or with
// records in flight), and the safe time of its last checkpoint: records after the
// checkpointed offsets may be in Kafka, produced at or after that time.
func (t *Tailer) Unclean() (bool, int64) {
	return !t.loaded.Clean, t.loaded.SafeMs
}

// Run polls until ctx is done (reps == 0) or for reps polls. It returns nil when stopped
// by ctx; call Close afterwards (after the sink has flushed) for the final checkpoint.
func (t *Tailer) Run(ctx context.Context, reps int) error {
	tick := time.NewTicker(t.cfg.PollInterval)
	defer tick.Stop()
	for i := 0; reps == 0 || i < reps; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
		if err := t.Poll(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	return nil
}

// Poll runs one cycle: find files, notice rotations, read every file to its end, and write
// a checkpoint if one is due.
func (t *Tailer) Poll(ctx context.Context) error {
	start := time.Now()
	defer func() { t.m.PollDuration.Observe(time.Since(start).Seconds()) }()
	meta := t.meta()
	t.discover(start)
	// Rotated-away files first: their lines are older than the new file's.
	for _, fo := range t.ordered() {
		if err := t.readFollower(ctx, fo, meta, start); err != nil {
			return err
		}
	}
	t.closeIdle(ctx, meta, start)
	t.m.TailedFiles.Set(float64(t.openCount()))
	if time.Since(t.lastCkpt) >= t.cfg.CheckpointInterval {
		t.checkpoint(false)
	}
	t.firstPoll = false
	return nil
}

func (t *Tailer) ordered() []*follower {
	fs := make([]*follower, 0, len(t.followers))
	for _, fo := range t.followers {
		if fo.f != nil {
			fs = append(fs, fo)
		}
	}
	sort.Slice(fs, func(i, j int) bool {
		if fs[i].rotated != fs[j].rotated {
			return fs[i].rotated
		}
		return fs[i].seq < fs[j].seq
	})
	return fs
}

func (t *Tailer) openCount() int {
	n := 0
	for _, fo := range t.followers {
		if fo.f != nil {
			n++
		}
	}
	return n
}

func hasMeta(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// discover matches the patterns, notices paths that now name another file (or none), finds
// files that lived and were rotated away between two looks at a path, and opens new files.
func (t *Tailer) discover(now time.Time) {
	globDue := now.Sub(t.lastGlob) >= t.cfg.GlobInterval
	if globDue {
		t.lastGlob = now
	}
	type away struct {
		path     string
		since    time.Time
		siblings map[fileID]time.Time
	}
	var rotated []away
	// Paths we follow: did the file behind them change?
	for path, fo := range t.byPath {
		id, _, err := statID(path)
		if err == nil && id == fo.id {
			fo.seenAt = now
			continue
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.m.TailErrors.WithLabelValues("stat").Inc()
			continue
		}
		// Renamed away (and maybe replaced), or deleted: drain the old file, then close it.
		delete(t.byPath, path)
		fo.rotated = true
		fo.lastGrowth = now
		rotated = append(rotated, away{path, fo.seenAt, fo.siblings})
		fo.seenAt, fo.siblings = time.Time{}, nil
		t.m.Rotations.WithLabelValues("rename").Inc()
		t.log.Info("log rotated: draining the old file", "path", path, "dev", fo.id.dev, "ino", fo.id.ino)
	}
	if t.firstPoll {
		// Live files of the last run whose path names another file now (taken before opening
		// anything consumes their checkpoint entries).
		for _, fs := range t.restored {
			if fs.SeenMs <= 0 || fs.Closed {
				continue
			}
			if id, _, err := statID(fs.Path); err == nil && id == (fileID{fs.Dev, fs.Ino}) {
				continue
			}
			rotated = append(rotated, away{fs.Path, time.UnixMilli(fs.SeenMs), nil})
		}
	}
	var matches []string
	for _, p := range t.cfg.Paths {
		if !hasMeta(p) {
			matches = append(matches, p)
			continue
		}
		if !globDue {
			continue
		}
		ms, err := filepath.Glob(p)
		if err != nil {
			t.m.TailErrors.WithLabelValues("glob").Inc()
			continue
		}
		matches = append(matches, ms...)
	}
	for _, path := range matches {
		if _, ok := t.byPath[path]; ok {
			continue
		}
		t.open(path, now)
	}
	if t.firstPoll {
		t.restoreRotated(now)
	}
	// Rotated files are read in the order they were found (oldest first): the restored
	// ones, then those found among the siblings; the live files after all of them.
	sort.Slice(rotated, func(i, j int) bool { return rotated[i].path < rotated[j].path })
	for _, r := range rotated {
		t.findRotatedSiblings(r.path, r.since, r.siblings, now)
	}
	if t.firstPoll {
		// What the last run knew and was not found stays known (bounded) as closed files.
		for id, fs := range t.restored {
			if !fs.Closed {
				fs.Closed, fs.SeenMs = true, now.UnixMilli() // retire orders by it
			}
			t.retire(id, fs)
		}
		t.restored = map[fileID]FileState{}
	}
}

// siblingSuffix is what follows a log's name in its rotated names: ".1", ".2" (numbered),
// "-20261124" (dateext), "-2026-11-24-1763942400" (dateformat). Compressed files (".gz")
// do not match: they are not read.
var siblingSuffix = regexp.MustCompile(`^[._-][0-9][0-9._-]*$`)

// siblingSlack allows for file timestamps that lag the clock (they are taken from a coarse
// clock, one jiffy) when comparing a file's mtime with the time a path was last seen.
const siblingSlack = time.Second

// findRotatedSiblings looks, after path was seen naming another file than at since, for
// files that were created after since, written, and rotated away before this poll (two
// rotations between two polls, or rotations while the collector was stopped): rotation
// siblings of path (path.1, path-20261124, ...) that the tailer does not know and that were
// modified since then. They are read from the start, oldest first, before the new live file.
// A known file (followed, restored from the checkpoint, or closed) is never read again; one
// that grew since it was closed is resumed where it was left.
func (t *Tailer) findRotatedSiblings(path string, since time.Time, history map[fileID]time.Time, now time.Time) {
	type cand struct {
		path  string
		id    fileID
		mtime time.Time
	}
	var found []cand
	for p, fi := range rotationSiblings(path, t.m) {
		id := idOf(fi)
		if mt, ok := history[id]; ok && !fi.ModTime().After(mt) {
			continue // there, unchanged, when the live file was opened: history
		}
		if _, ok := t.followers[id]; ok {
			continue
		}
		if fs, ok := t.known(id); ok {
			if fi.Size() > fs.Offset && t.sameFile(p, fs) {
				found = append(found, cand{p, id, fi.ModTime()})
			}
			continue
		}
		if fi.ModTime().Before(since.Add(-siblingSlack)) {
			continue // history from before the path's file was last seen
		}
		found = append(found, cand{p, id, fi.ModTime()})
	}
	sort.Slice(found, func(i, j int) bool { return found[i].mtime.Before(found[j].mtime) })
	for _, c := range found {
		f, err := os.Open(c.path)
		if err != nil {
			t.m.TailErrors.WithLabelValues("open").Inc()
			continue
		}
		fi, err := f.Stat()
		if err != nil || idOf(fi) != c.id {
			f.Close()
			continue
		}
		fo := t.start(f, c.id, c.path, fi.Size(), false, now)
		fo.rotated = true
		fo.lastGrowth = now
		t.m.Rotations.WithLabelValues("rename").Inc()
		t.log.Info("found a log rotated away between two polls: reading it", "path", c.path, "live_path", path,
			"dev", c.id.dev, "ino", c.id.ino, "offset", fo.readOff)
	}
}

// rotationSiblings returns the regular files whose names are path's rotated names.
func rotationSiblings(path string, m *metrics.Metrics) map[string]os.FileInfo {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		m.TailErrors.WithLabelValues("readdir").Inc()
		return nil
	}
	out := map[string]os.FileInfo{}
	for _, de := range des {
		name := de.Name()
		if !strings.HasPrefix(name, base) || !siblingSuffix.MatchString(name[len(base):]) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			out[p] = fi
		}
	}
	return out
}

// known returns what is remembered of a file that is not followed now.
func (t *Tailer) known(id fileID) (FileState, bool) {
	if fs, ok := t.restored[id]; ok {
		return fs, true
	}
	fs, ok := t.retired[id]
	return fs, ok
}

// sameFile reports whether the file at p still starts with the bytes fs was fingerprinted on
// (an inode can be reused by another file).
func (t *Tailer) sameFile(p string, fs FileState) bool {
	if fs.FpLen <= 0 {
		return true
	}
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	fp, err := fingerprint(f, fs.FpLen)
	return err == nil && fp == fs.Fp
}

// maxRetired bounds the closed files remembered (in memory and in the checkpoint).
const maxRetired = 64

// retire remembers a closed file, forgetting the oldest beyond maxRetired.
func (t *Tailer) retire(id fileID, fs FileState) {
	fs.Closed = true
	t.retired[id] = fs
	for len(t.retired) > maxRetired {
		var oldest fileID
		first := true
		for k, v := range t.retired {
			if first || v.SeenMs < t.retired[oldest].SeenMs || (v.SeenMs == t.retired[oldest].SeenMs && v.Path < t.retired[oldest].Path) {
				oldest, first = k, false
			}
		}
		delete(t.retired, oldest)
	}
	t.ckptDirty = true
}

// open starts following path (a file that exists).
func (t *Tailer) open(path string, now time.Time) {
	f, err := os.Open(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			t.m.TailErrors.WithLabelValues("open").Inc()
			t.log.Warn("cannot open log", "path", path, "err", err)
		}
		return
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err != nil {
			t.m.TailErrors.WithLabelValues("stat").Inc()
		}
		return
	}
	id := idOf(fi)
	if fo, ok := t.followers[id]; ok && fo.f != nil {
		// Already following this file under another name (a rotated file came back, or
		// two patterns name one file).
		f.Close()
		fo.path = path
		fo.rotated = false
		fo.seenAt = now
		t.byPath[path] = fo
		return
	}
	fo := t.start(f, id, path, fi.Size(), t.firstPoll && t.cfg.StartAt == StartEnd, now)
	fo.seenAt = now
	fo.siblings = map[fileID]time.Time{}
	for _, sfi := range rotationSiblings(path, t.m) {
		fo.siblings[idOf(sfi)] = sfi.ModTime()
	}
	t.byPath[path] = fo
}

// restoreRotated finds, after a restart, checkpointed files no pattern matched (rotated
// away while unread) by inode in the directory where they were last seen, and drains them.
// Closed files are resumed only if they still hold the content they were closed with.
func (t *Tailer) restoreRotated(now time.Time) {
	type entry struct {
		path string
		size int64
	}
	listings := map[string]map[fileID]entry{} // dir -> files by id
	ids := make([]fileID, 0, len(t.restored))
	for id := range t.restored {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return t.restored[ids[i]].Path < t.restored[ids[j]].Path })
	for _, id := range ids {
		fs := t.restored[id]
		if _, ok := t.followers[id]; ok {
			continue
		}
		dir := filepath.Dir(fs.Path)
		files, ok := listings[dir]
		if !ok {
			files = map[fileID]entry{}
			des, _ := os.ReadDir(dir)
			for _, de := range des {
				p := filepath.Join(dir, de.Name())
				if fid, size, err := statID(p); err == nil {
					files[fid] = entry{p, size}
				}
			}
			listings[dir] = files
		}
		e, ok := files[id]
		if !ok || e.size <= fs.Offset {
			continue
		}
		if fs.Closed && !t.sameFile(e.path, fs) {
			continue // the inode is another file's now
		}
		f, err := os.Open(e.path)
		if err != nil {
			t.m.TailErrors.WithLabelValues("open").Inc()
			continue
		}
		if fi, err := f.Stat(); err != nil || idOf(fi) != id {
			f.Close()
			continue
		}
		fo := t.start(f, id, e.path, e.size, false, now)
		fo.rotated = true
		fo.lastGrowth = now
		t.log.Info("resuming a rotated log found by inode", "path", e.path, "offset", fo.readOff)
	}
}

// start sets up a follower at its checkpointed (or last closed) offset, or the beginning,
// or the end.
func (t *Tailer) start(f *os.File, id fileID, path string, size int64, atEnd bool, now time.Time) *follower {
	t.seq++
	fo := &follower{t: t, id: id, path: path, f: f, opened: now, lastGrowth: now, seq: t.seq}
	var off, gen int64
	if fs, ok := t.known(id); ok {
		delete(t.restored, id)
		delete(t.retired, id)
		gen, off = fs.Gen, fs.Offset
		why := ""
		switch {
		case size < off:
			why = "truncate"
		case fs.FpLen > 0 && !fpMatches(f, 0, fs.FpLen, fs.Fp, size):
			why = "rewrite" // same inode, other content: truncated and rewritten, or a reused inode
		case fs.TailLen > 0 && !fpMatches(f, off-fs.TailLen, fs.TailLen, fs.TailFp, size):
			why = "rewrite" // same head, but not the bytes before the offset: rewritten past it
		case off > 0 && !fo.boundaryOK(off):
			why = "rewrite"
		}
		if why != "" {
			t.m.Rotations.WithLabelValues(why).Inc()
			t.log.Warn("log truncated since it was checkpointed: reading it again from the start", "path", path,
				"kind", why, "old_offset", off, "gen", gen+1)
			gen, off = gen+1, 0
		}
	} else if atEnd {
		off = lastLineEnd(f, size)
	}
	fo.setGen(gen, off)
	t.followers[id] = fo
	t.ckptDirty = true
	t.log.Info("following log", "path", path, "dev", id.dev, "ino", id.ino, "gen", gen, "offset", off)
	return fo
}

// fpMatches reports whether the n bytes of f at from (all within size) have CRC-32 fp.
func fpMatches(f *os.File, from, n int64, fp uint32, size int64) bool {
	if from < 0 || from+n > size {
		return false
	}
	got, err := rangeFp(f, from, n)
	return err == nil && got == fp
}

// closeIdle closes rotated files that reached their end and stayed idle for RotateGrace,
// flushing an incomplete last line, and forgets files whose records are all delivered.
func (t *Tailer) closeIdle(ctx context.Context, meta record.Meta, now time.Time) {
	for id, fo := range t.followers {
		if fo.f != nil && fo.rotated && !fo.grew && now.Sub(fo.lastGrowth) >= t.cfg.RotateGrace {
			if len(fo.partial) > 0 {
				t.m.PartialLines.WithLabelValues("flushed").Inc()
				fo.flushPartial(ctx, meta)
			}
			fo.closed = t.closedState(fo)
			fo.f.Close()
			fo.f = nil
			t.log.Info("closed rotated log", "path", fo.path, "dev", id.dev, "ino", id.ino, "offset", fo.readOff)
		}
		if fo.f == nil && fo.drained() {
			delete(t.followers, id)
			fs := t.closedNow(fo)
			fs.SeenMs = now.UnixMilli() // retire orders by it
			t.retire(id, fs)
		}
	}
}

// fileState is fo's checkpoint entry: its committed offset and the fingerprints of its first
// bytes and of the bytes just before that offset (read from the open file).
func (t *Tailer) fileState(fo *follower) FileState {
	t.mu.Lock()
	fs := FileState{Dev: fo.id.dev, Ino: fo.id.ino, Gen: fo.tr.gen, Offset: fo.tr.committed, Path: fo.path}
	t.mu.Unlock()
	if !fo.seenAt.IsZero() {
		fs.SeenMs = fo.seenAt.UnixMilli()
	}
	if fo.f != nil {
		n := min(fs.Offset, fpMax)
		if fp, err := fingerprint(fo.f, n); err == nil {
			fs.FpLen, fs.Fp = n, fp
		}
		if n, fp, err := tailFingerprint(fo.f, fs.Offset); err == nil {
			fs.TailLen, fs.TailFp = n, fp
		}
	}
	return fs
}

// closedState is fo's entry as it is closed: fingerprints at the end of what was read (the
// offset committed once its records are durable).
func (t *Tailer) closedState(fo *follower) FileState {
	fs := t.fileState(fo)
	fs.Offset, fs.Closed, fs.SeenMs = fo.readOff, true, 0
	if n, fp, err := tailFingerprint(fo.f, fs.Offset); err == nil {
		fs.TailLen, fs.TailFp = n, fp
	} else {
		fs.TailLen, fs.TailFp = 0, 0
	}
	return fs
}

// closedNow is a closed file's entry with its committed offset (the tail fingerprint only
// if it was taken at that offset).
func (t *Tailer) closedNow(fo *follower) FileState {
	fs := fo.closed
	t.mu.Lock()
	fs.Gen, fs.Offset = fo.tr.gen, fo.tr.committed
	t.mu.Unlock()
	if fs.Offset != fo.closed.Offset {
		fs.TailLen, fs.TailFp = 0, 0
	}
	return fs
}

// checkpoint writes the state file. final marks it clean if nothing is in flight.
func (t *Tailer) checkpoint(final bool) error {
	safe := t.out.SafeMs() // before the offsets: see sink.SafeMs
	c := Checkpoint{SafeMs: safe}
	clean := final
	var lag int64
	t.mu.Lock()
	for _, fo := range t.followers {
		if len(fo.tr.spans) > 0 {
			clean = false
		}
		lag += fo.readOff - int64(len(fo.partial)) - fo.tr.committed
	}
	t.mu.Unlock()
	for _, fo := range t.followers {
		fs := t.fileState(fo)
		if fo.f == nil { // closed, records still in flight
			fs = t.closedNow(fo)
		}
		c.Files = append(c.Files, fs)
	}
	// Files restored from the checkpoint but not found yet, and closed files, stay in it.
	for _, fs := range t.restored {
		c.Files = append(c.Files, fs)
	}
	for _, fs := range t.retired {
		c.Files = append(c.Files, fs)
	}
	sort.Slice(c.Files, func(i, j int) bool {
		if c.Files[i].Path != c.Files[j].Path {
			return c.Files[i].Path < c.Files[j].Path
		}
		return c.Files[i].Ino < c.Files[j].Ino
	})
	c.Clean = clean
	t.m.CheckpointLagBytes.Set(float64(lag))
	t.lastCkpt = time.Now()
	if err := saveCheckpoint(t.cfg.CheckpointPath, c); err != nil {
		t.m.CheckpointErrors.Inc()
		t.log.Error("checkpoint write failed", "err", err)
		return err
	}
	t.m.CheckpointWrites.Inc()
	t.ckptDirty = false
	return nil
}

// Close writes the final checkpoint (clean if every record read was delivered) and closes
// the files. Call it after the sink has flushed, so that every Done has been called.
func (t *Tailer) Close() error {
	err := t.checkpoint(true)
	for _, fo := range t.followers {
		if fo.f != nil {
			fo.f.Close()
			fo.f = nil
		}
	}
	return err
}

func idOf(fi os.FileInfo) fileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}
	}
	return fileID{}
}

func statID(path string) (fileID, int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, 0, err
	}
	return idOf(fi), fi.Size(), nil
}

// lastLineEnd is the offset just after the last newline before size (0 if none in the last 1 MiB).
func lastLineEnd(f *os.File, size int64) int64 {
	const step = 64 << 10
	buf := make([]byte, step)
	for end := size; end > 0 && size-end < 1<<20; {
		from := max(0, end-step)
		n, err := f.ReadAt(buf[:end-from], from)
		if err != nil && n < int(end-from) {
			return 0
		}
		for i := n - 1; i >= 0; i-- {
			if buf[i] == '\n' {
				return from + int64(i) + 1
			}
		}
		end = from
	}
	return 0
}
