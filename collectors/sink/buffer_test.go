package sink

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ccab-dev/ccab/collectors/metrics"
)

// The Buffer alone: its modes, each transition, fsync batching, the full policies and
// recovery of the disk spools after a crash. No sink, no Kafka: the test plays the sink.

type bufTest struct {
	t    *testing.T
	b    *Buffer[int]
	m    *metrics.Metrics
	done []int // handles whose done ran, in order
}

func openBuf(t *testing.T, dir string, maxBytes int64, full FullPolicy, fsync time.Duration) *bufTest {
	t.Helper()
	bt := &bufTest{t: t, m: metrics.New()}
	b, err := OpenBuffer(BufferConfig{Spool: SpoolConfig{Dir: dir, SegmentBytes: 4096, MaxBytes: maxBytes, Full: full},
		Key: "edge-1", FsyncInterval: fsync}, bt.m, quiet(), func(i int) { bt.done = append(bt.done, i) })
	if err != nil {
		t.Fatal(err)
	}
	bt.b = b
	return bt
}

func (bt *bufTest) push(from, to int) {
	for i := from; i < to; i++ {
		bt.b.Push(msg(i), i)
	}
}

func (bt *bufTest) mode() float64 { return testutil.ToFloat64(bt.m.SpoolMode) }

// drain replays and acknowledges everything, as a sink with a healthy Kafka would.
func (bt *bufTest) drain(now time.Time) []int64 {
	bt.t.Helper()
	var got []int64
	for i := 0; i < 10000; i++ {
		rd, err := bt.b.Replay(now, 7)
		if err != nil {
			bt.t.Fatal(err)
		}
		if rd == nil {
			if bt.b.Mode() != ModeSpool {
				return got
			}
			continue // fsynced what was pending: readable now
		}
		for _, e := range rd.Entries {
			got = append(got, e.Msg.Pos)
		}
		bt.b.Ack(rd, len(rd.Entries))
	}
	bt.t.Fatal("replay never drained the buffer")
	return nil
}

func TestBufferLiveToSpoolAndBackWhenDrained(t *testing.T) {
	bt := openBuf(t, t.TempDir(), 1<<20, FullShed, 0)
	now := time.Unix(1000, 0)
	if bt.b.Mode() != ModeLive || bt.mode() != 0 || !bt.b.Accepting() {
		t.Fatalf("an empty buffer opens in %v (gauge %v)", bt.b.Mode(), bt.mode())
	}
	if rd, _ := bt.b.Replay(now, 10); rd != nil || bt.b.Mode() != ModeLive {
		t.Fatal("replay in live mode")
	}
	if !bt.b.Enter("stall") || bt.b.Enter("backpressure") {
		t.Fatal("Enter: the first call switches, the second does not")
	}
	if bt.b.Mode() != ModeSpool || bt.mode() != 1 {
		t.Fatalf("after Enter: %v (gauge %v)", bt.b.Mode(), bt.mode())
	}
	if testutil.ToFloat64(bt.m.SpoolEntries.WithLabelValues("stall")) != 1 ||
		testutil.ToFloat64(bt.m.SpoolEntries.WithLabelValues("backpressure")) != 0 {
		t.Fatal("entries not counted once, by the reason that switched")
	}
	bt.push(0, 50)
	bt.b.Flush(now, false)
	if len(bt.done) != 50 {
		t.Fatalf("%d of 50 done after an fsync", len(bt.done))
	}
	if v := testutil.ToFloat64(bt.m.RecordsSpooled.WithLabelValues("ccab.http.v1")); v != 50 {
		t.Fatalf("records_spooled_total %v", v)
	}
	if got := bt.drain(now); !equal(got, seq(0, 50)) {
		t.Fatalf("replayed %v", got)
	}
	if bt.b.Mode() != ModeLive || bt.mode() != 0 || !bt.b.Empty() {
		t.Fatalf("after draining: %v (gauge %v)", bt.b.Mode(), bt.mode())
	}
	bt.b.Close()
}

func TestBufferStaysInSpoolWhileSomethingIsUnsynced(t *testing.T) {
	bt := openBuf(t, t.TempDir(), 1<<20, FullShed, time.Hour)
	now := time.Unix(1000, 0)
	bt.b.Enter("stall")
	bt.push(0, 1)
	bt.b.Flush(now, false) // the first fsync is due at once
	if rd, _ := bt.b.Replay(now, 10); rd == nil || len(rd.Entries) != 1 {
		t.Fatal("the fsynced record is not replayed")
	} else {
		bt.b.Ack(rd, 1)
	}
	bt.push(1, 4)
	bt.b.Flush(now.Add(time.Minute), false) // written, not fsynced: the interval has not passed
	if len(bt.done) != 1 {
		t.Fatalf("done ran for %v before the fsync", bt.done)
	}
	// Nothing readable (unsynced), but the buffer is not empty: it fsyncs, stays in spool.
	if rd, err := bt.b.Replay(now, 10); rd != nil || err != nil || bt.b.Mode() != ModeSpool {
		t.Fatalf("Replay with only unsynced records: %v %v %v", rd, err, bt.b.Mode())
	}
	if len(bt.done) != 4 {
		t.Fatalf("the forced fsync made %d of 4 done", len(bt.done))
	}
	if got := bt.drain(now); !equal(got, seq(1, 4)) {
		t.Fatalf("replayed %v", got)
	}
	bt.b.Close()
}

