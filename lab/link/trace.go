package link

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Trace is a Mahimahi packet-delivery trace: one integer millisecond timestamp per line,
// non-decreasing; each line is one opportunity to deliver OpportunityBytes bytes. The trace
// loops with a period of its last timestamp.
type Trace struct {
	Ms       []int64
	PeriodMs int64
}

// ParseTrace reads a Mahimahi trace. Blank lines and lines starting with '#' are skipped.
func ParseTrace(r io.Reader) (*Trace, error) {
	var t Trace
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || s[0] == '#' {
			continue
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("line %d: %q is not a non-negative integer millisecond", line, s)
		}
		if n := len(t.Ms); n > 0 && v < t.Ms[n-1] {
			return nil, fmt.Errorf("line %d: %d ms goes backwards (previous %d)", line, v, t.Ms[n-1])
		}
		t.Ms = append(t.Ms, v)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.Ms) == 0 {
		return nil, fmt.Errorf("empty trace")
	}
	t.PeriodMs = t.Ms[len(t.Ms)-1]
	if t.PeriodMs <= 0 {
		return nil, fmt.Errorf("the last timestamp must be > 0 ms (it is the loop period)")
	}
	return &t, nil
}

// LoadTrace reads a trace file.
func LoadTrace(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := ParseTrace(f)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	return t, nil
}

// MeanBps is the trace's capacity over one period, in bits/s of IP bytes.
func (t *Trace) MeanBps() float64 {
	return float64(len(t.Ms)) * OpportunityBytes * 8 / (float64(t.PeriodMs) / 1000)
}

// Opportunities counts the opportunities in [fromMs, toMs) of the looped trace.
func (t *Trace) Opportunities(fromMs, toMs int64) int64 {
	count := func(x int64) int64 { // opportunities with time < x
		if x <= 0 {
			return 0
		}
		loops := x / t.PeriodMs
		rem := x - loops*t.PeriodMs
		k := int64(0)
		for _, v := range t.Ms {
			if v < rem {
				k++
			} else {
				break
			}
		}
		return loops*int64(len(t.Ms)) + k
	}
	return count(toMs) - count(fromMs)
}

