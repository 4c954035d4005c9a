package link

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestConstRateIsExact(t *testing.T) {
	c := &constRate{bps: 20e6}
	// 1000 back-to-back 1500-byte packets at 20 Mbit/s take 1000 × 600 µs.
	var last int64
	for i := 0; i < 1000; i++ {
		last = c.depart(0, 1500)
	}
	if last != 600e6 {
		t.Fatalf("last departure %d ns, want 600 ms", last)
	}
	// An idle link starts fresh at the arrival.
	if got := c.depart(1e9, 1500); got != 1e9+600e3 {
		t.Fatalf("after idle: %d", got)
	}
	// Odd rates: the remainder is carried, no drift.
	c = &constRate{bps: 7}
	for i := 0; i < 7; i++ {
		last = c.depart(0, 1)
	}
	if last != 8e9 {
		t.Fatalf("7 bytes at 7 bit/s: %d", last)
	}
}

func TestTraceRateSemantics(t *testing.T) {
	tr, err := ParseTrace(strings.NewReader("# two opportunities at 1 ms, one at 3 ms\n1\n1\n3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tr.PeriodMs != 3 || len(tr.Ms) != 3 {
		t.Fatalf("%+v", tr)
	}
	s := newTraceRate(tr, 0)
	ms := int64(1e6)
	// Two 1500-byte packets at t=0 use the two opportunities at 1 ms; the third waits for 3 ms;
	// the fourth for the next loop's 1 ms (3 + 1 = 4 ms).
	for i, want := range []int64{1, 1, 3, 4} {
		if got := s.depart(0, 1500); got != want*ms {
			t.Fatalf("packet %d: %d ms, want %d", i, got/ms, want)
		}
	}
	// A 3000-byte segment needs two opportunities: 4 ms (second one) and 6 ms.
	if got := s.depart(0, 3000); got != 6*ms {
		t.Fatalf("3000 bytes: %v ms", float64(got)/1e6)
	}
	// Small packets share an opportunity: 7 ms has 1500 bytes.
	s = newTraceRate(tr, 0)
	a, b := s.depart(0, 700), s.depart(0, 700)
	if a != ms || b != ms {
		t.Fatalf("two 700-byte packets: %d %d", a, b)
	}
	// Unused credit is lost once its time has passed.
	if got := s.depart(2*ms, 100); got != 3*ms {
		t.Fatalf("late arrival: %v", got)
	}
	// Capacity over many loops.
	if got := tr.Opportunities(0, 3000); got != 3000 {
		t.Fatalf("opportunities in 3 s: %d", got)
	}
	if mb := tr.MeanBps(); math.Abs(mb-12e6) > 1 {
		t.Fatalf("mean %v", mb)
	}
}

func TestTraceRateDeliversCapacity(t *testing.T) {
	tr, err := GenCellular(CellularParams{Seed: 3, DurationS: 10, RatesMbps: []float64{5, 20}, DwellS: 2,
		FadeSigmaD: 2, FadeCorrMs: 200, HandoverHz: 0.2, OutageMs: 200})
	if err != nil {
		t.Fatal(err)
	}
	// A saturated queue of 1500-byte packets drains exactly one per opportunity.
	s := newTraceRate(tr, 0)
	var last int64
	n := int64(len(tr.Ms)) * 3
	for i := int64(0); i < n; i++ {
		last = s.depart(0, 1500)
	}
	if last != 3*tr.PeriodMs*1e6 {
		t.Fatalf("3 loops end at %d ms, want %d", last/1e6, 3*tr.PeriodMs)
	}
}

func TestLossModels(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	b := &bernoulli{p: 0.05, rng: rng}
	const n = 200000
	lost := 0
	for i := 0; i < n; i++ {
		if b.lose() {
			lost++
		}
	}
	if sd := math.Sqrt(n * 0.05 * 0.95); math.Abs(float64(lost)-n*0.05) > 5*sd {
		t.Fatalf("bernoulli lost %d of %d", lost, n)
	}
	g := &gilbertElliott{p: 0.01, r: 0.25, lossBad: 1, rng: rng}
	lost, bursts, run := 0, 0, 0
	for i := 0; i < n; i++ {
		if g.lose() {
			lost++
			run++
		} else if run > 0 {
			bursts++
			run = 0
		}
	}
	want := 0.01 / 0.26
	if got := float64(lost) / n; math.Abs(got-want) > 0.15*want {
		t.Fatalf("GE loss %.4f, want %.4f", got, want)
	}
	if mean := float64(lost) / float64(bursts); math.Abs(mean-4) > 0.6 {
		t.Fatalf("GE mean burst %.2f, want 4", mean)
	}
}

func TestGenCellularDeterministicAndCalibrated(t *testing.T) {
	p := DefaultCellular()
	a, err := GenCellular(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := GenCellular(p)
	if len(a.Ms) != len(b.Ms) || a.Ms[len(a.Ms)/2] != b.Ms[len(b.Ms)/2] {
		t.Fatal("same seed, different trace")
	}
	p.Seed = 2
	c, _ := GenCellular(p)
	if len(c.Ms) == len(a.Ms) {
		t.Fatal("different seeds, same length: suspicious")
	}
	if a.PeriodMs != 60000 {
		t.Fatalf("period %d", a.PeriodMs)
	}
	mean := a.MeanBps() / 1e6
	if mean < 2 || mean > 40 {
		t.Fatalf("mean %.1f Mbit/s outside the states' range", mean)
	}
	s := Summarize(a)
	if !(s.P10Mbps < s.P50Mbps && s.P50Mbps < s.P90Mbps) {
		t.Fatalf("no variability: %+v", s)
	}
	// Round trip through the file format.
	var sb strings.Builder
	if err := a.Write(&sb); err != nil {
		t.Fatal(err)
	}
	back, err := ParseTrace(strings.NewReader(sb.String()))
	if err != nil || len(back.Ms) != len(a.Ms) || back.PeriodMs != a.PeriodMs {
		t.Fatalf("round trip: %v", err)
	}
	if _, err := ParseTrace(strings.NewReader("5\n3\n")); err == nil {
		t.Fatal("backwards trace accepted")
	}
}
