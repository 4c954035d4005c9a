// Package recordcmp compares a tcp_sample/1 record read over netlink with the record
// parse-ss makes of the same socket, field by field, with the differences that the two
// sources are allowed to have written down in one place (Diff's doc). Tests use it.
package recordcmp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"

	"github.com/ccab-dev/ccab/collectors/record"
)

// Tolerance is what may differ because the two reads are not the same instant.
type Tolerance struct {
	// LastMs is the largest allowed |netlink − ss| of lastsnd_ms, lastrcv_ms and lastack_ms
	// (they grow with the wall clock). Ignored when Bracket is set.
	LastMs int64
	// Bracket, when set, is a second netlink read taken after ss: the ss value of every
	// field that moves with time must lie between the two netlink reads.
	Bracket *record.TCPSample
	// Ignore lists fields not compared at all.
	Ignore []string
}

// timeFields grow with the wall clock between two reads of an idle socket.
var timeFields = map[string]bool{"lastsnd_ms": true, "lastrcv_ms": true, "lastack_ms": true}

// printedG are fields ss prints with %g (6 significant digits) of value/1000: equal up to
// that rounding.
var printedG = map[string]bool{"rtt_us": true, "rttvar_us": true, "min_rtt_us": true, "bbr_min_rtt_us": true}

// netlinkOnly are fields ss never prints (tcpi_total_rto*, kernel 6.7): parse-ss leaves
// them null.
var netlinkOnly = map[string]bool{"total_rto": true, "total_rto_recoveries": true, "total_rto_time_ms": true}

// gains are BBR gains: netlink has value/256 exactly, ss prints %g.
var gains = map[string]bool{"bbr_pacing_gain": true, "bbr_cwnd_gain": true}

// Diff returns the differences between nl (netlink) and ss (parse-ss) for one socket, one
// line per field, empty when they agree. Every contract field is compared exactly, except:
//   - cc_version: stock ss cannot tell BBR v1 from v3, so parse-ss leaves it null where
//     netlink knows it (from the BBRINFO length); equal when both have it; the same for
//     total_rto, total_rto_recoveries, total_rto_time_ms, which ss never prints;
//   - rtt_us, rttvar_us, min_rtt_us, bbr_min_rtt_us: ss prints ms with %g, 6 significant
//     digits; equal up to that rounding;
//   - bbr_pacing_gain, bbr_cwnd_gain: ss prints gain/256 with %g; within 5e-6 relative;
//   - lastsnd_ms, lastrcv_ms, lastack_ms: grow between the two reads (see Tolerance).
func Diff(nl, ss record.TCPSample, tol Tolerance) []string {
	a, b := toMap(nl), toMap(ss)
	var after map[string]any
	if tol.Bracket != nil {
		after = toMap(*tol.Bracket)
	}
	ignore := map[string]bool{}
	for _, f := range tol.Ignore {
		ignore[f] = true
	}
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		if ignore[k] {
			continue
		}
		va, vb := a[k], b[k]
		if same(va, vb) {
			continue
		}
		na, aok := num(va)
		nb, bok := num(vb)
		switch {
		case (k == "cc_version" || netlinkOnly[k]) && vb == nil:
			continue
		case timeFields[k] && aok && bok:
			if after != nil {
				if nc, ok := num(after[k]); ok && nb >= math.Min(na, nc) && nb <= math.Max(na, nc) {
					continue
				}
			} else if math.Abs(na-nb) <= float64(tol.LastMs) {
				continue
			}
		case printedG[k] && aok && bok:
			if gRound(na) == nb {
				continue
			}
		case gains[k] && aok && bok:
			if math.Abs(na-nb) <= 5e-6*math.Max(math.Abs(na), 1) {
				continue
			}
		}
		out = append(out, fmt.Sprintf("%s: netlink %s, ss %s", k, show(va), show(vb)))
	}
	return out
}

// gRound is what parse-ss reads back from ss's "%g" of us/1000 ms: 6 significant digits.
func gRound(us float64) float64 {
	if us == 0 {
		return 0
	}
	ms := us / 1000
	digits := 6 - int(math.Floor(math.Log10(math.Abs(ms)))) - 1
	scale := math.Pow(10, float64(digits))
	return math.Round(math.Round(ms*scale)/scale*1000*1e6) / 1e6
}

func toMap(r record.TCPSample) map[string]any {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		panic(err)
	}
	return m
}

func same(a, b any) bool {
	na, aok := a.(json.Number)
	nb, bok := b.(json.Number)
	if aok && bok {
		return na.String() == nb.String()
	}
	return fmt.Sprint(a) == fmt.Sprint(b) && (a == nil) == (b == nil)
}

func num(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

func show(v any) string {
	if v == nil {
		return "null"
	}
	return fmt.Sprint(v)
}