func TestBufferFsyncsAtMostEveryInterval(t *testing.T) {
	bt := openBuf(t, t.TempDir(), 1<<20, FullShed, time.Second)
	t0 := time.Unix(1000, 0)
	bt.b.Enter("stall")
	bt.push(0, 1)
	bt.b.Flush(t0, false) // the first fsync is due at once (none yet)
	bt.push(1, 3)
	bt.b.Flush(t0.Add(500*time.Millisecond), false)
	if len(bt.done) != 1 {
		t.Fatalf("done %v: records 1, 2 must wait for the next fsync", bt.done)
	}
	bt.b.Flush(t0.Add(time.Second), false)
	if len(bt.done) != 3 {
		t.Fatalf("done %v after the interval", bt.done)
	}
	bt.b.Close()
}

func TestBufferReplaysFailedRecordsBeforeTheTail(t *testing.T) {
	dir := t.TempDir()
	bt := openBuf(t, dir, 1<<20, FullShed, 0)
	now := time.Unix(1000, 0)
	// live: the client holds 0..9; it fails 5..9 after the sink spooled 10..19.
	bt.b.Enter("backpressure")
	bt.push(10, 20)
	bt.b.Flush(now, false)
	for i := 5; i < 10; i++ {
		bt.b.PushFailed(msg(i), i)
	}
	bt.b.Flush(now, false)
	if _, err := os.Stat(filepath.Join(dir, "head")); err != nil {
		t.Fatal("no head spool directory")
	}
	if got := bt.drain(now); !equal(got, seq(5, 20)) {
		t.Fatalf("replay order %v, want the failed records first", got)
	}
	bt.b.Close()
}

func TestBufferPushFailedEntersSpoolFromLive(t *testing.T) {
	bt := openBuf(t, t.TempDir(), 1<<20, FullShed, 0)
	bt.b.PushFailed(msg(1), 1)
	if bt.b.Mode() != ModeSpool || testutil.ToFloat64(bt.m.SpoolEntries.WithLabelValues("produce_error")) != 1 {
		t.Fatalf("PushFailed in live mode: %v", bt.b.Mode())
	}
	bt.b.Close() // writes and fsyncs what was pushed
	if !equal(bt.doneInts(), []int64{1}) {
		t.Fatalf("Close left pushed records without done: %v", bt.done)
	}
}

func (bt *bufTest) doneInts() []int64 {
	out := make([]int64, len(bt.done))
	for i, d := range bt.done {
		out[i] = int64(d)
	}
	return out
}

func TestBufferRecoverModeHoldsReplayUntilRecovered(t *testing.T) {
	dir := t.TempDir()
	bt := openBuf(t, dir, 1<<20, FullShed, 0)
	now := time.Unix(1000, 0)
	bt.b.AwaitRecovery()
	if bt.b.Mode() != ModeRecover || bt.mode() != 1 {
		t.Fatalf("AwaitRecovery: %v", bt.b.Mode())
	}
	if bt.b.Enter("stall") {
		t.Fatal("Enter switched out of recover mode")
	}
	bt.push(0, 5)
	bt.b.Flush(now, false)
	if rd, _ := bt.b.Replay(now, 10); rd != nil || bt.b.Mode() != ModeRecover {
		t.Fatal("replay before the read-back finished")
	}
	bt.b.Recovered()
	if bt.b.Mode() != ModeSpool {
		t.Fatalf("Recovered: %v", bt.b.Mode())
	}
	if got := bt.drain(now); !equal(got, seq(0, 5)) {
		t.Fatalf("replayed %v", got)
	}
	bt.b.Close()
}

func TestBufferBlockPolicyStopsAcceptingUntilReplayMakesRoom(t *testing.T) {
	bt := openBuf(t, t.TempDir(), 2*4096, FullBlock, 0)
	now := time.Unix(1000, 0)
	bt.b.Enter("stall")
	n := 0
	for ; bt.b.Accepting() && n < 1000; n++ {
		bt.push(n, n+1)
		bt.b.Flush(now, false)
	}
	if bt.b.Accepting() {
		t.Fatal("still accepting after 1000 records in 8 KiB")
	}
	if v := testutil.ToFloat64(bt.m.RecordsDropped.WithLabelValues(metrics.DropSpoolFull)); v != 0 {
		t.Fatalf("block policy shed %v records", v)
	}
	if got := bt.drain(now); !equal(got, seq(0, n)) {
		t.Fatalf("replayed %v, want 0..%d", got, n)
	}
	if !bt.b.Accepting() || bt.b.Mode() != ModeLive {
		t.Fatal("not accepting after the spool drained")
	}
	bt.b.Close()
}

