package link

import (
	"math/rand/v2"
	"sort"
)

// A shaper assigns each segment, in arrival order, the time its last bit leaves the
// bottleneck. Times are nanoseconds on the link's monotonic clock. Departures never go
// backwards, so the link is one FIFO: packets keep their order.
type shaper interface {
	depart(arrive int64, bytes int) int64
}

// unlimited: no bottleneck, a segment leaves when it arrives.
type unlimited struct{}

func (unlimited) depart(t int64, _ int) int64 { return t }

// constRate serializes at bps bits per second (IP bytes). The division remainder is carried,
// so the long-run rate is exact.
type constRate struct {
	bps  uint64
	busy int64  // when the last accepted bit leaves
	rem  uint64 // carried remainder of bytes*8e9 / bps
}

func (c *constRate) depart(t int64, bytes int) int64 {
	if c.busy < t {
		c.busy, c.rem = t, 0
	}
	num := uint64(bytes)*8e9 + c.rem
	c.busy += int64(num / c.bps)
	c.rem = num % c.bps
	return c.busy
}

// traceRate follows a Mahimahi packet-delivery trace: at each listed millisecond (relative to
// start, the trace looping with a period of its last timestamp) the link may deliver
// OpportunityBytes bytes. Bytes of a segment may be served by several opportunities; the
// segment leaves with the one that serves its last byte. An opportunity that finds the queue
// empty is lost (Mahimahi's semantics): credit is never banked.
type traceRate struct {
	tr     *Trace
	start  int64 // ns, time of trace millisecond 0
	idx    int64 // absolute index of the current opportunity (loops included)
	credit int   // bytes left in opportunity idx
}

// OpportunityBytes is what one line of a Mahimahi trace delivers.
const OpportunityBytes = 1500

func newTraceRate(tr *Trace, start int64) *traceRate {
	return &traceRate{tr: tr, start: start, idx: -1}
}

func (s *traceRate) at(idx int64) int64 {
	n := int64(len(s.tr.Ms))
	loop, k := idx/n, idx%n
	return s.start + (loop*s.tr.PeriodMs+s.tr.Ms[k])*1e6
}

// first returns the absolute index of the first opportunity at or after t.
func (s *traceRate) first(t int64) int64 {
	n := int64(len(s.tr.Ms))
	if t <= s.start {
		return 0
	}
	rel := t - s.start
	periodNs := s.tr.PeriodMs * 1e6
	loop := rel / periodNs
	inLoop := rel - loop*periodNs
	k := sort.Search(len(s.tr.Ms), func(i int) bool { return s.tr.Ms[i]*1e6 >= inLoop })
	return loop*n + int64(k)
}

func (s *traceRate) depart(t int64, bytes int) int64 {
	if s.idx < 0 || s.at(s.idx) < t || s.credit == 0 {
		// The current opportunity is over (or used up): the segment waits for the next one.
		next := s.first(t)
		if s.idx >= 0 && s.credit == 0 && next <= s.idx {
			next = s.idx + 1
		}
		s.idx, s.credit = next, OpportunityBytes
	}
	need := bytes
	for need > s.credit {
		need -= s.credit
		s.idx++
		s.credit = OpportunityBytes
	}
	s.credit -= need
	return s.at(s.idx)
}

// lossModel decides per segment, in order.
type lossModel interface {
	lose() bool
}

// bernoulli loses each segment with probability p.
type bernoulli struct {
	p   float64
	rng *rand.Rand
}

func (b *bernoulli) lose() bool { return b.rng.Float64() < b.p }

// gilbertElliott is the two-state bursty loss model: in the good state a segment is lost
// with probability lossGood, in the bad state with lossBad; after each segment the state
// moves good→bad with probability p and bad→good with probability r. The mean loss rate is
// (r·lossGood + p·lossBad)/(p+r); the mean burst length in the bad state is 1/r segments.
type gilbertElliott struct {
	p, r, lossGood, lossBad float64
	bad                     bool
	rng                     *rand.Rand
}

func (g *gilbertElliott) lose() bool {
	q := g.lossGood
	if g.bad {
		q = g.lossBad
	}
	lost := q > 0 && g.rng.Float64() < q
	if g.bad {
		g.bad = g.rng.Float64() >= g.r
	} else {
		g.bad = g.rng.Float64() < g.p
	}
	return lost
}
