package tailer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ccab-dev/ccab/collectors/metrics"
	"github.com/ccab-dev/ccab/collectors/nginxlog"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/sink"
)

// out is a sink that keeps every record and acknowledges at once (or never, with hold).
type out struct {
	mu   sync.Mutex
	recs []sink.Message
	hold bool
	held []func()
}

func (o *out) Submit(_ context.Context, b sink.Batch) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, m := range b.Msgs { // copies: after Done the tailer reuses the values' memory
		m.Value = append([]byte(nil), m.Value...)
		o.recs = append(o.recs, m)
	}
	if o.hold {
		o.held = append(o.held, b.Done)
	} else if b.Done != nil {
		b.Done()
	}
	return nil
}

func (o *out) SafeMs() int64 { return time.Now().UnixMilli() }

// conns returns the conn_serial of every record, in order.
func (o *out) conns(t *testing.T) []int64 {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var cs []int64
	for _, m := range o.recs {
		var r record.HTTPRequest
		if err := json.Unmarshal(m.Value, &r); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, *r.ConnSerial)
	}
	return cs
}

func line(conn int) string {
	return fmt.Sprintf(`{"msec":1763769601.%03d,"remote_addr":"10.1.2.%d","connection":%d,"connection_requests":1,"request_method":"GET","status":200,"bytes_sent":100,"body_bytes_sent":50,"request_time":0.010}`+"\n",
		conn%1000, conn%250, conn)
}

func appendLines(t *testing.T, path string, from, to int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := from; i < to; i++ {
		if _, err := f.WriteString(line(i)); err != nil {
			t.Fatal(err)
		}
	}
}