func TestBufferShedPolicyDropsTheOldestAndKeepsAccepting(t *testing.T) {
	bt := openBuf(t, t.TempDir(), 2*4096, FullShed, 0)
	now := time.Unix(1000, 0)
	bt.b.Enter("stall")
	for i := 0; i < 200; i++ {
		bt.push(i, i+1)
		bt.b.Flush(now, false)
		if !bt.b.Accepting() {
			t.Fatal("shed policy stopped accepting")
		}
	}
	shed := testutil.ToFloat64(bt.m.RecordsDropped.WithLabelValues(metrics.DropSpoolFull))
	got := bt.drain(now)
	if shed == 0 || float64(len(got))+shed != 200 {
		t.Fatalf("replayed %d + shed %v, want 200 in all", len(got), shed)
	}
	if !equal(got, seq(200-len(got), 200)) {
		t.Fatalf("kept %v: want the newest records", got)
	}
	bt.b.Close()
}

// A process spools, replays part, saves its state (unclean) and dies without Close: the
// next one finds the unreplayed records, in order, the head's first, and knows the last
// stop was unclean.
func TestBufferCrashRecovery(t *testing.T) {
	dir := t.TempDir()
	bt := openBuf(t, dir, 1<<20, FullShed, 0)
	now := time.Unix(1000, 0)
	bt.b.Enter("stall")
	bt.push(20, 60)
	bt.b.Flush(now, false)
	for i := 10; i < 20; i++ {
		bt.b.PushFailed(msg(i), i)
	}
	bt.b.Flush(now, false)
	rd, err := bt.b.Replay(now, 4) // head: 10..13 reach Kafka
	if err != nil || rd == nil || len(rd.Entries) != 4 {
		t.Fatalf("replay: %v %v", rd, err)
	}
	bt.b.Ack(rd, 4)
	if err := bt.b.SaveState(false, 777); err != nil {
		t.Fatal(err)
	}
	bt.push(60, 63) // pushed, never flushed: not done, so its source still has it
	if len(bt.done) != 50 {
		t.Fatalf("done %d, want the 50 flushed records", len(bt.done))
	}
	// crash: no Close

	re := openBuf(t, dir, 1<<20, FullShed, 0)
	if st := re.b.Loaded(); st.Clean || st.SafeMs != 777 {
		t.Fatalf("loaded state %+v, want unclean with safe time 777", st)
	}
	if re.b.Mode() != ModeSpool || re.mode() != 1 {
		t.Fatalf("a non-empty buffer opens in %v", re.b.Mode())
	}
	var scanned []int64
	if err := re.b.Scan(func(_ string, pos int64) { scanned = append(scanned, pos) }); err != nil {
		t.Fatal(err)
	}
	want := seq(14, 60)
	if !equal(scanned, want) {
		t.Fatalf("scan %v, want %v", scanned, want)
	}
	if got := re.drain(now); !equal(got, want) {
		t.Fatalf("replayed after the crash %v, want %v", got, want)
	}
	if err := re.b.SaveState(true, 0); err != nil {
		t.Fatal(err)
	}
	re.b.Close()
	again := openBuf(t, dir, 1<<20, FullShed, 0)
	if st := again.b.Loaded(); !st.Clean || again.b.Mode() != ModeLive || !again.b.Empty() {
		t.Fatalf("after a clean stop: %+v, %v", st, again.b.Mode())
	}
	again.b.Close()
}

// A torn last line (the process died mid-write of a closed segment) is skipped and counted;
// the records before it replay.
func TestBufferCrashWithATornLine(t *testing.T) {
	dir := t.TempDir()
	bt := openBuf(t, dir, 1<<20, FullShed, 0)
	bt.b.Enter("stall")
	bt.push(0, 5)
	bt.b.Flush(time.Unix(1000, 0), false)
	bt.b.SaveState(false, 1)
	segs := segFiles(t, dir)
	f, err := os.OpenFile(segs[len(segs)-1], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"t":"ccab.http.v1","k":"edge-1","s":"f:1:2:0","p":5,"c":1,"v":{"sch`)
	f.Close()

	re := openBuf(t, dir, 1<<20, FullShed, 0)
	if got := re.drain(time.Unix(1000, 0)); !equal(got, seq(0, 5)) {
		t.Fatalf("replayed %v", got)
	}
	if v := testutil.ToFloat64(re.m.SpoolCorrupt.WithLabelValues("torn")); v != 1 {
		t.Fatalf("torn lines counted %v", v)
	}
	re.b.Close()
}
