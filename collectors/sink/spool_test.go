package sink

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ccab-dev/ccab/collectors/metrics"
)

func msg(i int) *Message {
	return &Message{Topic: "ccab.http.v1", Stream: "f:1:2:0", Pos: int64(i),
		Value: []byte(fmt.Sprintf(`{"schema":"http_request/1","n":%d,"pad":"%0100d"}`, i, 0))}
}

func appendN(t *testing.T, s *Spool, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if _, err := s.Append([]*Message{msg(i)}, "edge-1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
}

func readAllPos(t *testing.T, s *Spool) []int64 {
	t.Helper()
	var out []int64
	for {
		es, err := s.Read(7)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			return out
		}
		for _, e := range es {
			if e.Key != "edge-1" || e.Msg.Topic != "ccab.http.v1" {
				t.Fatalf("entry %+v lost its key or topic", e)
			}
			out = append(out, e.Msg.Pos)
		}
		s.Commit(es[len(es)-1].End)
	}
}

func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	ms, _ := filepath.Glob(filepath.Join(dir, "seg-*.jsonl"))
	return ms
}

func openTest(t *testing.T, dir string, maxBytes int64, full FullPolicy) (*Spool, *metrics.Metrics) {
	t.Helper()
	m := metrics.New()
	s, err := OpenSpool(SpoolConfig{Dir: dir, SegmentBytes: 4096, MaxBytes: maxBytes, Full: full}, m)
	if err != nil {
		t.Fatal(err)
	}
	return s, m
}