func newTailer(t *testing.T, dir string, o *out, paths ...string) (*Tailer, *metrics.Metrics) {
	t.Helper()
	p, err := nginxlog.NewParser("json", "")
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	tl, err := New(Config{Paths: paths, Topic: "ccab.http.v1", PollInterval: 10 * time.Millisecond,
		GlobInterval: 10 * time.Millisecond, RotateGrace: 0, CheckpointPath: filepath.Join(dir, "ckpt.json"),
		CheckpointInterval: time.Hour, StartAt: StartBeginning, MaxLineBytes: 4096, BatchLines: 7, ReadBytes: 4096},
		p, func() record.Meta { return record.Meta{Host: "edge-1", SampleRate: 1} }, o, m,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return tl, m
}

func poll(t *testing.T, tl *Tailer, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := tl.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func want(from, to int) []int64 {
	var w []int64
	for i := from; i < to; i++ {
		w = append(w, int64(i))
	}
	return w
}

func sameSet(t *testing.T, got, want []int64) {
	t.Helper()
	g := append([]int64(nil), got...)
	sort.Slice(g, func(i, j int) bool { return g[i] < g[j] })
	if len(g) != len(want) {
		t.Fatalf("got %d records, want %d: %v", len(g), len(want), got)
	}
	for i := range g {
		if g[i] != want[i] {
			t.Fatalf("records differ at %d: got %v", i, got)
		}
	}
}

func TestRenameRotationDrainsTheOldFileFirst(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	appendLines(t, log, 0, 100)
	o := &out{}
	tl, m := newTailer(t, dir, o, log)
	poll(t, tl, 1)
	// logrotate: rename, create the new file; nginx still writes the old one until USR1
	if err := os.Rename(log, log+".1"); err != nil {
		t.Fatal(err)
	}
	appendLines(t, log+".1", 100, 150) // written before the reopen
	appendLines(t, log, 150, 200)      // written after the reopen
	poll(t, tl, 3)
	got := o.conns(t)
	sameSet(t, got, want(0, 200))
	for i, c := range got[:150] { // the old file's lines come before the new one's
		if c != int64(i) {
			t.Fatalf("line %d of the old file came after the new file's: %v", i, got)
		}
	}
	if v := testutil.ToFloat64(m.Rotations.WithLabelValues("rename")); v != 1 {
		t.Fatalf("rename rotations %v", v)
	}
	if v := testutil.ToFloat64(m.TailedFiles); v != 1 {
		t.Fatalf("%v files open after the grace period, want 1", v)
	}
}

func TestCopytruncateStartsAgainAtZero(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	appendLines(t, log, 0, 50)
	o := &out{}
	tl, m := newTailer(t, dir, o, log)
	poll(t, tl, 1)
	if err := os.Truncate(log, 0); err != nil {
		t.Fatal(err)
	}
	appendLines(t, log, 50, 60) // shorter than before: size < offset
	poll(t, tl, 1)
	// truncated and rewritten past the old offset between two polls
	os.Truncate(log, 0)
	appendLines(t, log, 1000, 1100)
	poll(t, tl, 1)
	sameSet(t, o.conns(t), append(want(0, 60), want(1000, 1100)...))
	if v := testutil.ToFloat64(m.Rotations.WithLabelValues("truncate")); v != 1 {
		t.Fatalf("truncations %v", v)
	}
	if v := testutil.ToFloat64(m.Rotations.WithLabelValues("rewrite")); v != 1 {
		t.Fatalf("rewrites %v", v)
	}
}

func TestMissingFileIsPickedUpWhenItAppears(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	o := &out{}
	tl, _ := newTailer(t, dir, o, log, filepath.Join(dir, "vhost-*.log"))
	poll(t, tl, 2)
	appendLines(t, log, 0, 10)
	appendLines(t, filepath.Join(dir, "vhost-a.log"), 10, 20)
	time.Sleep(15 * time.Millisecond) // glob interval
	poll(t, tl, 1)
	sameSet(t, o.conns(t), want(0, 20))
}

func TestPartialLineIsHeldUntilItsNewline(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	appendLines(t, log, 0, 3)
	l := line(3)
	f, _ := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(l[:40])
	o := &out{}
	tl, m := newTailer(t, dir, o, log)
	poll(t, tl, 1)
	sameSet(t, o.conns(t), want(0, 3))
	f.WriteString(l[40:])
	f.Close()
	poll(t, tl, 1)
	sameSet(t, o.conns(t), want(0, 4))
	if v := testutil.ToFloat64(m.ParseErrors.WithLabelValues("bad_json")); v != 0 {
		t.Fatalf("a held partial line was parsed early (%v errors)", v)
	}
}

func TestPartialLineIsFlushedWhenItsFileIsRotatedAway(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	appendLines(t, log, 0, 2)
	f, _ := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"msec":1.0,"connection":99`) // torn, never completed
	f.Close()
	o := &out{}
	tl, m := newTailer(t, dir, o, log)
	poll(t, tl, 1)
	os.Rename(log, log+".1")
	appendLines(t, log, 2, 4)
	poll(t, tl, 3)
	sameSet(t, o.conns(t), want(0, 4))
	if v := testutil.ToFloat64(m.PartialLines.WithLabelValues("flushed")); v != 1 {
		t.Fatalf("flushed partial lines %v", v)
	}
	if v := testutil.ToFloat64(m.ParseErrors.WithLabelValues("bad_json")); v != 1 {
		t.Fatalf("the flushed partial line was not counted as a parse error (%v)", v)
	}
}

func TestCheckpointRestartNeitherLosesNorRepeats(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	appendLines(t, log, 0, 100)
	o := &out{}
	tl, _ := newTailer(t, dir, o, log)
	poll(t, tl, 1)
	if err := tl.Close(); err != nil {
		t.Fatal(err)
	}
	appendLines(t, log, 100, 150)
	o2 := &out{}
	tl2, _ := newTailer(t, dir, o2, log)
	if unclean, _ := tl2.Unclean(); unclean {
		t.Fatal("a clean Close was read back as unclean")
	}
	poll(t, tl2, 1)
	sameSet(t, o2.conns(t), want(100, 150))
	tl2.Close()
}

func TestCheckpointWaitsForDelivery(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	appendLines(t, log, 0, 30)
	o := &out{hold: true} // the sink has not made anything durable yet
	tl, _ := newTailer(t, dir, o, log)
	poll(t, tl, 1)
	o.mu.Lock()
	for _, d := range o.held[:2] { // first two batches (7 lines each) durable
		d()
	}
	o.mu.Unlock()
	tl.Close() // records still in flight: not clean
	o2 := &out{}
	tl2, _ := newTailer(t, dir, o2, log)
	if unclean, _ := tl2.Unclean(); !unclean {
		t.Fatal("checkpoint with records in flight was marked clean")
	}
	poll(t, tl2, 1)
	sameSet(t, o2.conns(t), want(14, 30))
	tl2.Close()
}

func TestRestartFindsARotatedFileByInode(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	appendLines(t, log, 0, 20)
	o := &out{}
	tl, _ := newTailer(t, dir, o, log)
	poll(t, tl, 1)
	tl.Close()
	// while the collector is down: more lines, rotation, new file
	appendLines(t, log, 20, 30)
	os.Rename(log, log+".1")
	appendLines(t, log, 30, 40)
	o2 := &out{}
	tl2, _ := newTailer(t, dir, o2, log)
	poll(t, tl2, 2)
	sameSet(t, o2.conns(t), want(20, 40))
	tl2.Close()
}

func TestStartAtEndSkipsHistoryOfNewFilesOnly(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	appendLines(t, log, 0, 10)
	p, _ := nginxlog.NewParser("json", "")
	o := &out{}
	tl, err := New(Config{Paths: []string{log}, Topic: "t", PollInterval: time.Millisecond, GlobInterval: time.Millisecond,
		CheckpointPath: filepath.Join(dir, "c.json"), CheckpointInterval: time.Hour, StartAt: StartEnd,
		MaxLineBytes: 4096, BatchLines: 10, ReadBytes: 4096}, p, func() record.Meta { return record.Meta{} }, o,
		metrics.New(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	poll(t, tl, 1)
	appendLines(t, log, 10, 12)
	poll(t, tl, 1)
	sameSet(t, o.conns(t), want(10, 12))
}

func mv(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

// A file that lived only between two polls (rotated in, written, rotated on) is found among
// the rotation siblings and read whole, after the file it replaced and before the new one.
func TestShortLivedRotatedFileIsReadWhereverItWasRenamed(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	appendLines(t, log+".2", 900, 905) // history from before the tailer: not read
	appendLines(t, log+".1", 905, 910)
	appendLines(t, log, 0, 10)
	o := &out{}
	tl, _ := newTailer(t, dir, o, log)
	poll(t, tl, 1)
	// Between two polls: two rotations (logrotate shifts .1 → .2 → .3, then the live file to .1).
	mv(t, log+".2", log+".3")
	mv(t, log+".1", log+".2")
	mv(t, log, log+".1")
	appendLines(t, log+".1", 10, 12) // before the reopen
	appendLines(t, log, 12, 17)      // the short-lived file: 5 lines
	mv(t, log+".3", log+".4")
	mv(t, log+".2", log+".3")
	mv(t, log+".1", log+".2")
	mv(t, log, log+".1")
	appendLines(t, log, 17, 25)
	poll(t, tl, 3)
	got := o.conns(t)
	if len(got) != 25 {
		t.Fatalf("got %d records, want 25 (0..24): %v", len(got), got)
	}
	for i, c := range got {
		if c != int64(i) {
			t.Fatalf("record %d is %d: %v", i, c, got)
		}
	}
	// A later rotation does not read anything again.
	mv(t, log+".2", log+".3")
	mv(t, log+".1", log+".2")
	mv(t, log, log+".1")
	appendLines(t, log, 25, 27)
	poll(t, tl, 3)
	sameSet(t, o.conns(t), want(0, 27))
}

// The same while the collector is stopped: the checkpoint remembers when the live file was
// last seen under its name.
func TestRestartFindsAShortLivedRotatedFile(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	appendLines(t, log+".1", 900, 905) // history from yesterday: not read
	old := time.Now().Add(-24 * time.Hour)
	if err := os.Chtimes(log+".1", old, old); err != nil {
		t.Fatal(err)
	}
	appendLines(t, log, 0, 10)
	o := &out{}
	tl, _ := newTailer(t, dir, o, log)
	poll(t, tl, 1)
	tl.Close()
	appendLines(t, log, 10, 12) // the live file grows after the checkpoint
	mv(t, log+".1", log+".2")
	mv(t, log, log+".1")
	appendLines(t, log, 12, 17)
	mv(t, log+".2", log+".3")
	mv(t, log+".1", log+".2")
	mv(t, log, log+".1")
	appendLines(t, log, 17, 22)
	o2 := &out{}
	tl2, _ := newTailer(t, dir, o2, log)
	poll(t, tl2, 3)
	got := o2.conns(t)
	sameSet(t, got, want(10, 22))
	for i, c := range got {
		if c != int64(10+i) {
			t.Fatalf("out of order: %v", got)
		}
	}
	tl2.Close()
}

// fixedLine is a log line whose length does not depend on conn (1000 ≤ conn < 10000).
func fixedLine(conn int) string {
	return fmt.Sprintf(`{"msec":1763769601.%03d,"remote_addr":"10.1.2.7","connection":%d,"connection_requests":1,"request_method":"GET","status":200,"bytes_sent":100,"body_bytes_sent":50,"request_time":0.010}`+"\n",
		conn%1000, conn)
}

func appendFixed(t *testing.T, path string, from, to int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := from; i < to; i++ {
		if _, err := f.WriteString(fixedLine(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// copytruncate, then more lines than before written before the next poll: the size grew and
// the byte before the old offset is a newline again (lines of one length), so only the
// content tells that the file was rewritten.
func TestCopytruncateRegrownPastTheOffsetIsDetectedByContent(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	appendFixed(t, log, 1000, 1100)
	o := &out{}
	tl, m := newTailer(t, dir, o, log)
	poll(t, tl, 1)
	copyFile(t, log, log+".1")
	if err := os.Truncate(log, 0); err != nil {
		t.Fatal(err)
	}
	appendFixed(t, log, 1100, 1260)
	poll(t, tl, 1)
	sameSet(t, o.conns(t), want(1000, 1260))
	if v := testutil.ToFloat64(m.Rotations.WithLabelValues("rewrite")) + testutil.ToFloat64(m.Rotations.WithLabelValues("truncate")); v != 1 {
		t.Fatalf("truncations counted: %v, want 1", v)
	}
}

// The same across a restart: the checkpoint's fingerprint of the bytes before its offset.
func TestCopytruncateWhileStoppedIsDetectedByContent(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	appendFixed(t, log, 1000, 1100)
	o := &out{}
	tl, _ := newTailer(t, dir, o, log)
	poll(t, tl, 1)
	tl.Close()
	if err := os.Truncate(log, 0); err != nil {
		t.Fatal(err)
	}
	appendFixed(t, log, 1000, 1003) // the same first lines (same fingerprint of the head) ...
	appendFixed(t, log, 1103, 1260) // ... then others
	o2 := &out{}
	tl2, m := newTailer(t, dir, o2, log)
	poll(t, tl2, 1)
	sameSet(t, o2.conns(t), append(want(1000, 1003), want(1103, 1260)...))
	if v := testutil.ToFloat64(m.Rotations.WithLabelValues("rewrite")); v != 1 {
		t.Fatalf("rewrites counted: %v, want 1", v)
	}
	tl2.Close()
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A closed rotated file that is written late (a slow worker) and found again at the next
// rotation is resumed where it was closed: its new lines are read, its old ones not again.
func TestLateWriteToAClosedRotatedFileIsResumedNotReread(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	appendLines(t, log, 0, 10)
	o := &out{}
	tl, _ := newTailer(t, dir, o, log)
	poll(t, tl, 1)
	mv(t, log, log+".1")
	appendLines(t, log, 10, 20)
	poll(t, tl, 3) // the old file drained and closed (grace 0)
	appendLines(t, log+".1", 20, 22)
	mv(t, log+".1", log+".2")
	mv(t, log, log+".1")
	appendLines(t, log, 22, 25)
	poll(t, tl, 3)
	sameSet(t, o.conns(t), want(0, 25))
	// and across a restart: the closed files are in the checkpoint
	tl.Close()
	appendLines(t, log+".2", 25, 26)
	o2 := &out{}
	tl2, _ := newTailer(t, dir, o2, log)
	poll(t, tl2, 2)
	sameSet(t, o2.conns(t), want(25, 26))
	tl2.Close()
}

// The same with logrotate's dateext names; a compressed sibling and an unrelated name that
// starts like the log are not read.
func TestShortLivedRotatedFileWithDateextNames(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	appendLines(t, log, 0, 10)
	o := &out{}
	tl, _ := newTailer(t, dir, o, log)
	poll(t, tl, 1)
	mv(t, log, log+"-20261124")
	appendLines(t, log, 10, 15)
	mv(t, log, log+"-20261125")
	appendLines(t, log, 15, 20)
	appendLines(t, log+"-20261123.gz", 900, 905)
	appendLines(t, log+".bak", 905, 910)
	appendLines(t, log+"-vhost2", 910, 915)
	poll(t, tl, 3)
	got := o.conns(t)
	sameSet(t, got, want(0, 20))
	for i, c := range got {
		if c != int64(i) {
			t.Fatalf("out of order: %v", got)
		}
	}
}