// Write writes t in Mahimahi format.
func (t *Trace) Write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	for _, v := range t.Ms {
		bw.WriteString(strconv.FormatInt(v, 10))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// CellularParams are the knobs of GenCellular. Rates are IP bits/s.
type CellularParams struct {
	Seed       uint64
	DurationS  float64   // trace length (it loops)
	RatesMbps  []float64 // mean rate of each radio state (e.g. poor, fair, good cell)
	DwellS     float64   // mean time in a state (exponential); the next state is a neighbour
	FadeSigmaD float64   // std deviation of the slow log-normal fading around the state's rate, in dB
	FadeCorrMs float64   // correlation time of the fading (AR(1) on a 10 ms grid)
	DeepFadeHz float64   // rate of short deep fades (Poisson, per second)
	DeepFadeMs float64   // mean duration of a deep fade (exponential)
	DeepFadeDB float64   // attenuation during a deep fade, dB
	HandoverHz float64   // rate of handovers (Poisson, per second)
	OutageMs   float64   // mean outage during a handover (no delivery), exponential, ≥ 20 ms
}

// DefaultCellular is an LTE-like drive: three cell qualities around 4, 12 and 30 Mbit/s
// held ~5 s each, ±3 dB slow fading over ~300 ms, a 10 dB deep fade every ~4 s (~80 ms),
// and a handover outage (~150 ms) every ~20 s.
func DefaultCellular() CellularParams {
	return CellularParams{
		Seed: 1, DurationS: 60, RatesMbps: []float64{4, 12, 30}, DwellS: 5,
		FadeSigmaD: 3, FadeCorrMs: 300, DeepFadeHz: 0.25, DeepFadeMs: 80, DeepFadeDB: 10,
		HandoverHz: 0.05, OutageMs: 150,
	}
}

// Validate checks the parameters.
func (p CellularParams) Validate() error {
	switch {
	case p.DurationS < 1:
		return fmt.Errorf("duration must be ≥ 1 s")
	case len(p.RatesMbps) == 0:
		return fmt.Errorf("need at least one state rate")
	case p.DwellS <= 0:
		return fmt.Errorf("dwell time must be > 0")
	case p.FadeSigmaD < 0 || p.DeepFadeHz < 0 || p.HandoverHz < 0 || p.DeepFadeMs < 0 || p.OutageMs < 0:
		return fmt.Errorf("fading and handover parameters must be ≥ 0")
	}
	for _, r := range p.RatesMbps {
		if !(r > 0) {
			return fmt.Errorf("state rates must be > 0 Mbit/s")
		}
	}
	return nil
}

// GenCellular makes a variable-rate trace: a Markov-modulated rate (states of RatesMbps,
// exponential dwell times, moves to a neighbouring state), multiplied by slow log-normal
// fading (an AR(1) process in dB), short deep fades and handover outages with no delivery.
// The rate is turned into delivery opportunities every millisecond with the fractional part
// carried, so the trace's capacity equals the integral of the rate. Same seed, same trace.
func GenCellular(p CellularParams) (*Trace, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(p.Seed, 0x63636162))
	exp := func(mean float64) float64 { return rng.ExpFloat64() * mean }
	totalMs := int64(p.DurationS * 1000)
	state := len(p.RatesMbps) / 2
	nextSwitch := exp(p.DwellS * 1000)
	fadeDB := 0.0
	rho := 0.0
	if p.FadeCorrMs > 0 {
		rho = math.Exp(-10 / p.FadeCorrMs)
	}
	nextDeep, deepEnd := math.Inf(1), -1.0
	if p.DeepFadeHz > 0 {
		nextDeep = exp(1000 / p.DeepFadeHz)
	}
	nextHO, hoEnd := math.Inf(1), -1.0
	if p.HandoverHz > 0 {
		nextHO = exp(1000 / p.HandoverHz)
	}
	var t Trace
	carry := 0.0
	const bitsPerOpp = OpportunityBytes * 8
	for ms := int64(0); ms < totalMs; ms++ {
		f := float64(ms)
		if f >= nextSwitch {
			if n := len(p.RatesMbps); n > 1 {
				switch {
				case state == 0:
					state = 1
				case state == n-1:
					state = n - 2
				case rng.IntN(2) == 0:
					state--
				default:
					state++
				}
			}
			nextSwitch = f + exp(p.DwellS*1000)
		}
		if ms%10 == 0 {
			fadeDB = rho*fadeDB + math.Sqrt(1-rho*rho)*p.FadeSigmaD*rng.NormFloat64()
		}
		if f >= nextDeep {
			deepEnd = f + exp(p.DeepFadeMs)
			nextDeep = f + exp(1000/p.DeepFadeHz)
		}
		if f >= nextHO {
			hoEnd = f + math.Max(20, exp(p.OutageMs))
			nextHO = f + exp(1000/p.HandoverHz)
		}
		db := fadeDB
		if f < deepEnd {
			db -= p.DeepFadeDB
		}
		rate := p.RatesMbps[state] * 1e6 * math.Pow(10, db/10)
		if f < hoEnd {
			rate = 0
		}
		carry += rate / 1000 / bitsPerOpp
		for carry >= 1 {
			t.Ms = append(t.Ms, ms+1) // Mahimahi timestamps start at 1 ms
			carry--
		}
	}
	if len(t.Ms) == 0 || t.Ms[len(t.Ms)-1] != totalMs {
		// The period is the last timestamp: end on the trace's last millisecond.
		t.Ms = append(t.Ms, totalMs)
	}
	t.PeriodMs = totalMs
	return &t, nil
}

// TraceSummary describes a trace's variability.
type TraceSummary struct {
	P10Mbps, P50Mbps, P90Mbps float64 // percentiles of the rate over 1-second windows
	OutageMs                  int64   // milliseconds inside gaps of ≥ 20 ms without an opportunity
}

// Summarize computes the summary over one period.
func Summarize(t *Trace) TraceSummary {
	var s TraceSummary
	secs := int((t.PeriodMs + 999) / 1000)
	per := make([]float64, secs)
	prev := int64(0)
	for _, v := range t.Ms {
		if i := int((v - 1) / 1000); i >= 0 && i < secs {
			per[i] += OpportunityBytes * 8 / 1e6
		} else if v == 0 {
			per[0] += OpportunityBytes * 8 / 1e6
		}
		if gap := v - prev; gap >= 20 {
			s.OutageMs += gap
		}
		prev = v
	}
	sort.Float64s(per)
	q := func(p float64) float64 { return per[int(p*float64(len(per)-1))] }
	s.P10Mbps, s.P50Mbps, s.P90Mbps = q(0.1), q(0.5), q(0.9)
	return s
}
