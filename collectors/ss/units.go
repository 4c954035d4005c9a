package ss

import (
	"fmt"
	"strings"

	"github.com/ccab-dev/ccab/collectors/internal/decimal"
)

// parseCount reads an unsigned decimal integer (a counter, a size, a port).
func parseCount(v string) (int64, error) { return decimal.Uint(v) }

// parseMsToUs reads ss's "%g" milliseconds (rtt, minrtt, mrtt) as integer microseconds,
// exactly: "5.613" → 5613.
func parseMsToUs(v string) (int64, error) {
	us, err := decimal.ScaleInt(v, 3)
	if err != nil {
		return 0, err
	}
	if us < 0 {
		return 0, fmt.Errorf("negative time %q", v)
	}
	return us, nil
}

// parseMs reads "%g" milliseconds rounded to an integer (rto:226.666 on a HZ=300 kernel → 227).
func parseMs(v string) (int64, error) {
	ms, err := decimal.ScaleInt(v, 0)
	if err != nil {
		return 0, err
	}
	if ms < 0 {
		return 0, fmt.Errorf("negative time %q", v)
	}
	return ms, nil
}

// parseMsSuffix reads "3916ms" and "101ms(91.0%)" as milliseconds.
func parseMsSuffix(v string) (int64, error) {
	num, _, ok := strings.Cut(v, "ms")
	if !ok {
		return 0, fmt.Errorf("%q lacks the ms unit", v)
	}
	return decimal.Uint(num)
}

// parseRate reads a rate in bits per second in any form ss has printed: "4762104bps",
// "10.8Mbps", "12871.1Mbps", "1.33Gbps", "466Mbps", "1.2kbps", "950.3Kbps", "8bps".
// Prefixes are decimal (k = 1000), as in ss.
func parseRate(v string) (int64, error) {
	num, ok := strings.CutSuffix(v, "bps")
	if !ok {
		return 0, fmt.Errorf("rate %q lacks the bps unit", v)
	}
	exp := 0
	if n := len(num); n > 0 {
		switch num[n-1] {
		case 'k', 'K':
			exp = 3
		case 'M':
			exp = 6
		case 'G':
			exp = 9
		case 'T':
			exp = 12
		}
		if exp > 0 {
			num = num[:n-1]
		}
	}
	bps, err := decimal.ScaleInt(num, exp)
	if err != nil {
		return 0, fmt.Errorf("rate %q: %w", v, err)
	}
	if bps < 0 {
		return 0, fmt.Errorf("negative rate %q", v)
	}
	return bps, nil
}

// noRTTSampleUs reports a min RTT that is really "no sample yet": tcpi_min_rtt and BBR's
// min_rtt_us start at ~0U µs, which ss prints (ms, %g) as 4.29497e+06, or 4294967.295 at
// full precision. Anything that prints as either (µs in [4294965000, 4294975000), some 71.6
// minutes, far above any real RTT) is the sentinel.
func noRTTSampleUs(us int64) bool {
	return us >= 4294965000 && us < 4294975000
}