func seq(from, to int) []int64 {
	var out []int64
	for i := from; i < to; i++ {
		out = append(out, int64(i))
	}
	return out
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSpoolSegmentsRotateAndReplayInOrder(t *testing.T) {
	dir := t.TempDir()
	s, m := openTest(t, dir, 1<<20, FullShed)
	appendN(t, s, 0, 200) // ~190 bytes each: about 10 segments of 4 KiB
	if n := len(segFiles(t, dir)); n < 5 {
		t.Fatalf("%d segment files, want several", n)
	}
	if got := readAllPos(t, s); !equal(got, seq(0, 200)) {
		t.Fatalf("replay order: got %v", got)
	}
	if !s.Empty() {
		t.Fatal("spool not empty after replaying everything")
	}
	if n := len(segFiles(t, dir)); n > 1 {
		t.Fatalf("%d segment files left after commit, want at most the active one", n)
	}
	if v := testutil.ToFloat64(m.RecordsDropped.WithLabelValues(metrics.DropSpoolFull)); v != 0 {
		t.Fatalf("dropped %v", v)
	}
	s.Close()
}

func TestSpoolOnlyReplaysWhatWasFsynced(t *testing.T) {
	s, _ := openTest(t, t.TempDir(), 1<<20, FullShed)
	if _, err := s.Append([]*Message{msg(1)}, "edge-1"); err != nil {
		t.Fatal(err)
	}
	if es, _ := s.Read(10); len(es) != 0 {
		t.Fatalf("read %d unsynced records", len(es))
	}
	if !s.Unsynced() {
		t.Fatal("Unsynced() = false after an append")
	}
	s.Sync()
	if es, _ := s.Read(10); len(es) != 1 {
		t.Fatalf("read %d records after sync, want 1", len(es))
	}
}

func TestSpoolFullShedsOldestSegmentAndCountsIt(t *testing.T) {
	dir := t.TempDir()
	s, m := openTest(t, dir, 2*4096, FullShed)
	appendN(t, s, 0, 200)
	if s.Bytes() > 2*4096 {
		t.Fatalf("spool holds %d bytes, bound 8192", s.Bytes())
	}
	dropped := int(testutil.ToFloat64(m.RecordsDropped.WithLabelValues(metrics.DropSpoolFull)))
	got := readAllPos(t, s)
	if dropped == 0 || dropped+len(got) != 200 {
		t.Fatalf("dropped %d + kept %d != 200", dropped, len(got))
	}
	// what is left is the newest records, in order
	if !equal(got, seq(200-len(got), 200)) {
		t.Fatalf("kept records are not the newest, in order: %v", got)
	}
}

func TestSpoolShedDoesNotCountRecordsBeingReplayed(t *testing.T) {
	dir := t.TempDir()
	s, m := openTest(t, dir, 2*4096, FullShed)
	appendN(t, s, 0, 30)
	es, _ := s.Read(5) // in flight to Kafka
	appendN(t, s, 30, 100)
	dropped := int(testutil.ToFloat64(m.RecordsDropped.WithLabelValues(metrics.DropSpoolFull)))
	rest := readAllPos(t, s)
	if dropped+len(rest)+len(es) != 130 {
		t.Fatalf("dropped %d + in flight %d + kept %d != 130", dropped, len(es), len(rest))
	}
}

func TestSpoolBlockModeReportsFullAndNeverSheds(t *testing.T) {
	dir := t.TempDir()
	s, m := openTest(t, dir, 2*4096, FullBlock)
	n := 0
	for !s.Full(200) {
		appendN(t, s, n, 1)
		n++
	}
	appendN(t, s, n, 5) // forced appends (produce failures) may exceed the bound
	n += 5
	if v := testutil.ToFloat64(m.RecordsDropped.WithLabelValues(metrics.DropSpoolFull)); v != 0 {
		t.Fatalf("block mode shed %v records", v)
	}
	if got := readAllPos(t, s); !equal(got, seq(0, n)) {
		t.Fatalf("block mode lost records: %d of %d", len(got), n)
	}
	if s.Full(200) {
		t.Fatal("still full after replaying everything")
	}
}

func TestSpoolTornLastRecordIsSkippedAndCounted(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTest(t, dir, 1<<20, FullShed)
	appendN(t, s, 0, 10)
	s.Close()
	// A crash in the middle of a write: the segment ends with half a record.
	segs := segFiles(t, dir)
	last := segs[len(segs)-1]
	line, _ := encodeLine(nil, msg(10), "edge-1")
	f, _ := os.OpenFile(last, os.O_APPEND|os.O_WRONLY, 0)
	f.Write(line[:len(line)/2])
	f.Close()
	// and a record whose bytes were damaged (checksum) in an earlier segment
	s2, m := openTest(t, dir, 1<<20, FullShed)
	appendN(t, s2, 11, 3)
	got := readAllPos(t, s2)
	want := append(seq(0, 10), 11, 12, 13)
	if !equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if v := testutil.ToFloat64(m.SpoolCorrupt.WithLabelValues("torn")); v != 1 {
		t.Fatalf("torn records counted %v, want 1", v)
	}
}

func TestSpoolDamagedRecordIsSkippedAndCounted(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTest(t, dir, 1<<20, FullShed)
	appendN(t, s, 0, 3)
	s.Close()
	seg := segFiles(t, dir)[0]
	b, _ := os.ReadFile(seg)
	i := len(b) - 20 // inside the last record's value
	b[i] ^= 0x01
	os.WriteFile(seg, b, 0o640)
	s2, m := openTest(t, dir, 1<<20, FullShed)
	if got := readAllPos(t, s2); !equal(got, []int64{0, 1}) {
		t.Fatalf("got %v", got)
	}
	bad := testutil.ToFloat64(m.SpoolCorrupt.WithLabelValues("checksum")) + testutil.ToFloat64(m.SpoolCorrupt.WithLabelValues("bad_json"))
	if bad != 1 {
		t.Fatalf("damaged records counted %v, want 1", bad)
	}
}

func TestSpoolStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTest(t, dir, 1<<20, FullShed)
	appendN(t, s, 0, 50)
	es, _ := s.Read(20)
	s.Commit(es[len(es)-1].End)
	if err := s.SaveState(true, 123); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, _ := openTest(t, dir, 1<<20, FullShed)
	if st := s2.Loaded(); !st.Clean || st.SafeMs != 123 {
		t.Fatalf("loaded state %+v", st)
	}
	if got := readAllPos(t, s2); !equal(got, seq(20, 50)) {
		t.Fatalf("resumed at the wrong place: %v", got)
	}
}

// A SIGKILL between an append and its fsync keeps what the process wrote: Append hands the
// lines to the kernel (the page cache outlives the process; only a power loss needs the
// fsync). Records held in a user-space buffer would be lost with the process and are in
// no gauge: the crash window would be larger than queue + in flight (found by
// pipelines/tests/e2e/test_collector_crash_window.py: a kill lost 177 spooled records).
func TestSpoolAppendSurvivesAKillBeforeTheFsync(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTest(t, dir, 1<<20, FullShed)
	for i := 0; i < 3; i++ { // a few records, far below the segment size: no rotation
		if _, err := s.Append([]*Message{msg(i)}, "edge-1"); err != nil {
			t.Fatal(err)
		}
	}
	// killed: no Sync, no Close; the next process opens the directory
	re, _ := openTest(t, dir, 1<<20, FullShed)
	if got := readAllPos(t, re); !equal(got, seq(0, 3)) {
		t.Fatalf("after a kill before the fsync the next process replays %v, want %v", got, seq(0, 3))
	}
	re.Close()
	s.Close()
}
